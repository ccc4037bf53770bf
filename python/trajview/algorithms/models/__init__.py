"""PPO's torch models, every input a view requirement: the four models and `make_model` to pick one by name.

* `MLPModel` (``"mlp"``): ``obs`` only (the memoryless control).
* `FrameStackModel` (``"framestack"``): ``prev_n_obs`` (``obs`` at
  ``"-{n-1}:0"``), ``prev_n_actions`` and ``prev_n_rewards`` (``"-{n}:-1"``).
* `LSTMModel` (``"lstm"``): ``state_in_i`` read from ``state_out_i`` at ``-1``
  with ``batch_repeat_value=max_seq_len`` (one row per training sequence),
  plus ``prev_actions`` / ``prev_rewards``.
* `GTrXLModel` (``"attention"``): a gated transformer whose memory is the view
  ``state_in_i = ViewRequirement("state_out_i", shift="-{M}:-1",
  batch_repeat_value=max_seq_len)``.

`ViewModel` (in `base`) is the interface PPO calls; the view rules are in
docs/contract.md ("Views", "Flat layout").
"""

from __future__ import annotations

from typing import Any

from .base import ViewModel, flat_sequence_index
from .framestack import FrameStackModel
from .gtrxl import GTrXLModel
from .lstm import LSTMModel
from .mlp import MLPModel

__all__ = [
    "MLPModel",
    "FrameStackModel",
    "LSTMModel",
    "GTrXLModel",
    "MODELS",
    "make_model",
    "flat_sequence_index",
    "ViewModel",
]

MODELS = {"mlp": MLPModel, "framestack": FrameStackModel, "lstm": LSTMModel, "attention": GTrXLModel}


def make_model(name: str, obs_space: Any, action_space: Any, **kwargs: Any) -> ViewModel:
    """One of `MODELS` by name (``"mlp"``, ``"framestack"``, ``"lstm"``, ``"attention"``)."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    return MODELS[name](obs_space, action_space, **kwargs)
