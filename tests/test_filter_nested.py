"""MeanStdFilter on Dict / Tuple observation spaces (RLlib's nested MeanStdFilter): one running mean / std per
Box leaf, other leaves unchanged; against per-leaf numpy over everything seen; in single- and multi-agent
workers and synced across the workers of a WorkerSet (process backend, and Ray when installed)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.rollout.filter import MeanStdFilter, filter_shape
from trajview.views.nest import Nest


def ref_filter(rows):
    """RLlib's MeanStdFilter output of each row from numpy over every row up to it (see
    test_batch_utils_filters.ref_filter): the unbiased std (0 before the second row), 1e-6 added, clip 10."""
    out = []
    for j in range(len(rows)):
        seen = np.asarray(rows[: j + 1], np.float64)
        mean = seen.mean(axis=0)
        std = np.sqrt(seen.var(axis=0, ddof=1).astype(np.float32)) if j else np.zeros(mean.shape, np.float32)
        out.append(np.clip((rows[j] - mean) / (std + 1e-6), -10, 10))
    return np.array(out)


# -- random nested spaces ----------------------------------------------------------------------------------------

def box(shape, dtype=np.float64):
    return gym.spaces.Box(-100, 100, shape, dtype)


leaf_spaces = st.one_of(
    st.lists(st.integers(1, 3), min_size=0, max_size=2).map(lambda s: box(tuple(s))),
    st.sampled_from([gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]), gym.spaces.MultiBinary(3),
                     box((2,), np.float32)]),
)
spaces = st.recursive(
    leaf_spaces,
    lambda kids: st.one_of(
        st.dictionaries(st.sampled_from(["a", "b", "c", "pos", "vel"]), kids, min_size=1, max_size=3).map(gym.spaces.Dict),
        st.lists(kids, min_size=1, max_size=3).map(lambda xs: gym.spaces.Tuple(tuple(xs))),
    ),
    max_leaves=6,
).filter(lambda s: isinstance(s, (gym.spaces.Dict, gym.spaces.Tuple)))


def is_box(space):
    return isinstance(space, gym.spaces.Box)


@settings(max_examples=60, deadline=None)
@given(spaces, st.integers(1, 12), st.integers(0, 2**31 - 1), st.integers(0, 12))
def test_nested_filter_matches_per_leaf_numpy(space, n, seed, cut):
    space.seed(seed)
    stream = [space.sample() for _ in range(n)]
    nest = Nest.from_space(space)
    shape = filter_shape(space)
    if not any(is_box(leaf.space) for leaf in nest.leaves):
        assert shape is None
        return
    f = MeanStdFilter(shape)
    outs = [f(x) for x in stream]
    per_leaf_in = [[nest.leaf_values(x, "x")[k] for x in stream] for k in range(len(nest.leaves))]
    per_leaf_out = [[nest.leaf_values(y, "y")[k] for y in outs] for k in range(len(nest.leaves))]
    stats = nest.leaf_values(f.running_stats, "stats")
    for leaf, xs, ys, rs in zip(nest.leaves, per_leaf_in, per_leaf_out, stats):
        if is_box(leaf.space):
            want = ref_filter(np.array(xs, np.float64))
            got = np.array(ys)
            assert got.dtype == leaf.space.dtype
            np.testing.assert_allclose(got, want.astype(leaf.space.dtype), rtol=1e-4, atol=1e-4)
            assert rs.n == n
            np.testing.assert_allclose(rs.mean, np.mean(np.array(xs, np.float64), axis=0), rtol=1e-7, atol=1e-7)
        else:  # passed through unchanged (the same object)
            assert rs is None
            for x, y in zip(xs, ys):
                assert y is x
    # RLlib's FilterManager over two workers that each saw part of the stream: the driver's stats = all of it.
    cut = min(cut, n)
    w1, w2, driver = MeanStdFilter(shape), MeanStdFilter(shape), MeanStdFilter(shape)
    for x in stream[:cut]:
        w1(x)
    for x in stream[cut:]:
        w2(x)
    for w in (w1, w2):
        copy = pickle.loads(pickle.dumps(w.copy()))
        w.clear_buffer()
        driver.apply_changes(copy, with_buffer=False)
    for w in (w1, w2):
        w.sync(driver.as_serializable())
    for k, leaf in enumerate(nest.leaves):
        if not is_box(leaf.space):
            continue
        xs = np.array(per_leaf_in[k], np.float64)
        for flt in (driver, w1, w2):
            rs = nest.leaf_values(flt.running_stats, "stats")[k]
            assert rs.n == n
            np.testing.assert_allclose(rs.mean, xs.mean(axis=0), rtol=1e-6, atol=1e-6)
            if n > 1:
                np.testing.assert_allclose(rs.std, xs.std(axis=0, ddof=1), rtol=1e-4, atol=1e-4)
        for w in (w1, w2):
            assert nest.leaf_values(w.buffer, "buffer")[k].n == 0


def test_filter_shape_of_nested_spaces():
    space = gym.spaces.Dict(pos=box((3,)), inner=gym.spaces.Tuple((box((2, 2)), gym.spaces.Discrete(4))),
                            mask=gym.spaces.MultiBinary(2))
    assert filter_shape(space) == {"pos": (3,), "inner": ((2, 2), None), "mask": None}
    assert filter_shape(box((5,))) == (5,)
    assert filter_shape(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(2)))) is None
    f = MeanStdFilter(filter_shape(space))
    assert f.shape == {"pos": (3,), "inner": ((2, 2), None), "mask": None}
    assert f.running_stats["inner"][1] is None and f.running_stats["pos"].shape == (3,)
    # RLlib passes leaf shapes as int arrays
    g = MeanStdFilter({"pos": np.array([3]), "inner": (np.array([2, 2]), None), "mask": None})
    assert g.shape == f.shape
    with pytest.raises(ValueError, match="structure"):
        f({"pos": np.zeros(3)})
    with pytest.raises(ValueError, match=r"\['pos'\]"):
        f({"pos": np.zeros(4), "inner": (np.zeros((2, 2)), 1), "mask": np.zeros(2, np.int8)})
    with pytest.raises(ValueError, match="shapes differ"):
        f.sync(MeanStdFilter((3,)))


# -- workers -----------------------------------------------------------------------------------------------------

NESTED = gym.spaces.Dict(
    pos=gym.spaces.Box(-1e3, 1e3, (3,), np.float32),
    more=gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.Dict(v=gym.spaces.Box(-1e3, 1e3, (2,), np.float64)))),
)


def raw_obs(seed, k):
    """The k-th observation of an episode seeded ``seed``: deterministic, different per seed and step."""
    r = np.random.default_rng([seed, k])
    return {"pos": (r.normal(size=3) * 10 + seed).astype(np.float32),
            "more": (int(k % 5), {"v": r.normal(size=2) * 3 - k})}


class NestedEnv(gym.Env):
    observation_space = NESTED
    action_space = gym.spaces.Discrete(2)

    def __init__(self, cfg=None, length=7):
        self.length = length
        self.seed_ = 0
        self.log = []

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.seed_ = seed
        else:
            self.seed_ += 1000
        self.k = 0
        self.log.append(raw_obs(self.seed_, 0))
        return self.log[-1], {}

    def step(self, action):
        self.k += 1
        self.log.append(raw_obs(self.seed_, self.k))
        return self.log[-1], 1.0, self.k >= self.length, False, {}


class Zero(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["obs"]["pos"]), np.int64), [], {}


def leaf_rows(log):
    return (np.array([o["pos"] for o in log], np.float64), np.array([o["more"][1]["v"] for o in log]),
            np.array([o["more"][0] for o in log]))


def test_single_agent_worker_filters_nested_observations():
    envs = []

    def make(cfg):
        envs.append(NestedEnv())
        return envs[-1]

    w = tv.RolloutWorker(make, Zero, rollout_fragment_length=10, seed=3, observation_filter="MeanStdFilter")
    b = w.sample()
    pos, v, disc = leaf_rows(envs[0].log)  # 12 observations: 8 of the first episode (7 steps), 4 of the second
    assert len(pos) == 12
    assert b["obs"]["pos"].dtype == np.float32 and b["obs"]["more"][1]["v"].dtype == np.float64
    # each row filtered with the stats of every observation up to it (the last obs before the reset's)
    fpos, fv = ref_filter(pos), ref_filter(v)
    stored = [j for j in range(12) if j != 7]  # obs rows: every observation but the first episode's last
    np.testing.assert_allclose(b["obs"]["pos"], fpos[stored[:10]].astype(np.float32), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b["obs"]["more"][1]["v"], fv[stored[:10]], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(b["obs"]["more"][0], disc[stored[:10]])  # Discrete leaf unchanged
    np.testing.assert_allclose(b["new_obs"]["pos"][:7], fpos[1:8].astype(np.float32), rtol=1e-5, atol=1e-5)
    f = w.filters["default_policy"]
    assert f.running_stats["pos"].n == 12 and f.buffer["more"][1]["v"].n == 12
    assert f.running_stats["more"][0] is None
    np.testing.assert_allclose(f.running_stats["more"][1]["v"].mean, v.mean(axis=0))


def test_single_agent_vector_env_filters_each_leaf_in_env_order():
    envs = []

    def make(cfg):
        envs.append(NestedEnv(length=4))
        return envs[-1]

    w = tv.RolloutWorker(make, Zero, num_envs=3, rollout_fragment_length=6, seed=0, observation_filter="MeanStdFilter")
    w.sample()
    f = w.filters["default_policy"]
    pos = np.concatenate([leaf_rows(e.log)[0] for e in envs])
    v = np.concatenate([leaf_rows(e.log)[1] for e in envs])
    assert f.running_stats["pos"].n == len(pos) == 3 * (6 + 1 + 1)  # 6 steps, the first reset, one reset each
    np.testing.assert_allclose(f.running_stats["pos"].mean, pos.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(f.running_stats["more"][1]["v"].std, v.std(axis=0, ddof=1), rtol=1e-5)


class NestedMA(tv.envs.MultiAgentEnv):
    """Two agents, both observed every step, NESTED observations of agent a: raw_obs(100 * a + seed, k)."""

    def __init__(self, cfg=None, length=5):
        self.possible_agents = ["a0", "a1"]
        self.agents = []
        self.observation_spaces = {a: NESTED for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self.length = length
        self.seed_ = 0
        self.log = []

    def _obs(self):
        obs = {a: raw_obs(100 * j + self.seed_, self.k) for j, a in enumerate(self.possible_agents)}
        self.log.append(obs)
        return obs

    def reset(self, seed=None, options=None):
        self.seed_ = seed if seed is not None else self.seed_ + 1000
        self.k = 0
        return self._obs(), {}

    def step(self, actions):
        self.k += 1
        done = self.k >= self.length
        return self._obs(), {a: 1.0 for a in actions}, {"__all__": done}, {"__all__": False}, {}


def test_multi_agent_worker_filters_nested_observations():
    envs = []

    def make(cfg):
        envs.append(NestedMA())
        return envs[-1]

    w = tv.RolloutWorker(make, {"p": Zero}, policy_mapping_fn=lambda a, *x, **k: "p", rollout_fragment_length=8,
                         observation_filter="MeanStdFilter")
    b = w.sample()
    pb = b.policy_batches["p"]
    f = w.filters["p"]
    seen = [o for step in envs[0].log for o in step.values()]
    pos, v, disc = leaf_rows(seen)
    assert f.running_stats["pos"].n == len(seen)
    np.testing.assert_allclose(f.running_stats["pos"].mean, pos.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(f.running_stats["more"][1]["v"].mean, v.mean(axis=0), rtol=1e-6)
    assert np.abs(pb["obs"]["pos"]).max() <= 10 and pb["obs"]["pos"].dtype == np.float32
    assert set(pb["obs"]["more"][0].tolist()) <= set(disc.tolist())  # the Discrete leaf: raw indices
    # The first step: both agents' reset observations, filtered in env order (a0, then a1).
    f0 = ref_filter(pos[:2])
    np.testing.assert_allclose(pb["obs"]["pos"][pb["t"] == 0][:2], f0.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_multi_agent_policy_without_a_box_part_gets_no_filter():
    class Mixed(NestedMA):
        def __init__(self, cfg=None):
            super().__init__(cfg)
            self.observation_spaces = {"a0": NESTED, "a1": gym.spaces.Discrete(5)}

        def _obs(self):
            return {"a0": raw_obs(self.seed_, self.k), "a1": self.k % 5}

    class ZeroD(tv.Policy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            return np.zeros(len(d["obs"]), np.int64), [], {}

    w = tv.RolloutWorker(Mixed, {"p0": Zero, "p1": ZeroD}, policy_mapping_fn=lambda a, *x, **k: "p" + a[1:],
                         rollout_fragment_length=4, observation_filter="MeanStdFilter")
    b = w.sample()
    assert isinstance(w.filters["p0"], MeanStdFilter) and isinstance(w.filters["p1"], tv.rollout.NoFilter)
    np.testing.assert_array_equal(b.policy_batches["p1"]["obs"], np.arange(4) % 5)


def test_filter_refused_when_no_policy_observes_a_box():
    space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(2)))

    class E(NestedEnv):
        observation_space = space

    with pytest.raises(ValueError, match="Box part"):
        tv.RolloutWorker(E, Zero, observation_filter="MeanStdFilter")


def at(stats, path):
    for p in path:
        stats = stats[p]
    return stats


def check_synced(ws, prior):
    """sync_filters(): the driver's stats (``prior``: before, None at first) take in what each worker saw since
    the last sync (its buffer), every worker's filter becomes the driver's, buffers cleared."""
    before = ws._run("get_filters", False)
    local = ws.sync_filters()["default_policy"]
    after = ws._run("get_filters", False)
    for path in (("pos",), ("more", 1, "v")):
        parts = [at(fs["default_policy"].buffer, path) for fs in before]
        if prior is not None:
            parts.append(at(prior.running_stats, path))
        n = sum(b.n for b in parts)
        assert at(local.running_stats, path).n == n
        np.testing.assert_allclose(at(local.running_stats, path).mean, sum(b.n * b.mean for b in parts) / n,
                                   rtol=1e-6)
        for fs in after:
            f = fs["default_policy"]
            assert at(f.running_stats, path).n == n and at(f.buffer, path).n == 0
            np.testing.assert_allclose(at(f.running_stats, path).mean, at(local.running_stats, path).mean)
            np.testing.assert_allclose(at(f.running_stats, path).std, at(local.running_stats, path).std)
    assert local.running_stats["more"][0] is None
    return local.copy()


def run_worker_set(**kw):
    with tv.WorkerSet(NestedEnv, Zero, num_workers=2, rollout_fragment_length=10, seed=5,
                      observation_filter="MeanStdFilter", **kw) as ws:
        ws.sample()
        local = check_synced(ws, None)
        assert local.running_stats["pos"].n == 2 * 12  # each worker: reset, 7 steps, reset, 3 steps
        ws.sample()
        local = check_synced(ws, local)
        assert local.running_stats["pos"].n == 24 + 2 * 11  # only what each saw since: 10 steps and a reset


def test_worker_set_syncs_nested_filters():
    run_worker_set()


@pytest.mark.ray
def test_ray_worker_set_syncs_nested_filters():
    ray = pytest.importorskip("ray")
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never an existing cluster
        run_worker_set(backend="ray")
    finally:
        ray.shutdown()  # also after a failed start: nothing half-started outlives the test
