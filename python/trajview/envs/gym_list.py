"""`GymEnvList`: a list of ``gymnasium.Env`` stepped together, one ``env.step`` each, in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from ..views.columns import cast_exactly
from ..views.columns import ACTIONS, OBS
from .base import VectorEnvAdapter, VectorStep, empty_rows
from .checks import check_flag, check_reward

__all__ = ["GymEnvList"]

_NEW = tuple.__new__


class GymEnvList(VectorEnvAdapter):
    """``envs[i]`` is env ``i``; the spaces are ``envs[0]``'s.

    Each observation is checked against the observation space's dtype and
    shape as it arrives (a safe cast is allowed; anything else is a
    ValueError naming the env), and written into the step's observation rows;
    rewards and flags are checked the same way (`trajview.envs.checks`).
    A nested observation (``Dict`` / ``Tuple``) is checked leaf by leaf and
    written into ``{leaf column: rows}``; a nested action is handed to each
    env in the space's structure. ``env_creator`` / ``env_config``, when
    given, let `recreate` replace an env that failed.
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
        n = self.num_envs
        #: (column, dtype, shape) of each leaf of a nested observation space; [] for one array per step.
        self._leaves = [] if self.obs_nest.flat else [(c, dt, shp) for c, (dt, shp) in self.obs_nest.specs(OBS).items()]
        self._act_cols = [] if self.action_nest.flat else self.action_nest.names(ACTIONS)
        self._obs_leaves: Any = self.obs_nest._fast
        self._write_row: Any = None if self.obs_nest.flat else self.obs_nest.row_writer()
        # Reused every step (VectorStep's contract): rewards and flags, and the observation rows when no obs_out is given.
        self._obs: Any
        self._obs_shape: tuple[int, ...]
        if self._leaves:
            self._obs_dtype, self._obs_shape = np.dtype(np.bool_), ()
            self._obs = {c: np.empty((n,) + shp, dtype=dt) for c, dt, shp in self._leaves}
        else:
            self._obs_dtype, self._obs_shape = next(iter(self.obs_nest.specs(OBS).values()))
            self._obs = np.empty((n,) + self._obs_shape, dtype=self._obs_dtype)
        self._rew = np.empty(n, dtype=np.float64)
        self._term = np.empty(n, dtype=bool)
        self._trunc = np.empty(n, dtype=bool)
        # The envs of the current step and the position of the one being stepped (for moved_on after it raised).
        self._ids: Any = range(self.num_envs)
        self._pos = -1

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        return self.reset_envs(np.arange(self.num_envs), seed=seed)

    def _check_obs(self, i: int, o: Any, col: str = OBS, obs_dtype: Any = None, obs_shape: Any = None) -> np.ndarray:
        if obs_dtype is None:
            obs_dtype, obs_shape = self._obs_dtype, self._obs_shape
        if type(o) is not np.ndarray or (o.dtype is not obs_dtype and o.dtype != obs_dtype) or o.shape != obs_shape:
            a = np.asarray(o)
            if a.shape != obs_shape or not np.can_cast(a.dtype, obs_dtype, "safe"):
                raise ValueError(
                    f"column {col!r}: env {i} returned an observation of dtype {a.dtype} and shape {a.shape}, expected "
                    f"dtype {obs_dtype} and shape {obs_shape} (the observation space; casting would lose data)"
                )
            try:
                return cast_exactly(col, a, obs_dtype)  # what the row assignment would otherwise round
            except ValueError as e:
                raise ValueError(f"env {i}: {e}") from None
        return o

    def _write_obs(self, out: Any, j: int, i: int, o: Any) -> None:
        """Env ``i``'s observation ``o``, checked, into row ``j`` of ``out`` (every leaf's row, if nested)."""
        if not self._leaves:
            out[j] = self._check_obs(i, o)
            return
        try:
            values = self._obs_leaves(o)
        except Exception:
            try:
                values = self.obs_nest.leaf_values(o, f"env {i}'s observation")
            except ValueError as e:
                raise ValueError(f"column 'obs': {e}") from None
        for (c, dt, shp), v in zip(self._leaves, values):
            if type(v) is np.ndarray and v.dtype is dt and v.shape == shp:
                out[c][j] = v
            else:
                out[c][j] = self._check_obs(i, v, c, dt, shp)

    def _env_actions(self, actions: Any, m: int) -> Any:
        """Per env (row), the action it is handed: a nested action in the space's structure."""
        if self._act_cols:
            return self.action_nest.split_rows(actions, ACTIONS, m)
        return actions.tolist() if self._discrete else actions

    def step(
        self,
        actions: np.ndarray,
        obs_out: np.ndarray | None = None,
        need_infos: bool = False,
        isolate_failures: bool = False,
        env_ids: np.ndarray | None = None,
    ) -> VectorStep:
        if env_ids is None:
            ids: Any = range(self.num_envs)
            if obs_out is None:
                new_obs = self._obs
            elif self._leaves:  # the leaves the caller has rows for (the big ones), the adapter's own for the rest
                new_obs = {**self._obs, **cast(dict, obs_out)}
            else:
                new_obs = obs_out
            rew, term, trunc = self._rew, self._term, self._trunc
        else:
            ids = [int(i) for i in env_ids]
            m = len(ids)
            rew, term, trunc = self._rew[:m], self._term[:m], self._trunc[:m]
            new_obs = self._obs[:m] if not self._leaves else {c: a[:m] for c, a in self._obs.items()}
        infos: list[dict] | None = [] if need_infos else None
        acts = self._env_actions(actions, len(ids))
        envs = self.envs
        obs_dtype, obs_shape = self._obs_dtype, self._obs_shape
        any_done = False
        self._pos = -1
        if isolate_failures:
            return self._step_checked(ids, acts, new_obs, rew, term, trunc, infos, isolate_failures)
        if self._leaves:
            return self._step_nested(ids, acts, new_obs, rew, term, trunc, infos)
        j = -1
        try:
            for j, i in enumerate(ids):
                o, r, te, tr, info = envs[i].step(acts[j])
                if type(o) is np.ndarray and o.dtype is obs_dtype and o.shape == obs_shape:
                    new_obs[j] = o
                else:
                    new_obs[j] = self._check_obs(i, o)
                # Inline fast paths of check_reward / check_flag (a float that is not NaN, a Python bool).
                rew[j] = r if type(r) is float and r == r else self._slow_reward(r, i)
                if te is not True and te is not False:
                    te = check_flag(te, "terminateds", i)
                if tr is not True and tr is not False:
                    tr = check_flag(tr, "truncateds", i)
                term[j] = te
                trunc[j] = tr
                if te or tr:
                    any_done = True
                if infos is not None:
                    infos.append(info)
        except BaseException:
            self._ids, self._pos = ids, j  # for moved_on: envs ids[0..j] may have stepped
            raise
        return _NEW(VectorStep, (new_obs, rew, term, trunc, infos, any_done, None, ()))  # VectorStep(...), faster

    def _slow_reward(self, r: Any, i: int) -> float:
        """`check_reward` for a reward that is not a Python float, noting its kind (see `reward_dtype`)."""
        self.note_reward(r)
        return check_reward(r, i)

    def _step_nested(
        self, ids: Any, acts: Any, new_obs: dict, rew: np.ndarray, term: np.ndarray, trunc: np.ndarray, infos: list | None
    ) -> VectorStep:
        """`step` for a nested observation space: each leaf written into its rows (the fast path of `_write_obs`)."""
        envs = self.envs
        write = self._write_row
        outs = [new_obs[c] for c, _, _ in self._leaves]
        leaves = self._leaves
        any_done = False
        j = -1
        i = -1

        def check(k: int, v: Any) -> np.ndarray:
            c, dt, shp = leaves[k]
            return self._check_obs(i, v, c, dt, shp)

        try:
            for j, i in enumerate(ids):
                o, r, te, tr, info = envs[i].step(acts[j])
                try:
                    write(o, j, outs, check)
                except Exception:
                    self._write_obs(new_obs, j, i, o)  # the slow path: writes it, or names what does not fit
                rew[j] = r if type(r) is float and r == r else check_reward(r, i)
                if te is not True and te is not False:
                    te = check_flag(te, "terminateds", i)
                if tr is not True and tr is not False:
                    tr = check_flag(tr, "truncateds", i)
                term[j] = te
                trunc[j] = tr
                if te or tr:
                    any_done = True
                if infos is not None:
                    infos.append(info)
        except BaseException:
            self._ids, self._pos = ids, j
            raise
        return VectorStep(new_obs, rew, term, trunc, infos, any_done)

    def _step_checked(
        self,
        ids: Any,
        acts: Any,
        new_obs: Any,
        rew: np.ndarray,
        term: np.ndarray,
        trunc: np.ndarray,
        infos: list | None,
        isolate: bool,
    ) -> VectorStep:
        """`step` one env at a time with every check (nested spaces); with ``isolate``, an env's Exception is
        recorded and the others step on."""
        any_done = False
        failed: list[int] = []
        errors: list[BaseException] = []
        j = -1
        try:
            for j, i in enumerate(ids):
                try:
                    o, r, te, tr, info = self.envs[i].step(acts[j])
                    self._write_obs(new_obs, j, i, o)
                    rew[j] = self._slow_reward(r, i)
                    term[j] = check_flag(te, "terminateds", i)
                    trunc[j] = check_flag(tr, "truncateds", i)
                except Exception as e:
                    if not isolate:
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
        except BaseException:
            self._ids, self._pos = ids, j
            raise
        if not isolate:
            return VectorStep(new_obs, rew, term, trunc, infos, any_done)
        return VectorStep(new_obs, rew, term, trunc, infos, any_done, np.array(failed, np.int64), tuple(errors))

    def moved_on(self) -> np.ndarray:
        return np.array(sorted(self._ids[: self._pos + 1]), dtype=np.int64) if self._pos >= 0 else np.zeros(0, np.int64)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray, seed: int | None = None) -> tuple[Any, list[dict]]:
        obs = empty_rows(self._obs, len(env_ids))
        infos = []
        for j, i in enumerate(env_ids):
            i = int(i)
            o, info = self.envs[i].reset(seed=None if seed is None else seed + i)
            self._write_obs(obs, j, i, o)
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
