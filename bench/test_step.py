"""(a) Per env-step cost: add one step for B envs and build the next inference dict.

tv.Collector does both in one C++ call (``coll.step(data)``); the baselines are
the pure-Python ReferenceCollector (same API) and a hand-written numpy version
vectorized over the envs (``_common.NumpyRunner``). Each round times a block of
``BLOCK`` steps; the round's untimed setup emits everything (``build_batch``),
which keeps memory bounded while episodes run on (no resets are timed).
Reported: ``per_env_step_ns`` = median block time / (BLOCK * B).
"""

from __future__ import annotations

import pytest

from _common import IMPLS, OPTIONAL_INPUT_KEYS, assert_columns_equal, expected_input_dict, make_runner, median_s

BLOCK = 100  # env steps per timed round
WORKLOADS = ("W1", "W2")
NUM_ENVS = (1, 64, 256)

# Timed rounds per case, sized so that each case takes about a second or two.
ROUNDS = {
    ("W1", 1): 400, ("W1", 64): 200, ("W1", 256): 100,
    ("W2", 1): 200, ("W2", 64): 40, ("W2", 256): 12,
}
REFERENCE_ROUNDS = {("W1", 1): 60, ("W1", 64): 10, ("W2", 1): 40, ("W2", 64): 5}


def cases():
    for w in WORKLOADS:
        for b in NUM_ENVS:
            for impl in IMPLS:
                if impl == "reference" and b > 64:
                    continue  # the pure-Python reference would take too long at B=256
                yield pytest.param(w, b, impl, id=f"{w}-B{b}-{impl}")


@pytest.mark.parametrize(("workload", "num_envs", "impl"), list(cases()))
def test_step(benchmark, pools, workload, num_envs, impl):
    pool = pools(workload, num_envs)
    runner = make_runner(impl, pool, capacity=BLOCK)
    rounds = (REFERENCE_ROUNDS if impl == "reference" else ROUNDS)[(workload, num_envs)]

    benchmark.group = f"{workload}-B{num_envs}-step"
    benchmark.extra_info.update(
        question="step", impl=impl, workload=workload, num_envs=num_envs, steps_per_round=BLOCK
    )
    last = benchmark.pedantic(runner.steps, args=(BLOCK,), setup=runner.flush, rounds=rounds, warmup_rounds=2)

    # The last inference dict of the timed run is the one the pool's data implies.
    expected = expected_input_dict(pool, runner.k, runner.eps_ids)
    assert_columns_equal(last, expected, f"{impl} input dict", optional=OPTIONAL_INPUT_KEYS)
    assert runner.k % BLOCK == 0 and runner.k >= BLOCK

    med = median_s(benchmark)
    if med is not None:
        benchmark.extra_info["per_env_step_ns"] = med / (BLOCK * num_envs) * 1e9
