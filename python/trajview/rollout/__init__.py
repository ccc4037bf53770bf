"""Layer 3, envs + policies + collectors -> batches: `RolloutWorker` (RLlib's rollout semantics), `WorkerSet`, callbacks."""

from .callbacks import Callbacks, Episode
from .filter import Filter, MeanStdFilter, NoFilter, RunningStat
from .worker import RolloutWorker
from .replay_writing import WriteToReplay
from .worker_set import AsyncBatch, WorkerSet

__all__ = [
    "AsyncBatch",
    "Callbacks",
    "Episode",
    "Filter",
    "MeanStdFilter",
    "NoFilter",
    "RolloutWorker",
    "RunningStat",
    "WorkerSet",
    "WriteToReplay",
]
