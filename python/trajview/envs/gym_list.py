"""`GymEnvList`: a list of ``gymnasium.Env`` stepped together, one ``env.step`` each, in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from .. import _core
from ..views.columns import ACTIONS, OBS, cast_exactly
from .base import VectorEnvAdapter, VectorStep, empty_rows
from .checks import check_flag, check_reset, check_reward, step_result_error

__all__ = ["GymEnvList"]

_NEW = tuple.__new__
_UNSTEPPED = object()  # (a row whose env has not stepped yet)


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
    #: The common case of the step and reset loops in C++ (`_core.step_envs`, `_core.reset_envs`); False runs every
    #: row in Python (the tests compare the two).
    step_in_cpp = True

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
        nest = self.obs_nest
        self._flat = nest.flat
        #: (column, dtype, shape) of each leaf of the observation space (one, ``obs``, for a flat space).
        self._leaves = [(c, dt, shp) for c, (dt, shp) in nest.specs(OBS).items()]
        self._act_cols = [] if self.action_nest.flat else self.action_nest.names(ACTIONS)
        #: write(o, j, outs, check): every leaf of one observation into row j of its rows (`Nest.row_writer`).
        self._write_row: Any = nest.row_writer()
        # Reused every step (VectorStep's contract): rewards and flags, and the observation rows when no obs_out is
        # given: one array for a flat space, {leaf column: rows} for a nested one.
        rows = {c: np.empty((n,) + shp, dtype=dt) for c, dt, shp in self._leaves}
        self._obs: Any = rows[OBS] if self._flat else rows
        self._rew = np.empty(n, dtype=np.float64)
        self._term = np.empty(n, dtype=bool)
        self._trunc = np.empty(n, dtype=bool)
        # The envs of the current step and the position of the one being stepped (for moved_on after it raised).
        self._ids: Any = range(self.num_envs)
        self._pos = -1

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        return self.reset_envs(np.arange(self.num_envs), seed=seed)

    def _check_leaf(self, k: int, o: Any, i: int = -1) -> np.ndarray:
        """Leaf ``k`` of env ``i``'s observation as its column's dtype (a safe, exact cast), else a ValueError.

        (`Nest.row_writer`'s ``check``, there without the env: what it refuses, `_write_obs` checks again and
        names the env.)"""
        col, obs_dtype, obs_shape = self._leaves[k]
        a = o if type(o) is np.ndarray else np.asarray(o)
        if a.shape != obs_shape or not np.can_cast(a.dtype, obs_dtype, "safe"):
            why = ("another shape than the observation space's" if a.shape != obs_shape else
                   f"casting {a.dtype} to the observation space's {obs_dtype} could lose data")
            raise ValueError(
                f"column {col!r}: env {i} returned an observation of dtype {a.dtype} and shape {a.shape}, expected "
                f"dtype {obs_dtype} and shape {obs_shape} ({why})"
            )
        try:
            return cast_exactly(col, a, obs_dtype)  # what the row assignment would otherwise round
        except ValueError as e:
            raise ValueError(f"env {i}: {e}") from None

    def _write_obs(self, out: Any, j: int, i: int, o: Any) -> None:
        """Env ``i``'s observation ``o``, checked, into row ``j`` of ``out`` (every leaf's row, if nested); what
        does not fit is a ValueError naming the env and the leaf."""
        if self._flat:
            out[j] = self._check_leaf(0, o, i)
            return
        try:
            values = self.obs_nest.leaf_values(o, f"env {i}'s observation")
        except ValueError as e:
            raise ValueError(f"column 'obs': {e}") from None
        for k, ((c, _, _), v) in enumerate(zip(self._leaves, values)):
            out[c][j] = self._check_leaf(k, v, i)

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
            elif not self._flat:  # the leaves the caller has rows for (the big ones), the adapter's own for the rest
                new_obs = {**self._obs, **cast(dict, obs_out)}
            else:
                new_obs = obs_out
            rew, term, trunc = self._rew, self._term, self._trunc
        else:
            ids = [int(i) for i in env_ids]
            m = len(ids)
            rew, term, trunc = self._rew[:m], self._term[:m], self._trunc[:m]
            new_obs = self._obs[:m] if self._flat else {c: a[:m] for c, a in self._obs.items()}
        self._pos = -1
        infos: list[dict] | None = [] if need_infos else None
        outs = [new_obs] if self._flat else [new_obs[c] for c, _, _ in self._leaves]
        acts = self._env_actions(actions, len(ids))
        # The common case of the step loop's body runs in C++ (`_core.step_envs`: a flat observation of exactly the
        # column's dtype and shape, a float reward, bool flags; rewards no longer noted, see `_step_rows`); the
        # first row it does not take comes back stepped (or its exception) for `_step_rows`' body, which goes on.
        out = outs[0]
        fast = (self.step_in_cpp and self._flat and self.saw_other_rewards and type(out) is np.ndarray
                and out.dtype is self._leaves[0][1] and out.flags.c_contiguous)
        first = None
        if fast:
            first = _core.step_envs(self.envs, None if env_ids is None else ids, acts, 0, out, out.dtype, rew, term,
                                    trunc, infos)
            if first[0] == len(ids):  # every row taken
                if not isolate_failures:
                    return _NEW(VectorStep, (new_obs, rew, term, trunc, infos, first[3], None, ()))
                return VectorStep(new_obs, rew, term, trunc, infos, first[3], np.zeros(0, np.int64), ())
        any_done, failed, errors = self._step_rows(ids, acts, new_obs, outs, rew, term, trunc, infos,
                                                   isolate_failures, fast, first)
        if not isolate_failures:
            return _NEW(VectorStep, (new_obs, rew, term, trunc, infos, any_done, None, ()))  # VectorStep(...), faster
        return VectorStep(new_obs, rew, term, trunc, infos, any_done, np.array(failed, np.int64), tuple(errors))

    def _step_rows(
        self,
        ids: Any,
        acts: Any,
        new_obs: Any,
        outs: list[np.ndarray],
        rew: np.ndarray,
        term: np.ndarray,
        trunc: np.ndarray,
        infos: list | None,
        isolate: bool,
        fast: bool = False,
        first: tuple | None = None,
    ) -> tuple[bool, list[int], list[BaseException]]:
        """The step loop, one body for every observation space: env ``ids[j]`` steps with ``acts[j]`` and its
        result goes, checked, into row ``j`` (each leaf of the observation into its rows ``outs[k]``).

        ``fast``: the rows the body would take as they are go through `_core.step_envs` (see `step`); ``first``:
        its answer for the rows from 0 (``(j, result, exception, any done)``: rows before ``j`` written, row ``j``
        stepped), when `step` called it.

        Returns (any episode ended, the failed rows, their exceptions): with ``isolate``, an env's Exception is
        recorded (its row: reward 0, not done) and the others step on; else it raises (see `moved_on`).
        """
        envs = self.envs
        write = self._write_row
        check = self._check_leaf
        # Until the env returned a reward that is not a float32 (reward_dtype's rule), every reward is noted (once
        # the step succeeded: a step that raises changes nothing of the adapter's).
        noted: list | None = None if self.saw_other_rewards else []
        out = outs[0]
        fast_ids = None if type(ids) is range else ids
        any_done = False
        failed: list[int] = []
        errors: list[BaseException] = []
        m = len(ids)
        j = 0
        try:
            while j < m:
                result: Any = _UNSTEPPED
                raised: BaseException | None = None
                if first is not None:
                    (j, result, raised, done), first = first, None
                    any_done = any_done or done
                elif fast:
                    j, result, raised, done = _core.step_envs(envs, fast_ids, acts, j, out, out.dtype, rew, term,
                                                               trunc, infos)
                    any_done = any_done or done
                    if j == m:
                        break
                i = ids[j]
                try:
                    if raised is not None:
                        raise raised
                    if result is _UNSTEPPED:
                        result = envs[i].step(acts[j])
                    try:
                        o, r, te, tr, info = result
                    except (TypeError, ValueError):
                        raise step_result_error(result, f"env {i}") from None
                    try:
                        write(o, j, outs, check)
                    except Exception:
                        self._write_obs(new_obs, j, i, o)  # the slow path: writes it, or names what does not fit
                    # Inline fast paths of check_reward / check_flag (a float that is not NaN, a Python bool).
                    rew[j] = r if type(r) is float and r == r and noted is None else check_reward(r, i)
                    if te is not True and te is not False:
                        te = check_flag(te, "terminateds", i)
                    if tr is not True and tr is not False:
                        tr = check_flag(tr, "truncateds", i)
                    if noted is not None:
                        noted.append(r)
                except Exception as e:
                    if not isolate:
                        raise
                    failed.append(j)
                    errors.append(e)
                    r, te, tr, info = 0.0, False, False, {}
                    rew[j] = r
                term[j] = te
                trunc[j] = tr
                if te or tr:
                    any_done = True
                if infos is not None:
                    infos.append(info)
                j += 1
        except BaseException:
            self._ids, self._pos = ids, j  # for moved_on: envs ids[0..j] may have stepped
            raise
        for r in noted or ():
            self.note_reward(r)
        return any_done, failed, errors

    def moved_on(self) -> np.ndarray:
        return np.array(sorted(self._ids[: self._pos + 1]), dtype=np.int64) if self._pos >= 0 else np.zeros(0, np.int64)

    def reset_envs(self, env_ids: Sequence[int] | np.ndarray, seed: int | None = None) -> tuple[Any, list[dict]]:
        obs = empty_rows(self._obs, len(env_ids))
        infos: list[dict] = []
        ids = [int(i) for i in env_ids]
        m = len(ids)
        # As `step`: the common case of the loop's body in C++ (`_core.reset_envs`: a pair of an observation of
        # exactly the column's dtype and shape and a dict); the first row it does not take comes back reset (or its
        # exception) for the body here, which goes on.
        fast = self.step_in_cpp and self._flat
        j = 0
        while j < m:
            result: Any = _UNSTEPPED
            if fast:
                j, result, raised = _core.reset_envs(self.envs, ids, j, obs, obs.dtype, infos, seed)
                if j == m:
                    break
                if raised is not None:
                    raise raised
            i = ids[j]
            if result is _UNSTEPPED:
                result = self.envs[i].reset(seed=None if seed is None else seed + i)
            o, info = check_reset(result, f"env {i}")
            self._write_obs(obs, j, i, o)
            infos.append(info)
            j += 1
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
