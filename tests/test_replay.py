"""`tv.ReplayBuffer` and `tv.SliceSampler`: hand-computed cases, bad input, zero copy, the GIL, threads."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import trajview as tv
from gil_check import assert_releases_gil
from trajview import _core

VR = tv.ViewRequirement


def episode_batch(eps_id, obs, t0=0, end=True, key="eps_id"):
    """One trajectory piece: obs values `obs`, new_obs = obs + 1, actions = 10 * obs."""
    obs = np.asarray(obs, dtype=np.float32)
    n = len(obs)
    term = np.zeros(n, bool)
    term[-1] = end
    return tv.SampleBatch({
        "obs": obs[:, None],
        "new_obs": obs[:, None] + 1,
        "actions": (obs * 10).astype(np.int64),
        "rewards": obs.copy(),
        "terminateds": term,
        "truncateds": np.zeros(n, bool),
        key: np.full(n, eps_id, np.int64),
        "t": np.arange(t0, t0 + n),
    })


def gather(rb, picks, slice_len, **kw):
    return rb._gather(picks, slice_len, **kw)[0]


def test_views_at_sample_time():
    rb = tv.ReplayBuffer(32, sampler=tv.SliceSampler(slice_len=1))  # slices: the slice end is marked
    rb.add(episode_batch(7, [1, 2, 3, 4]))
    assert len(rb) == 4 and rb.num_trajectories() == 1 and rb.rows_written() == 5
    views = {"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-2:0"), "prev_actions": VR("actions", shift=-1),
             "prev_rewards": VR("rewards", shift=-1)}
    b = gather(rb, [(0, 0, 4)], 4, views=views)
    assert b["obs"][:, 0].tolist() == [1, 2, 3, 4]
    assert b["new_obs"][:, 0].tolist() == [2, 3, 4, 5]  # the final observation is kept
    assert b["stack"][:, :, 0].tolist() == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert b["prev_actions"].tolist() == [0, 10, 20, 30]
    assert b["prev_rewards"].tolist() == [0, 1, 2, 3]
    assert b["is_init"].tolist() == [True, False, False, False]
    assert b["truncateds"].tolist() == [False, False, False, True]  # the slice's end (TorchRL's truncated_key)
    b = gather(rb, [(0, 1, 2)], 2, views=views)
    assert b["stack"][:, :, 0].tolist() == [[0, 1, 2], [1, 2, 3]]
    assert b["is_init"].tolist() == [True, False]  # each slice's first step
    assert b["truncateds"].tolist() == [False, True]


def test_the_buffers_own_view_specs_are_made_again_when_what_they_come_from_is_replaced():
    """`sample()` keeps the specs of the buffer's own views between calls; a state loaded with other views (and
    batches without new_obs) samples that state's views and columns, as the buffer it came from does."""
    a = tv.ReplayBuffer(32, views={"stack": VR("obs", shift="-1:0")})
    a.add(episode_batch(1, [1, 2, 3]))
    assert {"stack", "new_obs"} <= set(a.sample(4))  # (the specs kept from here)
    assert {"stack", "new_obs"} <= set(a.sample(4))
    b = tv.ReplayBuffer(32, views={"prev_actions": VR("actions", shift=-1)})
    batch = episode_batch(2, [5, 6])
    del batch["new_obs"]
    b.add(batch)
    a.load_state_dict(b.state_dict())
    got, want = a.sample(4), b.sample(4)
    assert "prev_actions" in got and "stack" not in got and "new_obs" not in got
    assert sorted(got) == sorted(want)
    c = tv.ReplayBuffer(32)
    c.add(episode_batch(3, [7, 8, 9]))
    a.load_state_dict(c.state_dict())
    assert sorted(a.sample(4)) == sorted(c.sample(4)) and "prev_actions" not in a.sample(4)


def test_fragments_join_their_trajectory():
    rb = tv.ReplayBuffer(64)
    # Two envs' fragments per batch, as a rollout worker emits them.
    rb.add(tv.concat_samples([episode_batch(1, [1, 2], end=False), episode_batch(2, [100, 101], end=False)]))
    rb.add(tv.concat_samples([episode_batch(1, [3, 4], t0=2), episode_batch(2, [102], t0=2, end=False)]))
    trajs = rb.trajectories()
    assert [(d["key"], d["steps"], d["open"]) for d in trajs] == [(1, 4, False), (2, 3, True)]
    b = gather(rb, [(0, 0, 4)], 4, views={"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-3:0")})
    assert b["new_obs"][:, 0].tolist() == [2, 3, 4, 5]
    assert b["stack"][3, :, 0].tolist() == [1, 2, 3, 4]
    # t that does not continue starts a new trajectory.
    rb.add(episode_batch(2, [500], t0=9))
    assert [(d["key"], d["steps"]) for d in rb.trajectories()] == [(1, 4), (2, 3), (2, 1)]
    assert rb.trajectories()[2]["starts_episode"] is False


def test_traj_ids_and_end_flag_fallback():
    rb = tv.ReplayBuffer(64)
    rb.add(episode_batch(3, [1, 2], key="traj_ids"))
    assert rb.trajectories()[0]["key"] == 3
    rb = tv.ReplayBuffer(64)
    b = episode_batch(0, [1, 2, 3, 4, 5])
    del b["eps_id"], b["t"]
    b["terminateds"] = np.array([0, 1, 0, 0, 0], bool)  # ends after step 1; the rest stays open
    rb.add(b)
    c = episode_batch(0, [6, 7])
    del c["eps_id"], c["t"]
    rb.add(c)  # continues the open trajectory
    assert [d["steps"] for d in rb.trajectories()] == [2, 5]
    picked = gather(rb, [(1, 0, 5)], 5, views={"stack": VR("obs", shift="-1:0")})
    assert picked["obs"][:, 0].tolist() == [3, 4, 5, 6, 7]
    assert picked["stack"][0, :, 0].tolist() == [0, 3]


def test_overwrite_drops_partly_overwritten_trajectories():
    rb = tv.ReplayBuffer(10)
    rb.add(episode_batch(0, [1, 2, 3]))        # rows 0..3
    rb.add(episode_batch(1, [11, 12, 13]))     # rows 4..7
    rb.add(episode_batch(2, [21, 22]))         # rows 8..10: overwrites row 0
    assert [d["key"] for d in rb.trajectories()] == [1, 2]
    assert len(rb) == 5
    rb.sampler = tv.SliceSampler(slice_len=2, seed=0)
    for _ in range(20):
        out = rb.sample(8)
        assert set(out["eps_id"].tolist()) <= {1, 2}


def test_sampler_semantics():
    rb = tv.ReplayBuffer(200, sampler=tv.SliceSampler(num_slices=40, strict_length=True, seed=1))
    rb.add(episode_batch(0, [1, 2]))
    rb.add(episode_batch(1, np.arange(10, 20)))
    out, info = rb.sample(160, return_info=True)  # 40 slices of 4
    assert len(out) == 160 and (info["slices"][:, 0] == 1).all() and (info["slices"][:, 2] == 4).all()
    starts = set(info["slices"][:, 1].tolist())
    assert starts <= set(range(7)) and len(starts) > 3
    rb.sampler = tv.SliceSampler(slice_len=4, seed=2)  # strict_length=False: the short one gives 2-step slices
    out, info = rb.sample(160, return_info=True)
    lens = info["slices"][:, 2]
    assert set(lens.tolist()) == {2, 4} and len(out) == lens.sum()
    assert out["obs"].shape == (lens.sum(), 1)
    rb.sampler = tv.SliceSampler(slice_len=4, pad_output=True, seed=2)
    out, info = rb.sample(160, return_info=True)
    assert len(out) == 160 and out["mask"].sum() == info["slices"][:, 2].sum()
    short = np.flatnonzero(info["slices"][:, 2] == 2)[0] * 4
    assert out["mask"][short:short + 4].tolist() == [True, True, False, False]
    assert out["obs"][short:short + 4, 0].tolist() == [1, 2, 2, 2]  # padding repeats the last real step
    # Same seed, same sample; slices never mix trajectories.
    a = tv.ReplayBuffer(200, sampler=tv.SliceSampler(slice_len=3, seed=5))
    b = tv.ReplayBuffer(200, sampler=tv.SliceSampler(slice_len=3, seed=5))
    for r in (a, b):
        for e in range(6):
            r.add(episode_batch(e, np.arange(e * 100, e * 100 + 3 + e)))
    x, y = a.sample(300), b.sample(300)
    np.testing.assert_array_equal(x["obs"], y["obs"])
    ids = x["eps_id"].reshape(100, 3)
    assert (ids == ids[:, :1]).all()
    assert set(ids[:, 0].tolist()) == set(range(6))  # every trajectory gets sampled


def test_collector_batches_round_trip():
    """Batches from tv.Collector: sampled views equal the collector's own views of the same rows."""
    B, T = 3, 40
    rng = np.random.default_rng(0)
    vrs = {"obs": VR("obs"), "actions": VR("actions"), "rewards": VR("rewards"), "terminateds": VR("terminateds"),
           "truncateds": VR("truncateds"), "new_obs": VR("obs", shift=1, used_for_compute_actions=False),
           "stack": VR("obs", shift="-3:0"), "prev_actions": VR("actions", shift=-1)}
    coll = tv.Collector(B, {"obs": (np.float32, (2,)), "actions": (np.int64, ()), "rewards": (np.float32, ()),
                            "terminateds": (np.bool_, ()), "truncateds": (np.bool_, ())}, vrs, chunk_rows=10)
    coll.begin_episodes(np.arange(B), {"obs": rng.normal(size=(B, 2)).astype(np.float32)})
    rb = tv.ReplayBuffer(1000, columns=["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"])
    emitted = []
    for step in range(T):
        term = rng.random(B) < 0.1
        coll.add_step({"obs": rng.normal(size=(B, 2)).astype(np.float32), "actions": rng.integers(0, 5, B),
                       "rewards": rng.normal(size=B).astype(np.float32), "terminateds": term,
                       "truncateds": np.zeros(B, bool)})
        done = np.flatnonzero(term)
        if len(done):
            coll.end_episodes(done)
            coll.begin_episodes(done, {"obs": rng.normal(size=(len(done), 2)).astype(np.float32)})
        if step % 10 == 9:
            batch = tv.concat_samples(coll.build_batch())
            rb.add(batch)
            emitted.append(batch)
    allb = tv.concat_samples(emitted)
    by_eps: dict[int, list] = {}
    for ep in allb.split_by_episode():
        by_eps.setdefault(int(ep["eps_id"][0]), []).append(ep)
    views = {"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-3:0"), "prev_actions": VR("actions", shift=-1)}
    for d in rb.trajectories():
        want = tv.concat_samples(by_eps[d["key"]])
        got = gather(rb, [(d["uid"], 0, d["steps"])], d["steps"], views=views)
        for k in ("obs", "actions", "t", "new_obs", "stack", "prev_actions"):
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_bad_input():
    with pytest.raises(ValueError, match="capacity must be an int >= 1, got 0"):
        tv.ReplayBuffer(0)
    with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
        tv.SliceSampler(num_slices=2, slice_len=3)
    with pytest.raises(ValueError, match="slice_len must be an int >= 1, got 0"):
        tv.SliceSampler(slice_len=0)
    rb = tv.ReplayBuffer(8, sampler=tv.SliceSampler(slice_len=3))
    with pytest.raises(ValueError, match="holds no steps"):
        rb.sample(3)
    rb.add(episode_batch(0, [1, 2]))
    with pytest.raises(ValueError, match="divisible by slice_len=3, got batch_size=4"):
        rb.sample(4)
    with pytest.raises(ValueError, match="batch_size is required"):
        rb.sample()
    bad = episode_batch(1, [1, 2])
    bad["obs"] = np.zeros((2, 1), np.float64)
    with pytest.raises(ValueError, match="column 'obs': expected dtype float32, got float64"):
        rb.add(bad)
    bad = episode_batch(1, [1, 2])
    bad["obs"] = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"column 'obs': expected per-step shape \(1,\), got \(3,\)"):
        rb.add(bad)
    bad = episode_batch(1, [1, 2])
    del bad["actions"]
    with pytest.raises(ValueError, match="missing column 'actions'"):
        rb.add(bad)
    bad = episode_batch(1, [1, 2])
    bad["extra"] = np.zeros(2)
    with pytest.raises(ValueError, match="column 'extra' is not stored"):
        rb.add(bad)
    assert len(rb) == 2  # nothing written by the failed adds
    with pytest.raises(ValueError, match="reads column 'nope', which is not stored"):
        rb.sample(3, views={"x": VR("nope")})
    with pytest.raises(ValueError, match="batch_repeat_value must be 1"):
        rb.sample(3, views={"x": VR("obs", batch_repeat_value=2)})
    rb.sampler = tv.SliceSampler(slice_len=3, strict_length=True)
    with pytest.raises(ValueError, match="slice_len=3 steps or more"):
        rb.sample(3)
    with pytest.raises(TypeError, match="MultiAgentBatch"):
        rb.add(tv.MultiAgentBatch({}, 0))
    words = episode_batch(0, [1])
    words["name"] = np.array(["a"])
    with pytest.raises(ValueError, match="column 'name': replay stores bool, int and float columns only"):
        tv.ReplayBuffer(8).add(words)
    no_ids = tv.SampleBatch(obs=np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="no trajectory ids"):
        tv.ReplayBuffer(8).add(no_ids)


def test_zero_copy_to_numpy_and_torch():
    torch = pytest.importorskip("torch")
    rb = tv.ReplayBuffer(64, sampler=tv.SliceSampler(slice_len=2, seed=0))
    rb.add(episode_batch(0, np.arange(10)))
    out = rb.sample(8, views={"stack": VR("obs", shift="-3:0")})
    stack = out["stack"]
    base = stack.base
    assert isinstance(base, _core._Buffer) and base.address == stack.__array_interface__["data"][0]
    t = torch.from_numpy(stack)
    assert t.data_ptr() == base.address
    want = stack.copy()
    del out, rb
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.timing  # (another thread must run within the call: gil_check)
def test_sample_releases_the_gil():
    rb = tv.ReplayBuffer(20000, sampler=tv.SliceSampler(slice_len=32, seed=0))
    frames = np.random.default_rng(0).integers(0, 255, (2000, 84, 84), dtype=np.uint8)
    for e in range(5):
        rb.add(tv.SampleBatch(obs=frames, eps_id=np.full(2000, e), terminateds=np.zeros(2000, bool)))
    # ~140 MB written in C++.
    out = assert_releases_gil(lambda: rb.sample(4096, views={"stack": VR("obs", shift="-3:0")}), "sample")
    assert len(out) == 4096


def test_one_writer_many_samplers_no_torn_rows():
    """A collector thread adds while three learner threads sample: every row is whole and views consistent."""
    W = 256
    rb = tv.ReplayBuffer(3000, sampler=tv.SliceSampler(slice_len=8, seed=0))
    errors: list[str] = []
    done = threading.Event()

    def writer():
        v = 1
        try:
            for e in range(300):
                n = 40
                vals = np.arange(v, v + n, dtype=np.float32)
                v += n + 1
                rb.add(tv.SampleBatch(
                    obs=np.repeat(vals[:, None], W, axis=1), new_obs=np.repeat(vals[:, None] + 1, W, axis=1),
                    actions=vals.astype(np.int64), eps_id=np.full(n, e), t=np.arange(n),
                    terminateds=np.arange(n) == n - 1, truncateds=np.zeros(n, bool)))
        finally:
            done.set()

    def sampler(seed):
        views = {"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-1:0")}
        try:
            while not done.is_set():
                if len(rb) == 0:
                    continue
                out = rb.sample(64, views=views)
                obs = out["obs"]
                v = obs[:, 0]
                ok = (obs == v[:, None]).all() and (out["actions"] == v.astype(np.int64)).all()
                ok = ok and (out["new_obs"] == (v + 1)[:, None]).all() and (out["stack"][:, 1] == obs).all()
                prev = out["stack"][:, 0, 0]
                ok = ok and ((prev == v - 1) | (prev == 0)).all() and (out["stack"][:, 0] == prev[:, None]).all()
                if not ok:
                    errors.append("torn or inconsistent row")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=sampler, args=(k,)) for k in range(3)] + [threading.Thread(target=writer)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert rb.rows_written() == 300 * 41


def test_an_add_larger_than_capacity_keeps_the_newest_rows():
    """As TorchRL's extend: the newest rows that fit (one piece: its steps plus its final-observation row)."""
    rb = tv.ReplayBuffer(8, sampler=tv.SliceSampler(slice_len=1))
    assert rb.add(episode_batch(1, np.arange(20))) == 7
    assert len(rb) == 7
    trajs = rb.trajectories()
    assert len(trajs) == 1 and trajs[0]["steps"] == 7
    s = rb.sample(64)
    assert sorted(set(s["obs"][:, 0].tolist())) == list(range(13, 20))
    np.testing.assert_array_equal(s["new_obs"], s["obs"] + 1)
    # views read zeros before the first kept step: the kept piece starts a trajectory of its own at t = 13
    s = rb.sample(64, views={"prev": VR("obs", shift=-1), "new_obs": VR("obs", shift=1)})
    first = s["t"] == 13
    assert first.any() and (s["prev"][first] == 0).all()


def test_two_writers_reusing_trajectory_ids_are_refused():
    """Two workers left at worker_index=0 hand out the same eps_ids: never glued into one trajectory."""
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=2))
    rb.add(episode_batch(5, [0, 1, 2], end=False))  # writer A: eps 5, t 0..2, goes on
    with pytest.raises(ValueError, match=r"trajectory id 5 .* is reused: a piece starting at t=0 arrived while the "
                                         r"trajectory with that id is open at t=2"):
        rb.add(episode_batch(5, [10, 11, 12], end=False))  # writer B: eps 5 again, from t=0
    assert len(rb) == 3  # B's batch was not written
    rb.add(episode_batch(5, [3, 4], t0=3))  # A goes on and ends
    rb.add(episode_batch(5, [10, 11]))  # after the end, the id may start again
    # a later fragment that skips steps is a trajectory of its own, not an error
    rb.add(episode_batch(7, [0, 1], end=False))
    rb.add(episode_batch(7, [5, 6], t0=5))
    assert [tr["steps"] for tr in rb.trajectories()] == [5, 2, 2, 2]


def test_new_obs_is_not_invented_when_batches_carry_none():
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=3))
    b = episode_batch(1, [1, 2, 3])
    del b["new_obs"]
    rb.add(b)
    s = rb.sample(3)
    assert "new_obs" not in s
    assert s["obs"][:, 0].tolist() == [1, 2, 3]


def test_slice_ends_are_marked_whatever_the_storage_holds():
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=4), columns=["obs", "actions", "eps_id", "t"])
    rb.add(episode_batch(1, np.arange(10), end=False))
    s = rb.sample(12)
    assert "truncateds" in s
    np.testing.assert_array_equal(s["truncateds"], np.tile([False, False, False, True], 3))
    pytest.importorskip("tensordict")
    td = s.to_tensordict()
    assert td["next", "done"].squeeze(-1).tolist() == np.tile([False, False, False, True], 3).tolist()


def test_padding_rows_are_not_marked_truncated():
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=4, pad_output=True))
    rb.add(episode_batch(1, [0, 1], end=False))
    s = rb.sample(4)
    assert s["mask"].tolist() == [True, True, False, False]
    assert s["truncateds"].tolist() == [False, True, False, False]
    with pytest.raises(ValueError, match="strict_length=True and pad_output=True cannot go together"):
        tv.SliceSampler(slice_len=4, pad_output=True, strict_length=True)


def test_synthetic_ids_advance_past_ends_cut_by_an_oversized_add():
    """No id column: an add larger than the buffer keeps its newest rows, and the synthetic trajectory ids
    still count every end flag of the batch (the reference's numbering: found by the property test)."""
    rb = tv.ReplayBuffer(4)
    one = lambda n: tv.SampleBatch({"obs": np.arange(n, dtype=np.float32)[:, None],  # noqa: E731
                                    "new_obs": np.arange(n, dtype=np.float32)[:, None] + 1,
                                    "terminateds": np.ones(n, bool)})
    rb.add(one(3))  # 3 one-step episodes (+3 final rows) in 4 rows: the first is dropped
    rb.add(one(1))
    assert [d["key"] for d in rb.trajectories()] == [2, 3]  # (the second add was given id 2 again before)
