"""The store releases the GIL while it copies large data: other Python threads run meanwhile."""

import threading
import time

import numpy as np

import trajview as tv

VR = tv.ViewRequirement


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

    stamps: list[float] = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    th = threading.Thread(target=count)
    th.start()
    try:
        time.sleep(0.01)  # the counter runs
        t0 = time.perf_counter()
        segments = coll.build_batch()  # ~150 MB of frame stacks: tens of milliseconds in C++
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
    assert sum(len(s) for s in segments) == B * T
    assert t1 - t0 > 0.004, f"build_batch took {t1 - t0:.4f} s: too short to tell"
    # Had the GIL been held, no stamp could fall in the middle of the call.
    lo, hi = t0 + (t1 - t0) * 0.25, t0 + (t1 - t0) * 0.75
    assert any(lo < s < hi for s in stamps), "no other Python thread ran while build_batch copied: the GIL was held"
