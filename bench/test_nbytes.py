"""(c) Bytes stored per step for W2 with the 4-frame stack view.

A user running rollout fragments of L steps sets ``chunk_rows = L`` (the
collector adds the rows its views look back at). Each
round runs one fragment (L steps of ``step``, then ``build_batch``) and records
``nbytes() / steps held`` in units of one frame (7056 bytes) mid-fragment
(L/2 steps in) and at the end (L steps, before ``build_batch``), for the first
fragment and in steady state (the last fragment run). The floor is about
1 + 14/7056 (the step columns); views must cost nothing.
"""

from __future__ import annotations

import pytest

from _common import FRAME_BYTES, IMPLS, make_runner, median_s

L = 200  # rollout_fragment_length
FRAGMENTS = 4  # rounds: the first is "first", the last "steady"
NUM_ENVS = (1, 8)


def cases():
    for b in NUM_ENVS:
        for impl in IMPLS:
            yield pytest.param(b, impl, L, id=f"B{b}-{impl}")


@pytest.mark.parametrize(("num_envs", "impl", "chunk_rows"), list(cases()))
def test_nbytes(benchmark, pools, num_envs, impl, chunk_rows):
    pool = pools("W2", num_envs)
    runner = make_runner(impl, pool, capacity=L, chunk_rows=chunk_rows)
    records: list[tuple[float, float]] = []

    def ratio() -> float:
        return runner.nbytes() / runner.steps_held() / FRAME_BYTES

    def fragment():
        runner.steps(L // 2)
        mid = ratio()
        runner.steps(L - L // 2)
        end = ratio()
        records.append((mid, end))
        runner.flush()
        return mid, end

    benchmark.group = "bytes-per-step"
    benchmark.extra_info.update(
        question="bytes", impl=impl, workload="W2", num_envs=num_envs, chunk_rows=chunk_rows,
        fragment_length=L, frame_bytes=FRAME_BYTES,
    )
    benchmark.pedantic(fragment, rounds=FRAGMENTS)
    while len(records) < 3:  # --benchmark-disable runs one round: reach steady state untimed
        fragment()

    (first_mid, first_end), (steady_mid, steady_end) = records[0], records[-1]
    benchmark.extra_info.update(
        fragments=len(records), first_mid=first_mid, first_end=first_end, steady_mid=steady_mid, steady_end=steady_end
    )
    for r in (first_mid, first_end, steady_mid, steady_end):
        assert r > 1.0, f"{impl}: {r} bytes per step per frame: less than one frame per step cannot hold the data"
    # Each fragment was emitted whole.
    assert runner.steps_held() == 0 and runner.k == len(records) * L

    med = median_s(benchmark)
    if med is not None:
        benchmark.extra_info["per_env_step_ns"] = med / (L * num_envs) * 1e9
