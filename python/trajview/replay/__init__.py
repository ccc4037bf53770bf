"""Layer 2, replay over the C++ replay store: `ReplayBuffer` keeps trajectories flat, samplers choose the
steps or slices a sample reads (TorchRL's names); views and `NStep` returns are built at sample time."""

from .buffer import ReplayBuffer
from .nstep import NStep
from .samplers import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)

__all__ = [
    "NStep",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "ReplayBuffer",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
]
