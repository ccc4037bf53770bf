"""MeanStdFilter and non-finite observations: ``nonfinite="skip"`` (the default) leaves the running statistics
untouched for an observation holding a NaN or an infinity in any filtered leaf and counts it; ``"raise"`` refuses
it (a NonFiniteObservationError naming the column, and inside a worker the env and agent) before anything changes.

Checked against a small pure-Python reference (every finite observation kept in a list, mean and std computed
from the list), for single observations, batches and `filter_columns` with skipped rows, flat and nested; the
counts through RLlib's sync (apply_changes, sync); and in single- and multi-agent workers."""

from __future__ import annotations

import functools
import math
import os
import pickle
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from rollout_helpers import pid_gone
from trajview.errors import NonFiniteObservationError
from trajview.rollout.filter import MeanStdFilter, make_filter

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

CLIP = 10.0


class RefFilter:
    """What MeanStdFilter(nonfinite="skip") should do, written the obvious way: a list of the finite
    observations pushed so far (per filtered leaf, by leaf path), the count of the skipped ones."""

    def __init__(self, paths):
        self.paths = paths  # the filtered leaves' paths
        self.kept = []  # observations (dicts path -> float64 array) pushed
        self.skipped = 0

    @staticmethod
    def finite(obs):
        return all(math.isfinite(float(v)) for leaf in obs.values() for v in np.ravel(leaf))

    def push(self, obs):
        if self.finite(obs):
            self.kept.append({p: np.asarray(v, np.float64) for p, v in obs.items()})
        else:
            self.skipped += 1

    def mean(self, p):
        if not self.kept:
            return None
        return sum(o[p] for o in self.kept) / len(self.kept)

    def std(self, p):
        n = len(self.kept)
        if n <= 1:
            return None
        m = self.mean(p)
        var = sum((o[p] - m) ** 2 for o in self.kept) / (n - 1)
        return np.sqrt(np.asarray(var).astype(np.float32))

    def out(self, p, x):
        x = np.asarray(x)
        m, s = self.mean(p), self.std(p)
        y = x - (0.0 if m is None else m)
        y = y / ((0.0 if s is None else s) + 1e-6)
        return np.clip(y, -CLIP, CLIP).astype(x.dtype)


# values: mostly ordinary floats, sometimes NaN or an infinity
values = st.one_of(
    st.floats(-50, 50, allow_nan=False, width=32),
    st.floats(-50, 50, allow_nan=False, width=32),
    st.floats(-50, 50, allow_nan=False, width=32),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


def arrays(shape):
    n = int(np.prod(shape, dtype=np.int64))
    return st.lists(values, min_size=n, max_size=n).map(lambda xs: np.array(xs, np.float32).reshape(shape))


def check_stats(f, ref, get_stat):
    assert f.num_nonfinite == ref.skipped
    for p in ref.paths:
        rs = get_stat(f.running_stats, p)
        assert rs.n == len(ref.kept)
        assert np.isfinite(rs.mean_array).all() and np.isfinite(rs.std_array).all()
        if ref.kept:
            np.testing.assert_allclose(rs.mean, ref.mean(p), rtol=1e-6, atol=1e-6)
        if len(ref.kept) > 1:
            np.testing.assert_allclose(rs.std, ref.std(p), rtol=1e-4, atol=1e-4)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([(), (2,), (2, 3)]),
    st.data(),
    st.lists(st.sampled_from(["one", "batch", "columns"]), min_size=1, max_size=8),
)
def test_flat_filter_skips_and_counts_like_the_reference(shape, data, calls):
    f = MeanStdFilter(shape)
    assert f.nonfinite == "skip"  # the default
    ref = RefFilter([()])
    for how in calls:
        if how == "one":
            x = data.draw(arrays(shape))
            ref.push({(): x})
            np.testing.assert_allclose(f(x), ref.out((), x), rtol=1e-4, atol=1e-4)
            continue
        n = data.draw(st.integers(0, 5))
        xs = data.draw(arrays((n, *shape)))
        if how == "batch":  # every row pushed, then every row filtered with the stats after the batch
            for x in xs:
                ref.push({(): x})
            want = np.array([ref.out((), x) for x in xs]).reshape(xs.shape)
            np.testing.assert_allclose(f(xs), want, rtol=1e-4, atol=1e-4)
        else:  # row by row; rows in skip (failed envs) filtered, never pushed, never counted
            skip = set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2))) if n else set()
            got = f.filter_columns({(): xs}, skip)[()]
            for j, x in enumerate(xs):
                if j not in skip:
                    ref.push({(): x})
                np.testing.assert_allclose(got[j], ref.out((), x), rtol=1e-4, atol=1e-4)
        check_stats(f, ref, lambda rs, p: rs)
    check_stats(f, ref, lambda rs, p: rs)
    assert f.buffer.n == len(ref.kept) and f.buffer_num_nonfinite == ref.skipped


NEST_SHAPE = {"pos": (2,), "more": ((), None)}  # a pass-through (Discrete) leaf at more[1]
PATHS = [("pos",), ("more", 0)]


def at(x, path):
    for p in path:
        x = x[p]
    return x


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(arrays((2,)), arrays(()), st.integers(0, 4)), min_size=1, max_size=12), st.booleans())
def test_nested_filter_skips_the_whole_observation(stream, as_columns):
    """A NaN in one leaf leaves every leaf's statistics untouched for that observation (one count)."""
    f = MeanStdFilter(NEST_SHAPE)
    ref = RefFilter(PATHS)
    outs = []
    if as_columns:
        cols = {("pos",): np.array([s[0] for s in stream]), ("more", 0): np.array([s[1] for s in stream]),
                ("more", 1): np.array([s[2] for s in stream])}
        got = f.filter_columns(cols, ())
        np.testing.assert_array_equal(got[("more", 1)], cols[("more", 1)])  # passed through
        for j, (pos, m0, _) in enumerate(stream):
            ref.push({("pos",): pos, ("more", 0): m0})
            outs.append((got[("pos",)][j], got[("more", 0)][j], pos, m0))
    else:
        for pos, m0, d in stream:
            y = f({"pos": pos, "more": (m0, d)})
            assert y["more"][1] is d
            ref.push({("pos",): pos, ("more", 0): m0})
            outs.append((y["pos"], y["more"][0], pos, m0))
    if not as_columns:  # (each output with the reference's stats at that point: checked for the calls)
        ref2 = RefFilter(PATHS)
        for (ypos, ym0, pos, m0) in outs:
            ref2.push({("pos",): pos, ("more", 0): m0})
            np.testing.assert_allclose(ypos, ref2.out(("pos",), pos), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(ym0, ref2.out(("more", 0), m0), rtol=1e-4, atol=1e-4)
    check_stats(f, ref, at)


def test_a_skipped_observation_is_filtered_as_it_is_nothing_made_up():
    f = MeanStdFilter((3,))
    f(np.array([1.0, 2.0, 3.0]))
    f(np.array([3.0, 2.0, 1.0]))
    y = f(np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(y[0]) and y[1] == CLIP and y[2] == -CLIP
    assert f.running_stats.n == 2 and f.num_nonfinite == 1
    np.testing.assert_allclose(f(np.array([2.0, 2.0, 2.0]), update=False), [0.0, 0.0, 0.0], atol=1e-5)
    assert f.pop_nonfinite_skipped() == 1 and f.pop_nonfinite_skipped() == 0
    f(np.array([np.nan, 0.0, 0.0]), update=False)  # not pushed: not checked, not counted
    assert f.num_nonfinite == 1


def snapshot(f):
    return pickle.dumps((f.num_nonfinite, f.buffer_num_nonfinite,
                         [(r.n, r.mean_array.tobytes(), r.std_array.tobytes()) for r in f._rs if r is not None],
                         [(r.n, r.mean_array.tobytes(), r.std_array.tobytes()) for r in f._buf if r is not None]))


@settings(max_examples=40, deadline=None)
@given(st.lists(arrays((2,)), min_size=1, max_size=6), st.integers(0, 5), st.booleans())
def test_raise_names_the_column_and_row_and_changes_nothing(prior, bad_row, nested):
    shape = {"pos": (2,), "more": ((), None)} if nested else (2,)
    f = MeanStdFilter(shape, nonfinite="raise")
    finite = [x for x in prior if np.isfinite(x).all()]
    for x in finite:
        f({"pos": x, "more": (np.float32(1), 0)} if nested else x)
    before = snapshot(f)
    rows = np.array([*finite, np.array([0.5, np.nan], np.float32)], np.float32)
    bad = min(bad_row, len(rows) - 1)
    rows[[bad, -1]] = rows[[-1, bad]]
    column = "obs.pos" if nested else "obs"
    m0 = np.ones(len(rows), np.float32)
    cols = {("pos",): rows, ("more", 0): m0, ("more", 1): np.zeros(len(rows), np.int64)} if nested else {(): rows}
    with pytest.raises(NonFiniteObservationError, match=rf"column '{column}': a non-finite observation in row "
                       rf"{bad} \(nan at \[1\]\)") as e:
        f.filter_columns(cols)
    assert (e.value.column, e.value.row, e.value.env_index) == (column, bad, None)
    assert snapshot(f) == before
    with pytest.raises(NonFiniteObservationError, match=rf"column '{column}': a non-finite observation \(nan"):
        f({"pos": rows[bad], "more": (np.float32(1), 0)} if nested else rows[bad])
    assert snapshot(f) == before
    if not nested:
        with pytest.raises(NonFiniteObservationError, match=rf"in row {bad} "):
            f(rows)
        assert snapshot(f) == before
    # a row in skip (a failed env's) is neither pushed nor checked
    got = f.filter_columns(cols, {bad})
    assert (f.running_stats["pos"] if nested else f.running_stats).n == 2 * len(finite)
    assert f.num_nonfinite == 0
    assert isinstance(e.value, ValueError)
    assert pickle.loads(pickle.dumps(e.value.at_env(3, "a1"))).env_index == 3
    assert got[("pos",) if nested else ()].shape == rows.shape


def test_nonfinite_in_a_nested_leaf_names_it():
    f = MeanStdFilter({"pos": (2,), "more": ((), {"v": (3,)})}, nonfinite="raise")
    with pytest.raises(NonFiniteObservationError, match=r"column 'obs.more.1.v': .*\(inf at \[2\]\)"):
        f({"pos": np.zeros(2), "more": (0.0, {"v": np.array([0.0, 1.0, np.inf])})})
    assert f.running_stats["pos"].n == 0


def test_counts_go_through_rllibs_sync():
    """Each worker's skipped count since the last sync reaches the driver (apply_changes), and every worker gets
    the driver's total (sync), as the running stats do."""
    w1, w2 = MeanStdFilter((2,)), MeanStdFilter((2,))
    driver = w1.empty_copy()
    ref = RefFilter([()])
    rng = np.random.default_rng(0)
    for rnd in range(3):
        for w, nan_every in ((w1, 3), (w2, 4)):
            for k in range(7 + rnd):
                x = rng.normal(size=2).astype(np.float32)
                if k % nan_every == 0:
                    x[k % 2] = np.nan if k % 4 else np.inf
                ref.push({(): x})
                w(x)
        for w in (w1, w2):
            copy = pickle.loads(pickle.dumps(w.copy()))
            w.reset_buffer()
            assert w.buffer_num_nonfinite == 0 and w.buffer.n == 0
            driver.apply_changes(copy, with_buffer=False)
        for w in (w1, w2):
            w.sync(driver.as_serializable())
        for flt in (driver, w1, w2):
            check_stats(flt, ref, lambda rs, p: rs)
    assert w1.pop_nonfinite_skipped() + w2.pop_nonfinite_skipped() == ref.skipped  # each its own, never synced
    assert driver.pop_nonfinite_skipped() == 0


def test_settings_checked_and_factories():
    with pytest.raises(ValueError, match=r"nonfinite must be one of \('skip', 'raise'\), got 'ignore'"):
        MeanStdFilter((2,), nonfinite="ignore")
    f = make_filter(functools.partial(MeanStdFilter, nonfinite="raise"), (4,))
    assert isinstance(f, MeanStdFilter) and f.nonfinite == "raise" and f.shape == (4,)
    assert f.copy().nonfinite == "raise" and f.empty_copy().nonfinite == "raise"
    assert pickle.loads(pickle.dumps(f)).nonfinite == "raise"
    assert make_filter(MeanStdFilter, (4,)).nonfinite == "skip"
    assert isinstance(make_filter(tv.rollout.NoFilter, (4,)), tv.rollout.NoFilter)
    with pytest.raises(ValueError, match="must return a Filter"):
        make_filter(lambda shape: shape, (4,))
    with pytest.raises(ValueError, match="observation_filter must be"):
        make_filter("MeanStd", (4,))
    g = MeanStdFilter((4,))
    g.sync(f)
    assert g.nonfinite == "raise"


# -- workers -----------------------------------------------------------------------------------------------------

class NaNEnv(gym.Env):
    """Observations [k, seed-ish noise]; at the steps in ``bad`` (k counted from the reset, 0) a NaN / inf."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index, bad=(), length=6, log=None, once=False):
        self.index, self.bad, self.length, self.once = index, set(bad), length, once
        self.log = [] if log is None else log
        self.k = 0
        self.episode = 0

    def _obs(self):
        x = np.array([self.k + 0.5 * self.index, np.sin(self.index + 3 * self.episode + self.k)], np.float32)
        if self.k in self.bad:
            x[self.k % 2] = np.nan if self.k % 3 else np.inf
            if self.once:
                self.bad.discard(self.k)
        self.log.append(x)
        return x

    def reset(self, seed=None, options=None):
        self.k = 0
        self.episode += 1
        return self._obs(), {}

    def step(self, action):
        self.k += 1
        return self._obs(), 1.0, self.k >= self.length, False, {}


class ZeroAct(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["obs"]), np.int64), [], {}


def test_worker_skips_nonfinite_observations_and_counts_them():
    log = []
    envs = iter(range(100))
    w = tv.RolloutWorker(lambda cfg: NaNEnv(next(envs), bad=(2, 5), log=log), ZeroAct, num_envs=2,
                         rollout_fragment_length=9, observation_filter="MeanStdFilter")
    b = w.sample()
    f = w.filters["default_policy"]
    ref = RefFilter([()])
    for x in log:
        ref.push({(): x})
    assert ref.skipped == 6  # each env: two episodes (6 and 3 steps), NaN / inf at k = 2 and 5 of the first, 2 of the second
    check_stats(f, ref, lambda rs, p: rs)
    # obs rows (k = 0..5, then 0..2 per env): the bad ones (k = 2, 5, 2) filtered as they are, the others finite
    assert (~np.isfinite(np.asarray(b["obs"])).all(axis=1)).sum() == 6
    assert f.pop_nonfinite_skipped() == 6


def test_worker_raise_names_the_env_cuts_the_step_and_goes_on():
    log = []
    envs = iter(range(100))

    def make(cfg):
        i = next(envs)
        return NaNEnv(i, bad=(3,) if i == 1 else (), log=log, once=True)  # env 1: a NaN at its step 3, once

    w = tv.RolloutWorker(make, ZeroAct, num_envs=3, rollout_fragment_length=4,
                         observation_filter=functools.partial(MeanStdFilter, nonfinite="raise"))
    with pytest.raises(NonFiniteObservationError, match=r"column 'obs': env 1 returned a non-finite observation") as e:
        w.sample()
    assert (e.value.env_index, e.value.column) == (1, "obs")
    f = w.filters["default_policy"]
    assert f.running_stats.n == 3 * 3 and f.num_nonfinite == 0  # resets + 2 steps of each env, not the refused one
    b = w.sample()  # the stepped envs' episodes were cut (none of that step stored): they start anew
    assert w.get_metrics()["num_faulty_episodes"] == 3
    assert len(b) == 12 and np.isfinite(np.asarray(b["obs"])).all()


class StepFails(NaNEnv):
    """Raises in its step to k = ``fail_at`` (once)."""

    def __init__(self, index, fail_at=None, **kw):
        super().__init__(index, **kw)
        self.fail_at = fail_at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.fail_at is not None and self.k + 1 == self.fail_at:
            self.fail_at = None
            raise RuntimeError("env broke")
        return super().step(action)


def test_raise_in_a_step_where_another_env_failed_cuts_both_and_replaces_the_failed_env():
    """restart_failed_sub_environments: in one step env 0 raises and env 1 returns a NaN. The filter's error names
    env 1; both episodes are cut (nothing of the step stored) and env 0 is recreated as any failed env is (the
    broken env is never stepped again); the next sample() goes on with exactly the batch size."""
    made = []

    def make(cfg):
        i = len(made)
        env = StepFails(i % 2, fail_at=3 if i == 0 else None, bad=(3,) if i == 1 else (), once=True)
        made.append(env)
        return env

    w = tv.RolloutWorker(make, ZeroAct, num_envs=2, rollout_fragment_length=4, restart_failed_sub_environments=True,
                         observation_filter=functools.partial(MeanStdFilter, nonfinite="raise"))
    n_made = len(made)
    broken = made[0]
    with pytest.raises(NonFiniteObservationError, match=r"column 'obs': env 1 returned a non-finite observation"):
        w.sample()
    m = w.get_metrics()
    assert m["num_env_restarts"] == 1 and m["num_faulty_episodes"] == 2
    assert len(made) == n_made + 1
    steps = broken.steps
    b = w.sample()
    assert broken.steps == steps, "the env that raised was replaced, not stepped again"
    assert len(b) == 8 and np.isfinite(np.asarray(b["obs"])).all() and np.isfinite(np.asarray(b["new_obs"])).all()
    assert w.filters["default_policy"].num_nonfinite == 0


class ResetNaN(NaNEnv):
    """A NaN in the reset observation of the episodes listed in ``episodes`` (1: the first)."""

    def __init__(self, index, episodes, length=3):
        super().__init__(index, length=length)
        self.episodes = set(episodes)

    def reset(self, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        if self.episode in self.episodes:
            obs = np.array([np.nan, obs[1]], np.float32)
        return obs, info


@pytest.mark.parametrize("episode", [1, 2])
def test_raise_at_a_reset_names_the_env_and_the_worker_goes_on(episode):
    """The first reset (before any step) and a reset after an episode's end: the error names the env; the env
    stays idle and is reset again by the next sample(), which returns exactly the batch size."""
    envs = iter(range(100))

    def make(cfg):
        i = next(envs)
        return ResetNaN(i, {episode} if i == 1 else set())

    w = tv.RolloutWorker(make, ZeroAct, num_envs=2, rollout_fragment_length=4,
                         observation_filter=functools.partial(MeanStdFilter, nonfinite="raise"))
    with pytest.raises(NonFiniteObservationError, match=r"column 'obs': env 1 returned a non-finite observation"):
        w.sample()
    b = w.sample()
    assert len(b) == 8 and np.isfinite(np.asarray(b["obs"])).all() and np.isfinite(np.asarray(b["new_obs"])).all()
    f = w.filters["default_policy"]
    assert f.num_nonfinite == 0 and np.isfinite(f.running_stats.mean).all()


class NaNMA(tv.envs.MultiAgentEnv):
    """Two agents observed every step; agent a1's observation at step 2 holds a NaN."""

    def __init__(self, cfg=None):
        self.possible_agents = ["a0", "a1"]
        self.agents = []
        self.observation_spaces = {a: gym.spaces.Box(-np.inf, np.inf, (2,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self.k = 0

    def _obs(self):
        obs = {a: np.array([self.k, j], np.float32) for j, a in enumerate(self.possible_agents)}
        if self.k == 2:
            obs["a1"][0] = np.nan
        return obs

    def reset(self, seed=None, options=None):
        self.k = 0
        return self._obs(), {}

    def step(self, actions):
        self.k += 1
        return self._obs(), {a: 1.0 for a in actions}, {"__all__": self.k >= 5}, {"__all__": False}, {}


@pytest.mark.parametrize("mode", ["skip", "raise"])
def test_multi_agent_worker_nonfinite(mode):
    w = tv.RolloutWorker(lambda cfg: NaNMA(), {"p": ZeroAct}, policy_mapping_fn=lambda a, *x, **k: "p",
                         num_envs=2, rollout_fragment_length=4,
                         observation_filter=functools.partial(MeanStdFilter, nonfinite=mode))
    f = w.filters["p"]
    if mode == "raise":
        with pytest.raises(NonFiniteObservationError, match=r"column 'obs': env 0, agent 'a1' returned a non-finite"):
            w.sample()
        return
    w.sample()
    # per env: resets and steps 1..4 of both agents, 10 observations, one of them (a1 at step 2) skipped
    assert f.num_nonfinite == 2 and f.running_stats.n == 2 * 10 - 2
    assert np.isfinite(f.running_stats.mean).all()


# -- WorkerSet: counts in the metrics, the driver, and replaced workers ---------------------------------------------

_COUNTER = iter(range(10**6))


def nan_env(cfg):
    return NaNEnv(next(_COUNTER), bad=(2,))


def workers(**kw):
    return tv.WorkerSet(nan_env, ZeroAct, num_workers=2, rollout_fragment_length=5,
                        observation_filter="MeanStdFilter", **kw)


def test_worker_set_counts_nonfinite_in_metrics_and_the_driver():
    with workers() as ws:
        ws.sample()  # each worker: its reset and 5 steps, k = 2 holds a NaN
        assert ws.get_metrics()["num_nonfinite_obs_skipped"] == 2
        assert ws.get_metrics()["num_nonfinite_obs_skipped"] == 0  # since the last call
        driver = ws.sync_filters()["default_policy"]
        assert driver.num_nonfinite == 2 and driver.running_stats.n == 2 * 5
        assert np.isfinite(driver.running_stats.mean).all() and np.isfinite(driver.running_stats.std).all()
        ws.sample()  # k = 6 (the episode's end), reset, k = 1..3: k = 2 again
        driver = ws.sync_filters()["default_policy"]
        assert driver.num_nonfinite == 4 and driver.running_stats.n == 2 * 5 + 2 * 5
        for fs in ws._run("get_filters", False):
            assert fs["default_policy"].num_nonfinite == 4 and fs["default_policy"].buffer_num_nonfinite == 0
        assert ws.get_metrics()["num_nonfinite_obs_skipped"] == 2  # each worker's own, never the synced total


def same_stats(a, b):
    assert a.n == b.n
    np.testing.assert_array_equal(a.mean_array, b.mean_array)
    np.testing.assert_array_equal(a.std_array, b.std_array)


def kill(pid):
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not pid_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_replaced_worker_gets_the_driver_filters():
    with workers(recreate_failed_workers=True) as ws:
        ws.sample()
        ws.sync_filters()
        ws.sample()  # the workers' buffers since the sync: not the driver's yet
        driver = ws.filters["default_policy"].copy()
        assert driver.running_stats.n == 10 and driver.num_nonfinite == 2
        p1, p2 = ws.worker_pids()
        kill(p2)
        each = ws.sample_each()  # worker 2 died: replaced, with the last weights and the driver's filters
        assert each[1] is None and ws.num_worker_restarts == 1
        f1, f2 = (fs["default_policy"] for fs in ws._run("get_filters", False))
        same_stats(f2.running_stats, driver.running_stats)  # as the last sync_filters left the driver's
        assert f2.num_nonfinite == driver.num_nonfinite == 2
        assert f2.buffer.n == 0 and f2.buffer_num_nonfinite == 0
        assert f1.running_stats.n == 10 + 2 * 5  # worker 1 kept its own since the sync (two samples)
        driver = ws.sync_filters()["default_policy"]  # the lost worker's unsynced buffer is gone with it
        assert driver.running_stats.n == 10 + 10 and driver.num_nonfinite == 2 + 2


def test_a_worker_replaced_while_sampling_asynchronously_gets_the_driver_filters():
    with workers(recreate_failed_workers=True) as ws:
        ws.sample()
        driver = ws.sync_filters()["default_policy"].copy()
        ws.sample_async(timeout=60)
        p1, p2 = ws.worker_pids()  # (waits for the samples in flight: none is lost)
        kill(p1)
        deadline = time.monotonic() + 60
        while ws.num_worker_restarts == 0 and time.monotonic() < deadline:
            ws.sample_async(timeout=60)
        assert ws.num_worker_restarts == 1
        f1 = ws._run("get_filters", False)[0]["default_policy"]  # it may have sampled since: its buffer
        want = driver.running_stats.copy()
        want.update(f1.buffer)
        assert f1.running_stats.n == want.n
        np.testing.assert_allclose(f1.running_stats.mean, want.mean, rtol=1e-6)
        np.testing.assert_allclose(f1.running_stats.std, want.std, rtol=1e-5)
        assert f1.num_nonfinite == driver.num_nonfinite + f1.buffer_num_nonfinite


def test_without_a_sync_a_replacement_starts_as_every_worker_did():
    with workers(recreate_failed_workers=True) as ws:
        ws.sample()
        kill(ws.worker_pids()[0])
        ws.sample()
        assert ws.filters == {}
        f1 = ws._run("get_filters", False)[0]["default_policy"]
        assert f1.running_stats.n == 0 and f1.num_nonfinite == 0
