"""The short ways of acting outside a worker decide nothing the general ones would not.

* `PolicyRunner`'s short way (`_act_hot`, for a call of the last call's episodes one step on) against the same
  runner forced onto the general way (``_hot_ok = False``): random schedules of `act`, `act_many` and
  `compute_single_action` calls (same, other, new and restarted episodes, float64 / float32 / missing / NaN
  rewards, explore on and off, bad observations) give the same actions, state outputs, extra fetches and errors.
* The C++ output check (`_core._OutputCheck`, `PolicyColumns.check_outputs`' common case) against the Python checks:
  for outputs made wrong in every way they check (dtypes, shapes, NaN, actions outside the space, containers of
  the wrong kind, missing or extra fetches, ndarray subclasses, layouts it cannot scan) it either returns what the
  Python checks return, or None (they decide); it never accepts what they refuse, and it takes the common case.
* The numpy actor on the runner's arrays (`MLPActor.act_numpy`) gives the torch-facing actor's values and draws.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.rollout.config import RolloutConfig
from trajview.rollout.plan import PolicyColumns

torch = pytest.importorskip("torch")

S = gym.spaces
BOX = S.Box(-1.0, 1.0, (3,), np.float32)
MODELS = {
    "framestack": ({"num_frames": 4, "hidden": (16,), "prev_rewards": True}, S.Discrete(3)),
    # (actions from 1: the padding zeros before an episode's first step are outside the space, and the numpy
    # actor's rows of those come from the model's encoders)
    "framestack-start": ({"num_frames": 3, "hidden": (16,)}, S.Discrete(3, start=1)),
    "lstm": ({"max_seq_len": 5, "hidden": 16, "cell_size": 16, "prev_reward": True}, S.Discrete(3)),
    "mlp-box": ({"hidden": (16,)}, S.Box(-1.0, 1.0, (2,), np.float32)),
}


def make_policy(name):
    torch.manual_seed(0)
    model_config, action_space = MODELS[name]
    model = {"mlp-box": "mlp", "framestack-start": "framestack"}.get(name, name)
    return tv.PPOPolicy(BOX, action_space, {"model": model, "model_config": model_config})


def outcome(fn):
    """What a call returned (copied), or its error's type and message."""
    try:
        return ("ok", copy.deepcopy(fn()))
    except (ValueError, TypeError, KeyError) as e:
        return ("error", type(e).__name__, str(e))


def assert_same(a, b, where):
    assert a[0] == b[0], (where, a, b)
    if a[0] == "error":
        assert a == b, where
        return
    la, lb = _leaves(a[1]), _leaves(b[1])
    assert len(la) == len(lb), where
    for x, y in zip(la, lb):
        assert type(x) is type(y), (where, type(x), type(y))
        np.testing.assert_array_equal(x, y, err_msg=str(where))
        if isinstance(x, (np.ndarray, np.generic)):
            assert x.dtype == y.dtype, where


def _leaves(v):
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _leaves(item)]
    if isinstance(v, dict):
        return [x for k in sorted(v) for x in _leaves(v[k])]
    return [v]


REWARDS = st.sampled_from(["f64", "f64", "f64", "f32", "none", "nan", "int"])
CALL = st.fixed_dictionaries({
    "kind": st.sampled_from(["act", "act", "many", "many", "single"]),
    "key": st.integers(0, 2),
    "width": st.integers(1, 3),
    "start": st.sampled_from([False, False, False, True, "array"]),
    "reward": REWARDS,
    "explore": st.sampled_from([None, False, True]),
    "bad_obs": st.sampled_from([None] * 8 + ["float64", "shape"]),
    "full_fetch": st.booleans(),
})


def _reward(kind, rng, n=None):
    if kind == "none":
        return None
    if kind == "int":
        v = rng.integers(-3, 3, n) if n else int(rng.integers(-3, 3))
        return v
    v = rng.uniform(-1, 1, n) if n else float(rng.uniform(-1, 1))
    if kind == "nan":
        if n:
            v[0] = np.nan
        else:
            v = float("nan")
    if kind == "f32":
        return np.asarray(v, np.float32) if n else np.float32(v)
    return v if n else np.float64(v) if rng.random() < 0.5 else v


def _obs(bad, rng, n=None):
    shape = (n, 3) if n else (3,)
    if bad == "shape":
        shape = (n, 4) if n else (4,)
    return rng.uniform(-1, 1, shape).astype(np.float64 if bad == "float64" else np.float32)


def _call(policy, runner, c, i):
    """One call of the schedule on ``runner`` (or ``policy``'s implicit episode), its arguments made from ``i``."""
    rng = np.random.default_rng(i)
    torch.manual_seed(i)  # (explore=True draws from torch's generator: the same draws on both sides)
    if c["kind"] == "single":
        return lambda: policy.compute_single_action(
            _obs(c["bad_obs"], rng), prev_reward=_reward(c["reward"], rng), explore=c["explore"],
            episode_start=c["start"] is True)
    if c["kind"] == "act":
        return lambda: runner.act(_obs(c["bad_obs"], rng), c["key"], reward=_reward(c["reward"], rng),
                                  episode_start=c["start"] is True, explore=c["explore"], full_fetch=c["full_fetch"])
    n = c["width"]
    keys = list(range(n))
    start = None if c["start"] is False else (np.zeros(n, bool) if c["start"] == "array" else np.ones(n, bool))
    return lambda: runner.act_many(_obs(c["bad_obs"], rng, n), keys, rewards=_reward(c["reward"], rng, n),
                                   episode_start=start, explore=c["explore"], full_fetch=c["full_fetch"])


def _two_sides(make, name):
    """Two (policy, runner) pairs alike: the first runner takes its short way where it can, the second never does."""
    sides = []
    for general in (False, True):
        policy = make(name)
        runner = tv.PolicyRunner(policy, max_episodes=4)
        runner._hot_ok = not general
        sides.append((policy, runner))
    return sides


@pytest.mark.parametrize("name", list(MODELS))
@settings(max_examples=25, deadline=None)
@given(schedule=st.lists(CALL, min_size=1, max_size=30))
def test_the_short_way_acts_as_the_general_way(name, schedule):
    sides = _two_sides(make_policy, name)
    for i, c in enumerate(schedule):
        results = []
        for policy, runner in sides:
            single = getattr(policy, "_single_action_runner", None)
            if single is not None and not runner._hot_ok:
                single._hot_ok = False  # (the implicit episode's runner, made at the first single call)
            results.append(outcome(_call(policy, runner, c, i)))
        assert_same(results[0], results[1], (i, c))
        general_policy, general_runner = sides[1]
        assert general_runner._hot is None
        single = getattr(general_policy, "_single_action_runner", None)
        assert single is None or single._hot is None or c["kind"] == "single"  # (made by this call: next one)
        if single is not None:
            single._hot_ok = False
            single._hot = None


def test_the_short_way_is_taken_for_the_common_calls():
    """compute_single_action, act and act_many in an acting loop run by the short way after their first call."""
    policy = make_policy("framestack")
    runner = tv.PolicyRunner(policy, max_episodes=8)
    rng = np.random.default_rng(0)
    runner.act_many(rng.uniform(-1, 1, (8, 3)).astype(np.float32), list(range(8)), rewards=np.zeros(8))
    hot = runner._hot
    assert hot is not None
    calls = []
    real = runner._act_hot
    runner._act_hot = lambda *a: calls.append(1) or real(*a)
    for _ in range(5):
        runner.act_many(rng.uniform(-1, 1, (8, 3)).astype(np.float32), list(range(8)), rewards=rng.uniform(-1, 1, 8),
                        episode_start=np.zeros(8, bool))
    assert len(calls) == 5
    policy.compute_single_action(np.zeros(3, np.float32))
    single = policy._single_action_runner
    # (`_act_one` makes the short way's C++ call itself: no call of the general way, `_act_columns`, and each counted)
    general = single._act_columns
    single._act_columns = lambda *a: calls.append(2) or general(*a)
    counted = single._counts.timestep
    for _ in range(5):
        policy.compute_single_action(rng.uniform(-1, 1, 3).astype(np.float32), prev_reward=1.0)
    assert calls.count(2) == 0
    assert single._counts.timestep == counted + 5


# -- the C++ output check against the Python checks -----------------------------------------------------------------

class Sub(np.ndarray):
    pass


def _config(nan_outputs="raise"):
    return RolloutConfig.validated(
        batch_mode="truncate_episodes", rollout_fragment_length=8, count_steps_by="env_steps", horizon=None,
        soft_horizon=False, no_done_at_end=False, seed=None, worker_index=0, lazy_views=False, nan_outputs=nan_outputs)


def _columns(name, nan_outputs="raise"):
    """A policy and its output checks, after the view-pruning pass (a runner's, which runs it first)."""
    policy = make_policy(name)
    tv.PolicyRunner(policy)
    return policy, PolicyColumns(policy, _config(nan_outputs))


def _good_outputs(policy, n, rng):
    cols = PolicyColumns(policy, _config())
    specs = policy.column_specs()
    space = policy.action_space
    if isinstance(space, S.Discrete):
        actions = rng.integers(space.start, space.start + space.n, n).astype(specs["actions"][0])
    else:
        actions = rng.uniform(-1, 1, (n, *specs["actions"][1])).astype(specs["actions"][0])
    states = [rng.standard_normal((n, *specs[k][1])).astype(specs[k][0]) for k in cols.state_keys]
    extra = {k: rng.standard_normal((n, *specs[k][1])).astype(specs[k][0]) for k in cols.extra_keys}
    return actions, states, extra


MUTATIONS = ["none", "action_dtype", "action_shape", "action_outside", "action_list", "action_nan", "action_sub",
             "state_dtype", "state_shape", "state_nan", "state_tuple", "state_missing", "extra_nan", "extra_missing",
             "extra_more", "extra_dtype", "extra_strided_nan", "extra_f16", "rows"]


def _mutate(what, outputs, rng):
    actions, states, extra = outputs
    states, extra = list(states), dict(extra)
    if what == "action_dtype":
        actions = actions.astype(np.int32 if actions.dtype.kind in "iu" else np.float64)
    elif what == "action_shape":
        actions = np.stack([actions, actions], axis=-1)
    elif what == "action_outside" and len(actions):
        actions = actions.copy()
        if actions.dtype.kind in "iu":
            actions[rng.integers(len(actions))] = 7
        else:
            actions[0] = 5.0
    elif what == "action_list":
        actions = actions.tolist()
    elif what == "action_nan" and actions.dtype.kind == "f" and len(actions):
        actions = actions.copy()
        actions.reshape(-1)[0] = np.nan
    elif what == "action_sub":
        actions = actions.view(Sub)
    elif what.startswith("state") and states and len(actions):
        j = int(rng.integers(len(states)))
        if what == "state_dtype":
            states[j] = states[j].astype(np.float64)
        elif what == "state_shape":
            states[j] = states[j][:, :-1]
        elif what == "state_nan":
            states[j] = states[j].copy()
            states[j].reshape(-1)[-1] = np.nan
        elif what == "state_tuple":
            states = tuple(states)
        elif what == "state_missing":
            states = states[:-1]
    elif what.startswith("extra") and extra and len(actions):
        k = sorted(extra)[int(rng.integers(len(extra)))]
        if what == "extra_nan":
            extra[k] = extra[k].copy()
            extra[k].reshape(-1)[0] = np.nan
        elif what == "extra_missing":
            del extra[k]
        elif what == "extra_more":
            extra["something"] = extra[k]
        elif what == "extra_dtype":
            extra[k] = extra[k].astype(np.float64)
        elif what == "extra_strided_nan":
            wide = np.repeat(extra[k], 2, axis=0)
            wide[0] = np.nan
            extra[k] = wide[::2]
        elif what == "extra_f16":
            extra[k] = extra[k].astype(np.float16)
    return actions, states, extra


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("nan_outputs", ["raise", "allow"])
@settings(max_examples=40, deadline=None)
@given(what=st.sampled_from(MUTATIONS), n=st.integers(0, 5), seed=st.integers(0, 2**16), extra_rows=st.integers(-1, 1))
def test_the_cpp_output_check_accepts_only_what_the_python_checks_accept(name, nan_outputs, what, n, seed,
                                                                       extra_rows):
    policy, cols = _columns(name, nan_outputs)
    fast = cols._fast_check
    assert fast is not None  # (flat actions, every column with a spec, Discrete's bounds or none)
    rng = np.random.default_rng(seed)
    outputs = _mutate(what, _good_outputs(policy, n, rng), rng)
    n_asked = max(n + (extra_rows if what == "rows" else 0), 0)
    cols._fast_check = None  # the Python checks alone
    try:
        expected = cols.check_outputs(*outputs, n_asked)
    except ValueError as e:
        expected = e
    got = fast(*outputs, n_asked)
    if isinstance(expected, ValueError):
        assert got is None, (what, expected)
        return
    if what == "none" and n_asked == n:
        assert got is not None  # the common case is taken
    if got is not None:
        assert list(got) == list(expected)
        for k in expected:
            assert got[k] is expected[k], k
        into = {"obs": 1}
        assert fast(*outputs, n_asked, into) is into and into == {"obs": 1, **expected}


def test_the_cpp_output_check_writes_nothing_where_it_declines():
    policy, cols = _columns("lstm")
    rng = np.random.default_rng(0)
    actions, states, extra = _good_outputs(policy, 3, rng)
    extra = dict(extra)
    extra[sorted(extra)[-1]] = extra[sorted(extra)[-1]].copy()
    extra[sorted(extra)[-1]][1] = np.nan
    into: dict = {"kept": 1}
    assert cols._fast_check(actions, states, extra, 3, into) is None
    assert into == {"kept": 1}
    with pytest.raises(TypeError, match="into must be a dict"):
        cols._fast_check(actions, states, extra, 3, [])


# -- the numpy actor on arrays ----------------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 2**16), explore=st.booleans())
def test_the_numpy_actor_on_arrays_gives_the_tensor_facing_actors_values_and_draws(n, seed, explore):
    policy = make_policy("framestack")
    actor = policy.numpy_actor()
    assert actor is not None
    rng = np.random.default_rng(seed)
    d = {"prev_n_obs": rng.uniform(-1, 1, (n, 4, 3)).astype(np.float32),
         "prev_n_actions": rng.integers(0, 3, (n, 4)), "prev_n_rewards": rng.uniform(-1, 1, (n, 4))}
    torch.manual_seed(seed)
    a_np, s_np, e_np = actor.act_numpy(d, explore)
    torch.manual_seed(seed)
    a_t, s_t, e_t = actor.act({k: torch.from_numpy(v) for k, v in d.items()}, explore)
    assert s_np == s_t == []
    assert a_np.dtype == a_t.numpy().dtype and a_np.shape == (n,)
    np.testing.assert_array_equal(a_np, a_t.numpy())
    assert sorted(e_np) == sorted(e_t)
    for k in e_np:
        np.testing.assert_array_equal(e_np[k], e_t[k].numpy())


def test_a_runner_follows_what_the_numpy_actor_decision_reads_after_its_first_call():
    """The runner's lane calls the numpy actor at once while nothing `PPOPolicy._act_on_arrays` reads has changed;
    an ``action_sampler`` set on the policy, or a new model (a new actor), is what computes the next action."""
    policy = make_policy("framestack")
    runner = tv.PolicyRunner(policy, max_episodes=2, explore=False)
    rng = np.random.default_rng(0)

    def obs():
        return rng.uniform(-1, 1, (2, 3)).astype(np.float32)

    runner.act_many(obs(), [0, 1], rewards=np.zeros(2))
    runner.act_many(obs(), [0, 1], rewards=np.zeros(2))
    first = policy.numpy_actor()
    assert first is not None and runner._hot is not None
    seen = []
    inner = policy.action_sampler

    def recording(tensors, explore):
        seen.append(dict.copy(tensors))
        return inner(tensors, explore)

    policy.action_sampler = recording
    runner.act_many(obs(), [0, 1], rewards=np.zeros(2))
    assert len(seen) == 1  # (the torch path, through the instance's action_sampler)
    del policy.action_sampler
    runner.act_many(obs(), [0, 1], rewards=np.zeros(2))
    assert len(seen) == 1
    # A new model: a new actor (`numpy_actor`), whose actions the runner's next call returns.
    torch.manual_seed(1)
    policy.model = make_policy("framestack").model
    x = obs()
    expected_inputs = {}
    real = type(first).act_numpy

    def spy(actor, d, explore):
        expected_inputs["actor"] = actor
        return real(actor, d, explore)

    type(first).act_numpy = spy
    try:
        runner.act_many(x, [0, 1], rewards=np.zeros(2))
    finally:
        type(first).act_numpy = real
    assert expected_inputs["actor"] is policy.numpy_actor() and expected_inputs["actor"] is not first


# -- the short way's C++ call (`_core._HotAct`) ---------------------------------------------------------------------

class Faulty(tv.PPOPolicy):
    """A PPO policy whose outputs go wrong on demand (``fault``): int32 actions (the C++ check declines them, the
    Python checks take them), NaN values (both refuse them), or an error of the policy's own."""

    fault = None

    def action_sampler(self, input_dict, explore):
        actions, states, extra = super().action_sampler(input_dict, explore)
        if self.fault == "int32" and actions.dtype == torch.int64:
            actions = actions.to(torch.int32)
        elif self.fault == "nan":
            extra = {**extra, "vf_preds": torch.full_like(extra["vf_preds"], float("nan"))}
        elif self.fault == "raise":
            raise RuntimeError("injected policy error")
        return actions, states, extra


def _faulty(name):
    torch.manual_seed(0)
    model_config, action_space = MODELS[name]
    model = {"mlp-box": "mlp", "framestack-start": "framestack"}.get(name, name)
    return Faulty(BOX, action_space, {"model": model, "model_config": model_config})


def _outcome_with_notes(fn):
    """`outcome`, the policy's own errors too, and the notes of an error (what the runner forgot)."""
    try:
        return ("ok", copy.deepcopy(fn()))
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        return ("error", type(e).__name__, str(e), tuple(getattr(e, "__notes__", ())))


@pytest.mark.parametrize("name", ["framestack", "lstm", "mlp-box"])
@settings(max_examples=25, deadline=None)
@given(schedule=st.lists(st.tuples(CALL, st.sampled_from([None] * 6 + ["int32", "nan", "raise"])), min_size=1,
                         max_size=30))
def test_the_cpp_short_way_fails_and_recovers_as_the_general_way(name, schedule):
    """Outputs the C++ check declines but the Python checks take (int32 actions), outputs both refuse (NaN) and the
    policy's own errors, at random calls of random schedules: the short way (its C++ call) and the general way give
    the same returns, the same errors with the same notes (the episodes forgotten), and go on alike."""
    sides = _two_sides(_faulty, name)
    for i, (c, fault) in enumerate(schedule):
        results = []
        for policy, runner in sides:
            single = getattr(policy, "_single_action_runner", None)
            if single is not None and not runner._hot_ok:
                single._hot_ok = False
                single._hot = None
            policy.fault = fault
            results.append(_outcome_with_notes(_call(policy, runner, c, i)))
            policy.fault = None
        assert_same(results[0], results[1], (i, c, fault))
    assert sides[1][1]._hot is None


@pytest.mark.parametrize("name", ["framestack", "lstm"])
def test_the_cpp_short_way_in_an_acting_loop_with_faults(name):
    """The same in a steady acting loop, where the short way's C++ call takes every call but the first of each run
    of episodes (checked): faults at fixed calls, then acting on."""
    faults = {5: "int32", 9: "nan", 14: "raise", 15: "int32", 22: "nan", 23: "nan", 30: "raise"}
    sides = _two_sides(_faulty, name)
    fused = 0
    for i in range(40):
        results = []
        for policy, runner in sides:
            fused += runner._hot is not None and runner._hot.act is not None and runner._hot.reward_type is np.float64
            policy.fault = faults.get(i)
            c = {"kind": "many", "key": 0, "width": 4, "start": False, "reward": "f64", "explore": i % 3 == 0,
                 "bad_obs": None, "full_fetch": i % 2 == 0}
            results.append(_outcome_with_notes(_call(policy, runner, c, i)))
            policy.fault = None
        assert_same(results[0], results[1], (i, faults.get(i)))
        assert (results[0][0] == "error") == (faults.get(i) in ("nan", "raise")), (i, results[0])
    assert fused >= 25  # (after each error the episodes begin again: that call and the next take the general way)


def test_the_cpp_short_way_is_taken_and_counts_its_calls(monkeypatch):
    """In an acting loop the short way's calls are C++ calls (`_HotAct`), which count the timestep the policy reads
    and free the store's steps every 32 calls, as the general way does."""
    from trajview.rollout import runner as runner_module

    policy = make_policy("framestack")
    runner = tv.PolicyRunner(policy, max_episodes=8)
    rng = np.random.default_rng(0)
    obs = lambda: rng.uniform(-1, 1, (8, 3)).astype(np.float32)  # noqa: E731
    runner.act_many(obs(), list(range(8)), rewards=np.zeros(8))
    runner.act_many(obs(), list(range(8)), rewards=np.zeros(8))  # (the rewards' dtype is known from here on)
    hot = runner._hot
    assert hot is not None and hot.act is not None
    fused, calls = runner_module._fused, []

    def recorded(*a):  # (the mode of each call that took the C++ call)
        out = fused(*a)
        if out is not runner_module._MISS:
            calls.append(a[-1])
        return out

    monkeypatch.setattr(runner_module, "_fused", recorded)
    timesteps = []
    real_run = hot.run
    hot.run = lambda explore, t: timesteps.append(t) or real_run(explore, t)
    freed = []
    coll = runner._collector
    before = runner._counts.calls
    for k in range(40):
        if runner._counts.calls == 0 and k:
            freed.append(k)
        out = runner.act_many(obs(), list(range(8)), rewards=rng.uniform(-1, 1, 8), full_fetch=k % 2 == 1)
        if k % 2:
            acts, states, extra = out
            assert acts.shape == (8,) and states == [] and set(extra) == {"action_logp", "vf_preds"}
        else:
            assert out.shape == (8,) and out.dtype == np.int64
    assert calls == [runner_module._ROWS_FETCH if k % 2 else runner_module._ROWS for k in range(40)]
    assert timesteps == [16 + 8 * k for k in range(40)]  # (two calls of 8 rows before)
    assert freed == [32 - before]  # every 32 calls
    assert runner._counts.timestep == 16 + 8 * 40
    assert coll.num_steps() <= 8 * 32


def test_a_policy_acting_through_its_implicit_episode_is_collected():
    """The short way's C++ call holds nothing that refers back to the policy (Python's collector cannot see into
    it): a policy that acted through compute_single_action is freed once unreferenced."""
    import gc
    import weakref

    policy = make_policy("lstm")
    for k in range(5):
        policy.compute_single_action(np.zeros(3, np.float32), prev_reward=0.0 if k else None)
    assert policy._single_action_runner._hot.act is not None
    ref = weakref.ref(policy)
    del policy
    gc.collect()
    assert ref() is None


def test_act_counts():
    from trajview import _core

    freed = []
    counts = _core._ActCounts(3, lambda: freed.append(counts.calls))
    for n in (1, 2, 3, 4, 5, 6, 7):
        counts.count(n)
    assert counts.timestep == 28 and counts.calls == 1 and freed == [0, 0]  # (calls back to 0, then free())
    with pytest.raises(ValueError, match="chunk must be positive, got 0"):
        _core._ActCounts(0, lambda: None)
    with pytest.raises(ValueError, match="cannot count -1 more rows"):
        counts.count(-1)
    assert counts.timestep == 28 and counts.calls == 1


def test_an_error_after_the_outputs_are_stored_keeps_the_episodes():
    """The C++ call's count frees the store's steps every chunk calls, after the outputs are checked and stored: an
    error there (``_core._HotAct.stage`` 2) leaves the episodes running, as it left them on the general way; an error of
    the policy (stage 1) forgets them."""
    from trajview import _core

    policy = _faulty("framestack")
    runner = tv.PolicyRunner(policy, max_episodes=2)
    failing = [False]

    def free():
        if failing[0]:
            failing[0] = False
            raise RuntimeError("free failed")
        runner._collector.discard_steps()

    runner._counts = _core._ActCounts(4, free)
    rng = np.random.default_rng(0)

    def act():
        return runner.act_many(rng.uniform(-1, 1, (2, 3)).astype(np.float32), [0, 1], rewards=rng.uniform(-1, 1, 2))

    for _ in range(3):
        act()
    assert runner._hot is not None and runner._hot.act is not None and runner._counts.calls == 3
    failing[0] = True
    with pytest.raises(RuntimeError, match="free failed"):
        act()  # (the 4th call: its outputs stored, then the free raised)
    assert runner._hot.act.stage == 2 and runner.episodes == [0, 1]
    lengths = runner._collector.episode_lengths().tolist()
    act()
    assert runner._collector.episode_lengths().tolist() == [x + 1 for x in lengths]  # (the same episodes, on)
    policy.fault = "raise"
    with pytest.raises(RuntimeError, match="injected policy error") as info:
        act()
    assert runner._hot.act.stage == 1 and runner.episodes == []
    assert "the episodes of this call were reset: [0, 1]" in "".join(info.value.__notes__)
