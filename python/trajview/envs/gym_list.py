"""`GymEnvList`: a list of ``gymnasium.Env`` stepped together, one ``env.step`` each, in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from .base import VectorEnvAdapter, VectorStep, obs_spec
from .checks import check_flag, check_reward

__all__ = ["GymEnvList"]


class GymEnvList(VectorEnvAdapter):
    """``envs[i]`` is env ``i``; the spaces are ``envs[0]``'s.

    Each observation is checked against the observation space's dtype and
    shape as it arrives (a safe cast is allowed; anything else is a
    ValueError naming the env), and written into the step's observation rows;
    rewards and flags are checked the same way (`trajview.envs.checks`).
    ``env_creator`` / ``env_config``, when given, let `recreate` replace an
    env that failed.
    """

    writes_obs_in_place = True
    can_step_some = True

    def __init__(
        self, envs: Sequence[gym.Env], env_creator: Callable[[dict], Any] | None = None, env_config: dict | None = None
    ) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.base_env = self.envs
        self._creator = env_creator
        self._config = dict(env_config or {})
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
        self._moved: list[int] = []  # the envs the current step has begun to step (for moved_on after it raised)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        return self.reset_envs(np.arange(self.num_envs), seed=seed)

    def _check_obs(self, i: int, o: Any) -> np.ndarray:
        obs_dtype, obs_shape = self._obs_dtype, self._obs_shape
        if type(o) is not np.ndarray or (o.dtype is not obs_dtype and o.dtype != obs_dtype) or o.shape != obs_shape:
            a = np.asarray(o)
            if a.shape != obs_shape or not np.can_cast(a.dtype, obs_dtype, "safe"):
                raise ValueError(
                    f"column 'obs': env {i} returned an observation of dtype {a.dtype} and shape {a.shape}, expected "
                    f"dtype {obs_dtype} and shape {obs_shape} (the observation space; casting would lose data)"
                )
            return a
        return o

    def step(
        self,
        actions: np.ndarray,
        obs_out: np.ndarray | None = None,
        need_infos: bool = False,
        isolate_failures: bool = False,
        env_ids: np.ndarray | None = None,
    ) -> VectorStep:
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        m = len(ids)
        new_obs = self._obs[:m] if obs_out is None or env_ids is not None else obs_out
        rew, term, trunc = self._rew[:m], self._term[:m], self._trunc[:m]
        infos: list[dict] | None = [] if need_infos else None
        acts = actions.tolist() if self._discrete else actions
        any_done = False
        failed: list[int] = []
        errors: list[BaseException] = []
        self._moved = []
        for j, i in enumerate(ids):
            self._moved.append(i)
            try:
                o, r, te, tr, info = self.envs[i].step(acts[j])
                new_obs[j] = self._check_obs(i, o)
                rew[j] = check_reward(r, i)
                term[j] = check_flag(te, "terminateds", i)
                trunc[j] = check_flag(tr, "truncateds", i)
            except Exception as e:
                if not isolate_failures:
                    raise
                failed.append(j)
                errors.append(e)
                rew[j] = 0.0
                term[j] = trunc[j] = False
                info = {}
            if term[j] or trunc[j]:
                any_done = True
            if infos is not None:
                infos.append(info)
        self._moved = []
        if isolate_failures:
            return VectorStep(new_obs, rew, term, trunc, infos, any_done, np.array(failed, np.int64), tuple(errors))
        return VectorStep(new_obs, rew, term, trunc, infos, any_done)

    def moved_on(self) -> np.ndarray:
        return np.array(sorted(self._moved), dtype=np.int64)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        obs = np.empty((len(env_ids),) + self._obs_shape, dtype=self._obs_dtype)
        infos = []
        for j, i in enumerate(env_ids):
            i = int(i)
            o, info = self.envs[i].reset(seed=None if seed is None else seed + i)
            obs[j] = self._check_obs(i, o)
            infos.append(info)
        return obs, infos

    def recreate(self, env_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        if self._creator is None:
            return super().recreate(env_ids)
        ids = np.asarray(env_ids, dtype=np.int64)
        for i in ids:
            try:
                self.envs[int(i)].close()
            except Exception:
                pass  # a broken env may fail to close too; it is replaced all the same
            self.envs[int(i)] = self._creator(self._config)
        return ids

    def close(self) -> None:
        for env in self.envs:
            env.close()
