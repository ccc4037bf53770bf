"""Layer 4, learning on top of the library: postprocessing (GAE), PPO and its view-based models.

`postprocessing` is numpy only; `ppo` and `models` need torch (import them directly).
"""

from . import postprocessing

__all__ = ["postprocessing"]
