"""trajview: trajectory views over C++ columnar storage for RL experience collection."""

from .view_requirement import ViewRequirement
from .sample_batch import LazyView, MultiAgentBatch, SampleBatch, concat_samples
from .collector import Collector
from .replay import ReplayBuffer, SliceSampler
from .callbacks import Callbacks, Episode
from .policy import Policy
from .rollout_worker import RolloutWorker
from .worker_set import WorkerSet
from . import postprocessing
from . import envs

__version__ = "0.1.0"


def __getattr__(name: str):
    # TorchPolicy needs torch, an optional dependency: import it on first use.
    if name == "TorchPolicy":
        from .torch_policy import TorchPolicy

        return TorchPolicy
    if name == "PPOPolicy":
        from .ppo import PPOPolicy

        return PPOPolicy
    if name == "models":
        from . import models

        return models
    raise AttributeError(f"module 'trajview' has no attribute {name!r}")


__all__ = [
    "Callbacks",
    "Collector",
    "Episode",
    "Policy",
    "RolloutWorker",
    "TorchPolicy",
    "PPOPolicy",
    "envs",
    "models",
    "postprocessing",
    "MultiAgentBatch",
    "ReplayBuffer",
    "SliceSampler",
    "SampleBatch",
    "ViewRequirement",
    "concat_samples",
    "WorkerSet",
    "LazyView",
    "__version__",
]
