"""Where `WorkerSet`'s workers run: one interface (`Backend`), one class per kind (processes, Ray actors).

A worker is a `RolloutWorker` inside `ServedWorker`, which answers commands
("sample", "set_weights", "get_weights", "metrics", "stop") by name: the
body of a Ray actor and of a worker process alike.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sys
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from .worker import RolloutWorker

__all__ = ["Backend", "ProcessBackend", "RayBackend", "ServedWorker"]


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


class ServedWorker:
    """One worker: its RolloutWorker and the commands it answers."""

    def __init__(self, env_creator: Callable, policy: Any, kwargs: dict) -> None:
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


class Backend(ABC):
    """``num_workers`` served workers (indices ``1..num_workers``) that run one command each, in parallel."""

    num_workers: int

    @abstractmethod
    def call_all(self, cmd: str, arg: Any = None) -> list[Any]:
        """Sends ``cmd`` to every worker and returns their answers in worker order.

        Waits for every answer; then, if any worker failed, raises a
        `RuntimeError` naming the first failed worker, with its traceback.
        """

    @abstractmethod
    def stop(self) -> None:
        """Asks every worker to stop (closing its envs), then ends it."""

    @abstractmethod
    def kill(self) -> None:
        """Ends every worker now."""

    @abstractmethod
    def alive(self) -> bool:
        """Whether any worker may still be running (stop/kill not yet done)."""


# -- processes ------------------------------------------------------------------------


def _serve(conn: Any, env_creator: Callable, policy: Any, kwargs: dict) -> None:
    """A worker process: build the worker, then answer commands until "stop" (or the pipe closes)."""
    try:
        served = ServedWorker(env_creator, policy, kwargs)
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


class ProcessBackend(Backend):
    """Each worker in a process of this machine, answering over a pipe.

    ``start_method``: ``"fork"`` (``env_creator`` may be a lambda) or
    ``"spawn"`` / ``"forkserver"`` (then ``env_creator`` and ``policy`` must pickle).
    """

    def __init__(
        self, env_creator: Callable, policy: Any, worker_kwargs: dict, num_workers: int, start_method: str
    ) -> None:
        self.num_workers = num_workers
        try:
            ctx: Any = mp.get_context(start_method)
        except ValueError as e:
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            ) from e
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        try:
            for i in range(1, num_workers + 1):
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
            for i in range(num_workers):
                self._answer(i)  # each worker's RolloutWorker is built, or its error raised here
        except BaseException:
            self.kill()
            raise

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

    def call_all(self, cmd: str, arg: Any = None) -> list[Any]:
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

    def stop(self) -> None:
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
        self.kill()

    def kill(self) -> None:
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for c in self._conns:
            c.close()
        self._conns, self._procs = [], []

    def alive(self) -> bool:
        return bool(self._procs)


# -- Ray ------------------------------------------------------------------------------


class RayBackend(Backend):
    """Each worker a Ray actor, on any machine of the Ray cluster (``ray.init()`` first to join one).

    ``options`` (e.g. ``{"num_cpus": 1}``) go to ``.options()``; Ray pickles
    ``env_creator`` and ``policy`` (lambdas are fine).
    """

    def __init__(self, env_creator: Callable, policy: Any, worker_kwargs: dict, num_workers: int, options: dict) -> None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("WorkerSet(backend='ray') needs Ray: pip install 'ray>=2.9'") from e
        self.num_workers = num_workers
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(ServedWorker)
        if options:
            actor = actor.options(**options)
        self._actors: list[Any] = [
            actor.remote(env_creator, policy, dict(worker_kwargs, worker_index=i)) for i in range(1, num_workers + 1)
        ]
        try:
            self.call_all("metrics")  # each worker's RolloutWorker is built, or its error raised here
        except BaseException:
            self.kill()
            raise

    def call_all(self, cmd: str, arg: Any = None) -> list[Any]:
        import ray

        if not self._actors:
            raise RuntimeError("WorkerSet is stopped")
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

    def stop(self) -> None:
        try:
            self.call_all("stop")
        except RuntimeError:
            pass  # a worker that already failed: it is killed below all the same
        finally:
            self.kill()

    def kill(self) -> None:
        if self._actors:
            import ray

            for a in self._actors:
                ray.kill(a)
            self._actors = []

    def alive(self) -> bool:
        return bool(self._actors)
