"""Shared check that a call releases the GIL while it runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def assert_releases_gil(call: Callable[[], Any], what: str) -> Any:
    """Runs ``call()`` while another thread records timestamps; returns its result.

    Had the GIL been held for the whole call, no timestamp could fall in the
    middle half of it. The call must take a few milliseconds to tell.
    """
    stamps: list[float] = []
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())

    th = threading.Thread(target=count)
    th.start()
    try:
        time.sleep(0.01)  # the counter runs
        t0 = time.perf_counter()
        result = call()
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
    assert t1 - t0 > 0.004, f"{what} took {t1 - t0:.4f} s: too short to tell"
    lo, hi = t0 + (t1 - t0) * 0.25, t0 + (t1 - t0) * 0.75
    assert any(lo < s < hi for s in stamps), f"no other Python thread ran while {what} copied: the GIL was held"
    return result
