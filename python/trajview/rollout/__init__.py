"""Layer 3, envs + policies + collectors -> batches: `RolloutWorker` (RLlib's rollout semantics), `WorkerSet`, callbacks."""

from typing import Any

from .callbacks import Callbacks, Episode
from .filter import Filter, MeanStdFilter, NoFilter, RunningStat
from .worker import RolloutWorker
from .replay_writing import ReplayWritingCallbacks
from .runner import PolicyRunner
from .worker_set import AsyncBatch, WorkerSet

__all__ = [
    "AsyncBatch",
    "Callbacks",
    "Episode",
    "Filter",
    "MeanStdFilter",
    "NoFilter",
    "PolicyRunner",
    "ReplayWritingCallbacks",
    "RolloutWorker",
    "RunningStat",
    "WorkerSet",
]


def __getattr__(name: str) -> Any:
    from .._compat import renamed

    return renamed(__name__, name)  # a deprecated name (warns), or AttributeError
