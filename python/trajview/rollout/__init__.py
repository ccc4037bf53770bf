"""Layer 3, envs + policies + collectors -> batches: `RolloutWorker` (RLlib's rollout semantics), `WorkerSet`, callbacks."""

from .callbacks import Callbacks, Episode
from .worker import RolloutWorker
from .worker_set import AsyncBatch, WorkerSet

__all__ = ["AsyncBatch", "Callbacks", "Episode", "RolloutWorker", "WorkerSet"]
