"""`GymEnvList`: a list of ``gymnasium.Env`` stepped together, one ``env.step`` each, in this process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from .base import VectorEnvAdapter, VectorStep, obs_spec

__all__ = ["GymEnvList"]


class GymEnvList(VectorEnvAdapter):
    """``envs[i]`` is env ``i``; the spaces are ``envs[0]``'s.

    Each observation is checked against the observation space's dtype and
    shape as it arrives (a safe cast is allowed; anything else is a
    ValueError naming the env), and written into the step's observation rows.
    """

    writes_obs_in_place = True

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.base_env = self.envs
        first = self.envs[0]
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self._obs_dtype, self._obs_shape = obs_spec(self.observation_space)
        n = self.num_envs
        # Reused every step (VectorStep's contract): rewards and flags, and the observation rows when no obs_out is given.
        self._obs = np.empty((n,) + self._obs_shape, dtype=self._obs_dtype)
        self._rew = np.empty(n, dtype=np.float64)
        self._term = np.empty(n, dtype=bool)
        self._trunc = np.empty(n, dtype=bool)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        pairs = [env.reset(seed=None if seed is None else seed + i) for i, env in enumerate(self.envs)]
        return np.stack([p[0] for p in pairs]), [p[1] for p in pairs]

    def _obs_error(self, i: int, o: Any) -> Exception:
        a = np.asarray(o)
        return ValueError(
            f"column 'obs': env {i} returned an observation of dtype {a.dtype} and shape {a.shape}, expected "
            f"dtype {self._obs_dtype} and shape {self._obs_shape} (the observation space; casting would lose data)"
        )

    def step(self, actions: np.ndarray, obs_out: np.ndarray | None = None, need_infos: bool = False) -> VectorStep:
        obs_dtype, obs_shape = self._obs_dtype, self._obs_shape
        new_obs = self._obs if obs_out is None else obs_out
        rew, term, trunc = self._rew, self._term, self._trunc
        infos: list[dict] | None = [] if need_infos else None
        acts = actions.tolist() if self._discrete else actions
        any_done = False
        for i, env in enumerate(self.envs):
            o, r, te, tr, info = env.step(acts[i])
            if type(o) is not np.ndarray or (o.dtype is not obs_dtype and o.dtype != obs_dtype) or o.shape != obs_shape:
                a = np.asarray(o)
                if a.shape != obs_shape or not np.can_cast(a.dtype, obs_dtype, "safe"):
                    raise self._obs_error(i, o)
                o = a
            new_obs[i] = o
            rew[i] = r
            term[i] = te
            trunc[i] = tr
            if te or tr:
                any_done = True
            if infos is not None:
                infos.append(info)
        return VectorStep(new_obs, rew, term, trunc, infos, any_done)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, list[dict]]:
        obs = np.empty((len(env_ids),) + self._obs_shape, dtype=self._obs_dtype)
        infos = []
        for j, i in enumerate(env_ids):
            o, info = self.envs[int(i)].reset()
            obs[j] = o
            infos.append(info)
        return obs, infos

    def close(self) -> None:
        for env in self.envs:
            env.close()
