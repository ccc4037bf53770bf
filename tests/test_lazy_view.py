"""`tv.LazyView` batch columns: the same values as copied-out views, each stored row held once.

The collector-level equality (lazy == reference for every view, shift, padding
and cut) is in test_collector_property.py and test_rollout_property.py (both
draw ``lazy_views``); this file covers the `LazyView` object itself and how
`SampleBatch`, `concat_samples`, pickling, torch conversion and the
`RolloutWorker` treat it.
"""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

import trajview as tv

VR = tv.ViewRequirement
FRAME = (16, 16)  # uint8: 256-byte rows


def frame_collector(num_envs=2, lazy=True, chunk_rows=8):
    cols = {"obs": (np.uint8, FRAME), "actions": (np.int64, ()), "rewards": (np.float32, ())}
    views = {
        "obs": VR(),
        "new_obs": VR("obs", shift=1, used_for_compute_actions=False),
        "stack": VR("obs", shift="-3:0"),
        "stack_reset": VR("obs", shift="-2:0", padding="reset"),
        "actions": VR(),
        "rewards": VR(),
    }
    return tv.Collector(num_envs, cols, views, chunk_rows=chunk_rows, lazy_views=256 if lazy else False)


def drive(coll, steps_per_fragment=(5, 7, 3), episode_len=6, seed=0):
    """Same script for any collector: frames whose pixels are (env, step) codes; episodes end every ``episode_len``."""
    rng = np.random.default_rng(seed)
    n = coll.num_envs
    ids = np.arange(n)
    coll.begin_episodes(ids, {"obs": rng.integers(0, 255, (n, *FRAME), dtype=np.uint8)})
    lengths = np.zeros(n, int)
    out = []
    for steps in steps_per_fragment:
        for _ in range(steps):
            coll.add_step({
                "obs": rng.integers(0, 255, (n, *FRAME), dtype=np.uint8),
                "actions": rng.integers(0, 5, n),
                "rewards": rng.random(n).astype(np.float32),
            })
            lengths += 1
            done = np.flatnonzero(lengths >= episode_len)
            if len(done):
                coll.end_episodes(done)
                coll.begin_episodes(done, {"obs": rng.integers(0, 255, (len(done), *FRAME), dtype=np.uint8)})
                lengths[done] = 0
        out.append(coll.build_batch())
    return out


def test_lazy_batches_equal_copied_batches_and_hold_frames_once():
    lazy, eager = drive(frame_collector(lazy=True)), drive(frame_collector(lazy=False))
    for segs_l, segs_e in zip(lazy, eager):
        assert len(segs_l) == len(segs_e)
        # Untouched segments concatenate to a view of the parent: all four views share one base, holding the
        # frames the batch needs once (+ the pad and zero rows).
        whole = tv.concat_samples(segs_l)
        assert sorted(whole.lazy_keys) == ["new_obs", "obs", "stack", "stack_reset"]
        bases = {id(dict.__getitem__(whole, k).base) for k in whole.lazy_keys}
        assert len(bases) == 1
        base = dict.__getitem__(whole, "obs").base
        rows_read = len(whole) + 4 * len(segs_l)  # each segment: its rows, 3 look-back rows, 1 new_obs row at most
        assert len(base) <= 2 + rows_read
        for bl, be in zip(segs_l, segs_e):
            assert sorted(bl.lazy_keys) == ["new_obs", "obs", "stack", "stack_reset"]
            assert be.lazy_keys == []
            for k in be:
                assert bl[k].dtype == be[k].dtype and bl[k].shape == be[k].shape
                np.testing.assert_array_equal(bl[k], be[k], err_msg=k)


def test_lazy_view_object():
    base = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    index = np.array([[0, 1], [2, 3], [4, 4]])
    v = tv.LazyView(base, index)
    assert v.shape == (3, 2, 3) and v.dtype == np.float32 and v.ndim == 3 and len(v) == 3
    want = base[index]
    np.testing.assert_array_equal(np.asarray(v), want)
    np.testing.assert_array_equal(v.materialize(), want)
    assert v.nbytes == want.nbytes
    assert v.stored_nbytes == base.nbytes + index.nbytes
    sub = v[1:3]
    assert isinstance(sub, tv.LazyView) and sub.base is base
    np.testing.assert_array_equal(np.asarray(sub), want[1:3])
    np.testing.assert_array_equal(v[2], want[2])
    np.testing.assert_array_equal(v[:, 1], want[:, 1])
    np.testing.assert_array_equal(v[0, 1, 2], want[0, 1, 2])
    np.testing.assert_array_equal(v[[2, 0]], want[[2, 0]])
    assert np.asarray(v, dtype=np.float64).dtype == np.float64
    c = v.copy()
    assert isinstance(c, np.ndarray) and not np.shares_memory(c, base)
    t = v.to_torch()
    assert torch.equal(t, torch.from_numpy(want))


@pytest.mark.parametrize(
    "base, index, error, match",
    [
        (np.zeros((4, 2)), np.array([0.5]), TypeError, "integer"),
        (np.zeros((4, 2)), np.array([0, 4]), IndexError, r"\[0, 4\)"),
        (np.zeros((4, 2)), np.array([-1]), IndexError, "base's rows"),
        (np.float32(1.0), np.array([0]), ValueError, "row axis"),
    ],
)
def test_lazy_view_rejects_bad_input(base, index, error, match):
    with pytest.raises(error, match=match):
        tv.LazyView(base, index)


def test_sample_batch_materializes_on_read_and_keeps_it():
    (segs,) = drive(frame_collector(), steps_per_fragment=(4,))
    b = segs[0]
    assert "stack" in b.lazy_keys
    b.enable_access_tracking()
    first = b["stack"]
    assert isinstance(first, np.ndarray) and b["stack"] is first  # materialized once
    assert "stack" not in b.lazy_keys and "stack" in b.accessed_keys
    assert b.get("new_obs") is b["new_obs"]
    b.materialize()
    assert b.lazy_keys == []
    assert all(isinstance(v, np.ndarray) for v in b.values())


def test_items_values_to_dict_and_copies_hand_out_arrays():
    (segs,) = drive(frame_collector(), steps_per_fragment=(4,))
    b = segs[0]
    assert all(isinstance(v, np.ndarray) for _, v in b.items())
    (segs,) = drive(frame_collector(), steps_per_fragment=(4,))
    assert all(isinstance(v, np.ndarray) for v in segs[0].to_dict().values())
    (segs,) = drive(frame_collector(), steps_per_fragment=(4,))
    deep = segs[0].copy()
    assert deep.lazy_keys == [] and all(isinstance(v, np.ndarray) for v in dict.values(deep))
    shallow = segs[0].copy(shallow=True)
    assert sorted(shallow.lazy_keys) == sorted(segs[0].lazy_keys)


def test_pickle_round_trip_keeps_values():
    (segs,) = drive(frame_collector(), steps_per_fragment=(5,))
    batch = tv.concat_samples(segs)
    want = {k: np.asarray(v).copy() for k, v in dict.items(batch)}
    back = pickle.loads(pickle.dumps(batch))
    assert sorted(back) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(back[k], want[k])


def test_concat_keeps_views_lazy_and_mixed_columns_materialize():
    (segs,) = drive(frame_collector(num_envs=3), steps_per_fragment=(8,), episode_len=3)
    assert len(segs) > 3
    eager = [{k: np.asarray(v).copy() for k, v in dict.items(s)} for s in segs]
    # Consecutive untouched segments: a view of the parent, still lazy.
    whole = tv.concat_samples(segs)
    assert "stack" in whole.lazy_keys
    # Out of order: indices concatenated over the shared base, still lazy.
    shuffled = tv.concat_samples([segs[2], segs[0], segs[1]])
    assert "stack" in shuffled.lazy_keys
    np.testing.assert_array_equal(
        shuffled["stack"], np.concatenate([eager[2]["stack"], eager[0]["stack"], eager[1]["stack"]])
    )
    # A segment read during postprocessing (materialized) still concatenates to the same values.
    segs[1]["new_obs"]
    mixed = tv.concat_samples(segs)
    np.testing.assert_array_equal(mixed["new_obs"], np.concatenate([e["new_obs"] for e in eager]))
    # Lazy next to a plain array of another base: a fresh array.
    other = tv.SampleBatch({k: np.asarray(v) for k, v in eager[0].items()})
    out = tv.concat_samples([segs[3], other])
    assert out.lazy_keys == []
    np.testing.assert_array_equal(out["stack"], np.concatenate([eager[3]["stack"], eager[0]["stack"]]))


def test_to_padded_and_to_tensordict_match_copied_batches():
    pytest.importorskip("tensordict")
    (lazy,) = drive(frame_collector(), steps_per_fragment=(9,), episode_len=4)
    (eager,) = drive(frame_collector(lazy=False), steps_per_fragment=(9,), episode_len=4)
    bl, be = tv.concat_samples(lazy), tv.concat_samples(eager)
    pl, pe = bl.to_padded(), be.to_padded()
    for k in pe:
        np.testing.assert_array_equal(pl[k], pe[k])
    (lazy,) = drive(frame_collector(), steps_per_fragment=(9,), episode_len=4)
    tl, te = tv.concat_samples(lazy).to_tensordict(), be.to_tensordict()
    for k in te.keys(include_nested=True, leaves_only=True):
        assert torch.equal(tl[k], te[k]), k


class FramePolicy(tv.TorchPolicy):
    def __init__(self, obs_space, act_space, config=None):
        model = torch.nn.Linear(4 * FRAME[0] * FRAME[1], 2)
        super().__init__(obs_space, act_space, config, model=model)
        self.view_requirements["stack"] = VR("obs", shift="-3:0")

    def action_sampler(self, input_dict, explore):
        return torch.zeros(len(input_dict["stack"]), dtype=torch.int64), [], {}

    def loss(self, train_batch):
        x = train_batch["stack"].float().reshape(len(train_batch["stack"]), -1)
        return self.model(x).sum() + 0 * train_batch["obs"].sum() + 0 * train_batch["new_obs"].sum()


class FrameEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, FRAME, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.rng.integers(0, 255, FRAME, dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        return self.rng.integers(0, 255, FRAME, dtype=np.uint8), 1.0, self.t >= 7, False, {}


def test_rollout_worker_lazy_and_copied_batches_agree_and_torch_gathers_them():
    def worker(lazy):
        envs = iter([FrameEnv(i) for i in range(3)])
        return tv.RolloutWorker(
            lambda cfg: next(envs), FramePolicy, num_envs=3, rollout_fragment_length=5, lazy_views=lazy
        )

    # 256-byte frames are under the default 1 KiB threshold: ask for 256.
    wl, we, wd = worker(256), worker(False), worker(True)
    for _ in range(4):
        bl, be, bd = wl.sample(), we.sample(), wd.sample()
        assert {"obs", "new_obs", "stack"} <= set(bl.lazy_keys)
        assert be.lazy_keys == [] and bd.lazy_keys == []
        tensors = wl.policy._to_torch(bl)  # gathered by torch, before anything reads the numpy values
        for k in be:
            np.testing.assert_array_equal(bl[k], be[k], err_msg=k)
        for k in ("obs", "new_obs", "stack"):
            assert torch.equal(tensors[k], torch.from_numpy(be[k]))
        stats = wl.policy.learn_on_batch(wl.sample())
        assert np.isfinite(stats["loss"])
        we.sample()
        wd.sample()


def test_lazy_views_setting_is_checked():
    with pytest.raises(ValueError, match="lazy_views must be True, False or a number of row bytes"):
        tv.Collector(1, {"obs": (np.uint8, FRAME)}, {"obs": VR()}, lazy_views="yes")
    with pytest.raises(ValueError, match="lazy_views"):
        tv.RolloutWorker(lambda cfg: FrameEnv(), FramePolicy, lazy_views=-1)


@pytest.mark.parametrize("padding", ["zero", "reset"])
def test_store_holds_each_frame_once_and_carries_only_the_look_back(padding):
    """held_nbytes: the rows a fragment adds (one frame per step, plus each new episode's first frame), and
    between fragments only 3 look-back frames + the newest obs per env (row 0 of a long episode is freed)."""
    B, T, frame = 4, 10, FRAME[0] * FRAME[1]
    cols = {"obs": (np.uint8, FRAME), "actions": (np.int64, ())}
    views = {"obs": VR(), "stack": VR("obs", shift="-3:0", padding=padding), "actions": VR()}
    coll = tv.Collector(B, cols, views, chunk_rows=T, lazy_views=True)
    ids = np.arange(B)
    rng = np.random.default_rng(0)
    coll.begin_episodes(ids, {"obs": rng.integers(0, 255, (B, *FRAME), dtype=np.uint8)})
    assert coll.held_nbytes() == B * frame  # the first observations
    carried = []
    for frag in range(4):
        start = coll.held_nbytes()
        for _ in range(T):
            coll.add_step({"obs": rng.integers(0, 255, (B, *FRAME), dtype=np.uint8), "actions": np.zeros(B, np.int64)})
        assert coll.held_nbytes() - start == B * T * (frame + 8)  # one frame and one int64 per step
        batch = tv.concat_samples(coll.build_batch())
        assert len(batch) == B * T
        carried.append(coll.held_nbytes())
    assert carried == [B * 4 * frame] * 4  # 3 look-back frames + the newest obs, per env


class BigFrameEnv(FrameEnv):
    """32x32 uint8 frames (1 KiB): the worker has env.step write them straight into the store."""

    observation_space = gym.spaces.Box(0, 255, (32, 32), np.uint8)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.rng.integers(0, 255, (32, 32), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        return self.rng.integers(0, 255, (32, 32), dtype=np.uint8), 1.0, self.t >= 7, self.t == 5, {}


class BigFramePolicy(tv.Policy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = VR("obs", shift="-3:0")

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.asarray(input_dict["stack"])[:, -1, 0, 0].astype(np.int64) % 2, [], {}


def test_envs_writing_into_the_store_give_the_same_batches(monkeypatch):
    import trajview.rollout.single_agent as rw

    def run(staged):
        monkeypatch.setattr(rw, "STAGE_OBS_BYTES", 1024 if staged else 1 << 40)
        envs = iter([BigFrameEnv(i) for i in range(3)])
        w = tv.RolloutWorker(lambda cfg: next(envs), BigFramePolicy, num_envs=3, rollout_fragment_length=6,
                             horizon=9, soft_horizon=True)
        batches = [w.sample() for _ in range(4)]
        assert (w.sampler._next_obs_rows is not None) == staged
        return batches

    for a, b in zip(run(True), run(False)):
        assert sorted(a) == sorted(b)
        for k in b:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_concat_of_batches_from_different_workers_stays_lazy_and_joins_each_base_once():
    """Samples of several collectors (different bases): one joined base per stored column, indices shifted."""
    batches = [tv.concat_samples(drive(frame_collector(num_envs=2), steps_per_fragment=(5,), seed=s)[0]) for s in (1, 2, 3)]
    want = {k: np.concatenate([np.asarray(dict.__getitem__(b, k)) for b in batches]) for k in batches[0]}
    out = tv.concat_samples(batches)
    assert sorted(out.lazy_keys) == ["new_obs", "obs", "stack", "stack_reset"]
    views = [dict.__getitem__(out, k) for k in out.lazy_keys]
    assert len({id(v.base) for v in views}) == 1  # obs, new_obs and both stacks share one joined base
    assert len(views[0].base) == sum(len(dict.__getitem__(b, "obs").base) for b in batches)
    for k, w in want.items():
        np.testing.assert_array_equal(out[k], w, err_msg=k)


def test_writes_to_a_read_column_survive_concat():
    """A postprocessing step that scales a lazy column in place: concat_samples keeps the scaled values."""
    (segs,) = drive(frame_collector(num_envs=2), steps_per_fragment=(8,), episode_len=3)
    want = [np.asarray(dict.__getitem__(s, "stack")).copy() for s in segs]
    for s, w in zip(segs, want):
        if s["t"][0] == 0:  # episodes that start here: zero their stacks in place
            s["stack"][...] = 0
            w[...] = 0
    out = tv.concat_samples(segs)
    np.testing.assert_array_equal(out["stack"], np.concatenate(want))
    # The eager (copied-out) collector behaves the same: there the column is a view of the parent buffer.
    (eager,) = drive(frame_collector(num_envs=2, lazy=False), steps_per_fragment=(8,), episode_len=3)
    for s in eager:
        if s["t"][0] == 0:
            s["stack"][...] = 0
    np.testing.assert_array_equal(tv.concat_samples(eager)["stack"], np.concatenate(want))
