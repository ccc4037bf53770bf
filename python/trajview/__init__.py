"""trajview: trajectory views over C++ columnar storage for RL experience collection.

The package is layered; each layer imports only the layers below it
(docs/architecture.md)::

    train/        the `trajview` command, PPOTrainer and DQNTrainer     (application)
    algorithms/   PPO, GAE postprocessing, view-based torch models        (learning)
    rollout/      RolloutWorker, WorkerSet, callbacks: envs + policies -> batches
    collect/ replay/ policy/ envs/
                  the C++ stores' faces, Policy and its pruning pass, env adapters
    views/        ViewRequirement, SampleBatch, LazyView: the data model (numpy only)

Every public class and function is re-exported here, one name per concept
(`docs/api.md`); the torch-based ones (`TorchPolicy`, `PPOPolicy`,
`DQNPolicy`) are imported on first use, so torch stays optional. Modules are
reached by their canonical paths (`trajview.envs`,
`trajview.algorithms.postprocessing`, `trajview.algorithms.models`). Old names
and module paths still work and warn (`trajview._compat`; removal planned
for 1.0).
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
    ReplayWriter,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from .policy import Policy
from . import envs

# Layer 3: rollouts.
from .rollout import (
    AsyncBatch,
    Callbacks,
    Episode,
    Filter,
    MeanStdFilter,
    PolicyRunner,
    ReplayWritingCallbacks,
    RolloutWorker,
    WorkerSet,
)

# Layer 4: learning (numpy part; the torch part is lazy, below).
from . import algorithms

from ._version import __version__

if TYPE_CHECKING:  # what the lazy __getattr__ below hands out, visible to type checkers
    from .algorithms.dqn import DQNPolicy
    from .algorithms.ppo import PPOPolicy
    from .policy.torch_policy import TorchPolicy

_compat.install()

#: Names that need torch: imported by `__getattr__` on first use.
_LAZY = {
    "TorchPolicy": ("trajview.policy.torch_policy", "TorchPolicy"),
    "PPOPolicy": ("trajview.algorithms.ppo", "PPOPolicy"),
    "DQNPolicy": ("trajview.algorithms.dqn", "DQNPolicy"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from ._extras import missing

        module_name, attr = _LAZY[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise missing(e, f"tv.{name}")  # chained to e
        return getattr(module, attr)
    return _compat.renamed(__name__, name)  # a deprecated name (warns), or AttributeError


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
    "ReplayBuffer",
    "Sampler",
    "RandomSampler",
    "SliceSampler",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "SamplerWithoutReplacement",
    "SliceSamplerWithoutReplacement",
    "NStep",
    "ReplayServer",
    "ReplayWriter",
    "Policy",
    "TorchPolicy",
    "envs",
    # rollouts
    "RolloutWorker",
    "WorkerSet",
    "AsyncBatch",
    "Callbacks",
    "Episode",
    "Filter",
    "MeanStdFilter",
    "PolicyRunner",
    "ReplayWritingCallbacks",
    "WorkerError",
    # learning
    "PPOPolicy",
    "DQNPolicy",
    "__version__",
]
