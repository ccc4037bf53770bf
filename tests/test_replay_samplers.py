"""Samplers of `tv.ReplayBuffer` (RandomSampler, prioritized, without replacement) and `tv.NStep`, against the
pure-Python reference (`trajview.testing.replay_reference`): distributions (chi-square over fixed-seed draws),
priorities and importance weights, epochs, views across the ring's wrap-around, the GIL."""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv
from gil_check import assert_releases_gil
from trajview.testing.replay_reference import ReferencePriorities, ReferenceReplay, reference_nstep

VR = tv.ViewRequirement
VIEWS = {"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-3:0"), "prev_actions": VR("actions", shift=-1)}
COLUMNS = ["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"]


class Envs:
    """Fake envs whose episodes have random lengths; each `fragment` is one batch holding a fragment of every
    env's running episode (so trajectories are cut and continue in the next add), obs counting up."""

    def __init__(self, num_envs: int, seed: int, max_len: int = 9, trunc_every: int = 3) -> None:
        self.rng = np.random.default_rng(seed)
        self.max_len = max_len
        self.trunc_every = trunc_every
        self.next_eps = 0
        self.counter = 0
        self.envs = [self._new() for _ in range(num_envs)]

    def _new(self) -> dict:
        self.next_eps += 1
        return dict(eps=self.next_eps, t=0, length=int(self.rng.integers(1, self.max_len + 1)))

    def fragment(self, n: int) -> tv.SampleBatch:
        cols: dict[str, list] = {k: [] for k in ["obs", "new_obs", "actions", "rewards", "terminateds", "truncateds",
                                                 "eps_id", "t"]}
        for i, e in enumerate(self.envs):
            for _ in range(n):
                self.counter += 1
                end = e["t"] == e["length"] - 1
                trunc = end and e["eps"] % self.trunc_every == 0
                cols["obs"].append([self.counter, -self.counter])
                cols["new_obs"].append([self.counter + 0.5, -self.counter - 0.5])
                cols["actions"].append(self.counter % 5)
                cols["rewards"].append(float(self.rng.normal()))
                cols["terminateds"].append(end and not trunc)
                cols["truncateds"].append(trunc)
                cols["eps_id"].append(e["eps"])
                cols["t"].append(e["t"])
                e["t"] += 1
                if end:
                    self.envs[i] = e = self._new()
        return tv.SampleBatch({
            "obs": np.array(cols["obs"], np.float32), "new_obs": np.array(cols["new_obs"], np.float32),
            "actions": np.array(cols["actions"], np.int64), "rewards": np.array(cols["rewards"], np.float32),
            "terminateds": np.array(cols["terminateds"]), "truncateds": np.array(cols["truncateds"]),
            "eps_id": np.array(cols["eps_id"], np.int64), "t": np.array(cols["t"], np.int64),
        })


def filled(capacity: int, sampler: tv.replay.Sampler, adds: int = 12, seed: int = 0, frag: int = 5, num_envs: int = 3,
           **kw):
    rb = tv.ReplayBuffer(capacity, sampler=sampler, columns=COLUMNS, **kw)
    ref = ReferenceReplay(capacity, COLUMNS)
    envs = Envs(num_envs, seed)
    for _ in range(adds):
        b = envs.fragment(frag)
        rb.add(b)
        ref.add(b)
    return rb, ref, envs


def chi_square(counts: dict, probs: dict, draws: int) -> tuple[float, int]:
    assert set(counts) <= set(probs), f"sampled outside the support: {set(counts) - set(probs)}"
    stat = sum((counts.get(k, 0) - draws * p) ** 2 / (draws * p) for k, p in probs.items())
    return stat, len(probs) - 1


def assert_fits(stat: float, df: int) -> None:
    # Wilson-Hilferty: the 99.99th percentile of chi2(df) is below df * (1 + 3.8 * sqrt(2 / (9 df)))^3 (+ slack).
    bound = df * (1 - 2 / (9 * df) + 3.8 * np.sqrt(2 / (9 * df))) ** 3 + 5
    assert stat < bound, f"chi-square {stat:.1f} with {df} dof exceeds {bound:.1f}"


def check_against_reference(rb, ref, batch, info, views, slice_len=1, pad=False, truncated_key=None):
    picks = [tuple(int(x) for x in p) for p in info["slices"]]
    expected, index = ref.expected(picks, slice_len, views, pad_output=pad, truncated_key=truncated_key)
    np.testing.assert_array_equal(info["index"], index)
    for k, v in expected.items():
        np.testing.assert_array_equal(np.asarray(batch[k]), v, err_msg=k)


# -- RandomSampler ---------------------------------------------------------------------------------------------------


def test_random_sampler_is_the_default_and_uniform_over_transitions():
    rb = tv.ReplayBuffer(64)
    assert isinstance(rb.sampler, tv.RandomSampler)
    # Two trajectories, of 2 and 6 steps.
    obs = np.arange(8, dtype=np.float32)[:, None]
    rb.add(tv.SampleBatch({"obs": obs, "eps_id": np.array([1, 1, 2, 2, 2, 2, 2, 2]),
                           "terminateds": np.array([0, 1, 0, 0, 0, 0, 0, 1], bool)}))
    draws = 8000
    b = rb.sample(draws)
    counts = dict(zip(*np.unique(b["obs"][:, 0], return_counts=True)))
    stat, df = chi_square({int(k): int(v) for k, v in counts.items()}, {i: 1 / 8 for i in range(8)}, draws)
    assert_fits(stat, df)
    # SliceSampler(slice_len=1), the old default, is uniform per trajectory: steps of the short one twice as often.
    rb.sampler = tv.SliceSampler(slice_len=1, seed=1)
    b = rb.sample(draws)
    counts = dict(zip(*np.unique(b["obs"][:, 0], return_counts=True)))
    probs = {0: 1 / 4, 1: 1 / 4, **{i: 1 / 12 for i in range(2, 8)}}
    stat, df = chi_square({int(k): int(v) for k, v in counts.items()}, probs, draws)
    assert_fits(stat, df)


def test_random_sampler_views_match_the_reference_across_the_wrap_around():
    rb, ref, _ = filled(37, tv.RandomSampler(seed=3), adds=15)
    assert rb.rows_written() > 3 * 37  # wrapped several times
    seen = set()
    for _ in range(10):
        batch, info = rb.sample(64, views=VIEWS, return_info=True)
        check_against_reference(rb, ref, batch, info, VIEWS)
        assert (info["slices"][:, 2] == 1).all()
        seen.update(map(tuple, info["slices"][:, :2].tolist()))
    starts = {(u, j) for u, j, _ in ref.start_steps(1, False)}
    assert seen <= starts and len(seen) > len(starts) // 2


def test_random_sampler_distribution_after_overwrites():
    rb, ref, _ = filled(29, tv.RandomSampler(seed=11), adds=9)
    support = {g: 1 / len(ref.step_rows()) for g in ref.step_rows()}
    draws = 20 * len(support) + 2000
    _, info = rb.sample(draws, return_info=True)
    counts = dict(zip(*np.unique(info["index"], return_counts=True)))
    stat, df = chi_square({int(k): int(v) for k, v in counts.items()}, support, draws)
    assert_fits(stat, df)


# -- prioritized -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha,beta", [(0.6, 0.4), (1.0, 1.0)])
def test_prioritized_sampler_against_numpy_reference(alpha, beta):
    rb, ref, envs = filled(41, tv.PrioritizedSampler(41, alpha, beta, seed=5), adds=4)
    pri = ReferencePriorities(ref, alpha, beta)
    pri.after_add()
    rng = np.random.default_rng(0)
    # Update the priorities of a sample, add more (overwriting some rows: their priority is reset), again.
    for _ in range(3):
        _, info = rb.sample(16, return_info=True)
        p = rng.uniform(0, 5, len(info["index"]))
        rb.update_priority(info["index"], p)
        # The same index twice: the last one wins, in both.
        pri.update(info["index"].tolist(), p.tolist())
        b = envs.fragment(3)
        rb.add(b)
        ref.add(b)
        pri.after_add()
    assert rb.max_priority == pytest.approx(pri.max_priority)
    rows = np.array(ref.step_rows())
    np.testing.assert_allclose(rb.priorities(rows), [pri.leaf[g] for g in rows], rtol=1e-12)
    probs = pri.probabilities()
    draws = 30000
    batch, info = rb.sample(draws, views=VIEWS, return_info=True)
    counts = dict(zip(*np.unique(info["index"], return_counts=True)))
    stat, df = chi_square({int(k): int(v) for k, v in counts.items()}, probs, draws)
    assert_fits(stat, df)
    np.testing.assert_allclose(info["_weight"], pri.weights(info["index"]), rtol=1e-12)
    check_against_reference(rb, ref, batch[:500], {"index": info["index"][:500], "slices": info["slices"][:500]},
                            VIEWS)


def test_prioritized_slice_sampler_starts_and_weights():
    s = tv.PrioritizedSliceSampler(None, 0.7, 0.5, slice_len=3, seed=2)
    assert s.strict_length  # TorchRL's default
    rb, ref, _ = filled(60, s, adds=6)
    pri = ReferencePriorities(ref, 0.7, 0.5)
    pri.after_add()
    rows = np.array(ref.step_rows())
    p = np.linspace(0.1, 3.0, len(rows))
    rb.update_priority(rows, p)
    pri.update(rows.tolist(), p.tolist())
    probs = pri.probabilities(3, strict=True)
    draws = 9000
    batch, info = rb.sample(3 * draws, views=VIEWS, return_info=True)
    assert len(info["slices"]) == draws and (info["slices"][:, 2] == 3).all()
    first = info["index"][::3]
    counts = dict(zip(*np.unique(first, return_counts=True)))
    stat, df = chi_square({int(k): int(v) for k, v in counts.items()}, probs, draws)
    assert_fits(stat, df)
    np.testing.assert_allclose(info["_weight"], np.repeat(pri.weights(first), 3), rtol=1e-12)
    # Slices are slices: marked at their ends, never across a trajectory.
    n = 300
    check_against_reference(rb, ref, batch[: 3 * n], {"index": info["index"][: 3 * n], "slices": info["slices"][:n]},
                            VIEWS, slice_len=3, truncated_key="truncateds")
    # Not strict: any step starts, slices cut at the trajectory's end; weights repeat per real row.
    rb.sampler = tv.PrioritizedSliceSampler(None, 0.7, 0.5, slice_len=3, strict_length=False, pad_output=True, seed=1)
    batch, info = rb.sample(300, return_info=True)
    assert len(info["_weight"]) == 300 and batch.count == 300
    assert set(info["index"][::3].tolist()) <= set(pri.probabilities(3, strict=False))


@pytest.mark.timing  # (another thread must run within the call: gil_check)
def test_prioritized_errors_and_gil():
    rb = tv.ReplayBuffer(8)
    rb.add(tv.SampleBatch({"obs": np.zeros((3, 1), np.float32), "eps_id": np.ones(3, np.int64)}))
    with pytest.raises(ValueError, match="not prioritized"):
        rb.update_priority([0], 1.0)
    with pytest.raises(ValueError, match="max_capacity=5 differs"):
        tv.ReplayBuffer(8, sampler=tv.PrioritizedSampler(5, 0.5, 0.5))
    with pytest.raises(ValueError, match="alpha"):
        tv.PrioritizedSampler(None, -1, 0.5)
    rb = tv.ReplayBuffer(400_000, sampler=tv.PrioritizedSampler(None, 0.6, 0.4))
    rb.add(tv.SampleBatch({"obs": np.zeros((300_000, 1), np.float32), "eps_id": np.arange(300_000) // 100,
                           "terminateds": np.arange(300_000) % 100 == 99}))
    with pytest.raises(ValueError, match="finite"):
        rb.update_priority([0, 1], [1.0, np.nan])
    idx = np.arange(300_000)
    assert_releases_gil(lambda: rb.update_priority(idx, np.random.default_rng(0).uniform(size=len(idx))),
                        "update_priority")
    assert_releases_gil(lambda: rb.sample(200_000), "prioritized sample")


# -- without replacement ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_without_replacement_epochs_cover_every_step_once(shuffle):
    rb, ref, _ = filled(50, tv.SamplerWithoutReplacement(shuffle=shuffle, seed=4), adds=8)
    rows = ref.step_rows()
    got = []
    while True:
        b, info = rb.sample(7, views=VIEWS, return_info=True)
        check_against_reference(rb, ref, b, info, VIEWS)
        got.extend(info["index"].tolist())
        if rb.sampler.ran_out:
            break
    assert sorted(got) == sorted(rows) and len(got) == len(rows)
    assert (got == rows) != shuffle  # in storage order without shuffle
    # The next sample starts a new epoch.
    _, info = rb.sample(7, return_info=True)
    assert not rb.sampler.ran_out and len(info["index"]) == 7


def test_sampler_without_replacement_drop_last():
    rb, ref, _ = filled(50, tv.SamplerWithoutReplacement(drop_last=True, seed=4), adds=8)
    n = len(ref.step_rows())
    sizes = []
    for _ in range(n // 7):
        sizes.append(rb.sample(7).count)
    assert sizes == [7] * (n // 7) and rb.sampler.ran_out
    with pytest.raises(ValueError, match="drop_last"):
        rb.sample(n + 1)


def test_slice_sampler_without_replacement_visits_each_trajectory_once():
    s = tv.SliceSamplerWithoutReplacement(slice_len=2, seed=6)
    rb, ref, _ = filled(80, s, adds=8)
    uids = [tr.uid for tr in ref.trajs]
    got = []
    while True:
        b, info = rb.sample(2 * 3, views=VIEWS, return_info=True)
        for uid, start, length in info["slices"].tolist():
            assert ref.valid_slice(uid, start, length, 2, False)
        check_against_reference(rb, ref, b, info, VIEWS, slice_len=2, truncated_key="truncateds")
        got.extend(info["slices"][:, 0].tolist())
        if s.ran_out:
            break
    assert sorted(got) == sorted(uids)


# -- n-step ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,gamma", [(1, 0.9), (3, 0.99), (5, 0.5)])
def test_nstep_matches_the_reference(n, gamma):
    rb, ref, _ = filled(70, tv.SliceSampler(slice_len=1), adds=10)
    picks = [(tr.uid, j, 1) for tr in ref.trajs for j in range(len(tr.rows))]
    b, _ = rb._gather(picks, 1, views={"nstep": tv.NStep(n, gamma), **VIEWS})
    assert "nstep.rewards" in b and b["nstep"]["new_obs"].shape == (len(picks), 2)
    for i, (uid, j, _) in enumerate(picks):
        want = reference_nstep(ref, uid, j, n, gamma)
        assert b["nstep.rewards"][i] == pytest.approx(want["rewards"], rel=1e-5, abs=1e-6)
        np.testing.assert_array_equal(b["nstep.new_obs"][i], want["new_obs"])
        assert b["nstep.terminateds"][i] == want["terminateds"]
        assert b["nstep.truncateds"][i] == want["truncateds"]
        assert b["nstep.discount"][i] == pytest.approx(want["discount"])
        assert b["nstep.steps"][i] == want["steps"]
    # Nothing extra is stored: the columns are the stored ones.
    assert set(rb.columns) == set(COLUMNS)


def test_nstep_as_a_buffer_view_with_a_sampler_and_nested_obs():
    rb = tv.ReplayBuffer(64, views={"nstep": tv.NStep(2, 0.5)})
    obs = {"a": np.arange(6, dtype=np.float32)[:, None], "b": np.arange(6, dtype=np.int64) * 10}
    new = {"a": obs["a"] + 1, "b": obs["b"] + 10}
    rb.add(tv.SampleBatch({"obs": obs, "new_obs": new, "rewards": np.ones(6, np.float32), "eps_id": np.zeros(6, int),
                           "t": np.arange(6), "terminateds": np.arange(6) == 5}))
    b = rb.sample(32)
    j = b["obs"]["b"] // 10
    np.testing.assert_array_equal(b["nstep"]["new_obs"]["b"], np.minimum(j + 2, 6) * 10)
    np.testing.assert_array_equal(b["nstep"]["new_obs"]["a"][:, 0], np.minimum(j + 2, 6))
    np.testing.assert_allclose(b["nstep.rewards"], np.where(j == 5, 1.0, 1.5))
    np.testing.assert_array_equal(b["nstep.terminateds"], j >= 4)
    # views= adds to the default new_obs view (obs@+1; the final observation after the last step).
    np.testing.assert_array_equal(b["new_obs"]["b"], np.minimum(j + 1, 6) * 10)
    with pytest.raises(ValueError, match="new_obs"):
        rb2 = tv.ReplayBuffer(8)
        rb2.add(tv.SampleBatch({"obs": np.zeros((2, 1)), "rewards": np.zeros(2), "eps_id": np.zeros(2, int)}))
        rb2.sample(2, views={"n": tv.NStep(2, 0.9)})


# -- default columns leave out views ---------------------------------------------------------------------------------


def test_worker_views_are_not_stored_by_default():
    """A rollout batch carrying a frame-stack view: the buffer stores each observation once (the stack is a
    view named in batch.view_columns, kept by slicing, concat and pickling) and builds the stack at sample
    time; storing it needs an explicit columns=."""
    import pickle

    import gymnasium as gym

    class Env(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (42, 42), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros((42, 42), np.uint8), {}

        def step(self, action):
            self.t += 1
            return np.full((42, 42), self.t, np.uint8), 1.0, self.t >= 7, False, {}

    class P(tv.Policy):
        def __init__(self, obs_space, act_space, config=None):
            super().__init__(obs_space, act_space, config)
            self.view_requirements["stack"] = tv.ViewRequirement("obs", shift="-3:0")

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            return np.zeros(len(input_dict["stack"]), np.int64), [], {}

        def loss(self, train_batch):  # a learner that reads obs, new_obs and the stack
            return train_batch["obs"], train_batch["new_obs"], train_batch["stack"]

    w = tv.RolloutWorker(lambda cfg: Env(), P, num_envs=2, rollout_fragment_length=10)
    b = w.sample()
    w.stop()
    assert "stack" in b.view_columns and "obs" not in b.view_columns
    b["stack"]  # materialized: still named a view
    for kept in (b[2:9], tv.concat_samples([b[:5], b[5:]]), pickle.loads(pickle.dumps(b)), b.copy()):
        assert "stack" in kept.view_columns
    rb = tv.ReplayBuffer(1000, views={"stack": VR("obs", shift="-3:0")})
    rb.add(b)
    assert "stack" not in rb.columns and "obs" in rb.columns
    row = sum(np.dtype(dt).itemsize * int(np.prod(shape)) for dt, shape in rb.columns.values())
    assert row < 42 * 42 + 100  # one frame per step (plus small columns), not four
    s = rb.sample(8)
    assert s["stack"].shape == (8, 4, 42, 42)
    rb2 = tv.ReplayBuffer(1000, columns=["obs", "stack", "eps_id", "t", "terminateds", "truncateds"])
    rb2.add(b)
    assert "stack" in rb2.columns


# -- persistence -----------------------------------------------------------------------------------------------------


def _same_future(a, b, views=VIEWS, n=5):
    """Both buffers give the same samples (same rows, same RNG state) and take the same adds."""
    for _ in range(n):
        x, xi = a.sample(12, views=views, return_info=True)
        y, yi = b.sample(12, views=views, return_info=True)
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)
        for k in xi:
            np.testing.assert_array_equal(xi[k], yi[k], err_msg=k)


@pytest.mark.parametrize("make", [
    lambda: tv.RandomSampler(seed=1),
    lambda: tv.PrioritizedSliceSampler(None, 0.6, 0.4, slice_len=3, seed=2),
    lambda: tv.SamplerWithoutReplacement(seed=3),
    lambda: tv.SliceSamplerWithoutReplacement(num_slices=4, seed=4),
])
def test_state_dict_dumps_loads_and_pickle_round_trip(make, tmp_path):
    import pickle

    rb, ref, envs = filled(45, make(), adds=9)
    if rb.sampler.prioritized:
        _, info = rb.sample(12, return_info=True)
        rb.update_priority(info["index"], np.arange(len(info["index"])) % 4)
    rb.sample(12)  # the sampler's state is not fresh
    copies = []
    sd = rb.state_dict()
    c = tv.ReplayBuffer(45, sampler=make())
    c.load_state_dict(sd)
    copies.append(c)
    rb.dumps(tmp_path / "d")
    c = tv.ReplayBuffer(45, sampler=make())
    c.loads(tmp_path / "d")
    copies.append(c)
    copies.append(pickle.loads(pickle.dumps(rb)))
    for c in copies:
        assert c.trajectories() == rb.trajectories() and c.rows_written() == rb.rows_written()
        if rb.sampler.prioritized:
            rows = np.array(ref.step_rows())
            np.testing.assert_array_equal(c.priorities(rows), rb.priorities(rows))
            assert c.max_priority == rb.max_priority
    # The same future: samples, then an add that continues open trajectories, then samples.
    b = envs.fragment(4)
    for c in [rb, *copies]:
        c.add(b)
    for c in copies:
        assert c.trajectories() == rb.trajectories()  # the open trajectories were continued alike
        _same_future(c, pickle.loads(pickle.dumps(c)))
    twin = pickle.loads(pickle.dumps(rb))
    _same_future(rb, twin)
    with pytest.raises(ValueError, match="capacity"):
        tv.ReplayBuffer(44, sampler=make()).load_state_dict(sd)


def test_memmap_storage_same_api_and_samples(tmp_path):
    rb, ref, envs = filled(45, tv.RandomSampler(seed=1), adds=9)
    mm = tv.ReplayBuffer(45, sampler=tv.RandomSampler(seed=1), columns=COLUMNS, storage="memmap", path=tmp_path / "mm")
    envs2 = Envs(3, 0)
    for _ in range(9):
        mm.add(envs2.fragment(5))
    assert mm.storage == "memmap" and sorted(p.name for p in (tmp_path / "mm").iterdir()) == [
        ".lock", "columns.json", *(f"ring_{i}.bin" for i in range(len(COLUMNS)))]
    assert mm.trajectories() == rb.trajectories()
    _same_future(rb, mm)
    batch, info = mm.sample(16, views=VIEWS, return_info=True)
    check_against_reference(mm, ref, batch, info, VIEWS)
    # dumps / loads between the two storages.
    mm.dumps(tmp_path / "d")
    back = tv.ReplayBuffer(45, sampler=tv.RandomSampler())
    back.loads(tmp_path / "d")
    _same_future(mm, back)
    with pytest.raises(ValueError, match="path"):
        tv.ReplayBuffer(4, storage="memmap")


def test_without_replacement_skips_what_was_overwritten_mid_epoch():
    rb, ref, envs = filled(30, tv.SamplerWithoutReplacement(seed=1), adds=3)
    rb.sample(4)  # an epoch begins
    for _ in range(6):  # overwrite everything the epoch holds
        rb.add(envs.fragment(5))
    b, info = rb.sample(4, return_info=True)  # no error: the stale rest is dropped, a new epoch begins
    live = set(rb._impl.step_rows().tolist())
    assert b.count > 0 and set(info["index"].tolist()) <= live


# -- the public seam -------------------------------------------------------------------------------------------------


def test_a_sampler_of_your_own_through_draw():
    """`tv.Sampler.draw(store, num_slices, slice_len)` is the seam: a subclass returning given picks is sampled
    like any other (views, marks), and the picking modes are one enum, C++'s."""
    from trajview import _core
    from trajview.replay import samplers

    class EveryFirstStep(tv.Sampler):
        def draw(self, store, num_slices, slice_len):
            uids = store.trajectory_lengths()[:num_slices, 0]
            return self.given([(u, 0, 1) for u in uids], slice_len)

    assert tv.Sampler is tv.replay.Sampler is samplers.Sampler
    assert samplers.SampleMode is _core.SampleMode and tv.PrioritizedSampler.mode == _core.SampleMode.PRIORITIZED
    rb, ref, _ = filled(60, EveryFirstStep(), adds=4)
    batch, info = rb.sample(3, views=VIEWS, return_info=True)
    assert [tuple(p) for p in info["slices"].tolist()] == [(tr.uid, 0, 1) for tr in ref.trajs[:3]]
    check_against_reference(rb, ref, batch, info, VIEWS)
    req = tv.SliceSampler(slice_len=4, seed=1).draw(rb._impl, 2, 4)
    assert (req.mode, req.num_slices, req.slice_len, req.truncated_key, req.done_key) == (
        _core.SampleMode.PER_TRAJECTORY, 2, 4, "truncateds", "dones")


def test_views_add_to_the_default_new_obs_view_and_default_views_false_builds_only_the_given():
    obs = np.arange(5, dtype=np.float32)[:, None]
    batch = tv.SampleBatch({"obs": obs, "new_obs": obs + 1, "actions": np.arange(5), "rewards": np.ones(5),
                            "eps_id": np.zeros(5, int), "t": np.arange(5), "terminateds": np.arange(5) == 4})
    stack = {"stack": tv.ViewRequirement("obs", shift="-1:0")}
    rb = tv.ReplayBuffer(16, views=stack)
    rb.add(batch)
    b = rb.sample(40)
    np.testing.assert_array_equal(b["new_obs"], b["obs"] + 1)  # obs@+1, the final observation after the last step
    np.testing.assert_array_equal(b["stack"][:, 1], b["obs"])
    np.testing.assert_array_equal(b["stack"][:, 0], np.maximum(b["obs"] - 1, 0) * (b["obs"] > 0))
    only = tv.ReplayBuffer(16, views=stack, default_views=False)
    only.add(batch)
    b = only.sample(8)
    assert "stack" in b and "new_obs" not in b
    # A view named as a default one replaces it.
    replaced = tv.ReplayBuffer(16, views={"new_obs": tv.ViewRequirement("obs", shift=-1)})
    replaced.add(batch)
    b = replaced.sample(40)
    np.testing.assert_array_equal(b["new_obs"], np.maximum(b["obs"] - 1, 0) * (b["obs"] > 0))
    with pytest.raises(TypeError, match="default_views must be a bool"):
        tv.ReplayBuffer(16, default_views="no")


def test_a_sample_of_an_nstep_column_computes_it_from_its_windows_alone():
    """``columns`` naming an `NStep`: its returns as in the whole sample (its window views gathered), no other column."""
    n = 12
    batch = {"obs": np.arange(n, dtype=np.float32), "new_obs": np.arange(1, n + 1, dtype=np.float32),
             "actions": np.arange(n), "rewards": np.linspace(0.5, 2.0, n).astype(np.float32),
             "terminateds": np.arange(n) == 7, "truncateds": np.zeros(n, bool), "eps_id": (np.arange(n) > 7).astype(np.int64)}
    rb = tv.ReplayBuffer(64, views={"ret": tv.NStep(3, 0.9)})
    rb.add(batch)
    rb.sampler = tv.RandomSampler(seed=5)
    whole = rb.sample(16)
    rb.sampler = tv.RandomSampler(seed=5)
    some = rb.sample(16, columns=["ret", "actions"])
    ret = sorted(c for c in whole if c.startswith("ret"))
    assert ret and sorted(some) == sorted(ret + ["actions", "is_init"])
    for c in some:
        np.testing.assert_array_equal(some[c], whole[c], err_msg=c)
