"""`ReplayWritingCallbacks` (formerly `WriteToReplay`): callbacks that send every batch a worker samples to a
replay buffer's writer, from inside the worker (a `WorkerSet` process or an in-process `RolloutWorker`)."""

from __future__ import annotations

from typing import Any

from ..replay import ReplayWriter
from .callbacks import Callbacks

__all__ = ["ReplayWritingCallbacks"]


class ReplayWritingCallbacks(Callbacks):
    """``WorkerSet(..., callbacks=tv.ReplayWritingCallbacks(server.writer(trajs_per_batch=8)))``: each worker sends
    its sampled batches (``on_sample_end``) to the learner's `tv.ReplayServer` itself, with the ``process``
    backend (each worker process opens its own connection on its first batch). With
    ``trajs_per_batch`` only complete trajectories are sent (TorchRL's collector option), so the buffer never
    holds a partial episode; the batches still come back from ``sample()`` as usual."""

    def __init__(self, writer: ReplayWriter) -> None:
        super().__init__()
        if not isinstance(writer, ReplayWriter):
            raise TypeError(f"writer must be a ReplayServer.writer(), got {type(writer).__name__}")
        self.writer = writer

    def on_sample_end(self, *, worker: Any, samples: Any, **kwargs: Any) -> None:
        self.writer.add(samples)
