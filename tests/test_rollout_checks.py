"""Checked input at the worker's boundaries, and the smaller guarantees: unique eps_ids, bounded metrics, infos."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from rollout_helpers import ObsActionPolicy, ScriptedEnv, creator_from, make_envs

import trajview as tv


def worker(policy=ObsActionPolicy, num_envs=2, **kw):
    return tv.RolloutWorker(creator_from(make_envs(num_envs, kw.pop("lengths", (10,)))), policy, num_envs=num_envs, **kw)


def policy_returning(actions=None, state_outs=None, extra=None, initial_state=None):
    class P(ObsActionPolicy):
        def get_initial_state(self):
            return [] if initial_state is None else initial_state

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, s, e = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            if not explore:  # the pruning pass sees well-formed outputs
                return a, [np.zeros((len(a),) + np.shape(x)) for x in (initial_state or [])], {}
            return (a if actions is None else actions(a)), state_outs, extra

    return P


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (dict(actions=lambda a: a.astype(np.float64) + 0.5), r"column 'actions': expected dtype int64, got float64"),
        (dict(actions=lambda a: a + 5), r"column 'actions': .*outside the action space Discrete\(5\)"),
        (dict(actions=lambda a: -a - 1), r"column 'actions': .*outside the action space"),
        (dict(actions=lambda a: a[:, None]), r"column 'actions': .*shape"),
        (dict(state_outs=None, extra={}), r"state_outs: compute_actions_from_input_dict must return a list"),
        (dict(state_outs=[], extra=None), r"extra_fetches: compute_actions_from_input_dict must return a dict"),
        (dict(state_outs=[], extra={"new_thing": np.zeros(2)}), r"extra fetches \['new_thing'\] that it did not"),
    ],
)
def test_bad_policy_outputs_are_errors_before_any_env_steps(bad, pattern):
    envs = make_envs(2)
    bad.setdefault("state_outs", [])
    bad.setdefault("extra", {})
    w = tv.RolloutWorker(creator_from(envs), policy_returning(**bad), num_envs=2, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=pattern):
        w.sample()
    assert all(not e.actions for e in envs), "no env stepped"


def test_nan_policy_outputs_are_errors_unless_allowed():
    class Box(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, False, {}

    class NaNPolicy(tv.Policy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            return np.full((len(input_dict["obs"]), 1), np.nan, np.float32), [], {}

    w = tv.RolloutWorker(lambda cfg: Box(), NaNPolicy, rollout_fragment_length=2)
    with pytest.raises(ValueError, match=r"column 'actions': compute_actions_from_input_dict returned NaN.*nan_outputs='allow'"):
        w.sample()
    w = tv.RolloutWorker(lambda cfg: Box(), NaNPolicy, rollout_fragment_length=2, nan_outputs="allow")
    assert np.isnan(w.sample()["actions"]).all()
    with pytest.raises(ValueError, match=r"nan_outputs must be one of \('raise', 'allow'\), got 'warn'"):
        tv.RolloutWorker(lambda cfg: Box(), NaNPolicy, nan_outputs="warn")


@pytest.mark.parametrize(
    "kw, pattern",
    [
        (dict(env_config=[1, 2]), r"env_config must be a dict \(or None\), got list"),
        (dict(worker_index=-1), r"worker_index must be in \[0, 8388608\), got -1"),
        (dict(worker_index=1 << 23), r"worker_index must be in \[0, 8388608\)"),
        (dict(worker_index=1.5), r"worker_index must be an int, got 1.5"),
        (dict(restart_failed_sub_environments="yes"), r"restart_failed_sub_environments must be a bool"),
        (dict(metrics_window=0), r"metrics_window must be an int >= 1, got 0"),
    ],
)
def test_bad_settings_name_the_setting(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        worker(**kw)


@pytest.mark.parametrize(
    "value, pattern",
    [
        (None, r"column 'rewards': env 0 returned a reward of type NoneType"),
        ("1.5", r"column 'rewards': env 0 returned a reward of type str \('1.5'\), expected a real number"),
        (1 + 2j, r"type complex"),
        (np.ones(2), r"type ndarray"),
        (True, r"type bool"),
        (float("nan"), r"returned a NaN reward"),
        (2**60 + 1, r"the int reward 1152921504606846977, which float64 cannot hold exactly"),
    ],
)
def test_rewards_must_be_real_numbers(value, pattern):
    class Bad(ScriptedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return o, value, te, tr, info

    w = tv.RolloutWorker(lambda cfg: Bad(), ObsActionPolicy, rollout_fragment_length=3)
    with pytest.raises(ValueError, match=pattern):
        w.sample()


@pytest.mark.parametrize("value", ["False", 0.5, float("nan"), None, [], 0, 1])
def test_flags_must_be_bools(value):
    class Bad(ScriptedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return o, r, te, value, info

    w = tv.RolloutWorker(lambda cfg: Bad(), ObsActionPolicy, rollout_fragment_length=3)
    with pytest.raises(ValueError, match=r"column 'truncateds': env 0 returned .* expected a bool"):
        w.sample()


def test_numpy_scalars_are_fine():
    class Np(ScriptedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return o, np.float32(r), np.bool_(te), np.bool_(tr), info

    b = tv.RolloutWorker(lambda cfg: Np((3,)), ObsActionPolicy, rollout_fragment_length=6).sample()
    assert b["rewards"].tolist() == [1, 2, 3, 1, 2, 3] and b["terminateds"].sum() == 2


def test_vector_env_arrays_are_checked():
    class BadVec(gym.vector.SyncVectorEnv):
        def step(self, actions):
            obs, rew, term, trunc, info = super().step(actions)
            return obs, rew.astype(np.complex128), term, trunc, info

    w = tv.RolloutWorker(lambda cfg: BadVec([lambda: ScriptedEnv() for _ in range(2)]), ObsActionPolicy)
    with pytest.raises(ValueError, match=r"column 'rewards': the VectorEnv returned rewards of dtype complex128"):
        w.sample()


def test_eps_ids_stay_unique_however_often_the_views_change():
    class Growing(ObsActionPolicy):
        pass

    w = worker(Growing, num_envs=2, rollout_fragment_length=1)
    seen = set()
    for k in range(300):  # 300 store rebuilds (the old layout repeated ids after 256)
        w.policy.view_requirements[f"extra_view_{k}"] = tv.ViewRequirement("obs", shift=-1)
        b = w.sample()
        ids = set(b["eps_id"].tolist())
        assert not ids & seen
        seen |= ids
    assert all(e >> 40 == 0 for e in seen)


def test_metrics_are_bounded_when_never_read():
    w = worker(num_envs=1, lengths=(1,), rollout_fragment_length=50, metrics_window=20)
    for _ in range(4):
        w.sample()
    m = w.get_metrics()
    assert len(m["episode_returns"]) == 20 and m["episodes_dropped"] == 180
    assert w.get_metrics()["episode_returns"] == []


def test_last_info_is_current_without_training_on_infos():
    infos = []

    class Cb(tv.Callbacks):
        def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kwargs):
            infos.append((episode.last_info_for(), episode.last_observation_for().tolist()))

    class NoInfos(ObsActionPolicy):
        def loss(self, train_batch):
            return train_batch["obs"]

    w = tv.RolloutWorker(lambda cfg: ScriptedEnv((5,)), NoInfos, rollout_fragment_length=3, callbacks=Cb())
    b = w.sample()
    assert "infos" not in b
    assert [i for i, _ in infos] == [{"uid": 0, "t": t} for t in (1, 2, 3)]
    assert [o for _, o in infos] == [[0, t] for t in (1, 2, 3)]


def test_ints_beyond_2_53_are_never_rounded_into_float64_columns():
    VR = tv.ViewRequirement
    coll = tv.Collector(2, {"obs": (np.float64, (2,))}, {"obs": VR()})
    with pytest.raises(ValueError, match=r"column 'obs': the int64 value 9007199254740993 has no exact float64"):
        coll.begin_episodes(np.arange(2), {"obs": np.full((2, 2), 2**53 + 1, np.int64)})
    coll.begin_episodes(np.arange(2), {"obs": np.full((2, 2), 2**53, np.int64)})  # exact: fine
    rb = tv.ReplayBuffer(10, columns={"x": (np.float64, ())})
    with pytest.raises(ValueError, match=r"column 'x': the int64 value 9007199254740993 has no exact float64"):
        rb.add({"x": np.array([2**53 + 1]), "eps_id": np.zeros(1, np.int64), "t": np.zeros(1, np.int64)})


def test_the_nan_check_of_outputs_finds_exactly_the_arrays_with_nan():
    """`_has_nan` (one value read, or a real array's max) against the plain mask: every float and complex dtype,
    NaN, infinities of both signs, the largest values, empty and strided arrays; and no warning on any of them."""
    import warnings
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trajview.rollout.plan import _has_nan

    specials = [np.nan, np.inf, -np.inf, 3e38, -3e38, 1e308, 0.0, -1.5]

    @settings(max_examples=300, deadline=None)
    @given(
        dtype=st.sampled_from([np.float16, np.float32, np.float64, np.complex64, np.complex128]),
        shape=st.sampled_from([(0,), (1,), (1, 1), (3,), (2, 4), (64, 3)]),
        picks=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(specials), st.booleans()), max_size=4),
        strided=st.booleans(),
    )
    def check(dtype, shape, picks, strided):
        with np.errstate(all="ignore"):
            arr = np.random.default_rng(len(picks)).standard_normal(shape).astype(dtype)
            flat = arr.reshape(-1)
            for i, v, imag in picks:
                if flat.size:
                    flat[i % flat.size] = v * 1j if imag and arr.dtype.kind == "c" else v
            if strided and arr.ndim == 2:
                arr = arr[:, ::2]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _has_nan(arr) == bool(np.isnan(arr).any())

    check()


def test_core_any_nan_is_numpys_isnan_over_the_list_or_none():
    """`_core.any_nan` (one scan of a list of arrays, the output checks' first step): ``np.isnan(a).any()`` for
    any of them where every one is a C-contiguous float32 / float64 ndarray (also byte for byte the reference on
    NaN payloads, infinities, huge values, empty arrays, and more than 2**16 values, scanned without the GIL);
    None where one is not (another float kind, complex, non-native byte order, strided, not an array), never a
    wrong answer."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trajview import _core

    specials = [np.nan, -np.nan, np.inf, -np.inf, 3e38, 0.0, -1.5]
    scanned = {np.dtype(np.float32), np.dtype(np.float64)}

    @st.composite
    def arrays(draw):
        dtype = draw(st.sampled_from([np.float32, np.float64, np.float32, np.float64, np.float16, np.complex64,
                                      ">f4", np.int64]))
        shape = draw(st.sampled_from([(0,), (1,), (1, 1), (3,), (2, 4), (64, 3), (70_000,)]))
        arr = np.random.default_rng(draw(st.integers(0, 3))).standard_normal(shape).astype(dtype)
        flat = arr.reshape(-1)
        if flat.size and arr.dtype.kind == "f":
            with np.errstate(all="ignore"):  # (3e38 overflows a float16 to inf: fine here)
                for i, v in draw(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(specials)), max_size=3)):
                    flat[i % flat.size] = v
            if draw(st.booleans()):  # the last value a NaN with another payload: all exponent bits and a few more
                bits = flat.view(f"u{arr.dtype.itemsize}")
                bits[-1] |= bits.dtype.type((1 << (8 * arr.dtype.itemsize - 1)) - 1)
        if draw(st.booleans()) and arr.ndim == 2 and arr.shape[1] > 1:
            arr = arr[:, ::2]
        return arr

    @settings(max_examples=300, deadline=None)
    @given(st.lists(arrays(), max_size=4), st.booleans())
    def check(arrs, other):
        items: list = [*arrs, *([1.0] if other else [])]
        got = _core.any_nan(items)
        if other or not all(a.dtype in scanned and a.dtype.isnative and a.flags.c_contiguous for a in arrs):
            assert got is None
        else:
            assert got is bool(any(np.isnan(a).any() for a in arrs))

    check()


def test_core_any_outside_is_numpys_bounds_check_or_none():
    """`_core.any_outside(arr, lo, hi)` (the action bounds check of many rows) is numpy's ``((arr < lo) | (arr >
    hi)).any()`` for C-contiguous int64 / int32 arrays, None for any other array (another dtype, strided, not an
    array), never a wrong answer."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trajview import _core

    scanned = {np.dtype(np.int64), np.dtype(np.int32)}
    big = 2**63 - 1

    @st.composite
    def cases(draw):
        dtype = draw(st.sampled_from([np.int64, np.int32, np.int64, np.int32, np.int16, np.uint64, np.float64, ">i8"]))
        n = draw(st.sampled_from([0, 1, 2, 16, 17, 64, 1000]))
        lo = draw(st.integers(-(2**63), big))
        hi = draw(st.integers(lo, big))
        info = np.iinfo(np.dtype(dtype)) if np.dtype(dtype).kind in "iu" else np.iinfo(np.int32)
        vals = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=4))
        arr = np.resize(np.asarray(vals, dtype=np.dtype(dtype)), n)
        if draw(st.booleans()) and n > 1:
            arr = arr[::2]
        return arr, lo, hi

    @settings(max_examples=300, deadline=None)
    @given(cases())
    def check(case):
        arr, lo, hi = case
        got = _core.any_outside(arr, lo, hi)
        if arr.dtype not in scanned or not arr.dtype.isnative or not arr.flags.c_contiguous:
            assert got is None
        else:
            assert got is bool(((arr < lo) | (arr > hi)).any())

    check()
    assert _core.any_outside([0, 1], 0, 1) is None  # (not an array)


@pytest.mark.parametrize("num_envs", [1, 17, 40])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("value", [5, -1])
def test_an_action_outside_the_space_names_its_row_at_any_row_count(num_envs, dtype, value):
    """One row's action outside Discrete(5), in a call of 1, 17 or 40 rows (the checks of few and of many rows), as
    int64 or int32: the error names that row and its value; no env steps."""
    row = num_envs - 1

    def bad(a):
        a = a.astype(dtype)
        a[row] = value
        return a

    envs = make_envs(num_envs)
    w = tv.RolloutWorker(creator_from(envs), policy_returning(actions=bad, state_outs=[], extra={}),
                         num_envs=num_envs, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=rf"outside the action space Discrete\(5\) \(rows \[{row}\]: \[{value}\]\)"):
        w.sample()
    assert all(not e.actions for e in envs), "no env stepped"


@pytest.mark.parametrize("num_envs", [1, 2])
@pytest.mark.parametrize("nan_in, named", [((1,), "state_out_1"), ((2, 1), "state_out_1"), ((2,), "state_out_2"),
                                           ((0, 2), "state_out_0"), ((), None)])
def test_nan_in_state_outs_names_the_first_column_holding_it(num_envs, nan_in, named):
    """State outputs are checked for NaN together (one reduction): the error still names the first column (in
    the order of get_initial_state) that holds NaN, and its rows; one-value and larger columns alike."""
    shapes = [(3,), (4,), (1,)]
    initial = [np.zeros(s, np.float32) for s in shapes]
    outs = [np.zeros((num_envs, *s), np.float32) for s in shapes]
    for i in nan_in:
        outs[i][num_envs - 1, 0] = np.nan
    envs = make_envs(num_envs)
    w = tv.RolloutWorker(creator_from(envs), policy_returning(state_outs=outs, extra={}, initial_state=initial),
                         num_envs=num_envs, rollout_fragment_length=4)
    if named is None:
        w.sample()
        return
    with pytest.raises(ValueError, match=rf"column '{named}': compute_actions_from_input_dict returned NaN \(rows "
                                         rf"\[{num_envs - 1}\]\)"):
        w.sample()
    assert all(not e.actions for e in envs), "no env stepped"
