"""trajview: trajectory views over C++ columnar storage for RL experience collection."""

from .view_requirement import ViewRequirement
from .sample_batch import MultiAgentBatch, SampleBatch, concat_samples
from .collector import Collector

__version__ = "0.1.0"

__all__ = [
    "Collector",
    "MultiAgentBatch",
    "SampleBatch",
    "ViewRequirement",
    "concat_samples",
    "__version__",
]
