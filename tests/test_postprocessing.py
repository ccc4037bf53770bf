"""compute_advantages: bootstrapping from new_obs when truncated, from zero when terminated."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trajview as tv
from trajview import _core
from trajview.algorithms.postprocessing import (
    compute_advantages,
    compute_gae_for_sample_batch,
    discount_cumsum,
    gae_of_segments,
)


def batch(terminated: bool, truncated: bool):
    return tv.SampleBatch(
        rewards=np.array([1.0, 2.0, 3.0]),
        vf_preds=np.array([0.5, 0.5, 0.5], np.float32),
        terminateds=np.array([False, False, terminated]),
        truncateds=np.array([False, False, truncated]),
        new_obs=np.array([[1.0], [2.0], [10.0]], np.float32),
    )


def test_discount_cumsum_by_hand():
    np.testing.assert_allclose(discount_cumsum([1.0, 2.0, 3.0], 0.5), [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


def test_terminated_bootstraps_from_zero():
    b = compute_gae_for_sample_batch(batch(True, False), value_fn=lambda o: 100.0, gamma=0.5, lambda_=1.0)
    # lambda=1: advantages = discounted returns - V; returns with last_r = 0.
    returns = np.array([1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0])
    np.testing.assert_allclose(b["advantages"], returns - 0.5, rtol=1e-6)
    np.testing.assert_allclose(b["value_targets"], returns, rtol=1e-6)


def test_truncated_bootstraps_from_the_value_of_the_last_new_obs():
    seen = []

    def value_fn(o):
        seen.append(o.tolist())
        return 8.0

    b = compute_gae_for_sample_batch(batch(False, True), value_fn=value_fn, gamma=0.5, lambda_=1.0)
    assert seen == [[10.0]]  # the final observation, not a reset one
    returns = np.array([1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 8, 2 + 0.5 * 3 + 0.25 * 8, 3 + 0.5 * 8])
    np.testing.assert_allclose(b["value_targets"], returns, rtol=1e-6)
    np.testing.assert_allclose(b["advantages"], returns - 0.5, rtol=1e-6)


def test_fragment_cut_also_bootstraps():
    b = compute_gae_for_sample_batch(batch(False, False), value_fn=lambda o: 8.0, gamma=0.5, lambda_=1.0)
    assert b["value_targets"][-1] == pytest.approx(3 + 0.5 * 8)


def test_gae_by_hand():
    # gamma=0.9, lambda=0.8, last_r=2: deltas then their (0.72)-discounted sum.
    r = np.array([1.0, 0.0])
    v = np.array([0.5, 1.0])
    b = compute_advantages(tv.SampleBatch(rewards=r, vf_preds=v), 2.0, gamma=0.9, lambda_=0.8)
    d1 = 0.0 + 0.9 * 2.0 - 1.0
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    np.testing.assert_allclose(b["advantages"], [d0 + 0.72 * d1, d1], rtol=1e-6)
    np.testing.assert_allclose(b["value_targets"], [d0 + 0.72 * d1 + 0.5, d1 + 1.0], rtol=1e-6)
    assert b["advantages"].dtype == np.float32


def _gae_reference(rewards, vf, lengths, last_r, gamma, lam):
    """Textbook GAE, one trajectory at a time, element by element in float64."""
    adv, targets, start = [], [], 0
    for n, boot in zip(lengths, last_r):
        acc, seg = 0.0, []
        for t in range(start + n - 1, start - 1, -1):
            v_next = boot if t == start + n - 1 else float(vf[t + 1])
            delta = float(rewards[t]) + gamma * v_next - float(vf[t])
            acc = delta + gamma * lam * acc
            seg.append(acc)
        seg.reverse()
        adv += seg
        targets += [a + float(v) for a, v in zip(seg, vf[start : start + n])]
        start += n
    return np.array(adv, np.float32), np.array(targets, np.float32)


@given(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.data())
def test_gae_of_segments_equals_each_trajectory_alone(lengths, gamma, lam, data):
    """Segments of a flat batch in one pass: each one's figures are the textbook loop's and compute_advantages' on
    that trajectory alone, bit for bit (the same float64 arithmetic)."""
    n = sum(lengths)
    floats = st.floats(-100, 100, allow_nan=False, width=32)
    rewards = np.array(data.draw(st.lists(floats, min_size=n, max_size=n)), np.float32)
    vf = np.array(data.draw(st.lists(floats, min_size=n, max_size=n)), np.float32)
    last_r = np.array(data.draw(st.lists(floats, min_size=len(lengths), max_size=len(lengths))), np.float64)
    adv, targets = gae_of_segments(rewards, vf, np.array(lengths), last_r, gamma, lam)
    ref_adv, ref_targets = _gae_reference(rewards, vf, lengths, last_r, gamma, lam)
    np.testing.assert_array_equal(adv, ref_adv)
    np.testing.assert_array_equal(targets, ref_targets)
    start = 0
    for k, m in enumerate(lengths):
        one = tv.SampleBatch(rewards=rewards[start : start + m], vf_preds=vf[start : start + m])
        compute_advantages(one, float(last_r[k]), gamma, lam)
        np.testing.assert_array_equal(one["advantages"], adv[start : start + m])
        np.testing.assert_array_equal(one["value_targets"], targets[start : start + m])
        start += m


def test_gae_of_segments_refuses_lengths_that_do_not_cover_the_rows():
    r = np.zeros(5)
    with pytest.raises(ValueError, match="lengths sum to 4 rows, expected 5"):
        gae_of_segments(r, r, np.array([2, 2]), np.zeros(2), 0.9, 0.9)
    with pytest.raises(ValueError, match="expected 5 vf_preds"):
        gae_of_segments(r, r[:4], np.array([5]), np.zeros(1), 0.9, 0.9)
    with pytest.raises(ValueError, match="segments' lengths sum to 3 rows, x has 5"):
        _core.discounted_sums(r, np.array([3]), 0.5)
