"""`MLPModel`: reads only ``obs`` (the memoryless control)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import VR, Tensor, ViewModel, _f32, _mlp, _np_last, _spaces

__all__ = ["MLPModel"]


class MLPModel(ViewModel):
    """Reads only ``obs``: on Stateless CartPole it cannot see velocities (the control)."""

    def __init__(self, obs_space: Any, action_space: Any, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        self.pi = _mlp(obs_dim, hidden, n, 0.01)
        self.vf = _mlp(obs_dim, hidden, 1, 1.0)
        self.view_requirements = {"obs": VR(space=obs_space)}

    def _forward(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        x = _f32(d["obs"])
        return self.pi(x), self.vf(x)[:, 0]

    def forward_step(self, input_dict):
        logits, value = self._forward(input_dict)
        return logits, value, []

    def forward_train(self, batch):
        return self._forward(batch)

    def bootstrap_input(self, segment):
        return {"obs": _np_last(segment, "new_obs")}
