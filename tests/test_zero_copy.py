"""Batch arrays are numpy views of C++-owned memory that outlive the collector."""

import gc

import numpy as np
import pytest

import trajview as tv
from trajview import _core

VR = tv.ViewRequirement


def _owner(arr: np.ndarray):
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    return base


def _addr(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _collector(num_envs=2, lazy_views=False):
    cols = {"obs": (np.float32, (3,)), "actions": (np.int64, ()), "rewards": (np.float32, ())}
    vrs = {
        "obs": VR("obs"),
        "new_obs": VR("obs", shift=1, used_for_compute_actions=False),
        "stack": VR("obs", shift="-2:0"),
        "actions": VR("actions"),
        "prev_actions": VR("actions", shift=-1),
        "rewards": VR("rewards"),
    }
    return tv.Collector(num_envs, cols, vrs, chunk_rows=4, lazy_views=lazy_views)


def _fill(coll, steps, num_envs=2):
    coll.begin_episodes(np.arange(num_envs), {"obs": np.zeros((num_envs, 3), np.float32)})
    for t in range(steps):
        obs = np.full((num_envs, 3), t + 1, np.float32) + np.arange(num_envs, dtype=np.float32)[:, None] * 100
        coll.add_step({"obs": obs, "actions": np.arange(num_envs) + 10 * t, "rewards": np.full(num_envs, t, np.float32)})


def test_batch_arrays_view_cpp_buffers_and_outlive_the_collector():
    coll = _collector()
    _fill(coll, 7)
    coll.end_episodes([0])
    segments = coll.build_batch()
    batch = tv.concat_samples(segments)
    expected = {k: np.array(v, copy=True) for k, v in batch.items()}
    for key, arr in batch.items():
        owner = _owner(arr)
        assert isinstance(owner, _core._Buffer), key
        assert _addr(arr) == owner.address, key  # the batch starts at the C++ buffer: no copy
        assert arr.nbytes <= owner.nbytes
    # Each segment is a slice of the same buffer.
    for seg in segments:
        for key, arr in seg.items():
            assert np.shares_memory(arr, batch[key]), key
    assert _addr(segments[1]["obs"]) == _addr(batch["obs"]) + 7 * 3 * 4

    del coll, segments
    gc.collect()
    # Churn the allocator so freed memory would be overwritten.
    junk = [np.full(1000, 7.0) for _ in range(100)]
    assert len(junk) == 100
    for key, arr in batch.items():
        np.testing.assert_array_equal(arr, expected[key], err_msg=key)


def test_lazy_views_free_their_buffers_with_their_last_array():
    """A LazyView keeps its base and index alive; a materialized column is a numpy array of its own."""
    gc.collect()
    before = _core._live_buffers()
    coll = _collector(lazy_views=1)
    _fill(coll, 5)
    batch = tv.concat_samples(coll.build_batch())
    stack = dict.__getitem__(batch, "stack")
    assert isinstance(stack, tv.LazyView)
    obs = batch["obs"]  # materialized: owns its memory
    del coll, batch
    gc.collect()
    assert _core._live_buffers() == before + 2  # the stack's index and the obs base it shares
    np.testing.assert_array_equal(obs[:, 0], [0, 1, 2, 3, 4, 0, 101, 102, 103, 104])
    np.testing.assert_array_equal(np.asarray(stack)[:, -1], obs)
    del stack
    gc.collect()
    assert _core._live_buffers() == before


def test_buffers_are_freed_with_their_last_array():
    gc.collect()
    before = _core._live_buffers()
    coll = _collector()
    _fill(coll, 5)
    batch = tv.concat_samples(coll.build_batch())
    assert _core._live_buffers() > before
    obs = batch["obs"]
    del coll, batch
    gc.collect()
    assert _core._live_buffers() == before + 1  # only obs's buffer is still referenced
    np.testing.assert_array_equal(obs[:, 0], [0, 1, 2, 3, 4, 0, 101, 102, 103, 104])
    del obs
    gc.collect()
    assert _core._live_buffers() == before


def test_input_dict_arrays_are_fresh_copies():
    coll = _collector()
    _fill(coll, 3)
    d = coll.input_dict()
    d["obs"][:] = -1
    d["stack"][:] = -1
    d2 = coll.input_dict()
    np.testing.assert_array_equal(d2["obs"], [[3, 3, 3], [103, 103, 103]])
    batch = tv.concat_samples(coll.build_batch())
    np.testing.assert_array_equal(batch["new_obs"][2], [3, 3, 3])


def test_in_place_edit_of_a_segment_writes_the_flat_batch():
    coll = _collector()
    _fill(coll, 4)
    segments = coll.build_batch()
    segments[1]["rewards"] *= 2  # in place: still the collector's buffer
    batch = tv.concat_samples(segments)
    assert np.shares_memory(batch["rewards"], segments[0]["rewards"])
    np.testing.assert_array_equal(batch["rewards"], [0, 1, 2, 3, 0, 2, 4, 6])


@pytest.mark.parametrize("steps", [1, 5, 9])
def test_store_storage_is_released_after_emission(steps):
    coll = _collector()
    _fill(coll, steps)
    held = coll.nbytes()
    assert held > 0
    coll.end_episodes([0, 1])
    coll.build_batch()
    assert coll.num_steps() == 0
    # Finished episodes are gone; only idle pooled chunks (bounded) may remain.
    pooled = coll.nbytes()
    _fill(coll, steps)
    assert coll.nbytes() <= max(held, pooled)
