"""Layer 2, replay over the C++ replay store: `ReplayBuffer` keeps trajectories flat, samplers build views at sample time."""

from .buffer import ReplayBuffer, SliceSampler

__all__ = ["ReplayBuffer", "SliceSampler"]
