"""Layer 4, learning on top of the library: algorithms that train policies on collected batches (PPO with GAE).

`postprocessing` (GAE) is numpy only; `ppo` and `models` (PPO's view-fed torch
models) need torch: import them directly. Imports only the layers below it
(here: views, policy), never `trajview.train`.
"""

from . import postprocessing

__all__ = ["postprocessing"]
