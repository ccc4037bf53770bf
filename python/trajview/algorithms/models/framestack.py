"""`FrameStackModel`: an MLP over frame-stack views (``obs``, ``actions``, ``rewards`` at a range of shifts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from .base import VR, Tensor, ViewModel, _f32, _mlp, _np_last, _spaces

__all__ = ["FrameStackModel"]


class FrameStackModel(ViewModel):
    """An MLP over the last ``num_frames`` observations, actions and rewards, all views of one stored copy.

    ``prev_n_obs`` = ``obs`` at ``"-{n-1}:0"``, ``prev_n_actions`` and
    ``prev_n_rewards`` = ``actions`` / ``rewards`` at ``"-{n}:-1"`` (RLlib's
    frame-stacking example, n = 16). Before the episode's start they read zeros.
    """

    def __init__(self, obs_space: Any, action_space: Any, num_frames: int = 16, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        self.num_frames = k = int(num_frames)
        self.n_actions = n
        in_dim = k * (obs_dim + n + 1)
        self.pi = _mlp(in_dim, hidden, n, 0.01)
        self.vf = _mlp(in_dim, hidden, 1, 1.0)
        self.view_requirements = {
            "prev_n_obs": VR("obs", space=obs_space, shift=f"-{k - 1}:0"),
            "prev_n_actions": VR("actions", space=action_space, shift=f"-{k}:-1"),
            "prev_n_rewards": VR("rewards", shift=f"-{k}:-1"),
        }

    def _forward(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        obs = _f32(d["prev_n_obs"]).flatten(1)
        acts = nn.functional.one_hot(torch.as_tensor(d["prev_n_actions"]).long(), self.n_actions).float().flatten(1)
        rews = _f32(d["prev_n_rewards"])
        x = torch.cat([obs, acts, rews], -1)
        return self.pi(x), self.vf(x)[:, 0]

    def forward_step(self, input_dict):
        logits, value = self._forward(input_dict)
        return logits, value, []

    def forward_train(self, batch):
        return self._forward(batch)

    def bootstrap_input(self, segment):
        def shifted(stack: str, col: str) -> np.ndarray:
            s, c = _np_last(segment, stack), _np_last(segment, col)
            return np.concatenate([s[:, 1:], c[:, None].astype(s.dtype)], axis=1)

        return {
            "prev_n_obs": shifted("prev_n_obs", "new_obs"),
            "prev_n_actions": shifted("prev_n_actions", "actions"),
            "prev_n_rewards": shifted("prev_n_rewards", "rewards"),
        }
