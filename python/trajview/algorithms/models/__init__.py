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

Each works over any observation space `SpaceEncoder` reads (Box vectors and
images, Discrete, MultiDiscrete, MultiBinary, nested in Dict and Tuple: a CNN
per image leaf, concatenated) and any action space `make_action_head` acts
in (Discrete, MultiDiscrete, MultiBinary, Box with a tanh-squashed Gaussian).

`ViewModel` (in `base`) is the interface PPO calls; the view rules are in
docs/contract.md ("Views", "Flat layout"). `spaces` walks a space with a
nested value of it (`get_nested` reads ``"obs"`` nested or as flat per-leaf
columns ``"obs.image"``).
"""

from __future__ import annotations

import inspect
from typing import Any

from .base import ViewModel, flat_sequence_index
from .distributions import ActionDistribution, ActionHead, make_action_head
from .encoders import ImageCNN, SpaceEncoder, has_image_leaves, image_layout
from .framestack import FrameStackModel
from .gtrxl import GTrXLModel
from .lstm import LSTMModel
from .mlp import MLPModel
from .spaces import UnsupportedSpaceError, get_nested

__all__ = [
    "MLPModel",
    "FrameStackModel",
    "LSTMModel",
    "GTrXLModel",
    "MODELS",
    "make_model",
    "flat_sequence_index",
    "ViewModel",
    "ActionDistribution",
    "ActionHead",
    "make_action_head",
    "SpaceEncoder",
    "ImageCNN",
    "image_layout",
    "has_image_leaves",
    "UnsupportedSpaceError",
    "get_nested",
]

MODELS = {"mlp": MLPModel, "framestack": FrameStackModel, "lstm": LSTMModel, "attention": GTrXLModel}


def make_model(name: str, obs_space: Any, action_space: Any, **kwargs: Any) -> ViewModel:
    """One of `MODELS` by name (``"mlp"``, ``"framestack"``, ``"lstm"``, ``"attention"``)."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    cls = MODELS[name]
    known = list(inspect.signature(cls).parameters)[2:]  # (after obs_space, action_space)
    unknown = sorted(k for k in kwargs if k not in known)
    if unknown:
        raise ValueError(f"model_config: {unknown} {'is not a setting' if len(unknown) == 1 else 'are not settings'} "
                         f"of model {name!r} ({cls.__name__}); its settings: {', '.join(known)}")
    try:
        return cls(obs_space, action_space, **kwargs)
    except TypeError as e:  # (a setting of the wrong kind: a string where a number goes, ...)
        raise TypeError(f"model_config {kwargs!r} of model {name!r} ({cls.__name__}): {e}") from e
