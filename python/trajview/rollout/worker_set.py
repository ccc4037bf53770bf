"""`WorkerSet`: many `RolloutWorker`s, each in a process or a Ray actor of its own, sampled in parallel."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, cast, overload

import numpy as np

from .._validate import positive_int, timeout_seconds
from ..envs.make import as_env_creator
from ..errors import WorkerError
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from .async_sampling import AsyncBatch, AsyncSampling
from .backends import Backend, ProcessBackend, RayBackend, WorkerFailed
from .metrics import merge_worker_metrics
from .options import BatchT
from .plan import EPS_COUNTER_MASK

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import MultiAgentEnvCreator, SingleAgentEnvCreator, WorkerSetOptions

log = logging.getLogger("trajview.rollout")

__all__ = ["AsyncBatch", "STARTING", "WorkerSet", "worker_failure"]

#: How long `WorkerSet.stop` waits for a worker to close its envs before it is killed.
_STOP_TIMEOUT_S = 5.0


#: `WorkerFailed.detail` of a ``"timeout"`` while a new worker builds its envs and policy (``start_timeout_s``).
STARTING = "starting"


def worker_failure(index: int, reason: str, detail: str, sample_timeout_s: float | None = None,
                   start_timeout_s: float | None = None) -> str:
    """What a failed rollout worker's `WorkerError` says (its ``failure``): worker ``index`` (1-based) ``died``
    (``detail``: how), gave no answer within ``sample_timeout_s`` (``timeout``; with ``detail`` `STARTING`: was not
    built within ``start_timeout_s``), or ``raised`` (``detail``: its traceback). `WorkerSet` and ``trajview
    train``'s local backend say it alike."""
    if reason == "died":
        return f"rollout worker {index} died: {detail}"
    if reason == "timeout" and detail == STARTING:
        return (f"rollout worker {index} was not ready within start_timeout_s={start_timeout_s:g} s (building its "
                f"envs and policy; killed)")
    if reason == "timeout":
        return f"rollout worker {index} gave no answer within sample_timeout_s={sample_timeout_s:g} s (killed)"
    return f"rollout worker {index} failed:\n{detail.rstrip()}"


class WorkerSet(Generic[BatchT]):
    """``num_workers`` `RolloutWorker` s, each in a process of its own, sampled in parallel.

    ``WorkerSet(env_creator, policy, num_workers=2, **worker_kwargs)`` (``env_creator`` a callable or a
    registered gymnasium env id, as `RolloutWorker`'s) builds
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
    same exploration noise. With ``seed`` given, worker ``i``'s envs are
    seeded from ``seed + (i - 1) * num_envs`` on (RLlib's rule: env ``k`` of
    worker ``i`` gets ``seed + (i - 1) * num_envs + k``), so no two workers
    start their envs alike. ``set_weights`` / ``sync_weights``
    send a learner's weights to every worker between samples.

    ``backend="process"`` (the default) runs the workers as processes of this
    machine. ``start_method``: ``"fork"`` (the default on Linux:
    ``env_creator`` may be a lambda) or ``"spawn"`` / ``"forkserver"`` (then
    ``env_creator`` and ``policy`` must pickle). A forked worker runs torch on
    one intra-op thread (OpenMP's threads do not survive ``fork``: a driver
    that had run a multi-threaded op left children that would hang at their
    first one); spawned ones keep torch's default. Worker processes end within
    about half a second when the driver process dies, even when it is
    killed. ``backend="ray"`` runs each
    worker as a Ray actor, on any machine of the Ray cluster (``ray.init()``
    first to join one; otherwise a local one is started), with
    ``ray_options`` (e.g. ``{"num_cpus": 1}``) passed to ``.options()``;
    Ray pickles ``env_creator`` and ``policy`` (lambdas are fine).

    Worker failures (RLlib's names):

    * A worker *fails* when it dies (its process exits or is killed, its Ray
      actor is killed or lost), when it gives no answer within
      ``sample_timeout_s`` seconds (default ``None``: no limit; it bounds
      every command once the workers are up, ``sample()`` and the others
      alike; the worker is then killed, a process reaped), or when its command
      raises (e.g. its env's error).
    * ``recreate_failed_workers=False`` (the default): the failure is raised
      as `trajview.errors.WorkerError` (a `RuntimeError`) naming the worker
      (``"rollout worker 2 died: killed by signal SIGKILL ..."``, ``"... gave
      no answer within sample_timeout_s=..."``, or ``"rollout worker 1
      failed:"`` and the worker's traceback), after every other worker's
      answer is in. A worker that raised stays in service; one that died or
      hung stays down, and every later call raises its error again.
    * ``recreate_failed_workers=True``: the failed worker is replaced by a new
      one with the same ``worker_index`` (it gets the weights last given to
      `set_weights` / `sync_weights`, per ``policy_id``, and copies of the
      driver's observation filters ``self.filters`` as the last `sync_filters`
      left them, as RLlib's recreated workers do), and the call goes on
      with the healthy workers' answers: ``sample()`` returns the
      concatenation of their batches (if every worker failed, it samples
      again), ``sample_each()`` / ``get_weights()`` / ``worker_pids()`` hold
      ``None`` in a failed worker's place, and ``get_metrics()`` leaves out
      what the failed worker had not reported yet. At most ``max_restarts``
      (default 1000) replacements in all; after that a failure is raised as
      above. A replacement that fails to start counts as one too.
    Asynchronous sampling (RLlib's async sampling, TorchRL's async
    collectors): `sample_async` keeps every worker sampling all the time and
    hands out each worker's batch as soon as it is in, tagged with the
    ``policy_version`` of the weights it was sampled with; `set_weights`
    meanwhile only records the new weights (``policy_version`` + 1), and each
    worker takes them with its next sample, so the learner never waits for
    the workers nor they for it. Batches more than ``max_staleness`` versions
    behind are dropped (counted in ``get_metrics()["num_stale_batches_dropped"]``).
    Any other call (``sample()``, ``get_metrics()`` ...) first waits for the
    samples in flight and keeps their batches for the next `sample_async`, so
    none is lost.

    * Errors while the workers are first built are always raised. Building a
      worker (the first ones, and each replacement: its envs and its policy)
      is bounded by ``start_timeout_s`` seconds (default ``None``: no limit),
      not by ``sample_timeout_s`` (which bounds the weights and filters a
      replacement is then given): a worker not ready by then is killed, and is a
      `WorkerError` with reason ``"timeout"`` (``"rollout worker 2 was not
      ready within start_timeout_s=..."``); a replacement that is not ready in
      time counts as a failed restart (replaced again while restarts are left;
      RLlib's ``env_runner_restore_timeout_s``).
    * A replacement's ``eps_id`` s count from its worker's first again, and
      with ``seed`` given its envs are seeded as its predecessor's were; its
      global RNGs are seeded apart.

    ``stop()`` (or leaving a ``with`` block) ends the workers.

    Typing: as `RolloutWorker`'s, a ``WorkerSet[SampleBatch]`` over gymnasium
    envs with one policy, a ``WorkerSet[MultiAgentBatch]`` over multi-agent
    envs or with a dict of policies.
    """

    @overload
    def __init__(
        self: WorkerSet[MultiAgentBatch],
        env_creator: MultiAgentEnvCreator,
        policy: Policy | type[Policy] | dict[str, Policy | type[Policy]],
        **options: Unpack[WorkerSetOptions],
    ) -> None: ...

    @overload
    def __init__(
        self: WorkerSet[SampleBatch],
        env_creator: SingleAgentEnvCreator,
        policy: Policy | type[Policy],
        **options: Unpack[WorkerSetOptions],
    ) -> None: ...

    @overload
    def __init__(
        self: WorkerSet[MultiAgentBatch],
        env_creator: Callable[[dict], Any],
        policy: dict[str, Policy | type[Policy]],
        **options: Unpack[WorkerSetOptions],
    ) -> None: ...

    def __init__(
        self,
        env_creator: str | Callable[[dict], Any],
        policy: Policy | type[Policy] | dict,
        *,
        num_workers: int = 2,
        backend: str = "process",
        start_method: str = "fork",
        ray_options: dict | None = None,
        recreate_failed_workers: bool = False,
        max_restarts: int = 1000,
        sample_timeout_s: float | None = None,
        start_timeout_s: float | None = None,
        **worker_kwargs: Any,
    ) -> None:
        self.num_workers = positive_int("num_workers", num_workers)
        if "worker_index" in worker_kwargs:
            raise ValueError("WorkerSet sets worker_index itself (1..num_workers); do not pass it")
        if backend not in ("process", "ray"):
            raise ValueError(f"backend must be 'process' or 'ray', got {backend!r}")
        if not isinstance(recreate_failed_workers, (bool, np.bool_)):
            raise ValueError(f"recreate_failed_workers must be a bool, got {recreate_failed_workers!r}")
        if isinstance(max_restarts, (bool, np.bool_)) or not isinstance(max_restarts, (int, np.integer)) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        self.sample_timeout_s = timeout_seconds("sample_timeout_s", sample_timeout_s)
        #: Seconds a new worker may take to be built and answer (None: no limit).
        self.start_timeout_s = timeout_seconds("start_timeout_s", start_timeout_s)
        env_creator = as_env_creator(env_creator)  # an env id: checked here, a picklable creator for the workers
        self.backend = backend
        self.recreate_failed_workers = bool(recreate_failed_workers)
        self.max_restarts = int(max_restarts)
        #: Workers replaced so far (RLlib's ``num_remote_worker_restarts``).
        self.num_worker_restarts = 0
        self._backend: Backend
        if backend == "ray":
            self._backend = RayBackend(env_creator, policy, worker_kwargs, ray_options or {})
        else:
            self._backend = ProcessBackend(env_creator, policy, worker_kwargs, start_method)
        self._workers: list[Any] = [None] * self.num_workers  # a backend handle; None: killed
        self._down: dict[int, WorkerError] = {}  # position -> the failure that left it down for good
        self._weights: dict[str, Any] = {}  # policy_id -> the weights last set: a replacement gets them
        #: The driver's observation filters (RLlib's local worker's), made by the first `sync_filters`.
        self.filters: dict[str, Any] = {}
        self._worker_kwargs = dict(worker_kwargs)
        self._eps_next = [0] * self.num_workers  # per worker: the episode counter after the ids seen in its batches
        self._stopped = False
        #: Bumped by every set_weights: the version of the learner's newest weights.
        self.policy_version = 0
        self._async = AsyncSampling(self)  # sample_async's samples in flight, and the weights each worker has
        try:
            for i in range(self.num_workers):
                self._workers[i] = self._backend.start(i + 1, overrides=self._seed_kwargs(i, 0))
            failed = self._started(range(self.num_workers))
            if failed:
                i = min(failed)
                raise self._error(i, failed[i], hint=False)
        except BaseException:
            self._kill_all()
            raise

    # -- commands, failures, replacements ------------------------------------------------

    def _exchange(
        self, positions: Iterable[int], cmd: str, arg: Any, timeout: float | None
    ) -> tuple[dict[int, Any], dict[int, WorkerFailed]]:
        """Sends ``cmd`` to the workers at ``positions`` at once; their answers, and their failures.

        ``timeout`` counts from the send, for all of them together. A worker
        that died or gave no answer in time is killed (its handle ``None``).
        """
        positions = list(positions)
        deadline = None if timeout is None else time.monotonic() + timeout
        for i in positions:
            self._backend.send(self._workers[i], cmd, arg)
        answers: dict[int, Any] = {}
        failed: dict[int, WorkerFailed] = {}
        for i in positions:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                answers[i] = self._backend.receive(self._workers[i], remaining)
            except WorkerFailed as f:
                failed[i] = f
                if f.reason != "raised":
                    self._kill(i)
        return answers, failed

    def _run(self, cmd: str, arg: Any = None) -> list[Any]:
        """``cmd`` on every worker: their answers in worker order (``None`` for a failed, replaced worker)."""
        if self._stopped:
            raise RuntimeError("WorkerSet is stopped")
        self._raise_if_down()
        self._async.drain()
        if cmd != "set_weights":
            self._async.catch_up()
        answers, failed = self._exchange(range(self.num_workers), cmd, arg, self.sample_timeout_s)
        if failed:
            self._recover(failed)
        return [answers.get(i) for i in range(self.num_workers)]

    def _raise_if_down(self) -> None:
        """Raises the failure that left a worker down for good, if any."""
        if self._down:
            i = min(self._down)
            e = self._down[i]
            raise WorkerError(
                f"rollout worker {i + 1} is down after an earlier failure:\n{e}",
                worker_index=e.worker_index, reason=e.reason, detail=e.detail,
            )

    def _recover(self, failed: dict[int, WorkerFailed]) -> None:
        """Replaces the failed workers while restarts are allowed; then raises the first failure left, if any."""
        error: WorkerError | None = None
        while failed:
            starting = []
            for i in sorted(failed):
                if self.recreate_failed_workers and self.num_worker_restarts < self.max_restarts:
                    self._kill(i)
                    self.num_worker_restarts += 1
                    f = failed[i]
                    what = self._error(i, f, hint=False).failure.splitlines()[0]
                    if f.reason == "raised" and f.detail.strip():  # the worker's exception, its traceback's last line
                        what += " " + f.detail.strip().splitlines()[-1]
                    log.warning("%s; starting a replacement (restart %d of max_restarts=%d)", what,
                                self.num_worker_restarts, self.max_restarts)
                    try:
                        self._workers[i] = self._backend.start(
                            i + 1, incarnation=self.num_worker_restarts, overrides=self._replacement_kwargs(i)
                        )
                    except Exception as start_error:  # e.g. no process could be forked: the worker stays down
                        f = failed[i]
                        self._down[i] = WorkerError(
                            f"{self._error(i, f, hint=False)}\nstarting its replacement failed: {start_error!r}",
                            worker_index=i + 1, reason=f.reason, detail=f.detail,
                        )
                        error = error or self._down[i]
                        continue
                    starting.append(i)
                    continue
                err = self._error(i, failed[i])
                if self._workers[i] is None:
                    self._down[i] = err
                error = error or err
            failed = self._ready(starting)
        if error is not None:
            raise error

    def _ready(self, positions: list[int]) -> dict[int, WorkerFailed]:
        """Waits for new workers to be built, then gives them the last weights and the driver's filters (RLlib
        restores a recreated worker from the local worker's state); those that failed (killed)."""
        if not positions:
            return {}
        failed = self._started(positions)
        commands: list[tuple[str, Any]] = [("set_weights", (policy_id, weights)) for policy_id, weights in self._weights.items()]
        if self.filters:
            commands.append(("sync_filters", self._driver_filters()))
        for cmd, arg in commands:
            ok = [i for i in positions if i not in failed]
            failed.update(self._exchange(ok, cmd, arg, self.sample_timeout_s)[1])
        for i in failed:
            self._kill(i)
        return failed

    def _started(self, positions: Iterable[int]) -> dict[int, WorkerFailed]:
        """Waits (up to ``start_timeout_s``) for the new workers at ``positions`` to be built and answer; those that
        failed (a timeout's detail: `STARTING`)."""
        _, failed = self._exchange(positions, "pid", None, timeout=self.start_timeout_s)
        return {i: WorkerFailed("timeout", STARTING) if f.reason == "timeout" else f for i, f in failed.items()}

    def _seed_kwargs(self, i: int, restarts: int) -> dict[str, Any]:
        """Worker ``i``'s env seed: ``seed + i * num_envs`` (its envs' seeds follow on), moved apart for a
        replacement (``restarts`` > 0); nothing without ``seed``."""
        seed = self._worker_kwargs.get("seed")
        if seed is None:
            return {}
        num_envs = int(self._worker_kwargs.get("num_envs", 1))
        return {"seed": (int(seed) + i * num_envs + 1_000_003 * restarts) % 2**31}

    def _replacement_kwargs(self, i: int) -> dict[str, Any]:
        """A replacement's episode ids go on after every id its predecessors handed out; its env seeds differ."""
        return {"eps_id_offset": self._eps_next[i], **self._seed_kwargs(i, self.num_worker_restarts)}

    def _note_eps_ids(self, batches: list[Any]) -> None:
        """Remembers, per worker, the next episode counter after the ids its batches carried."""
        for i, b in enumerate(batches):
            if b is None:
                continue
            parts = b.policy_batches.values() if isinstance(b, MultiAgentBatch) else [b]
            for part in parts:
                eps = part.get(SampleBatch.EPS_ID) if len(part) else None
                if eps is not None and len(eps):
                    n = int((np.asarray(eps) & EPS_COUNTER_MASK).max()) + 1
                    self._eps_next[i] = max(self._eps_next[i], n)

    def _error(self, i: int, f: WorkerFailed, hint: bool = True) -> WorkerError:
        msg = worker_failure(i + 1, f.reason, f.detail, self.sample_timeout_s, self.start_timeout_s)
        note = ""
        if hint and not self.recreate_failed_workers:
            note = "(WorkerSet(..., recreate_failed_workers=True) replaces a failed worker and goes on)"
        elif hint:
            note = f"(all max_restarts={self.max_restarts} worker restarts are used up: raise max_restarts for more)"
        return WorkerError(msg, worker_index=i + 1, reason=f.reason, detail=f.detail, hint=note,
                           restarts_used_up=hint and self.recreate_failed_workers)

    def _kill(self, i: int) -> None:
        w, self._workers[i] = self._workers[i], None
        if w is not None:
            self._backend.kill(w)

    def _kill_all(self) -> None:
        for i in range(len(self._workers)):
            self._kill(i)

    # -- API ------------------------------------------------------------------------

    @property
    def num_healthy_workers(self) -> int:
        """Workers in service (all of them, unless one died or hung and was not replaced)."""
        return 0 if self._stopped else sum(w is not None for w in self._workers)

    def sample(self) -> BatchT:
        """One ``sample()`` of every worker, in parallel, concatenated in worker order (failed workers left out)."""
        while True:
            answers = self._run("sample")
            self._note_eps_ids(answers)
            batches = [b for b in answers if b is not None]
            if batches:
                return cast(BatchT, concat_samples(batches))

    def sample_each(self) -> list[BatchT | None]:
        """One ``sample()`` of every worker, in parallel, one batch per worker (``None``: that worker failed and
        was replaced, see ``recreate_failed_workers``)."""
        answers = self._run("sample")
        self._note_eps_ids(answers)
        return answers

    def sample_async(
        self, timeout: float | None = None, max_staleness: int | None = None, with_metrics: bool = False
    ) -> AsyncBatch:
        """The next batch of whichever worker is done first; that worker samples on at once.

        The first call sets every worker sampling; from then on each worker
        always has one sample in flight, with the newest weights it was given
        (see `set_weights`). ``max_staleness``: batches sampled with weights
        more than that many versions older than the newest are dropped (and
        counted), not handed out. ``timeout``: seconds to wait for a batch
        (``None``: no limit); a ``TimeoutError`` if none came.
        ``with_metrics``: the samples this call sends also bring the worker's
        metrics since its last report (``AsyncBatch.metrics``), so that a
        learner needs no `get_metrics` (which waits for the samples in
        flight); those episodes are then not in a later `get_metrics`. A
        dropped stale batch's metrics are lost with it: pass
        ``max_staleness=None`` and drop stale batches yourself to keep them.
        """
        if self._stopped:
            raise RuntimeError("WorkerSet is stopped")
        if max_staleness is not None and (isinstance(max_staleness, bool) or not isinstance(max_staleness, int)
                                          or max_staleness < 0):
            raise ValueError(f"max_staleness must be None or an int >= 0, got {max_staleness!r}")
        return self._async.next(timeout, max_staleness, with_metrics)

    def set_weights(self, weights: Any, policy_id: str = "default_policy") -> None:
        """Every worker's policy ``policy_id`` gets ``weights`` (see `Policy.get_weights`); so will replacements.

        ``policy_version`` goes up by one. While workers sample asynchronously
        (`sample_async`), the weights are only recorded: each worker takes
        them with its next sample.
        """
        self._weights[policy_id] = weights
        self.policy_version += 1
        if self._async.active:
            return
        self._run("set_weights", (policy_id, weights))
        self._async.all_given()

    def sync_weights(self, policy: Policy, policy_id: str = "default_policy") -> None:
        """``set_weights(policy.get_weights())``: the workers act with the learner's current weights; then, if
        the workers filter observations, the filters are synced (`sync_filters`), as RLlib does each iteration."""
        self.set_weights(policy.get_weights(), policy_id)
        if self._worker_kwargs.get("observation_filter", "NoFilter") not in ("NoFilter", None):
            self.sync_filters()

    def sync_filters(self) -> dict[str, Any]:
        """RLlib's ``FilterManager.synchronize``: every worker's filter buffer (what it saw since the last sync,
        then cleared) goes into the driver's filters (``self.filters``), and every worker's filters become
        copies of those. Returns the driver's filters."""
        answers = self._run("get_filters", True)
        for fs in answers:
            if fs is None:
                continue
            for pid, f in fs.items():
                if pid not in self.filters:
                    self.filters[pid] = f.empty_copy()
                self.filters[pid].apply_changes(f, with_buffer=False)
        self._run("sync_filters", self._driver_filters())
        return self.filters

    def _driver_filters(self) -> dict[str, Any]:
        """Copies of the driver's filters, to send (a worker's filters become copies of them)."""
        return {pid: f.as_serializable() for pid, f in self.filters.items()}

    def get_weights(self) -> list[dict[str, Any] | None]:
        """Per worker: ``{policy_id: weights}`` (``None``: that worker failed and was replaced)."""
        return self._run("get_weights")

    def worker_pids(self) -> list[int | None]:
        """Per worker: the id of the process it runs in (a Ray actor's too; ``None``: it failed and was replaced)."""
        return self._run("pid")

    def get_metrics(self) -> dict[str, Any]:
        """Every worker's metrics since the last call (see `RolloutWorker.get_metrics`), summed, plus the set's.

        ``episode_returns`` / ``episode_lengths``: the workers' lists, in
        worker order; ``episodes_dropped``, ``num_faulty_episodes``,
        ``num_env_restarts``: summed over the workers; ``custom_metrics``:
        RLlib's ``<name>_mean/_min/_max`` over every worker's episodes'
        ``episode.custom_metrics``; ``hist_stats`` / ``episode_media``: the
        workers' ``hist_data`` / ``media`` lists joined; ``num_worker_restarts``:
        workers replaced so far (in all, not since the last call);
        ``num_healthy_workers``: workers in service now; ``sample_time_s`` /
        ``sample_env_steps``: per worker (in worker order, failed ones left
        out), the seconds its ``RolloutWorker.sample`` calls took and the env
        steps they returned since the last report (its sampling throughput);
        ``num_nonfinite_obs_skipped``: observations the workers' filters
        skipped for a NaN or an infinity since the last call (see
        `MeanStdFilter`'s ``nonfinite``).
        """
        out = merge_worker_metrics(self._run("metrics"))
        out["num_worker_restarts"] = self.num_worker_restarts
        out["num_healthy_workers"] = self.num_healthy_workers
        out["policy_version"] = self.policy_version
        out["num_stale_batches_dropped"] = self._async.stale_dropped
        return out

    def stop(self) -> None:
        """Stops every worker (their envs are closed) and ends the processes (or Ray actors)."""
        if self._stopped:
            return
        self._stopped = True
        self._async.clear()  # "stop" is answered after any sample in flight: its answer is skipped
        try:
            live = [i for i, w in enumerate(self._workers) if w is not None]
            self._exchange(live, "stop", None, timeout=_STOP_TIMEOUT_S)  # a worker that fails now is killed all the same
        finally:
            self._kill_all()

    def __enter__(self) -> WorkerSet[BatchT]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            if "_workers" in self.__dict__:
                self._kill_all()
        except Exception:
            pass
