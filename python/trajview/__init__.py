"""trajview: trajectory views over C++ columnar storage for RL experience collection."""

from .view_requirement import ViewRequirement
from .sample_batch import MultiAgentBatch, SampleBatch, concat_samples
from .collector import Collector
from .callbacks import Callbacks, Episode
from .policy import Policy
from .rollout_worker import RolloutWorker
from . import postprocessing

__version__ = "0.1.0"

__all__ = [
    "Callbacks",
    "Collector",
    "Episode",
    "Policy",
    "RolloutWorker",
    "postprocessing",
    "MultiAgentBatch",
    "SampleBatch",
    "ViewRequirement",
    "concat_samples",
    "__version__",
]
