"""`WorkerSet`: many `RolloutWorker`s, each in a process or a Ray actor of its own, sampled in parallel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._validate import positive_int
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from .backends import Backend, ProcessBackend, RayBackend

__all__ = ["WorkerSet"]


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
        self._backend: Backend
        if backend == "ray":
            self._backend = RayBackend(env_creator, policy, worker_kwargs, self.num_workers, ray_options or {})
        else:
            self._backend = ProcessBackend(env_creator, policy, worker_kwargs, self.num_workers, start_method)

    def _all(self, cmd: str, arg: Any = None) -> list[Any]:
        return self._backend.call_all(cmd, arg)

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
        self._backend.stop()

    def __enter__(self) -> WorkerSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            backend = self.__dict__.get("_backend")
            if backend is not None and backend.alive():
                backend.kill()
        except Exception:
            pass
