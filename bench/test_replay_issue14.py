"""Replay (issue 14): uniform and prioritized sampling from a 1,000,000-step buffer, bytes per stored step in
RAM and on disk, dumps + loads of a 1 GB buffer (10,000 steps / 64 MB under ``--benchmark-disable``).

* ``replay-uniform-stack``: 256 transitions uniformly over the stored steps (`tv.RandomSampler`), with every
  stored column and the 4-frame 84x84 stack ``obs@"-3:0"`` built at sample time, side by side with ``numpy``:
  the same rows gathered by fancy indexing from the same ring (the buffer's own memory, viewed as arrays; one
  ``take`` per column and per stack offset, zeros before a trajectory's start): the same output bytes.
  ``extra_info.frames_per_step`` (RAM) is ``nbytes() / len(rb) / 7056``.
* ``replay-prioritized``: `tv.PrioritizedSampler` (alpha 0.6, beta 0.4) over 1,000,000 W1 steps (obs
  float32[4]): ``sample(256, return_info=True)`` then ``update_priority(index, new priorities)``.
* ``replay-memmap``: the uniform stack sample from ``storage="memmap"`` (files in a temporary directory);
  ``extra_info.disk_frames_per_step``: allocated file blocks / stored steps / 7056.
* ``replay-dumps-loads``: ``rb.dumps(dir)`` + ``rb2.loads(dir)`` of a buffer of 1 GB of rows, beside
  ``numpy``: ``ndarray.tofile`` + ``np.fromfile`` of the same bytes to the same disk (both through the page
  cache, as they run); ``extra_info.gb_per_s``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import trajview as tv

VR = tv.ViewRequirement
FRAME = (84, 84)
FRAME_BYTES = 84 * 84
TRAJ_LEN = 500
BATCH = 256
COLUMNS = ["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"]
STACK = {"stack": VR("obs", shift="-3:0")}


def steps(benchmark, full: int) -> int:
    return 10_000 if getattr(benchmark, "disabled", False) else full


def chunk(k0: int, n: int, pool: np.ndarray) -> tv.SampleBatch:
    k = np.arange(k0, k0 + n)
    t = k % TRAJ_LEN
    return tv.SampleBatch({
        "obs": pool[k % len(pool)], "actions": k.astype(np.int64), "rewards": (k % 13).astype(np.float32),
        "terminateds": t == TRAJ_LEN - 1, "truncateds": np.zeros(n, bool), "eps_id": (k // TRAJ_LEN).astype(np.int64),
        "t": t.astype(np.int64),
    })


def fill(rb: tv.ReplayBuffer, n: int, pool: np.ndarray, step: int = 10_000) -> None:
    for k0 in range(0, n, step):
        rb.add(chunk(k0, min(step, n - k0), pool))
    assert len(rb) == n


def ring_arrays(rb: tv.ReplayBuffer) -> dict[str, np.ndarray]:
    """The buffer's rows as numpy arrays over its own memory (no copy): the numpy baseline reads the same bytes."""
    out = {}
    for i, (name, (dt, shape)) in enumerate(rb.columns.items()):
        out[name] = rb._impl.column_view(i).view(dt).reshape(rb.capacity, *shape)
    return out


def numpy_gather(ring: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    out = {c: a.take(rows, axis=0) for c, a in ring.items()}
    frames, t = ring["obs"], out["t"]
    st = np.empty((len(rows), 4, *frames.shape[1:]), frames.dtype)
    for j, s in enumerate(range(-3, 1)):
        np.take(frames, np.maximum(rows + s, 0), axis=0, out=st[:, j])
        st[t + s < 0, j] = 0
    out["stack"] = st
    out["is_init"] = np.ones(len(rows), bool)
    return out


@pytest.fixture(scope="module")
def pool():
    return np.random.default_rng(0).integers(0, 255, (7, *FRAME), dtype=np.uint8)


_BIG: dict = {}


def big_buffer(n: int, pool: np.ndarray) -> tv.ReplayBuffer:
    if _BIG.get("n") != n:
        _BIG.clear()
        rb = tv.ReplayBuffer(n, sampler=tv.RandomSampler(seed=0), columns=COLUMNS)
        fill(rb, n, pool)
        _BIG.update(n=n, rb=rb)
    return _BIG["rb"]


@pytest.mark.parametrize("impl", ["trajview", "numpy"])
def test_uniform_stack(benchmark, impl, pool):
    n = steps(benchmark, 1_000_000)
    rb = big_buffer(n, pool)
    ring = ring_arrays(rb)
    rng = np.random.default_rng(1)
    last: dict = {}
    if impl == "trajview":
        def run():
            out, info = rb.sample(BATCH, views=STACK, return_info=True)
            last["out"], last["rows"] = out, info["index"]
            return out
    else:
        def run():
            rows = rng.integers(0, n, BATCH)
            last["out"], last["rows"] = numpy_gather(ring, rows), rows
            return last["out"]
    benchmark.group = "replay-uniform-stack"
    benchmark.extra_info.update(impl=impl, steps=n, batch=BATCH)
    benchmark.pedantic(run, rounds=200, warmup_rounds=5)
    want = numpy_gather(ring, last["rows"])
    for c in want:
        np.testing.assert_array_equal(np.asarray(last["out"][c]), want[c], err_msg=c)
    benchmark.extra_info["bytes_out"] = sum(np.asarray(v).nbytes for v in want.values())
    if impl == "trajview":
        benchmark.extra_info["frames_per_step"] = rb.nbytes() / len(rb) / FRAME_BYTES


def test_prioritized(benchmark):
    n = steps(benchmark, 1_000_000)
    rb = tv.ReplayBuffer(n, sampler=tv.PrioritizedSampler(None, 0.6, 0.4, seed=0))
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    for k0 in range(0, n, 100_000):
        b = chunk(k0, min(100_000, n - k0), obs)
        rb.add(b)
    rng = np.random.default_rng(2)

    def run():
        out, info = rb.sample(BATCH, return_info=True)
        rb.update_priority(info["index"], rng.uniform(0.1, 2.0, BATCH))
        return info

    benchmark.group = "replay-prioritized"
    benchmark.extra_info.update(impl="trajview", steps=n, batch=BATCH)
    info = benchmark.pedantic(run, rounds=500, warmup_rounds=5)
    assert len(info["_weight"]) == BATCH and (info["_weight"] <= 1.0 + 1e-12).all()


def test_memmap_uniform_stack(benchmark, pool):
    n = steps(benchmark, 1_000_000)
    d = Path(tempfile.mkdtemp(prefix="tv-mm-", dir=os.environ.get("TRAJVIEW_BENCH_DIR")))
    try:
        rb = tv.ReplayBuffer(n, sampler=tv.RandomSampler(seed=0), columns=COLUMNS, storage="memmap", path=d)
        fill(rb, n, pool)
        disk = sum(p.stat().st_blocks * 512 for p in d.iterdir())
        benchmark.group = "replay-memmap"
        benchmark.extra_info.update(impl="trajview-memmap", steps=n, batch=BATCH,
                                    disk_frames_per_step=disk / n / FRAME_BYTES,
                                    frames_per_step=rb.nbytes() / n / FRAME_BYTES)
        out = benchmark.pedantic(lambda: rb.sample(BATCH, views=STACK), rounds=200, warmup_rounds=5)
        k = out["actions"]
        np.testing.assert_array_equal(out["obs"], pool[k % 7])
        del rb, out
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("impl", ["trajview", "numpy"])
def test_dumps_loads(benchmark, impl, pool):
    n = 10_000 if getattr(benchmark, "disabled", False) else 150_000  # 150,000 x 7,056 bytes: 1.06 GB of frames
    d = Path(tempfile.mkdtemp(prefix="tv-dump-", dir=os.environ.get("TRAJVIEW_BENCH_DIR")))
    try:
        rb = tv.ReplayBuffer(n, sampler=tv.RandomSampler(seed=0), columns=COLUMNS)
        fill(rb, n, pool)
        total = rb.nbytes()
        if impl == "trajview":
            rb2 = tv.ReplayBuffer(n, sampler=tv.RandomSampler(seed=0))

            def run():
                rb.dumps(d / "buf")
                rb2.loads(d / "buf")
        else:
            ring = ring_arrays(rb)
            back = {c: np.empty_like(a) for c, a in ring.items()}

            def run():
                for c, a in ring.items():
                    a.tofile(d / f"{c}.bin")
                for c, a in back.items():
                    a[...] = np.fromfile(d / f"{c}.bin", dtype=a.dtype).reshape(a.shape)
        benchmark.group = "replay-dumps-loads"
        benchmark.extra_info.update(impl=impl, steps=n, bytes=total)
        benchmark.pedantic(run, rounds=3, warmup_rounds=1)
        if benchmark.stats is not None:
            benchmark.extra_info["gb_per_s"] = 2 * total / benchmark.stats.stats.median / 1e9
        if impl == "trajview":
            np.testing.assert_array_equal(rb2.sample(8)["obs"][0].shape, FRAME)
            assert rb2.trajectories() == rb.trajectories()
    finally:
        shutil.rmtree(d, ignore_errors=True)
