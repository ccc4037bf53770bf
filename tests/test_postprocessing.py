"""compute_advantages: bootstrapping from new_obs when truncated, from zero when terminated."""

import numpy as np
import pytest

import trajview as tv
from trajview.algorithms.postprocessing import compute_advantages, compute_gae_for_sample_batch, discount_cumsum


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
