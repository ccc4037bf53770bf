"""`FrameStackModel`: an MLP over frame-stack views (``obs``, ``actions``, ``rewards`` at a range of shifts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .base import VR, Tensor, ViewModel, _f32, _has_params, _heads, _mlp, _np_rows, _whole
from .encoders import SpaceEncoder
from .spaces import get_nested, map_leaves

__all__ = ["FrameStackModel"]


class FrameStackModel(ViewModel):
    """An MLP over the last ``num_frames`` observations, actions and rewards, all views of one stored copy.

    ``prev_n_obs`` = ``obs`` at ``"-{n-1}:0"``, ``prev_n_actions`` and
    ``prev_n_rewards`` = ``actions`` / ``rewards`` at ``"-{n}:-1"`` (RLlib's
    frame-stacking example, n = 16). Before the episode's start they read zeros.
    ``prev_actions=False`` / ``prev_rewards=False`` leave the actions / rewards
    out (their views too): an MLP over the last n observations alone, as
    Stable-Baselines3's ``VecFrameStack`` feeds its policy.

    Each frame is encoded by a `SpaceEncoder` with ``frames=n``: vector leaves
    and one-hots per frame, concatenated; image leaves stack the n frames
    along the channels of one CNN (DQN's frame stack). The policy and the
    value function each have their own encoder when it has weights.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_frames: int = 16,
        hidden: tuple[int, ...] = (64, 64),
        log_std_init: float = 0.0,
        prev_actions: bool = True,
        prev_rewards: bool = True,
    ) -> None:
        super().__init__()
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        for name, flag in (("prev_actions", prev_actions), ("prev_rewards", prev_rewards)):
            if not isinstance(flag, bool):
                raise TypeError(f"FrameStackModel {name} must be a bool, got {type(flag).__name__} {flag!r}")
        self.prev_actions, self.prev_rewards = prev_actions, prev_rewards
        self.action_dist = _heads(obs_space, action_space, log_std_init)
        self.obs_space = obs_space
        self.num_frames = k = int(num_frames)
        self.pi_enc = SpaceEncoder(obs_space, frames=k)
        self.vf_enc = SpaceEncoder(obs_space, frames=k) if _has_params(self.pi_enc) else self.pi_enc
        self.act_enc = SpaceEncoder(action_space, frames=k, what="action_space") if prev_actions else None
        in_dim = self.pi_enc.dim + (0 if self.act_enc is None else self.act_enc.dim) + (k if prev_rewards else 0)
        self.pi = _mlp(in_dim, hidden, self.action_dist.num_inputs, 0.01)
        self.vf = _mlp(in_dim, hidden, 1, 1.0)
        self.view_requirements = {"prev_n_obs": VR("obs", space=obs_space, shift=f"-{k - 1}:0")}
        if prev_actions:
            self.view_requirements["prev_n_actions"] = VR("actions", space=action_space, shift=f"-{k}:-1")
        if prev_rewards:
            self.view_requirements["prev_n_rewards"] = VR("rewards", shift=f"-{k}:-1")

    #: The column `prepare_train` puts in place of the three views when the encoders have no weights.
    INPUTS = "framestack_inputs"

    def _inputs(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        """The policy's and the value function's input rows (one tensor, twice, when the encoders are one)."""
        obs = get_nested(d, "prev_n_obs", self.obs_space)
        rest = ([] if self.act_enc is None else [self.act_enc(d["prev_n_actions"])]) + (
            [_f32(d["prev_n_rewards"])] if self.prev_rewards else [])
        x = torch.cat([self.pi_enc(obs), *rest], -1) if rest else self.pi_enc(obs)
        if self.vf_enc is self.pi_enc:
            return x, x
        return x, (torch.cat([self.vf_enc(obs), *rest], -1) if rest else self.vf_enc(obs))

    def forward_train(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        x = d.get(self.INPUTS)
        x, xv = (x, x) if x is not None else self._inputs(d)
        return self.pi(x), self.vf(xv)[:, 0]

    def prepare_train(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Without encoder weights (vectors and one-hots), the input rows are built once per training batch."""
        if self.vf_enc is not self.pi_enc or (self.act_enc is not None and _has_params(self.act_enc)):
            return batch
        views = ("prev_n_obs", "prev_n_actions", "prev_n_rewards")
        with torch.no_grad():
            x, _ = self._inputs(batch)
        return {**{k: v for k, v in batch.items() if k not in views and not k.startswith("prev_n_obs.")},
                self.INPUTS: x}

    def bootstrap_input(self, segment):
        return self.bootstrap_inputs(segment, *_whole(segment))

    def bootstrap_inputs(self, batch, starts, ends):
        """Each segment's next-step inputs: each stack after its last row shifted by one, that row's own value
        appended."""
        rows = np.asarray(ends, np.int64) - 1

        def shifted(stack: np.ndarray, last: np.ndarray) -> np.ndarray:  # [k, n, ...] and [k, ...]
            return np.concatenate([stack[:, 1:], last[:, None].astype(stack.dtype)], axis=1)

        space = self.obs_space
        out = {"prev_n_obs": map_leaves(shifted, space, _np_rows(batch, "prev_n_obs", rows, space),
                                        _np_rows(batch, "new_obs", rows, space))}
        if self.prev_actions:
            out["prev_n_actions"] = shifted(_np_rows(batch, "prev_n_actions", rows), _np_rows(batch, "actions", rows))
        if self.prev_rewards:
            out["prev_n_rewards"] = shifted(_np_rows(batch, "prev_n_rewards", rows), _np_rows(batch, "rewards", rows))
        return out
