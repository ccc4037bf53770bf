"""Layer 2, replay over the C++ replay store: `ReplayBuffer` keeps trajectories flat, samplers (`SliceSampler`)
choose the slices a sample reads; views are built at sample time."""

from .buffer import ReplayBuffer
from .samplers import SliceSampler

__all__ = ["ReplayBuffer", "SliceSampler"]
