"""(b) Building a 4000-step training batch with the frame-stack view (W2).

B envs x 4000/B steps are collected in the untimed setup of every round; the
round times building the batch: ``tv.concat_samples(coll.build_batch())`` for
the collectors, fancy indexing into the ``[T, B, ...]`` buffers for numpy.
``trajview-lazy`` is the same collector with ``lazy_views=True``: the batch
holds the frames once plus an index per view (``tv.LazyView``), as the
RolloutWorker's batches do. Reported: ``bytes_out`` (all output arrays; a lazy
column's base once) and ``gb_per_s`` = bytes_out / median. Compare with the
``memcpy`` group (test_memcpy.py).
"""

from __future__ import annotations

import pytest

from _common import IMPLS, assert_columns_equal, batch_nbytes, expected_batch, make_runner, median_s

STEPS = 4000  # env steps per batch
NUM_ENVS = (1, 8)
ROUNDS = {"trajview": 15, "trajview-lazy": 15, "numpy": 15, "reference": 3}
BATCH_IMPLS = (*IMPLS, "trajview-lazy")


@pytest.mark.parametrize("impl", BATCH_IMPLS)
@pytest.mark.parametrize("num_envs", NUM_ENVS, ids=lambda b: f"B{b}")
def test_batch(benchmark, pools, num_envs, impl):
    pool = pools("W2", num_envs)
    T = STEPS // num_envs
    runner = make_runner(impl, pool, capacity=T)

    def refill():
        runner.steps(T)

    benchmark.group = "W2-batch-4000"
    benchmark.extra_info.update(question="batch", impl=impl, workload="W2", num_envs=num_envs, steps=STEPS)
    batch = benchmark.pedantic(runner.batch, setup=refill, rounds=ROUNDS[impl], warmup_rounds=1)

    # The last round's batch: every column, the frame stack included, as the pool implies.
    assert len(batch["t"]) == STEPS
    nbytes = batch_nbytes(batch)  # before the check below reads (materializes) the lazy columns
    assert_columns_equal(batch, expected_batch(pool, runner.k - T, runner.k, runner.eps_ids), f"{impl} batch")

    benchmark.extra_info["bytes_out"] = nbytes
    med = median_s(benchmark)
    if med is not None:
        benchmark.extra_info["gb_per_s"] = nbytes / med / 1e9
