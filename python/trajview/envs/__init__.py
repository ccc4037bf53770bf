"""Layer 2, envs: the example envs (registered as gymnasium ids on import)."""

from .stateless_cartpole import REPEAT_PREVIOUS_ID, STATELESS_CARTPOLE_ID, RepeatPreviousEnv, StatelessCartPole, make_env

__all__ = ["REPEAT_PREVIOUS_ID", "STATELESS_CARTPOLE_ID", "RepeatPreviousEnv", "StatelessCartPole", "make_env"]
