"""`GymVectorEnv`: a ``gymnasium.vector.VectorEnv`` in either autoreset mode, stepped in one call per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ..views.columns import ACTIONS, OBS
from .base import VectorEnvAdapter, VectorStep, set_rows, take_rows
from .checks import check_reset, check_vector_flags, check_vector_rewards, step_result_error

__all__ = ["GymVectorEnv", "vector_info"]


def vector_info(info: dict, i: int | np.integer) -> dict:
    """Env ``i``'s info dict out of a VectorEnv's batched infos (keys whose ``_key`` mask is set for it).

    Nested dicts are batched the same way (gymnasium's ``_add_info``) and are unbatched recursively.
    """
    out = {}
    for k, v in info.items():
        if k.startswith("_"):
            continue
        mask = info.get("_" + k)
        if mask is None or mask[i]:
            if isinstance(v, dict):
                out[k] = vector_info(v, i)
            else:
                out[k] = v[i] if isinstance(v, np.ndarray) else v
    return out


_FINAL_KEYS = ("final_obs", "final_info")


class GymVectorEnv(VectorEnvAdapter):
    """A VectorEnv; its ``metadata["autoreset_mode"]`` says when it resets an env whose episode ended.

    * ``NEXT_STEP`` (gymnasium's default): the step that ends an episode
      returns its final observation; `reset_envs` resets those envs
      (``reset(options={"reset_mask": ...})``).
    * ``SAME_STEP``: that step already reset the env and returns the next
      episode's first observation, the final one in ``info["final_obs"]``
      (and the step's info in ``info["final_info"]``); `step` returns the
      final ones and `reset_envs` the first ones it kept.

    envpool's gymnasium envs are VectorEnvs of this kind (NEXT_STEP), whose
    partial reset returns only the reset envs' rows: both forms are taken.

    Nested spaces: the VectorEnv's batched ``Dict`` / ``Tuple`` observations
    come back as ``{leaf column: [num_envs, ...]}``, and actions given that
    way are handed to it in the space's structure (batched leaves).
    """

    def __init__(
        self, env: gym.vector.VectorEnv, env_creator: Callable[[dict], Any] | None = None, env_config: dict | None = None
    ) -> None:
        self._creator = env_creator
        self._config = dict(env_config or {})
        self._wrap(env)

    def _wrap(self, env: gym.vector.VectorEnv) -> None:
        self.env = env
        self.num_envs = int(env.num_envs)
        self.base_env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self._same_step = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP) == (
            gym.vector.AutoresetMode.SAME_STEP
        )
        # SAME_STEP: the first observations (and infos) of the episodes the last step began
        self._reset_obs: Any = None
        self._reset_done = np.zeros(self.num_envs, dtype=bool)  # which envs the last step reset
        self._reset_infos: list[dict] = []

    def _obs(self, obs: Any) -> Any:
        """The VectorEnv's observations as one array, or ``{leaf column: rows}`` for a nested space."""
        if self.obs_nest.flat:
            return obs
        try:
            return self.obs_nest.columns(OBS, obs, "the VectorEnv's observation")
        except ValueError as e:
            raise ValueError(f"column 'obs': {e}") from None

    def _final_obs(self, obs: Any, k: int, final: Any) -> None:
        """Row ``k`` of ``obs`` := env ``k``'s final observation ``final`` (one env's, nested or not)."""
        if self.obs_nest.flat:
            obs[k] = final
            return
        try:
            values = self.obs_nest.leaf_values(final, f"env {k}'s final observation")
        except ValueError as e:
            raise ValueError(f"column 'obs': {e}") from None
        for c, v in zip(self.obs_nest.names(OBS), values):
            obs[c][k] = v

    def reset(self, seed: int | None = None) -> tuple[Any, list[dict]]:
        obs, info = check_reset(self.env.reset(seed=seed), "the VectorEnv")
        return self._obs(obs), [vector_info(info, i) for i in range(self.num_envs)]

    def step(
        self,
        actions: np.ndarray,
        obs_out: np.ndarray | None = None,
        need_infos: bool = False,
        isolate_failures: bool = False,
        env_ids: np.ndarray | None = None,
    ) -> VectorStep:
        if env_ids is not None:
            raise ValueError("a VectorEnv steps all its envs at once (can_step_some is False), got env_ids")
        n = self.num_envs
        self._reset_obs = None
        if not self.action_nest.flat:
            actions = self.action_nest.unflatten(actions[c] for c in self.action_nest.names(ACTIONS))
        try:
            result = self.env.step(actions)
            try:
                obs, rew, term, trunc, info = result
            except (TypeError, ValueError):
                raise step_result_error(result, "the VectorEnv") from None
            obs = self._obs(obs)
            checked = check_vector_rewards(rew, n)
            term = check_vector_flags(term, "terminateds", n)
            trunc = check_vector_flags(trunc, "truncateds", n)
            self.note_reward(rew if isinstance(rew, np.ndarray) else checked)
            rew = checked
        except Exception as e:
            if not isolate_failures:
                raise
            # One call steps every env: which one failed, and what the others did, is unknown.
            nothing = np.zeros(n, dtype=bool)
            zeros = {c: np.zeros((n,) + shp, dt) for c, (dt, shp) in self.obs_nest.specs(OBS).items()}
            return VectorStep(
                zeros[OBS] if self.obs_nest.flat else zeros,
                np.zeros(n), nothing, nothing, [{} for _ in range(n)] if need_infos else None, False,
                np.arange(n, dtype=np.int64), (e,) * n,
            )
        any_done = bool(term.any() or trunc.any())
        new_obs = obs
        if not (self._same_step and any_done):
            infos = [vector_info(info, i) for i in range(self.num_envs)] if need_infos else None
            return VectorStep(new_obs, rew, term, trunc, infos, any_done)
        # SAME_STEP: the envs that ended already reset; their step's observation and info are the final_* ones.
        done = term | trunc
        new_obs = {c: v.copy() for c, v in obs.items()} if isinstance(obs, dict) else obs.copy()
        for k in np.flatnonzero(done):
            self._final_obs(new_obs, int(k), info["final_obs"][k])
        self._reset_obs = obs
        self._reset_done = done
        self._reset_infos = [
            {k: v for k, v in vector_info(info, i).items() if k not in _FINAL_KEYS} for i in range(self.num_envs)
        ]
        infos = None
        if need_infos:
            infos = [
                vector_info(info["final_info"], i) if done[i] else self._reset_infos[i] for i in range(self.num_envs)
            ]
        return VectorStep(new_obs, rew, term, trunc, infos, any_done)

    def moved_on(self) -> np.ndarray:
        return np.arange(self.num_envs, dtype=np.int64)  # one call steps them all

    def recreate(self, env_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Replaces the whole VectorEnv (a VectorEnv cannot replace one of its envs from outside)."""
        if self._creator is None:
            return super().recreate(env_ids)
        try:
            self.env.close()
        except Exception:
            pass
        env = self._creator(self._config)
        if not isinstance(env, gym.vector.VectorEnv) or env.num_envs != self.num_envs:
            raise ValueError(f"recreating the VectorEnv: env_creator returned {env!r}, expected a VectorEnv of {self.num_envs} envs")
        self._wrap(env)
        self.base_env = env
        return np.arange(self.num_envs, dtype=np.int64)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray) -> tuple[Any, list[dict]]:
        ids = np.asarray(env_ids, dtype=np.int64)
        if self._reset_obs is not None:  # SAME_STEP: the envs whose episode ended in the last step reset already
            already = self._reset_done[ids]
            obs = take_rows(self._reset_obs, ids)
            infos = [self._reset_infos[int(i)] if a else {} for i, a in zip(ids, already)]
            if not already.all():  # others cut by the worker (a horizon, a refused observation): reset for real
                fresh = np.flatnonzero(~already)
                got, got_infos = self._reset_some(ids[fresh])
                set_rows(obs, fresh, got, np.arange(len(fresh)))
                for j, info in zip(fresh, got_infos):
                    infos[int(j)] = info
            return obs, infos
        return self._reset_some(ids)

    def _reset_some(self, ids: np.ndarray) -> tuple[Any, list[dict]]:
        """Resets the envs ``ids`` (all of them, or by gymnasium's ``reset_mask``): their first rows and infos."""
        if len(ids) == self.num_envs:  # all of them (e.g. after a failed step): a plain reset
            obs, info = check_reset(self.env.reset(), "the VectorEnv")
            return take_rows(self._obs(obs), ids), [vector_info(info, int(i)) for i in ids]
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[ids] = True
        obs, info = check_reset(self.env.reset(options={"reset_mask": mask}), "the VectorEnv")
        obs = self._obs(obs)
        first = next(iter(obs.values())) if isinstance(obs, dict) else obs
        if len(first) == self.num_envs:  # gymnasium: every env's row (the others unchanged)
            return take_rows(obs, ids), [vector_info(info, int(i)) for i in ids]
        if len(first) != len(ids):
            raise ValueError(
                f"column 'obs': the VectorEnv's reset of {len(ids)} of its {self.num_envs} envs returned "
                f"{len(first)} observation rows, expected {self.num_envs} (every env) or {len(ids)} (those reset)"
            )
        # envpool: only the reset envs' rows, in env order
        rows = np.searchsorted(np.sort(ids), ids)
        return take_rows(obs, rows), [vector_info(info, int(r)) for r in rows]

    def close(self) -> None:
        self.env.close()
