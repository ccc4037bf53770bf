"""The store releases the GIL while it copies large data: other Python threads run meanwhile."""

import numpy as np
import pytest

import trajview as tv
from gil_check import assert_releases_gil

VR = tv.ViewRequirement


@pytest.mark.timing  # (another thread must run within the call: gil_check)
def test_build_batch_releases_the_gil():
    B, T = 8, 400
    coll = tv.Collector(
        B,
        {"obs": (np.uint8, (84, 84)), "actions": (np.int64, ())},
        {"stack": VR("obs", shift="-3:0"), "new_obs": VR("obs", shift=1), "actions": VR("actions")},
        chunk_rows=T,
    )
    frames = np.random.default_rng(0).integers(0, 255, (B, 84, 84), dtype=np.uint8)
    coll.begin_episodes(np.arange(B), {"obs": frames})
    for _ in range(T):
        coll.add_step({"obs": frames, "actions": np.zeros(B, np.int64)})

    # ~150 MB of frame stacks: tens of milliseconds in C++.
    segments = assert_releases_gil(coll.build_batch, "build_batch")
    assert sum(len(s) for s in segments) == B * T
