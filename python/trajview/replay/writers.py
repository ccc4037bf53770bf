"""Many writers, one `ReplayBuffer`: complete batches from other processes (a queue into the learner's buffer)
or from a Ray cluster (the buffer as an actor).

Each writer hands over whole batches (e.g. one `RolloutWorker.sample()`);
the buffer adds each batch whole, under its lock, in the order that writer
sent them. Trajectories are told apart by their ids (``eps_id``: give every
worker its own ``worker_index``), so interleaved writes of different writers
never stitch two trajectories into one slice. Fragments of one episode are
joined when they arrive in order (``t`` continues); a fragment that is not
contiguous with the stored part (steps missing, or an earlier fragment
arriving late) starts a trajectory of its own (see `ReplayBuffer`).
"""

from __future__ import annotations

import multiprocessing
import queue as queue_mod
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..views import SampleBatch, concat_samples
from .buffer import ReplayBuffer

__all__ = ["ReplayServer", "ReplayWriter", "ray_replay_buffer"]

_STOP = "__trajview_replay_server_stop__"


class ReplayWriter:
    """A writer's handle (pass it to a `multiprocessing.Process`): `add` sends a batch, pickled whole, to the
    learner's `ReplayServer`. ``add`` blocks while the server's queue is full (back-pressure).

    ``trajs_per_batch=N`` (TorchRL's collector option): only complete trajectories are sent, N per batch.
    The writer keeps each trajectory's rows (by ``traj_key``, default ``eps_id``) until a row with an end
    flag (``terminateds | truncateds``) arrives; `flush` sends the complete ones still held (fewer than N).
    """

    def __init__(self, q: Any, trajs_per_batch: int | None = None, traj_key: str = "eps_id") -> None:
        self._queue = q
        if trajs_per_batch is not None and (not isinstance(trajs_per_batch, int) or trajs_per_batch < 1):
            raise ValueError(f"trajs_per_batch must be None or an int >= 1, got {trajs_per_batch!r}")
        self.trajs_per_batch = trajs_per_batch
        self.traj_key = traj_key
        self._pending: dict[int, list[SampleBatch]] = {}
        self._complete: list[SampleBatch] = []

    def add(self, batch: Mapping[str, Any]) -> None:
        if self.trajs_per_batch is None:
            self._queue.put(batch)
            return
        b = batch if isinstance(batch, SampleBatch) else SampleBatch(batch)
        keys = np.asarray(b[self.traj_key])
        n = len(keys)
        ends = np.zeros(n, bool)
        for k in ("terminateds", "truncateds", "dones"):
            if k in b:
                ends |= np.asarray(b[k]).reshape(n, -1).any(axis=1)
        cut = np.ones(n, bool)
        cut[1:] = (keys[1:] != keys[:-1]) | ends[:-1]
        starts = np.flatnonzero(cut).tolist()
        for a, e in zip(starts, starts[1:] + [n]):
            key = int(keys[a])
            self._pending.setdefault(key, []).append(b[a:e])
            if ends[e - 1]:
                parts = self._pending.pop(key)
                self._complete.append(parts[0] if len(parts) == 1 else concat_samples(parts))
        while len(self._complete) >= self.trajs_per_batch:
            self._send(self._complete[: self.trajs_per_batch])
            del self._complete[: self.trajs_per_batch]

    def _send(self, trajs: list[SampleBatch]) -> None:
        self._queue.put(trajs[0] if len(trajs) == 1 else concat_samples(trajs))

    def flush(self) -> None:
        """Sends the complete trajectories held back (``trajs_per_batch``); incomplete ones stay held."""
        if self._complete:
            self._send(self._complete)
            self._complete = []

    extend = add  # TorchRL's name


class ReplayServer:
    """Feeds ``buffer`` from writer processes: `writer()` handles put batches on a multiprocessing queue, and a
    thread of this process adds them (``buffer.add``) as they come, while other threads sample.

    ``context``: the multiprocessing context the writers are started with (default: the platform's).
    ``maxsize``: batches in flight before writers block. Errors from ``add`` (a bad batch) are kept in
    ``errors`` and the server goes on. Use as a context manager, or `start` / `close`.
    """

    def __init__(self, buffer: ReplayBuffer, *, context: Any = None, maxsize: int = 64) -> None:
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer must be a tv.ReplayBuffer, got {type(buffer).__name__}")
        self.buffer = buffer
        ctx = context if context is not None else multiprocessing.get_context()
        self._queue = ctx.Queue(maxsize)
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self.batches_added = 0
        self.steps_added = 0

    def writer(self, trajs_per_batch: int | None = None, traj_key: str = "eps_id") -> ReplayWriter:
        """A handle for one writer process (``trajs_per_batch``: send complete trajectories only, see
        `ReplayWriter`)."""
        return ReplayWriter(self._queue, trajs_per_batch, traj_key)

    def start(self) -> ReplayServer:
        """Starts the thread that adds incoming batches (start writer processes that fork before this)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="trajview-replay-server", daemon=True)
            self._thread.start()
        return self

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, str) and item == _STOP:
                return
            try:
                self.steps_added += self.buffer.add(item)
                self.batches_added += 1
            except Exception as e:  # a bad batch: kept, the others go on
                self.errors.append(e)

    def close(self, timeout: float | None = 60.0) -> None:
        """Adds every batch sent before this call, then stops the thread."""
        if self._thread is None:
            self.start()
        assert self._thread is not None
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"ReplayServer.close: batches still arriving after {timeout} s")
        self._queue.close()

    def pending(self) -> bool:
        """Whether batches wait in the queue (approximate)."""
        try:
            return not self._queue.empty()
        except (OSError, ValueError, queue_mod.Empty):
            return False

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def ray_replay_buffer(capacity: int, *, ray_options: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """A `ReplayBuffer` as a Ray actor: ``buf.add.remote(batch)`` from any worker of the cluster,
    ``ray.get(buf.sample.remote(256))`` in the learner. The actor runs one call at a time, so every batch is
    added whole. ``kwargs`` go to `ReplayBuffer`; ``ray_options`` to ``.options()``. Needs ``ray``."""
    import ray

    actor = ray.remote(ReplayBuffer)
    if ray_options:
        actor = actor.options(**ray_options)
    return actor.remote(capacity, **kwargs)
