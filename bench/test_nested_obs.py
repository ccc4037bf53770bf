"""Quick run of bench/nested_obs.py (one short round): the Dict-observation workload against the flat image.

Checks what the comparison rests on, not timings: both workloads run, the
image leaf's 4-frame stack holds each frame once in the batch, and the store
holds about one frame per step (timings: ``python bench/nested_obs.py``).
"""

from __future__ import annotations

import pytest

import nested_obs


@pytest.mark.parametrize("dict_obs", [False, True], ids=["flat", "dict"])
def test_nested_obs_workload(dict_obs):
    m = nested_obs.measure(dict_obs, fragments=1)
    assert m["worker"] > 0 and m["plain"] > 0
    assert 1.0 <= m["batch_frames"] <= 1.05  # 200 steps + 3 look-back frames + 1 final, per env
    assert 1.0 <= m["store_frames"] <= 1.05
