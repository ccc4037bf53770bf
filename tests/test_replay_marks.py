"""Slice-end marks of sampled slices (TorchRL's SliceSampler): each slice's last real step is marked in the
``truncated_key`` column (computed where it is not stored) and in a stored ``dones`` column, whichever of
``terminateds`` / ``truncateds`` / ``dones`` the buffer stores; against the pure-Python reference
(`trajview.testing.replay_reference`), and GAE over a sample equal to GAE per slice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from test_replay_samplers import Envs
from trajview.algorithms.postprocessing import compute_advantages
from trajview.testing.replay_reference import ReferenceReplay

FLAGS = ("terminateds", "truncateds", "dones")
GAMMA, LAMBDA = 0.9, 0.8


def _fill(stored_flags, sampler, capacity, adds, seed, frag=4):
    columns = ["obs", "rewards", "eps_id", "t", *stored_flags]
    rb = tv.ReplayBuffer(capacity, sampler=sampler, columns=columns)
    ref = ReferenceReplay(capacity, columns)
    envs = Envs(3, seed, max_len=7)
    for _ in range(adds):
        b = envs.fragment(frag)
        b["dones"] = np.asarray(b["terminateds"]) | np.asarray(b["truncateds"])
        rb.add(b)
        ref.add(b)
    return rb, ref


def _samplers(draw_len, pad, tk, seed):
    return [
        tv.SliceSampler(slice_len=draw_len, pad_output=pad, truncated_key=tk, seed=seed),
        tv.PrioritizedSliceSampler(None, 0.7, 0.4, slice_len=draw_len, strict_length=False, pad_output=pad,
                                   truncated_key=tk, seed=seed),
        tv.SliceSamplerWithoutReplacement(slice_len=draw_len, pad_output=pad, truncated_key=tk, seed=seed),
    ]


@settings(max_examples=60, deadline=None)
@given(
    stored=st.lists(st.sampled_from(FLAGS), unique=True, max_size=3),
    slice_len=st.integers(1, 6),
    pad=st.booleans(),
    tk=st.sampled_from(["truncateds", None]),
    which=st.integers(0, 2),
    seed=st.integers(0, 10_000),
)
def test_slice_ends_are_marked_whatever_flags_are_stored(stored, slice_len, pad, tk, which, seed):
    sampler = _samplers(slice_len, pad, tk, seed)[which]
    rb, ref = _fill(stored, sampler, capacity=40, adds=4, seed=seed)
    batch, info = rb.sample(4 * slice_len, return_info=True)
    picks = [tuple(int(x) for x in p) for p in info["slices"]]
    want, index = ref.expected(picks, slice_len, {"new_obs": tv.ViewRequirement("obs", shift=1)}, pad_output=pad,
                               truncated_key=tk)
    np.testing.assert_array_equal(info["index"], index)
    assert set(batch.keys()) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(np.asarray(batch[k]), v, err_msg=k)
    if tk is not None:  # the rule itself, besides the reference: every slice's last real row, both columns
        ends = (np.arange(len(picks)) * slice_len if pad else np.cumsum([p[2] for p in picks]) - [p[2] for p in picks])
        last = ends + np.array([p[2] for p in picks]) - 1
        assert np.asarray(batch[tk])[last].all()
        if "dones" in stored:
            assert np.asarray(batch["dones"])[last].all()


def _value(obs):
    return np.sin(np.asarray(obs, np.float64)[..., 0] * 0.37)


def _gae_flat(rewards, values, next_values, terminated, done):
    """GAE over a flat batch of steps, reset at every done (TorchRL's vectorized estimator, as a loop)."""
    adv = np.zeros(len(rewards))
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + GAMMA * next_values[t] * (1.0 - terminated[t]) - values[t]
        acc = delta + GAMMA * LAMBDA * (1.0 - done[t]) * acc
        adv[t] = acc
    return adv


@pytest.mark.parametrize("stored", [("terminateds",), ("terminateds", "dones"), ("terminateds", "truncateds"),
                                    ("terminateds", "truncateds", "dones"), ("dones",)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_over_a_sample_equals_gae_per_slice(stored, seed):
    """The issue's case: GAE run over a whole sample of slices must reset at every slice end, whatever the
    buffer stores (a buffer with `terminateds` but no `truncateds` used to get no mark in `dones`)."""
    rb, _ = _fill(stored, tv.SliceSampler(slice_len=5, seed=seed), capacity=200, adds=10, seed=seed)
    batch, info = rb.sample(60, return_info=True, views={"new_obs": tv.ViewRequirement("obs", shift=1)})
    rewards = np.asarray(batch["rewards"], np.float64)
    values, next_values = _value(batch["obs"]), _value(batch["new_obs"])
    # The done signal a value estimator reads: TorchRL's done key where stored, else terminated | truncated.
    terminated = np.asarray(batch["terminateds"], np.float64) if "terminateds" in batch else np.zeros(len(rewards))
    done = (np.asarray(batch["dones"]) if "dones" in batch else
            np.asarray(batch["terminateds"]) | np.asarray(batch["truncateds"]))
    flat = _gae_flat(rewards, values, next_values, terminated, done.astype(np.float64))
    per_slice = []
    start = 0
    for _, _, length in info["slices"].tolist():
        sl = slice(start, start + length)
        term_last = bool(terminated[sl][-1])
        seg = tv.SampleBatch({"rewards": rewards[sl], "vf_preds": values[sl]})
        last_r = 0.0 if term_last else float(next_values[sl][-1])
        per_slice.append(np.asarray(compute_advantages(seg, last_r, GAMMA, LAMBDA)["advantages"], np.float64))
        start += length
    np.testing.assert_allclose(flat, np.concatenate(per_slice), rtol=1e-5, atol=1e-5)
