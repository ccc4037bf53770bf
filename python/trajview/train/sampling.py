"""Where a PPO run's rollout workers sample (``trajview train --backend``): the rollout sources behind `PPOTrainer`.

* `LocalRollouts` (``--backend local``): the workers are `RolloutWorker` s in
  the trainer's process, sharing the learner's policy object (no weights to
  send), sampled one after another. One worker this way is the fastest
  setup on one core (nothing crosses a process boundary).
* `ParallelRollouts` (``--backend process`` / ``ray``): the workers are a
  `tv.WorkerSet`, each in a process or a Ray actor of its own, sampled in
  parallel. Synchronously: each iteration every worker samples its share
  with the learner's newest weights, while the learner waits. With
  ``async_sampling`` (``--async``): `WorkerSet.sample_async` keeps every
  worker sampling while the learner trains; each batch is tagged with the
  policy version it was sampled with, and batches more than
  ``max_staleness`` versions behind are dropped here (their env steps and
  episodes still count).

Each returns one `Sampled` per iteration: the train batch, the
episodes finished, each worker's sampling throughput, and how long the learner
waited for it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
import traceback
from typing import Any

import numpy as np

from .._extras import require
from ..policy.policy import Policy
from ..rollout.worker import RolloutWorker
from ..errors import WorkerError
from ..rollout.worker_set import WorkerSet, worker_failure
from ..views import SampleBatch, concat_samples
from .config import TrainConfig

log = logging.getLogger("trajview.train")

__all__ = ["Sampled", "LocalRollouts", "ParallelRollouts", "make_rollouts", "check_ray_address", "sample_in_process"]


@dataclasses.dataclass
class Sampled:
    """One iteration's experience and how it was sampled."""

    batch: SampleBatch
    #: Env steps sampled (the batch's, plus those of stale batches dropped).
    env_steps: int
    episode_returns: list[float]
    episode_lengths: list[int]
    #: Per worker that reported: (env steps, seconds in ``RolloutWorker.sample``).
    worker_timing: dict[int, tuple[int, float]]
    #: Seconds the learner waited for the batch (sampling it, for the synchronous sources).
    learner_idle_s: float
    #: Per batch in ``batch``: how many policy versions behind the learner's newest weights it was.
    staleness: list[int]
    stale_batches_dropped: int = 0

    def worker_steps_per_s(self) -> float:
        """The mean over the workers of their env steps per second of sampling."""
        rates = [steps / secs for steps, secs in self.worker_timing.values() if secs > 0]
        return float(np.mean(rates)) if rates else math.nan


def _timing(metrics: dict, timing: dict[int, tuple[int, float]], index: int) -> None:
    for steps, secs in zip(metrics.get("sample_env_steps", []), metrics.get("sample_time_s", [])):
        s0, t0 = timing.get(index, (0, 0.0))
        timing[index] = (s0 + int(steps), t0 + float(secs))


def sample_in_process(worker: RolloutWorker[Any], index: int) -> Any:
    """``worker.sample()`` of a worker in the trainer's process (the local backend's, DQN's); whatever it raises
    (the env, the policy) becomes the `WorkerError` a worker process's failure is (`worker_failure`: "rollout
    worker ``index`` failed:" and the traceback), so that ``trajview train`` says it alike."""
    try:
        return worker.sample()
    except Exception as e:
        tb = traceback.format_exc()
        raise WorkerError(worker_failure(index, "raised", tb), worker_index=index, reason="raised", detail=tb) from e


class LocalRollouts:
    """``config.workers`` `RolloutWorker` s in this process, sampled in turn, acting with the learner's policy."""

    def __init__(self, config: TrainConfig, env_creator: Any, policy: Policy, fragment: int, seed: int) -> None:
        self.workers = [
            RolloutWorker(
                env_creator,
                policy,
                num_envs=config.envs_per_worker,
                rollout_fragment_length=fragment,
                seed=seed + i * config.envs_per_worker,
                worker_index=i,
            )
            for i in range(config.workers)
        ]

    def sample(self) -> Sampled:
        batches = []
        returns: list[float] = []
        lengths: list[int] = []
        timing: dict[int, tuple[int, float]] = {}
        for i, w in enumerate(self.workers):
            t0 = time.perf_counter()
            b = sample_in_process(w, i + 1)
            timing[i + 1] = (len(b), time.perf_counter() - t0)
            batches.append(b)
        for w in self.workers:
            m = w.get_metrics()
            returns.extend(m["episode_returns"])
            lengths.extend(m["episode_lengths"])
        batch = concat_samples(batches)
        idle = sum(t for _, t in timing.values())
        return Sampled(batch, len(batch), returns, lengths, timing, idle, [0] * len(batches))

    #: Workers in the trainer's process are never replaced: their failure is the trainer's.
    worker_restarts = 0

    def sync_weights(self, policy: Policy) -> tuple[int, float]:
        """Nothing to send when the workers act with the learner's policy object itself; else (the learner on
        another device) its weights copied into the workers' CPU policy: the bytes and the seconds it took."""
        acting = self.workers[0].policy
        if acting is policy:
            return 0, 0.0
        t0 = time.perf_counter()
        weights = policy.get_weights()
        acting.set_weights(weights)
        return sum(int(np.asarray(v).nbytes) for v in weights.values()), time.perf_counter() - t0

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Raises ValueError, naming ``--ray-address``, when no Ray cluster can be there (``HOST:PORT`` or
    ``ray://HOST:PORT`` that nothing listens on; an address Ray cannot parse). "auto" / "local" pass."""
    if address in ("auto", "local"):
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--ray-address: expected auto, HOST:PORT (the head's `ray start --head` address, e.g. "
                         f"10.0.0.1:6379) or ray://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise ValueError(f"--ray-address {address}: no Ray cluster answers there ({e}); start one with "
                         "`ray start --head` and pass the address it prints") from None


#: Attempts at a Ray Client connection (``ray://``) whose server-side start failed.
RAY_CLIENT_ATTEMPTS = 3


def join_ray_cluster(ray: Any, address: str, attempts: int = RAY_CLIENT_ATTEMPTS) -> None:
    """``ray.init(address)``; through Ray Client (``ray://``), tried again when the head failed to start the
    connection's server ("Initialization failure from server": Ray 2.60's proxy forks that server while gRPC
    threads run, and it sometimes dies at once; here 1 fresh head in 6, the next attempt connected). Other
    failures (no answer, a timeout, token authentication) are not retried: they would fail again."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except ConnectionError as e:
            if not address.startswith("ray://") or "Initialization failure from server" not in str(e) \
                    or attempt == attempts:
                raise
            log.warning("--ray-address %s: the Ray Client server did not start (attempt %d of %d), trying again",
                        address, attempt, attempts)
            ray.shutdown()
            time.sleep(1.0)


def ray_auth_hint(environ: Any = None) -> str:
    """What to add to a failed connection's message about Ray's token authentication (Ray >= 2.52).

    ``ray start`` turns token authentication on where a token exists (``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, which any earlier ``ray.init()`` on the machine writes),
    unless ``RAY_AUTH_MODE`` says otherwise; a driver connecting to it (``HOST:PORT`` or ``ray://``) sends the
    token only with ``RAY_AUTH_MODE=token``. With the two modes apart, Ray reports a connection failure or a
    client timeout, not the mismatch.
    """
    env = os.environ if environ is None else environ
    mode = env.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() == "token":
        return ("; RAY_AUTH_MODE=token is set here: if the cluster uses token authentication, give this process "
                "the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
    return (f"; if the cluster uses Ray's token authentication (`ray start` turns it on where a token exists, "
            f"~/.ray/auth_token included), run with RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, "
            f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token); RAY_AUTH_MODE here: {mode if mode is not None else 'unset'}")


class LowPriorityCreator:
    """An env creator that first lowers the CPU priority of the process it runs in (``os.nice(increment)``, once
    per process), then calls ``creator``.

    With ``--async`` the workers sample while the learner trains. Workers at
    the same priority as the learner take CPU time from it whenever there
    are fewer cores than processes (2 workers and the learner on 2 cores: the
    learner got two thirds of a core), though a batch sampled beyond what the
    learner trains on only waits or goes stale. At a lower priority the
    workers take what the learner leaves.
    """

    def __init__(self, creator: Any, increment: int = 19) -> None:
        self.creator = creator
        self.increment = increment
        self._niced_pid: int | None = None

    def __call__(self, env_config: Any) -> Any:
        if self._niced_pid != os.getpid():
            self._niced_pid = os.getpid()
            try:
                os.nice(self.increment)
            except OSError:  # not allowed here: sample at the same priority
                pass
        return self.creator(env_config)


class ParallelRollouts:
    """The workers of a `WorkerSet` (processes or Ray actors), sampled in parallel, synchronously or not."""

    def __init__(self, config: TrainConfig, env_creator: Any, policy: Policy, fragment: int, seed: int) -> None:
        self.async_sampling = config.async_sampling
        self.max_staleness = config.max_staleness
        self.train_batch_size = config.train_batch_size
        self._started_ray = False
        ray_options: dict[str, Any] = {}
        if config.backend == "ray":
            ray = require("ray", "--backend ray")
            if not ray.is_initialized():  # else: the Ray session the caller started (e.g. a test's)
                if config.ray_address is not None:
                    check_ray_address(config.ray_address)
                    try:
                        join_ray_cluster(ray, config.ray_address)
                    except ConnectionError as e:
                        raise ValueError(f"--ray-address {config.ray_address}: {' '.join(str(e).split())}"
                                         f"{ray_auth_hint()}") from None
                else:
                    # address="local": a new instance, never one that another program started on this machine.
                    ray.init(address="local", include_dashboard=False, log_to_driver=False)
                self._started_ray = True
        try:
            # The learner's policy is copied into each worker (forked, or pickled for Ray): its weights to start.
            self.workers: WorkerSet[SampleBatch] = WorkerSet(
                LowPriorityCreator(env_creator) if config.async_sampling else env_creator,
                policy,
                num_workers=config.workers,
                backend=config.backend or "process",
                ray_options=ray_options,
                num_envs=config.envs_per_worker,
                rollout_fragment_length=fragment,
                seed=seed,
                recreate_failed_workers=config.recreate_failed_workers,
                max_restarts=config.max_worker_restarts,
                sample_timeout_s=config.sample_timeout_s,
                start_timeout_s=config.start_timeout_s,
            )
        except BaseException:
            self._shutdown_ray()
            raise
        self._weights_bytes: int | None = None

    def sample(self) -> Sampled:
        return self._sample_async() if self.async_sampling else self._sample_sync()

    def _sample_sync(self) -> Sampled:
        ws = self.workers
        t0 = time.perf_counter()
        batches: list[SampleBatch] = []
        steps = 0
        # One round of every worker's sample gives train_batch_size env steps; a worker that failed in it and was
        # replaced (recreate_failed_workers) gave none, and another round tops the batch up (RLlib's
        # synchronous_parallel_sample also samples on until it has the train batch size).
        while steps < self.train_batch_size:
            got = [b for b in ws.sample_each() if b is not None]
            batches.extend(got)
            steps += sum(len(b) for b in got)
        m = ws.get_metrics()
        idle = time.perf_counter() - t0
        timing: dict[int, tuple[int, float]] = {}
        for k, (worker_steps, secs) in enumerate(zip(m["sample_env_steps"], m["sample_time_s"])):
            timing[k + 1] = (int(worker_steps), float(secs))
        batch = concat_samples(batches)
        return Sampled(batch, len(batch), list(m["episode_returns"]), list(m["episode_lengths"]), timing, idle,
                       [0] * len(batches))

    def _sample_async(self) -> Sampled:
        ws = self.workers
        kept: list[tuple[int, SampleBatch, int]] = []  # (worker index, batch, staleness), in arrival order
        episodes: list[tuple[int, list[float], list[int]]] = []  # (worker index, returns, lengths), in arrival order
        timing: dict[int, tuple[int, float]] = {}
        sampled = steps = dropped = 0
        idle = 0.0
        while steps < self.train_batch_size:
            t0 = time.perf_counter()
            # Stale batches are dropped here, not by the WorkerSet: their episodes and env steps still count.
            got = ws.sample_async(with_metrics=True)
            idle += time.perf_counter() - t0
            m = got.metrics or {}
            episodes.append((got.worker_index, list(m.get("episode_returns", [])), list(m.get("episode_lengths", []))))
            _timing(m, timing, got.worker_index)
            sampled += len(got.batch)
            if got.staleness > self.max_staleness:
                dropped += 1
                continue
            if not isinstance(got.batch, SampleBatch):  # gymnasium envs give single-agent batches
                raise TypeError(f"PPO trains on single-agent batches, got {type(got.batch).__name__}")
            kept.append((got.worker_index, got.batch, got.staleness))
            steps += len(got.batch)
        # Batches and episodes in worker order, not in arrival order (which the OS's scheduling decides): when each
        # worker sent one batch (the usual case: each samples one fragment while the learner trains), the train
        # batch and the episodes' order (which of them the return's window keeps) are the same in every run of the
        # seed, and so is the learning. (The sorts are stable: one worker's batches stay in the order they came.)
        kept.sort(key=lambda k: k[0])
        episodes.sort(key=lambda e: e[0])
        batches = [k[1] for k in kept]
        staleness = [k[2] for k in kept]
        returns = [r for e in episodes for r in e[1]]
        lengths = [n for e in episodes for n in e[2]]
        return Sampled(concat_samples(batches), sampled, returns, lengths, timing, idle, staleness, dropped)

    @property
    def worker_restarts(self) -> int:
        """Failed workers replaced so far (``recreate_failed_workers``)."""
        return self.workers.num_worker_restarts

    def sync_weights(self, policy: Policy) -> tuple[int, float]:
        """Sends the learner's weights to every worker (asynchronously: each takes them with its next sample);
        the bytes sent (the weights' size times the workers) and the seconds the learner spent on it."""
        t0 = time.perf_counter()
        weights = policy.get_weights()
        if self._weights_bytes is None:
            self._weights_bytes = sum(int(np.asarray(v).nbytes) for v in weights.values())
        n = self.workers.num_healthy_workers
        self.workers.set_weights(weights)
        return self._weights_bytes * n, time.perf_counter() - t0

    def stop(self) -> None:
        try:
            self.workers.stop()
        finally:
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False


def make_rollouts(config: TrainConfig, env_creator: Any, policy: Policy, fragment: int,
                 seed: int) -> LocalRollouts | ParallelRollouts:
    """The rollout source of ``config.backend``."""
    if config.backend == "local":
        return LocalRollouts(config, env_creator, policy, fragment, seed)
    return ParallelRollouts(config, env_creator, policy, fragment, seed)
