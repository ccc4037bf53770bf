"""Prioritized replay at the edges of the double range, against the exact pure-Python reference
(`trajview.testing.replay_reference.ReferencePriorities`, Decimal leaves): huge (1e308, and (1e308)^2 with
alpha=2), tiny (1e-300), zero and mixed priorities keep the distribution (chi-square over fixed-seed draws)
and the importance weights; bad priorities and indices are errors naming the index and change nothing;
indices overwritten since their sample are skipped and counted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from test_replay_samplers import assert_fits, chi_square, filled
from trajview.testing.replay_reference import ReferencePriorities, ReferenceReplay, _to_float

#: Priorities a user may give: the double range's edges, zero, and everyday ones.
EDGES = [0.0, 5e-324, 1e-300, 3e-300, 1e-10, 0.5, 1.0, 7.0, 1e300, 5e307, 1e308, 1.7976931348623157e308]


def _check_distribution(rb, pri, draws, seed_note=""):
    """Sample `draws` transitions: every one where the reference gives a positive probability, counts that fit
    it (chi-square over the rows of probability >= 1e-9; the others may not be drawn at all), and the weights."""
    probs = pri.probabilities()
    batch, info = rb.sample(draws, return_info=True)
    index = info["index"]
    assert set(index.tolist()) <= set(probs), f"drawn outside the support {seed_note}"
    big = {g: p for g, p in probs.items() if p >= 1e-9}
    rare = set(index.tolist()) - set(big)
    assert len(rare) <= 1, f"rows of probability < 1e-9 drawn: {rare}"  # (one at most, by chance, never a pattern)
    counts = dict(zip(*np.unique(index, return_counts=True)))
    scale = sum(big.values())
    stat, df = chi_square({int(k): int(v) for k, v in counts.items() if int(k) in big},
                          {g: p / scale for g, p in big.items()}, int(sum(counts.get(g, 0) for g in big)))
    if df > 0:
        assert_fits(stat, df)
    np.testing.assert_allclose(info["_weight"], pri.weights(index), rtol=1e-9)
    assert np.isfinite(info["_weight"]).all() and (info["_weight"] <= 1.0).all()


@pytest.mark.parametrize("alpha,beta,eps,priorities", [
    (1.0, 0.4, 1e-8, [1e308, 5e307, 1.7976931348623157e308, 1e308, 2.5e307, 1e300]),  # sums far beyond a double
    (2.0, 1.0, 0.0, [1e308, 5e307, 1e200, 1e308]),                                      # leaves beyond a double
    (1.0, 0.6, 0.0, [1e-300, 3e-300, 5e-324, 2e-300]),                                  # all tiny, none "zero"
    (3.0, 0.5, 0.0, [1e-300, 3e-300, 2e-300]),                                          # leaves below a double
    (1.0, 0.4, 0.0, [0.0, 1e-300, 1.0, 1e308, 0.0, 7.0]),                               # mixed, with zeros
    (0.6, 0.4, 1e-8, [0.0, 1e-300, 0.5, 1e308, 1.7976931348623157e308, 3.0]),           # TorchRL's defaults
    (0.0, 0.4, 0.0, [0.0, 1e308, 1e-300]),                                              # alpha 0: uniform
])
def test_extreme_priorities_keep_the_distribution(alpha, beta, eps, priorities):
    rb, ref, envs = filled(40, tv.PrioritizedSampler(None, alpha, beta, eps, seed=3), adds=3)
    pri = ReferencePriorities(ref, alpha, beta, eps)
    pri.after_add()
    rows = np.array(ref.step_rows())
    p = np.resize(np.array(priorities), len(rows))
    assert rb.update_priority(rows, p) == 0
    pri.update(rows.tolist(), p.tolist())
    np.testing.assert_allclose(rb.priorities(rows), [pri.leaf[g] for g in rows.tolist()], rtol=1e-12)
    assert rb.max_priority == pri.max_priority
    _check_distribution(rb, pri, 40000)
    # New steps enter at (max priority + eps) ** alpha (huge too), overwriting some: still exact.
    b = envs.fragment(3)
    rb.add(b)
    ref.add(b)
    pri.after_add()
    rows = np.array(ref.step_rows())
    np.testing.assert_allclose(rb.priorities(rows), [pri.leaf[g] for g in rows.tolist()], rtol=1e-12)
    _check_distribution(rb, pri, 20000)
    # The huge ones go: the rest come back with their exact shares.
    rows = np.array(ref.step_rows())
    p = np.where(np.resize(np.arange(3), len(rows)) == 0, 2.0, 1e-300)
    rb.update_priority(rows, p)
    pri.update(rows.tolist(), p.tolist())
    _check_distribution(rb, pri, 20000)


@settings(max_examples=40, deadline=None)
@given(
    alpha=st.sampled_from([0.5, 1.0, 2.0]),
    rounds=st.lists(st.lists(st.sampled_from(EDGES), min_size=1, max_size=12), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_leaves_and_weights_match_the_exact_reference(alpha, rounds, seed):
    """Any mix of edge priorities, updated over rounds with adds overwriting rows in between: every leaf and every
    importance weight as the exact reference says, and no draw where the reference gives probability 0."""
    rb, ref, envs = filled(30, tv.PrioritizedSampler(None, alpha, 0.7, 0.0, seed=seed % 1000), adds=2, seed=seed)
    pri = ReferencePriorities(ref, alpha, 0.7, 0.0)
    pri.after_add()
    rng = np.random.default_rng(seed)
    for prios in rounds:
        if not pri.probabilities():
            with pytest.raises(ValueError, match="every stored priority is 0"):
                rb.sample(1)
            return
        _, info = rb.sample(len(prios), return_info=True)
        assert set(info["index"].tolist()) <= set(pri.probabilities())
        np.testing.assert_allclose(info["_weight"], pri.weights(info["index"]), rtol=1e-9)
        skipped = rb.update_priority(info["index"], prios)
        assert skipped == 0
        pri.update(info["index"].tolist(), prios)
        if rng.random() < 0.5:
            b = envs.fragment(2)
            rb.add(b)
            ref.add(b)
            pri.after_add()
        rows = ref.step_rows()
        np.testing.assert_allclose(rb.priorities(rows), [pri.leaf[g] for g in rows], rtol=1e-12)
        assert rb.max_priority == pri.max_priority


def _small(sampler=None):
    rb = tv.ReplayBuffer(8, sampler=sampler or tv.PrioritizedSampler(None, 0.5, 0.4, 0.0))
    rb.add(tv.SampleBatch({"obs": np.arange(3, dtype=np.float32)[:, None], "new_obs": np.ones((3, 1), np.float32),
                           "eps_id": np.zeros(3, np.int64), "terminateds": np.array([False, False, True])}))
    return rb  # rows 0..2 hold steps, row 3 the final observation


def test_bad_priorities_and_indices_are_errors_naming_the_index_and_change_nothing():
    rb = _small()
    rb.update_priority([1], 4.0)
    before = (rb.priorities([0, 1, 2]).tolist(), rb.max_priority)
    for idx, pr, words in [
        ([0, 2], [1.0, -1.0], ["index 2", "finite and >= 0", "-1"]),
        ([0, 1], [np.nan, 1.0], ["index 0", "nan"]),
        ([2], [np.inf], ["index 2", "inf"]),
        ([0, 99], [1.0, 1.0], ["index 99", "never held a row"]),
        ([-1], [1.0], ["index -1", "never held a row"]),
        ([3], [1.0], ["index 3", "final observation"]),
    ]:
        with pytest.raises(ValueError) as e:
            rb.update_priority(idx, pr)
        for w in words:
            assert w in str(e.value), (w, str(e.value))
        assert (rb.priorities([0, 1, 2]).tolist(), rb.max_priority) == before  # nothing changed
    assert rb.skipped_priority_updates == 0
    with pytest.raises(ValueError, match="index 0 never held a row"):
        tv.ReplayBuffer(8, sampler=tv.PrioritizedSampler(None, 0.5, 0.4)).update_priority([0], 1.0)
    with pytest.raises(ValueError, match="alpha must be at most"):
        tv.PrioritizedSampler(None, 2e6, 0.4)


def test_overwritten_indices_are_skipped_and_counted():
    rb = _small()
    _, info = rb.sample(4, return_info=True)
    # Overwrite rows 0..3 (a 6-step trajectory: rows 4..9, its final observation at 10; the ring holds 8).
    rb.add(tv.SampleBatch({"obs": np.arange(6, dtype=np.float32)[:, None], "new_obs": np.ones((6, 1), np.float32),
                           "eps_id": np.ones(6, np.int64), "terminateds": np.arange(6) == 5}))
    assert rb.update_priority(info["index"], 3.0) == len(info["index"])
    assert rb.skipped_priority_updates == len(info["index"])
    assert rb.max_priority == 1.0  # a skipped update does not raise the default of new steps
    assert rb.update_priority([5, 0, 6], [2.0, 2.0, 2.0]) == 1  # one live, one gone, one live
    assert rb.skipped_priority_updates == len(info["index"]) + 1
    np.testing.assert_allclose(rb.priorities([5, 6]), [2.0 ** 0.5] * 2)


def test_the_sum_never_overflows_where_a_plain_double_sum_would():
    """The issue's case: with 1e308 priorities a double sum is inf and every draw lands on one row."""
    rb = tv.ReplayBuffer(16, sampler=tv.PrioritizedSampler(None, 1.0, 0.4, 0.0, seed=1))
    rb.add(tv.SampleBatch({"obs": np.arange(10, dtype=np.float32)[:, None], "eps_id": np.arange(10)}))
    rb.update_priority(np.arange(10), np.full(10, 1e308))
    _, info = rb.sample(20000, return_info=True)
    counts = np.bincount(info["index"], minlength=10)
    stat, df = chi_square(dict(enumerate(counts.tolist())), {i: 0.1 for i in range(10)}, 20000)
    assert_fits(stat, df)
    np.testing.assert_array_equal(info["_weight"], 1.0)


def test_exact_reference_leaf_of_an_overflowing_power():
    ref = ReferenceReplay(4, ["obs"])
    pri = ReferencePriorities(ref, 2.0, 0.4, 0.0)
    assert _to_float(pri._leaf(1e308)) == float("inf") and pri._leaf(1e308) > 0
    assert float(pri._leaf(1e154)) == pytest.approx(1e308)


def test_exact_leaves_survive_state_dict_and_states_with_double_leaves_load():
    rb = _small(tv.PrioritizedSampler(None, 2.0, 0.4, 0.0, seed=1))
    rb.update_priority([0, 1, 2], [1e308, 1e-300, 3.0])  # leaves 1e616 and 1e-600: beyond a double both ways
    rb2 = _small(tv.PrioritizedSampler(None, 2.0, 0.4, 0.0, seed=9))
    rb2.load_state_dict(rb.state_dict())
    assert rb2.priorities([0, 1, 2]).tolist() == rb.priorities([0, 1, 2]).tolist() == [float("inf"), 0.0, 9.0]
    (_, a), (_, b) = rb.sample(50, return_info=True), rb2.sample(50, return_info=True)
    np.testing.assert_array_equal(a["index"], b["index"])
    np.testing.assert_array_equal(a["_weight"], b["_weight"])
    # A state whose leaves are plain doubles (before exact leaves) still restores.
    rb3 = _small(tv.PrioritizedSampler(None, 1.0, 0.4, 0.0))
    rb3.update_priority([0, 1, 2], [1e300, 5e-324, 7.0])
    meta = rb3._impl.meta()
    old = {k: v for k, v in meta.items() if k not in ("leaf_mantissas", "leaf_exponents")}
    old["leaves"] = np.ldexp(meta["leaf_mantissas"], meta["leaf_exponents"].astype(np.int32))
    rb4 = _small(tv.PrioritizedSampler(None, 1.0, 0.4, 0.0))
    rb4._impl.restore(old)
    assert rb4.priorities([0, 1, 2]).tolist() == [1e300, 5e-324, 7.0]
    old["leaves"][1] = -1.0
    with pytest.raises(ValueError, match="finite and >= 0"):
        rb4._impl.restore(old)
