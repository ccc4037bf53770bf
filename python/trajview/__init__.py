"""trajview: trajectory views over C++ columnar storage for RL experience collection.

The package is layered; each layer imports only the layers below it
(docs/architecture.md)::

    train/        the `trajview` command and its Trainer                  (application)
    algorithms/   PPO, GAE postprocessing, view-based torch models        (learning)
    rollout/      RolloutWorker, WorkerSet, callbacks: envs + policies -> batches
    collect/ replay/ policy/ envs/
                  the C++ stores' faces, Policy and its pruning pass, env adapters
    views/        ViewRequirement, SampleBatch, LazyView: the data model (numpy only)

Every public name is re-exported here; torch-based ones (`TorchPolicy`,
`PPOPolicy`, `models`) are imported on first use, so torch stays optional.
"""

from typing import TYPE_CHECKING, Any

from . import _compat
from .errors import WorkerError

# Layer 1: the data model.
from .views import LazyView, MultiAgentBatch, SampleBatch, ViewRequirement, concat_samples

# Layer 2: the stores, policies and envs.
from .collect import Collector
from .replay import (
    NStep,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayBuffer,
    ReplayServer,
    Sampler, SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from .policy import Policy
from . import envs

# Layer 3: rollouts.
from .rollout import AsyncBatch, Callbacks, Episode, MeanStdFilter, RolloutWorker, WorkerSet, WriteToReplay

# Layer 4: learning (numpy part; the torch part is lazy, below).
from .algorithms import postprocessing

from ._version import __version__

if TYPE_CHECKING:  # what the lazy __getattr__ below hands out, visible to type checkers
    from .algorithms import models
    from .algorithms.ppo import PPOPolicy
    from .policy.torch_policy import TorchPolicy

_compat.install()

#: Names that need torch: imported by `__getattr__` on first use.
_LAZY = {
    "TorchPolicy": ("trajview.policy.torch_policy", "TorchPolicy"),
    "PPOPolicy": ("trajview.algorithms.ppo", "PPOPolicy"),
    "models": ("trajview.algorithms.models", None),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        module = importlib.import_module(module_name)
        return module if attr is None else getattr(module, attr)
    raise AttributeError(f"module 'trajview' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    # views: the data model
    "LazyView",
    "MultiAgentBatch",
    "SampleBatch",
    "ViewRequirement",
    "concat_samples",
    # the stores, policies and envs
    "Collector",
    "Policy",
    "NStep",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "ReplayBuffer",
    "ReplayServer",
    "Sampler", "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "TorchPolicy",
    "envs",
    # rollouts
    "Callbacks",
    "MeanStdFilter",
    "Episode",
    "RolloutWorker",
    "WorkerSet",
    "WorkerError",
    "AsyncBatch",
    "WriteToReplay",
    # learning
    "PPOPolicy",
    "models",
    "postprocessing",
    "__version__",
]
