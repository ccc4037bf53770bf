"""`GymVectorEnv`: a ``gymnasium.vector.VectorEnv`` in either autoreset mode, stepped in one call per step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from .base import VectorEnvAdapter, VectorStep

__all__ = ["GymVectorEnv", "vector_info"]


def vector_info(info: dict, i: int | np.integer) -> dict:
    """Env ``i``'s info dict out of a VectorEnv's batched infos (keys whose ``_key`` mask is set for it)."""
    out = {}
    for k, v in info.items():
        if k.startswith("_"):
            continue
        mask = info.get("_" + k)
        if mask is None or mask[i]:
            out[k] = v[i] if isinstance(v, np.ndarray) else v
    return out


class GymVectorEnv(VectorEnvAdapter):
    """A VectorEnv; its ``metadata["autoreset_mode"]`` says when it resets an env whose episode ended.

    * ``NEXT_STEP`` (gymnasium's default): the step that ends an episode
      returns its final observation; `reset_envs` resets those envs
      (``reset(options={"reset_mask": ...})``).
    * ``SAME_STEP``: that step already reset the env and returns the next
      episode's first observation, the final one in ``info["final_obs"]``;
      `step` returns the final one and `reset_envs` the first one it kept.
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        self.env = env
        self.num_envs = int(env.num_envs)
        self.base_env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self._same_step = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP) == (
            gym.vector.AutoresetMode.SAME_STEP
        )
        self._reset_obs: np.ndarray | None = None  # SAME_STEP: the first observations of the step's new episodes

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        obs, info = self.env.reset(seed=seed)
        return obs, [vector_info(info, i) for i in range(self.num_envs)]

    def step(self, actions: np.ndarray, obs_out: np.ndarray | None = None, need_infos: bool = False) -> VectorStep:
        obs, rew, term, trunc, info = self.env.step(actions)
        term = np.asarray(term, dtype=bool)
        trunc = np.asarray(trunc, dtype=bool)
        any_done = bool(term.any() or trunc.any())
        new_obs = obs
        self._reset_obs = None
        if self._same_step and any_done:
            new_obs = obs.copy()
            for k in np.flatnonzero(term | trunc):
                new_obs[k] = info["final_obs"][k]
            self._reset_obs = obs  # the env already reset those
        infos = [vector_info(info, i) for i in range(self.num_envs)] if need_infos else None
        return VectorStep(new_obs, np.asarray(rew), term, trunc, infos, any_done)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, list[dict]]:
        ids = np.asarray(env_ids, dtype=np.int64)
        infos: list[dict] = [{} for _ in ids]
        if self._reset_obs is not None:  # SAME_STEP: the env already reset them
            return self._reset_obs[ids], infos
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[ids] = True
        obs, info = self.env.reset(options={"reset_mask": mask})
        return obs[ids], [vector_info(info, int(i)) for i in ids]

    def close(self) -> None:
        self.env.close()
