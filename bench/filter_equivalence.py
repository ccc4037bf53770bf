#!/usr/bin/env python3
"""trajview's MeanStdFilter next to RLlib's (ray.rllib.utils.filter), call by call.

    .venv-compare/bin/python bench/filter_equivalence.py      # RLlib from bench/requirements-compare.txt

Two "workers" filter random observations (float32 and float64 rows, one at a
time), then a driver synchronizes them as RLlib's FilterManager does (copy
each worker's filter, clear its buffer, ``apply_changes(copy,
with_buffer=False)`` on the driver, ``sync`` every worker to the driver),
for 5 rounds. After every call the outputs, running statistics (n, mean,
std) and buffers (n, mean) of both implementations are compared; exits 1 on
the first difference beyond float rounding.
"""

import sys

import numpy as np
from ray.rllib.utils.filter import MeanStdFilter as RLlibFilter

from trajview.rollout.filter import MeanStdFilter as TVFilter


def same(a, b, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-5):
        print(f"DIFFERENT {what}: RLlib {a} trajview {b}")
        sys.exit(1)


def check(r, t, what):
    for name in ("running_stats", "buffer"):
        rs, ts = getattr(r, name), getattr(t, name)
        if rs.n != ts.n:
            print(f"DIFFERENT {what} {name}.n: RLlib {rs.n} trajview {ts.n}")
            sys.exit(1)
        same(rs.mean, ts.mean, f"{what} {name}.mean")
    same(r.running_stats.std, t.running_stats.std, f"{what} running_stats.std")


rng = np.random.default_rng(0)
shape = (3,)
calls = 0
for dtype in (np.float32, np.float64):
    drv_r, drv_t = RLlibFilter(shape), TVFilter(shape)
    workers = [(RLlibFilter(shape), TVFilter(shape)) for _ in range(2)]
    for rnd in range(5):
        for w, (fr, ft) in enumerate(workers):
            for _ in range(int(rng.integers(1, 20))):
                x = (rng.normal(size=shape) * rng.uniform(0.1, 50) + rng.uniform(-5, 5)).astype(dtype)
                yr, yt = fr(x), ft(x)
                if yr.dtype != yt.dtype:
                    print(f"DIFFERENT output dtype: RLlib {yr.dtype} trajview {yt.dtype}")
                    sys.exit(1)
                same(yr, yt, f"output (round {rnd}, worker {w})")
                calls += 1
            check(fr, ft, f"worker {w} after round {rnd}")
        # FilterManager.synchronize
        copies = []
        for fr, ft in workers:
            copies.append((fr.copy(), ft.copy()))
            fr.reset_buffer()
            ft.reset_buffer()
        for cr, ct in copies:
            drv_r.apply_changes(cr, with_buffer=False)
            drv_t.apply_changes(ct, with_buffer=False)
        check(drv_r, drv_t, f"driver after round {rnd}")
        for fr, ft in workers:
            fr.sync(drv_r.as_serializable())
            ft.sync(drv_t.as_serializable())
            check(fr, ft, f"worker synced after round {rnd}")
print(f"MeanStdFilter: {calls} filter calls and 10 synchronizations, RLlib and trajview agree")
