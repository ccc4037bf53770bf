"""`WorkerSet`: many `RolloutWorker`s on one machine, one process each, sampled in parallel."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validate import positive_int
from ..policy.policy import Policy
from ..views.sample_batch import MultiAgentBatch, SampleBatch, concat_samples

__all__ = ["WorkerSet"]


def _seed_worker(kwargs: dict) -> None:
    """Seeds this worker process's global RNGs (random, numpy, torch) apart from every other worker's.

    Forked workers inherit the driver's RNG states, and fresh processes all
    start torch's generator at the same default seed: without this, every
    worker would draw the same "random" actions. With ``seed`` given, each
    worker's seed follows from it and its ``worker_index`` (reproducible).
    """
    seed = kwargs.get("seed")
    index = int(kwargs["worker_index"])
    s = (int(seed) * 1_000_003 + index) % 2**63 if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
    random.seed(s)
    np.random.seed(s % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(s)


class _Served:
    """One worker: its RolloutWorker and the commands it answers (the body of a Ray actor, and of `_serve`)."""

    def __init__(self, env_creator: Callable, policy: Any, kwargs: dict) -> None:
        from .worker import RolloutWorker

        _seed_worker(kwargs)
        self.worker = RolloutWorker(env_creator, policy, **kwargs)

    def run(self, cmd: str, arg: Any) -> Any:
        w = self.worker
        if cmd == "sample":
            return w.sample()
        if cmd == "set_weights":
            w.policy_map[arg[0]].set_weights(arg[1])
            return None
        if cmd == "get_weights":
            return {pid: p.get_weights() for pid, p in w.policy_map.items()}
        if cmd == "metrics":
            return w.get_metrics()
        if cmd == "stop":
            w.stop()
            return None
        raise ValueError(f"unknown WorkerSet command {cmd!r}")


def _serve(conn: Any, env_creator: Callable, policy: Any, kwargs: dict) -> None:
    """A worker process: build the worker, then answer commands until "stop" (or the pipe closes)."""
    try:
        served = _Served(env_creator, policy, kwargs)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            served.worker.stop()
            return
        try:
            out = served.run(cmd, arg)
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        else:
            conn.send(("ok", out))
            if cmd == "stop":
                return


class WorkerSet:
    """``num_workers`` `RolloutWorker` s, each in a process of its own, sampled in parallel.

    ``WorkerSet(env_creator, policy, num_workers=2, **worker_kwargs)`` builds
    worker ``i`` (``1..num_workers``) as ``RolloutWorker(env_creator, policy,
    worker_index=i, **worker_kwargs)`` in its own process, so its ``eps_id`` s
    never collide with another worker's. ``sample()`` asks every worker for one
    ``sample()`` at the same time and returns them concatenated (worker 1
    first): ``num_workers`` times a worker's batch. Batches cross the process
    boundary pickled; `LazyView` columns cross as their base (each frame once)
    plus indices.

    ``policy`` is a `Policy` subclass (each worker builds its own) or an
    instance (copied into each worker). Each worker seeds its process's
    global RNGs (``random``, numpy, torch) apart from the others' (from
    ``seed`` and its index when ``seed`` is given), so workers never draw the
    same exploration noise. ``set_weights`` / ``sync_weights``
    send a learner's weights to every worker between samples.

    ``backend="process"`` (the default) runs the workers as processes of this
    machine. ``start_method``: ``"fork"`` (the default on Linux:
    ``env_creator`` may be a lambda) or ``"spawn"`` / ``"forkserver"`` (then
    ``env_creator`` and ``policy`` must pickle). ``backend="ray"`` runs each
    worker as a Ray actor, on any machine of the Ray cluster (``ray.init()``
    first to join one; otherwise a local one is started), with
    ``ray_options`` (e.g. ``{"num_cpus": 1}``) passed to ``.options()``;
    Ray pickles ``env_creator`` and ``policy`` (lambdas are fine).

    An exception in a worker is raised here as a `RuntimeError` naming the
    worker, with its traceback. ``stop()`` (or leaving a ``with`` block) ends
    the workers.
    """

    def __init__(
        self,
        env_creator: Callable[[dict], Any],
        policy: Policy | type[Policy] | dict,
        *,
        num_workers: int = 2,
        backend: str = "process",
        start_method: str = "fork",
        ray_options: dict | None = None,
        **worker_kwargs: Any,
    ) -> None:
        self.num_workers = positive_int("num_workers", num_workers)
        if "worker_index" in worker_kwargs:
            raise ValueError("WorkerSet sets worker_index itself (1..num_workers); do not pass it")
        if backend not in ("process", "ray"):
            raise ValueError(f"backend must be 'process' or 'ray', got {backend!r}")
        self.backend = backend
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self._actors: list[Any] = []
        if backend == "ray":
            self._start_ray(env_creator, policy, worker_kwargs, ray_options or {})
            return
        try:
            ctx: Any = mp.get_context(start_method)
        except ValueError as e:
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            ) from e
        try:
            for i in range(1, self.num_workers + 1):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_serve,
                    args=(child, env_creator, policy, dict(worker_kwargs, worker_index=i)),
                    name=f"trajview-worker-{i}",
                    daemon=True,
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            for i in range(self.num_workers):
                self._answer(i)  # each worker's RolloutWorker is built, or its error raised here
        except BaseException:
            self._kill()
            raise

    # -- the worker protocol ------------------------------------------------------

    def _start_ray(self, env_creator: Callable, policy: Any, worker_kwargs: dict, options: dict) -> None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("WorkerSet(backend='ray') needs Ray: pip install 'ray>=2.9'") from e
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(_Served)
        if options:
            actor = actor.options(**options)
        self._actors = [
            actor.remote(env_creator, policy, dict(worker_kwargs, worker_index=i))
            for i in range(1, self.num_workers + 1)
        ]
        try:
            self._ray_all("metrics", None)  # each worker's RolloutWorker is built, or its error raised here
        except BaseException:
            self._kill()
            raise

    def _ray_all(self, cmd: str, arg: Any) -> list[Any]:
        import ray

        refs = [a.run.remote(cmd, arg) for a in self._actors]
        answers: list[Any] = []
        error: BaseException | None = None
        for i, ref in enumerate(refs):
            try:
                answers.append(ray.get(ref))
            except ray.exceptions.RayError as e:  # the actor's exception (with its traceback) or its death
                error = error or RuntimeError(f"rollout worker {i + 1} failed:\n{e}")
                answers.append(None)
        if error is not None:
            raise error
        return answers

    def _answer(self, i: int) -> Any:
        try:
            status, value = self._conns[i].recv()
        except (EOFError, OSError):
            self._procs[i].join(timeout=5)
            raise RuntimeError(
                f"rollout worker {i + 1} died (exit code {self._procs[i].exitcode}) without an answer"
            ) from None
        if status == "error":
            raise RuntimeError(f"rollout worker {i + 1} failed:\n{value}")
        return value

    def _all(self, cmd: str, arg: Any = None) -> list[Any]:
        if self._actors:
            return self._ray_all(cmd, arg)
        if not self._conns:
            raise RuntimeError("WorkerSet is stopped")
        for c in self._conns:
            c.send((cmd, arg))
        # Read every answer before raising, so that no answer is left behind in a pipe.
        answers: list[Any] = []
        error: BaseException | None = None
        for i in range(self.num_workers):
            try:
                answers.append(self._answer(i))
            except RuntimeError as e:
                error = error or e
                answers.append(None)
        if error is not None:
            raise error
        return answers

    # -- API ------------------------------------------------------------------------

    def sample(self) -> SampleBatch | MultiAgentBatch:
        """One ``sample()`` of every worker, in parallel, concatenated in worker order."""
        return concat_samples(self._all("sample"))

    def sample_each(self) -> list[SampleBatch | MultiAgentBatch]:
        """One ``sample()`` of every worker, in parallel, one batch per worker."""
        return self._all("sample")

    def set_weights(self, weights: Any, policy_id: str = "default_policy") -> None:
        """Every worker's policy ``policy_id`` gets ``weights`` (see `Policy.get_weights`)."""
        self._all("set_weights", (policy_id, weights))

    def sync_weights(self, policy: Policy, policy_id: str = "default_policy") -> None:
        """``set_weights(policy.get_weights())``: the workers act with the learner's current weights."""
        self.set_weights(policy.get_weights(), policy_id)

    def get_weights(self) -> list[dict[str, Any]]:
        """Per worker: ``{policy_id: weights}``."""
        return self._all("get_weights")

    def get_metrics(self) -> dict[str, list]:
        """Returns and lengths of the episodes every worker finished since the last call."""
        out: dict[str, list] = {"episode_returns": [], "episode_lengths": []}
        for m in self._all("metrics"):
            out["episode_returns"] += m["episode_returns"]
            out["episode_lengths"] += m["episode_lengths"]
        return out

    def stop(self) -> None:
        """Stops every worker (their envs are closed) and ends the processes (or Ray actors)."""
        if self._actors:
            try:
                self._ray_all("stop", None)
            except RuntimeError:
                pass  # a worker that already failed: it is killed below all the same
            finally:
                self._kill()
            return
        conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.send(("stop", None))
            except (OSError, ValueError):
                pass
        for c in conns:
            try:
                if c.poll(5):
                    c.recv()
            except (EOFError, OSError):
                pass
            c.close()
        for p in self._procs:
            p.join(timeout=5)
        self._kill()

    def _kill(self) -> None:
        if self._actors:
            import ray

            for a in self._actors:
                ray.kill(a)
            self._actors = []
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for c in self._conns:
            c.close()
        self._conns, self._procs = [], []

    def __enter__(self) -> WorkerSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            if self._procs or self._actors:
                self._kill()
        except Exception:
            pass
