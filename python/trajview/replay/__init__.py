"""Layer 2, replay over the C++ replay store: `ReplayBuffer` keeps trajectories flat, samplers choose the
steps or slices a sample reads (TorchRL's names); views and `NStep` returns are built at sample time."""

from .buffer import ReplayBuffer
from .nstep import NStep
from .writers import ReplayServer, ReplayWriter, ray_replay_buffer
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
    "ReplayServer",
    "ReplayWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "ray_replay_buffer",
]
