"""Memory bandwidth, the yardstick of the batch build (group ``memcpy``).

``np.copyto`` of a 113 MB array (the size of the 4000-step frame stack,
4000 x 4 x 84 x 84 uint8) into a preallocated array, and into a freshly
allocated ``np.empty`` one (page faults included, as for any fresh batch).
"""

from __future__ import annotations

import numpy as np
import pytest

from _common import FRAME_BYTES, median_s

NBYTES = 4000 * 4 * FRAME_BYTES  # 112_896_000


@pytest.fixture(scope="module")
def src():
    return np.random.default_rng(0).integers(0, 256, NBYTES, dtype=np.uint8)


@pytest.mark.parametrize("dst", ["prealloc", "fresh"])
def test_memcpy(benchmark, src, dst):
    if dst == "prealloc":
        out = np.empty_like(src)
        out.fill(0)  # fault the pages in before timing

        def copy():
            np.copyto(out, src)
            return out

    else:

        def copy():
            out = np.empty(src.shape, dtype=src.dtype)
            np.copyto(out, src)
            return out

    benchmark.group = "memcpy"
    benchmark.extra_info.update(question="memcpy", impl=f"copyto-{dst}", bytes_out=NBYTES)
    got = benchmark.pedantic(copy, rounds=20, warmup_rounds=2)
    assert got.shape == src.shape and np.array_equal(got, src)

    med = median_s(benchmark)
    if med is not None:
        benchmark.extra_info["gb_per_s"] = NBYTES / med / 1e9
