"""Property tests: `tv.ReplayBuffer` against the pure-Python `ReferenceReplay`.

Random scripts: 1 to 3 envs run episodes of random lengths; each add holds
one fragment per env (random lengths, so trajectories are cut at fragment
boundaries and continue in the next add), trajectory ids from ``eps_id``,
``traj_ids`` or, with one env, the end flags alone; with or without ``t`` and
``new_obs``; small capacities, so the ring wraps and overwrites trajectories.
After every add both must hold the same trajectories (same stored rows), and
every sample must consist of slices the reference allows, with every array
(stored columns, views, ``is_init``, ``mask``) equal to the reference's.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.testing.replay_reference import ReferenceReplay

VR = tv.ViewRequirement

VIEW_SETS = [
    {"new_obs": VR("obs", shift=1)},
    {"new_obs": VR("obs", shift=1), "stack": VR("obs", shift="-2:0"), "prev_actions": VR("actions", shift=-1)},
    {"reset_stack": VR("obs", shift="-2:0", padding="reset"), "next_actions": VR("actions", shift=1)},
    {"far": VR("obs", shift=[-3, 1, 2]), "prev_rewards": VR("rewards", shift=-1)},
]


@st.composite
def scripts(draw):
    key_mode = draw(st.sampled_from(["eps_id", "traj_ids", "none"]))
    num_envs = 1 if key_mode == "none" else draw(st.integers(1, 3))
    return dict(
        key_mode=key_mode,
        num_envs=num_envs,
        with_t=draw(st.booleans()),
        with_next=draw(st.booleans()),
        frames=draw(st.booleans()),
        capacity=draw(st.integers(4, 40)),
        episodes=[draw(st.lists(st.integers(1, 8), min_size=12, max_size=12)) for _ in range(num_envs)],
        adds=draw(
            st.lists(
                st.tuples(
                    st.lists(st.integers(0, 6), min_size=num_envs, max_size=num_envs),  # fragment per env
                    st.integers(1, 4),  # num_slices
                    st.integers(1, 6),  # slice_len
                    st.booleans(),  # strict_length
                    st.booleans(),  # pad_output
                    st.integers(0, len(VIEW_SETS) - 1),
                ),
                min_size=1,
                max_size=8,
            )
        ),
    )


class Envs:
    """Deterministic fake envs: obs counts up within an episode, new_obs[t] == obs[t + 1]."""

    def __init__(self, s):
        self.s = s
        self.counter = 1
        self.eps = 0
        self.state = []
        for e in range(s["num_envs"]):
            self.state.append(dict(ep=0, t=0, eps_id=self._new_eps(), obs=self._take()))

    def _new_eps(self):
        self.eps += 1
        return self.eps

    def _take(self):
        self.counter += 1
        return self.counter

    def fragment(self, env, steps):
        rows = []
        st_ = self.state[env]
        lens = self.s["episodes"][env]
        for _ in range(steps):
            length = lens[st_["ep"] % len(lens)]
            nxt = self._take()
            end = st_["t"] + 1 == length
            rows.append(dict(obs=st_["obs"], new_obs=nxt, actions=st_["obs"] * 10, eps_id=st_["eps_id"], t=st_["t"],
                             terminateds=end and st_["ep"] % 2 == 0, truncateds=end and st_["ep"] % 2 == 1))
            st_["obs"], st_["t"] = nxt, st_["t"] + 1
            if end:
                st_.update(ep=st_["ep"] + 1, t=0, eps_id=self._new_eps(), obs=self._take())
        return rows

    def batch(self, frag):
        rows = [r for e, n in enumerate(frag) for r in self.fragment(e, n)]
        s = self.s
        n = len(rows)

        def obs_arr(key):
            vals = np.array([r[key] for r in rows], dtype=np.int64)
            if s["frames"]:
                return np.stack([(vals + k) % 251 for k in range(4)], axis=1).astype(np.uint8).reshape(n, 2, 2)
            return np.stack([vals, -vals], axis=1).astype(np.float32).reshape(n, 2)

        b = {
            "obs": obs_arr("obs"),
            "actions": np.array([r["actions"] for r in rows], dtype=np.int64),
            "rewards": np.array([r["t"] * 0.5 for r in rows], dtype=np.float32),
            "terminateds": np.array([r["terminateds"] for r in rows], dtype=bool),
            "truncateds": np.array([r["truncateds"] for r in rows], dtype=bool),
        }
        if s["with_next"]:
            b["new_obs"] = obs_arr("new_obs")
        if s["key_mode"] != "none":
            b[s["key_mode"]] = np.array([r["eps_id"] for r in rows], dtype=np.int64)
        if s["with_t"]:
            b["t"] = np.array([r["t"] for r in rows], dtype=np.int64)
        return tv.SampleBatch(b)


def same_trajectories(rb, ref):
    got = [(d["uid"], d["key"], d["steps"], d["open"], d["starts_episode"], d["has_final_obs"], d["rows"])
           for d in rb.trajectories()]
    want = [(t.uid, t.key, len(t.rows), t.open, t.starts_episode, t.final is not None, t.rows) for t in ref.trajs]
    assert got == want
    assert len(rb) == sum(len(t.rows) for t in ref.trajs)


def same_arrays(got, want, what):
    assert sorted(got) == sorted(want), what
    for k in want:
        g = np.asarray(got[k])
        assert g.dtype == want[k].dtype, (what, k, g.dtype, want[k].dtype)
        assert g.shape == want[k].shape, (what, k, g.shape, want[k].shape)
        np.testing.assert_array_equal(g, want[k], err_msg=f"{what}: column {k!r}")


#: Slices per sample: the script's (1-4), or that times 37, so that the sample's loops over random rows run past
#: the distance at which they read ahead (`kAhead` in cpp/src/replay_sample.cpp: 16 reads).
SCALES = st.sampled_from([1, 37])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scripts(), st.integers(0, 2**32 - 1), SCALES)
def test_replay_matches_reference(s, seed, scale):
    envs = Envs(s)
    rb = tv.ReplayBuffer(s["capacity"])
    ref = None
    for k, (frag, num_slices, slice_len, strict, pad, vi) in enumerate(s["adds"]):
        num_slices *= scale
        batch = envs.batch(frag)
        if ref is None:
            if len(batch) == 0:
                continue
            cols = [c for c in batch if c != "new_obs"]
            ref = ReferenceReplay(s["capacity"], cols)
        ref.add(batch)  # an add larger than the buffer keeps its newest rows, in both
        rb.add(batch)
        same_trajectories(rb, ref)

        views = VIEW_SETS[vi]
        if not s["with_next"]:
            views = {n: v for n, v in views.items() if n != "new_obs"}
        if strict and pad:
            with pytest.raises(ValueError, match="cannot go together"):
                tv.SliceSampler(slice_len=slice_len, strict_length=strict, pad_output=pad)
            pad = False
        rb.sampler = tv.SliceSampler(slice_len=slice_len, strict_length=strict, pad_output=pad, seed=seed + k)
        if not ref.eligible(slice_len, strict):
            with pytest.raises(ValueError, match="no steps|strict_length"):
                rb.sample(num_slices * slice_len, views=views)
            continue
        out, info = rb.sample(num_slices * slice_len, views=views, return_info=True)
        picks = [tuple(int(x) for x in p) for p in info["slices"]]
        assert len(picks) == num_slices
        for p in picks:
            assert ref.valid_slice(*p, slice_len, strict), (p, slice_len, strict)
        want, index = ref.expected(picks, slice_len, views, pad_output=pad)
        same_arrays(out, want, f"add {k}")
        np.testing.assert_array_equal(info["index"], index)
        assert len(out) == (num_slices * slice_len if pad else sum(p[2] for p in picks))

        # An explicit slice through _gather: the last trajectory's tail, past its end by the views.
        tr = ref.trajs[-1] if ref.trajs else None
        if tr is not None and tr.rows:
            length = min(slice_len, len(tr.rows))
            pick = (tr.uid, len(tr.rows) - length, length)
            got, ginfo = rb._gather([pick], slice_len, pad_output=pad, views=views)
            want, index = ref.expected([pick], slice_len, views, pad_output=pad)
            same_arrays(got, want, f"gather after add {k}")
            np.testing.assert_array_equal(ginfo["index"], index)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scripts(), st.integers(0, 2**32 - 1), st.sampled_from(["random", "prioritized", "pslice", "without"]), SCALES)
def test_step_samplers_match_reference(s, seed, kind, scale):
    """RandomSampler, PrioritizedSampler, PrioritizedSliceSampler and SamplerWithoutReplacement on the same random scripts: every
    pick starts at a step the reference allows, and every array equals the reference's; priorities equal the
    numpy reference after updates and overwrites."""
    from trajview.testing.replay_reference import ReferencePriorities

    envs = Envs(s)
    slice_len = 1 + seed % 3 if kind == "pslice" else 1
    if kind == "random":
        sampler = tv.RandomSampler(seed=seed)
    elif kind == "without":
        sampler = tv.SamplerWithoutReplacement(seed=seed)
    elif kind == "prioritized":
        sampler = tv.PrioritizedSampler(None, 0.7, 0.5, seed=seed)
    else:
        sampler = tv.PrioritizedSliceSampler(None, 0.7, 0.5, slice_len=slice_len, strict_length=True, seed=seed)
    rb = tv.ReplayBuffer(s["capacity"], sampler=sampler)
    ref = pri = None
    rng = np.random.default_rng(seed)
    for k, (frag, num_slices, _, _, _, vi) in enumerate(s["adds"]):
        num_slices *= 1 if kind == "without" else scale  # (without replacement: at most the steps held)
        batch = envs.batch(frag)
        if ref is None:
            if len(batch) == 0:
                continue
            ref = ReferenceReplay(s["capacity"], [c for c in batch if c != "new_obs"])
            pri = ReferencePriorities(ref, 0.7, 0.5)
        ref.add(batch)
        rb.add(batch)
        pri.after_add()
        views = VIEW_SETS[vi]
        if not s["with_next"]:
            views = {n: v for n, v in views.items() if n != "new_obs"}
        starts = {(u, j) for u, j, _ in ref.start_steps(slice_len, kind == "pslice")}
        if not starts:
            with pytest.raises(ValueError):
                rb.sample(num_slices * slice_len, views=views)
            continue
        out, info = rb.sample(num_slices * slice_len, views=views, return_info=True)
        picks = [tuple(int(x) for x in p) for p in info["slices"]]
        assert all((u, j) in starts and n == slice_len for u, j, n in picks), (picks, starts)
        tk = "truncateds" if kind == "pslice" else None
        want, index = ref.expected(picks, slice_len, views, truncated_key=tk)
        same_arrays(out, want, f"{kind} add {k}")
        np.testing.assert_array_equal(info["index"], index)
        if kind in ("prioritized", "pslice"):
            np.testing.assert_allclose(info["_weight"], np.repeat(pri.weights(index[::slice_len]),
                                                                  slice_len), rtol=1e-12)
            p = rng.uniform(0, 3, len(index))
            rb.update_priority(index, p)
            pri.update(index.tolist(), p.tolist())
            rows = np.array(ref.step_rows(), dtype=np.int64)
            np.testing.assert_allclose(rb.priorities(rows), [pri.leaf[g] for g in rows.tolist()], rtol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scripts(), st.integers(0, 2**32 - 1), st.data())
def test_a_sample_of_some_columns_is_those_columns_of_the_whole_sample(s, seed, data):
    """``sample(columns=...)``: the same rows as the whole sample (the same sampler seed), those columns of it (with
    ``is_init``, the slice sampler's ``truncateds`` and, padded, ``mask``), nothing else."""
    envs = Envs(s)
    rb = tv.ReplayBuffer(s["capacity"])
    for k, (frag, num_slices, slice_len, strict, pad, vi) in enumerate(s["adds"]):
        batch = envs.batch(frag)
        if len(batch) == 0 and len(rb) == 0:
            continue
        rb.add(batch)
        views = VIEW_SETS[vi]
        if not s["with_next"]:
            views = {n: v for n, v in views.items() if n != "new_obs"}
        pad = pad and not strict

        def sample(**kw):
            rb.sampler = tv.SliceSampler(slice_len=slice_len, strict_length=strict, pad_output=pad, seed=seed + k)
            return rb.sample(num_slices * slice_len, views=views, return_info=True, **kw)

        try:
            whole, info = sample()
        except ValueError:
            continue  # (no slice of this length yet: test_replay_matches_reference covers the error)
        held = sorted(c for c in whole if c not in ("is_init", "mask"))
        columns = data.draw(st.lists(st.sampled_from(held), unique=True))
        some, some_info = sample(columns=columns)
        np.testing.assert_array_equal(some_info["slices"], info["slices"])
        np.testing.assert_array_equal(some_info["index"], info["index"])
        # (and the slice ends' marks: a stored truncateds with them OR-ed in, as in the whole sample)
        assert sorted(some) == sorted(set(columns) | {"is_init", "truncateds"} | ({"mask"} if pad else set()))
        for c in some:
            np.testing.assert_array_equal(some[c], whole[c], err_msg=f"column {c!r}")
            assert some[c].dtype == whole[c].dtype


def test_columns_of_a_sample_refuse_a_name_the_sample_does_not_hold():
    rb = tv.ReplayBuffer(16, views={"stack": VR("obs", shift="-1:0")})
    n = 6
    rb.add({"obs": np.arange(n, dtype=np.float32), "actions": np.arange(n), "rewards": np.ones(n, np.float32),
            "terminateds": np.zeros(n, bool), "truncateds": np.zeros(n, bool), "eps_id": np.zeros(n, np.int64)})
    with pytest.raises(ValueError, match=r"columns \['stacks'\] are not in the buffer's samples.*'stack'"):
        rb.sample(4, columns=["stack", "stacks"])
    with pytest.raises(TypeError, match="columns must be a list of names, got the string 'stack'"):
        rb.sample(4, columns="stack")
    assert sorted(rb.sample(4, columns=[])) == ["is_init"]
