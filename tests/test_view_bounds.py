"""ViewRequirement's documented bounds: offsets within +-MAX_SHIFT, at most MAX_OFFSETS of them (ValueError, never
OverflowError or a huge allocation), and the stores built from views at the bounds work."""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv
from trajview.views.view_requirement import MAX_BATCH_REPEAT, MAX_OFFSETS, MAX_SHIFT


@pytest.mark.parametrize(
    "shift",
    [-(2**62), 2**63 - 1, 2**64, -(2**70), MAX_SHIFT + 1, -MAX_SHIFT - 1, f"0:{2**40}", f"{-MAX_SHIFT - 1}:0",
     [0, 2**63], [np.int64(-(2**62))], f"0:{MAX_OFFSETS}"],
)
def test_out_of_bound_shifts_are_value_errors(shift):
    with pytest.raises(ValueError, match=r"ViewRequirement shift"):
        tv.ViewRequirement("obs", shift=shift)


def test_too_many_offsets_in_a_list():
    with pytest.raises(ValueError, match=rf"at most {MAX_OFFSETS} allowed"):
        tv.ViewRequirement("obs", shift=list(range(MAX_OFFSETS + 1)))


@pytest.mark.parametrize("value", [0, -1, MAX_BATCH_REPEAT + 1, 2**63, 1.5, True])
def test_batch_repeat_value_bounds(value):
    with pytest.raises(ValueError, match=r"batch_repeat_value must be an int in \[1, "):
        tv.ViewRequirement("obs", batch_repeat_value=value)


def test_views_at_the_bounds_work_in_the_store():
    vrs = {
        "far_back": tv.ViewRequirement("obs", shift=-MAX_SHIFT),
        "far_ahead": tv.ViewRequirement("obs", shift=MAX_SHIFT, used_for_compute_actions=False),
    }
    coll = tv.Collector(2, {"obs": (np.float32, (2,))}, vrs, chunk_rows=4)
    coll.begin_episodes(np.arange(2), {"obs": np.ones((2, 2), np.float32)})
    inputs = coll.step({"obs": np.full((2, 2), 2, np.float32)})
    np.testing.assert_array_equal(inputs["far_back"], 0)  # before the episode's start: the pad row
    coll.end_episodes(np.arange(2))
    b = tv.concat_samples(coll.build_batch())
    np.testing.assert_array_equal(b["far_ahead"], 0)  # past the episode's end: zeros
    assert len(b) == 2


@pytest.mark.parametrize("n, pattern", [(2**62, r"batch_size must be at most 2147483648"), (0, r"batch_size must be an int >= 1"),
                                        (1.5, r"batch_size must be an int >= 1"), (6, r"divisible by slice_len=4")])
def test_replay_sample_sizes_are_checked(n, pattern):
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=4))
    rb.add(tv.SampleBatch({"obs": np.zeros((10, 2), np.float32), "eps_id": np.zeros(10, np.int64), "t": np.arange(10)}))
    with pytest.raises(ValueError, match=pattern):
        rb.sample(n)


def test_replay_views_are_checked():
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=2))
    rb.add(tv.SampleBatch({"obs": np.zeros((10, 2), np.float32), "eps_id": np.zeros(10, np.int64), "t": np.arange(10)}))
    with pytest.raises(TypeError, match=r"views\['x'\] must be a tv.ViewRequirement or a tv.NStep, got int"):
        rb.sample(4, views={"x": 3})
    with pytest.raises(ValueError, match=r"views\['x'\] reads column 'nope', which is not stored"):
        rb.sample(4, views={"x": tv.ViewRequirement("nope")})
    with pytest.raises(ValueError, match=r"ViewRequirement shift"):
        rb.sample(4, views={"x": tv.ViewRequirement("obs", shift=-(2**62))})
