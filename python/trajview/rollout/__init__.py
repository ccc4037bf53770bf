"""Layer 3, envs + policies + collectors -> batches: `RolloutWorker` (RLlib's rollout semantics), `WorkerSet`, callbacks."""

from .callbacks import Callbacks, Episode
from .worker import RolloutWorker
from .replay_writing import WriteToReplay
from .worker_set import WorkerSet

__all__ = ["Callbacks", "Episode", "RolloutWorker", "WorkerSet", "WriteToReplay"]
