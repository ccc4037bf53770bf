"""`GymEnvList.step`'s common case runs in C++ (`_core.step_envs`), and `reset_envs`' (`_core.reset_envs`); every
other row is handed back to the Python loop. Property: for any mix of envs returning the common case and everything
else (casts, numpy rewards and flags, non-contiguous or wrong observations, malformed results, raising envs, NaN
rewards), with or without env_ids, infos and isolated failures, the C++ path gives exactly what the Python loop
alone gives: the rows, the rewards and flags, the infos, the failures and their messages, the exception raised and
`moved_on`, and the reward dtype; for resets, the rows, the infos, the seeds and the exception raised.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajview import _core
from trajview.envs import GymEnvList

KINDS = ("fast", "fast", "fast", "f64_exact", "f64_inexact", "list_obs", "np_f32_reward", "np_f64_reward",
         "int_reward", "nan_reward", "np_bool_flags", "int_flag", "non_contiguous", "wrong_shape", "four_tuple",
         "raise", "done", "truncated", "tuple_subclass", "int_obs_column")


def _obs_of_kind(obs, kind):
    """``obs`` as a script's observation kind gives it (others: as it is): float64 (exactly the float32 values, or
    not), a list, a non-contiguous array, the wrong shape."""
    if kind == "f64_exact":
        return obs.astype(np.float64)
    if kind == "f64_inexact":
        return obs.astype(np.float64) + 1e-9
    if kind == "list_obs":
        return obs.tolist()
    if kind == "non_contiguous":
        return np.stack([obs, obs], axis=1)[:, 0]
    if kind == "wrong_shape":
        return np.zeros(4, np.float32)
    return obs


class ScriptedEnv(gym.Env):
    """Returns, step by step, the kinds of results in ``script`` (cycled)."""

    def __init__(self, script: list[str], seed: int) -> None:
        self.observation_space = gym.spaces.Box(-10, 10, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.script = script
        self.t = 0
        self.seed_ = seed

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        kind = self.script[self.t % len(self.script)]
        self.t += 1
        v = float(self.seed_ * 7 + self.t) + 0.25 * action
        obs = np.array([v, -v, 0.5], np.float32)
        rew, te, tr, info = v, False, False, {"t": self.t, "kind": kind}
        obs = _obs_of_kind(obs, kind)
        if kind == "np_f32_reward":
            rew = np.float32(v)
        elif kind == "np_f64_reward":
            rew = np.float64(v)
        elif kind == "int_reward":
            rew = int(v)
        elif kind == "nan_reward":
            rew = float("nan")
        elif kind == "np_bool_flags":
            te, tr = np.bool_(False), np.bool_(self.t % 2 == 0)
        elif kind == "int_flag":
            te = 1
        elif kind == "four_tuple":
            return obs, rew, te, info
        elif kind == "raise":
            raise RuntimeError(f"env {self.seed_} failed at step {self.t}")
        elif kind == "done":
            te = True
        elif kind == "truncated":
            tr = True
        elif kind == "tuple_subclass":
            class Result(tuple):
                pass
            return Result((obs, rew, te, tr, info))
        elif kind == "int_obs_column":
            obs = obs.astype(np.int32)
        return obs, rew, te, tr, info


def _outcome(adapter: GymEnvList, actions, env_ids, need_infos, isolate, obs_out):
    try:
        res = adapter.step(actions, obs_out=obs_out, need_infos=need_infos, isolate_failures=isolate,
                           env_ids=env_ids)
    except BaseException as e:  # noqa: BLE001 (compared between the two paths)
        return ("raised", type(e).__name__, str(e), adapter.moved_on().tolist())
    return ("ok", np.array(res.obs, copy=True), res.rewards.copy(), res.terminateds.copy(), res.truncateds.copy(),
            res.infos, bool(res.any_done), None if res.failed is None else res.failed.tolist(),
            [(type(e).__name__, str(e)) for e in res.errors])


def _same(a, b) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "raised":
        assert a == b
        return
    assert a[5:] == b[5:]
    ok = np.ones(len(a[2]), bool)
    ok[a[7] or []] = False  # a failed row's observation is not written (unspecified)
    for x, y in zip(a[1:5], b[1:5]):
        assert x.dtype == y.dtype and np.array_equal(x[ok], y[ok], equal_nan=True), (x, y)


@settings(max_examples=150, deadline=None)
@given(
    scripts=st.lists(st.lists(st.sampled_from(KINDS), min_size=1, max_size=6), min_size=1, max_size=6),
    steps=st.integers(1, 8),
    isolate=st.booleans(),
    need_infos=st.booleans(),
    subset=st.booleans(),
    own_out=st.booleans(),
    data=st.data(),
)
def test_cpp_step_loop_equals_the_python_loop(scripts, steps, isolate, need_infos, subset, own_out, data):
    n = len(scripts)
    pair = []
    for in_cpp in (True, False):
        a = GymEnvList([ScriptedEnv(s, k) for k, s in enumerate(scripts)])
        a.step_in_cpp = in_cpp
        a.reset()
        pair.append(a)
    for _ in range(steps):
        if subset:
            ids = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), np.int64)
        else:
            ids = None
        m = n if ids is None else len(ids)
        actions = np.array(data.draw(st.lists(st.integers(0, 2), min_size=m, max_size=m)), np.int64)
        outs = [np.full((n, 3), -1, np.float32) if own_out and ids is None else None for _ in pair]
        got = [_outcome(a, actions, ids, need_infos, isolate, out) for a, out in zip(pair, outs)]
        _same(*got)
        assert pair[0].reward_dtype == pair[1].reward_dtype
        assert (pair[0].saw_f32_rewards, pair[0].saw_other_rewards) == (pair[1].saw_f32_rewards,
                                                                        pair[1].saw_other_rewards)
        if got[0][0] == "raised":
            break


def _spy(monkeypatch, name):
    """The list of rows each call of ``_core.<name>`` (as `GymEnvList` calls it) went up to, appended per call."""
    import trajview.envs.gym_list as gl

    calls = []
    real = getattr(_core, name)

    def spy(*args):
        out = real(*args)
        calls.append(out[0])
        return out

    monkeypatch.setattr(gl._core, name, spy)
    return calls


def test_the_common_case_runs_in_cpp(monkeypatch):
    """After the first step (which notes the reward kind in Python), every row of a plain env goes through
    `_core.step_envs` and none through the Python body."""
    calls = _spy(monkeypatch, "step_envs")
    a = GymEnvList([ScriptedEnv(["fast"], k) for k in range(4)])
    a.reset()
    a.step(np.zeros(4, np.int64))  # rewards noted in Python
    assert calls == []
    for _ in range(3):
        res = a.step(np.ones(4, np.int64))
        assert res.obs[:, 2].tolist() == [0.5] * 4
    assert calls == [4, 4, 4]


def test_a_raising_env_keeps_its_traceback():
    a = GymEnvList([ScriptedEnv(["fast"], 0), ScriptedEnv(["fast", "raise"], 1)])
    a.reset()
    a.step(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="env 1 failed at step 2") as info:
        a.step(np.zeros(2, np.int64))
    assert any(e.name == "step" and str(e.path) == __file__ for e in info.traceback)  # the env's own frame
    assert a.moved_on().tolist() == [0, 1]


def test_step_envs_refuses_mismatched_buffers():
    env = ScriptedEnv(["fast"], 0)
    out = np.zeros((2, 3), np.float32)
    rew, flags = np.zeros(2), np.zeros(2, bool)
    with pytest.raises(ValueError, match="out must be C-contiguous rows of the given dtype"):
        _core.step_envs([env, env], None, [0, 0], 0, out, np.dtype(np.float64), rew, flags, flags, None)
    with pytest.raises(ValueError, match="rew must be a contiguous 1-d array of at least 2 items of 8 bytes"):
        _core.step_envs([env, env], None, [0, 0], 0, out, out.dtype, np.zeros(2, np.float32), flags, flags, None)
    with pytest.raises(ValueError, match="start out of range"):
        _core.step_envs([env, env], None, [0, 0], 3, out, out.dtype, rew, flags, flags, None)
    with pytest.raises(IndexError, match="env id out of range"):
        _core.step_envs([env, env], [0, 5], [0, 0], 0, out, out.dtype, rew, flags, flags, None)


def test_too_few_actions_fail_at_the_same_row_in_both_paths():
    """Fewer actions than envs: the row without one raises IndexError (as ``acts[j]`` does in Python), and the
    envs before it have stepped."""
    outcomes = []
    for in_cpp in (True, False):
        a = GymEnvList([ScriptedEnv(["fast"], k) for k in range(3)])
        a.step_in_cpp = in_cpp
        a.reset()
        a.step(np.zeros(3, np.int64))  # (rewards noted in Python)
        with pytest.raises(IndexError) as info:
            a.step(np.zeros(2, np.int64))
        outcomes.append((type(info.value), a.moved_on().tolist(), [e.t for e in a.envs]))
    assert outcomes[0] == outcomes[1] == (IndexError, [0, 1, 2], [2, 2, 1])


RESET_KINDS = ("fast", "fast", "fast", "f64_exact", "f64_inexact", "list_obs", "non_contiguous", "wrong_shape",
               "obs_alone", "info_not_dict", "info_subclass", "raise", "tuple_subclass", "int_obs_column")


class ScriptedResetEnv(ScriptedEnv):
    """Returns, reset by reset, the kinds of results in ``script`` (cycled), and notes the seeds it was given."""

    def __init__(self, script: list[str], seed: int) -> None:
        super().__init__(["fast"], seed)
        self.reset_script = script
        self.seeds: list = []

    def reset(self, *, seed=None, options=None):
        kind = self.reset_script[len(self.seeds) % len(self.reset_script)]
        self.seeds.append(seed)
        v = float(self.seed_ * 5 + len(self.seeds))
        obs = np.array([v, -v, 0.25], np.float32)
        info: dict = {"n": len(self.seeds), "kind": kind}
        obs = _obs_of_kind(obs, kind)
        if kind == "obs_alone":
            return obs
        elif kind == "info_not_dict":
            return obs, [info]
        elif kind == "info_subclass":
            class Info(dict):
                pass
            return obs, Info(info)
        elif kind == "raise":
            raise RuntimeError(f"env {self.seed_} failed at reset {len(self.seeds)}")
        elif kind == "tuple_subclass":
            class Result(tuple):
                pass
            return Result((obs, info))
        elif kind == "int_obs_column":
            obs = obs.astype(np.int32)
        return obs, info


def _reset_outcome(adapter: GymEnvList, ids, seed):
    try:
        obs, infos = adapter.reset_envs(ids, seed=seed)
    except BaseException as e:  # noqa: BLE001 (compared between the two paths)
        got: tuple = ("raised", type(e).__name__, str(e))
    else:
        got = ("ok", obs.dtype, obs.shape, obs.tolist(), infos)
    return got, [list(e.seeds) for e in adapter.envs]


@settings(max_examples=150, deadline=None)
@given(
    scripts=st.lists(st.lists(st.sampled_from(RESET_KINDS), min_size=1, max_size=6), min_size=1, max_size=6),
    rounds=st.integers(1, 6),
    data=st.data(),
)
def test_cpp_reset_loop_equals_the_python_loop(scripts, rounds, data):
    """`GymEnvList.reset_envs`' common case in C++ (`_core.reset_envs`) gives exactly what the Python loop alone
    gives: the observation rows, the infos, the seeds each env was given, the error raised (and which envs were
    reset before it)."""
    n = len(scripts)
    pair = []
    for in_cpp in (True, False):
        a = GymEnvList([ScriptedResetEnv(s, k) for k, s in enumerate(scripts)])
        a.step_in_cpp = in_cpp
        pair.append(a)
    for _ in range(rounds):
        ids = data.draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=n + 2))
        as_array = data.draw(st.booleans())
        seed = data.draw(st.one_of(st.none(), st.integers(0, 2**40)))
        got = [_reset_outcome(a, np.array(ids, np.int64) if as_array else ids, seed) for a in pair]
        assert got[0] == got[1]


def test_the_common_reset_runs_in_cpp(monkeypatch):
    """A plain env's reset rows all go through `_core.reset_envs`, in one call."""
    calls = _spy(monkeypatch, "reset_envs")
    a = GymEnvList([ScriptedResetEnv(["fast"], k) for k in range(4)])
    obs, infos = a.reset_envs(np.array([2, 0]), seed=10)
    assert calls == [2]
    assert obs[:, 0].tolist() == [11.0, 1.0] and [i["n"] for i in infos] == [1, 1]
    assert [e.seeds for e in a.envs] == [[10], [], [12], []]


def test_a_raising_reset_keeps_its_traceback():
    a = GymEnvList([ScriptedResetEnv(["fast"], 0), ScriptedResetEnv(["fast", "raise"], 1)])
    a.reset_envs([0, 1])
    with pytest.raises(RuntimeError, match="env 1 failed at reset 2") as info:
        a.reset_envs([0, 1])
    assert any(e.name == "reset" and str(e.path) == __file__ for e in info.traceback)  # the env's own frame
    assert [len(e.seeds) for e in a.envs] == [2, 2]


def test_reset_envs_refuses_mismatched_buffers():
    env = ScriptedResetEnv(["fast"], 0)
    out = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="reset_envs: out must be C-contiguous rows of the given dtype"):
        _core.reset_envs([env, env], [0, 1], 0, out, np.dtype(np.float64), [], None)
    with pytest.raises(ValueError, match="reset_envs: start out of range"):
        _core.reset_envs([env, env], [0, 1], 3, out, out.dtype, [], None)
    with pytest.raises(ValueError, match="reset_envs: infos must hold one per row before start"):
        _core.reset_envs([env, env], [0, 1], 1, out, out.dtype, [], None)
    with pytest.raises(IndexError, match="reset_envs: env id out of range"):
        _core.reset_envs([env, env], [0, 5], 0, out, out.dtype, [], None)
    assert env.seeds == [None]  # (row 0 was reset, as the Python loop's env 0 is before envs[5] raises)
