"""`MLPModel`: reads only ``obs`` (the memoryless control)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import VR, Tensor, ViewModel, _has_params, _heads, _mlp, _np_rows, _whole
from .encoders import SpaceEncoder
from .spaces import get_nested

__all__ = ["MLPModel"]


class MLPModel(ViewModel):
    """Reads only ``obs``: on Stateless CartPole it cannot see velocities (the control).

    The observation goes through a `SpaceEncoder` (a CNN for image leaves,
    one-hots for discrete ones; the policy and the value function each have
    their own when it has weights), then an MLP each.
    """

    def __init__(
        self, obs_space: Any, action_space: Any, hidden: tuple[int, ...] = (64, 64), log_std_init: float = 0.0
    ) -> None:
        super().__init__()
        self.obs_space = obs_space
        self.action_dist = _heads(obs_space, action_space, log_std_init)
        self.pi_enc = SpaceEncoder(obs_space)
        self.pi = _mlp(self.pi_enc.dim, hidden, self.action_dist.num_inputs, 0.01)
        self.vf_enc = SpaceEncoder(obs_space) if _has_params(self.pi_enc) else self.pi_enc
        self.vf = _mlp(self.vf_enc.dim, hidden, 1, 1.0)
        self.view_requirements = {"obs": VR(space=obs_space)}

    def forward_train(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        obs = get_nested(d, "obs", self.obs_space)
        x = self.pi_enc(obs)
        xv = x if self.vf_enc is self.pi_enc else self.vf_enc(obs)
        return self.pi(x), self.vf(xv)[:, 0]

    def bootstrap_input(self, segment):
        return self.bootstrap_inputs(segment, *_whole(segment))

    def bootstrap_inputs(self, batch, starts, ends):
        return {"obs": _np_rows(batch, "new_obs", np.asarray(ends, np.int64) - 1, self.obs_space)}
