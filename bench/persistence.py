"""Replay dumps and loads (issue 23): `ReplayBuffer.dumps` + `loads` against `np.save` + `np.load` of the same
arrays, side by side in one run.

A buffer holds one ``obs`` column (frames: uint8[84, 84], or float32[64]) and ``terminateds``, full: its
rows total ``--sizes`` MiB. Per round, in the same folder and interleaved (so both meet the same machine):

* ``trajview``: ``rb.dumps(dir)`` (a committed folder: each column's rows as ``.npy`` written from the store's
  memory with a crc32, fsynced, renamed, the manifest replaced atomically) then ``rb2.loads(dir)`` (every file's
  size and crc32 verified, read straight into a fresh store, swapped in);
* ``numpy``: ``np.save`` of each column's rows (the same bytes) then ``np.load`` of each: no checksum, no fsync,
  no atomic rename: the bandwidth limit of writing and reading those bytes from Python (its pages are written
  back after its clock stops: before every timed round, of every side, ``os.sync()`` runs untimed, so no side's
  deferred writeback lands on another side's clock);
* ``numpy+fsync``: the same with each file fsynced (what durability alone costs on this disk).

Printed: per size and kind, the median of ``--repeats`` rounds with the spread (min..max) of the dump, load and
dump + load bandwidth (MiB of rows per second), and trajview's dump + load bandwidth as a share of numpy's
(goal: at least 50%).

    python bench/persistence.py                      # 64 and 512 MiB, 5 rounds (~2-4 minutes)
    python bench/persistence.py --quick              # 16 MiB, 3 rounds (seconds)
    python bench/persistence.py --dir /some/disk     # where the files go (default: a temporary folder)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import trajview as tv

KINDS = {"frames": (np.uint8, (84, 84)), "float32": (np.float32, (64,))}
EPISODE = 1000
MIB = 1 << 20


def filled_buffer(size_mib: int, kind: str) -> tv.ReplayBuffer:
    """A full buffer whose ``obs`` rows total ``size_mib`` MiB (values from a small pool, cycled through)."""
    dt, shape = KINDS[kind]
    row = np.dtype(dt).itemsize * int(np.prod(shape))
    capacity = max(EPISODE, size_mib * MIB // row)
    rb = tv.ReplayBuffer(capacity, sampler=tv.RandomSampler(seed=0),
                         columns={"obs": (dt, shape), "terminateds": (np.bool_, ())})
    pool = np.random.default_rng(0).integers(0, 255, size=(7, *shape)).astype(dt)
    k = 0
    while k < capacity:
        n = min(EPISODE, capacity - k)
        idx = np.arange(k, k + n)
        done = np.zeros(n, bool)
        done[-1] = True
        rb.add({"obs": pool[idx % len(pool)], "terminateds": done})
        k += n
    return rb


def _arrays(rb: tv.ReplayBuffer) -> list[np.ndarray]:
    """Each column's rows, as the arrays numpy saves (views of the buffer's memory: the same bytes)."""
    used = min(rb.rows_written(), rb.capacity)
    out = []
    for i, (dt, shape) in enumerate(rb.columns.values()):
        nbytes = used * np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64))
        out.append(rb._impl.column_view(i)[:nbytes].view(dt).reshape(used, *shape))
    return out


def _numpy_round(arrays: list[np.ndarray], folder: Path, fsync: bool) -> tuple[float, float]:
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for i, a in enumerate(arrays):
        with open(folder / f"{i}.npy", "wb") as f:
            np.save(f, a)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    t1 = time.perf_counter()
    back = [np.load(folder / f"{i}.npy", allow_pickle=False) for i in range(len(arrays))]
    t2 = time.perf_counter()
    assert all(b.shape == a.shape for a, b in zip(arrays, back))
    return t1 - t0, t2 - t1


def _trajview_round(rb: tv.ReplayBuffer, rb2: tv.ReplayBuffer, folder: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    rb.dumps(folder)
    t1 = time.perf_counter()
    rb2.loads(folder)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def measure(sizes_mib: list[int], kinds: list[str], repeats: int, where: Path) -> list[dict]:
    """One row per (size, kind, side): the median and min..max of dump, load and dump + load MiB/s."""
    rows = []
    for size in sizes_mib:
        for kind in kinds:
            rb = filled_buffer(size, kind)
            rb2 = tv.ReplayBuffer(rb.capacity, sampler=tv.RandomSampler())
            arrays = _arrays(rb)
            mib = sum(a.nbytes for a in arrays) / MIB
            times: dict[str, list[tuple[float, float]]] = {"trajview": [], "numpy": [], "numpy+fsync": []}
            for r in range(repeats):
                for side in (("trajview", "numpy", "numpy+fsync") if r % 2 == 0 else
                             ("numpy+fsync", "numpy", "trajview")):
                    d = where / f"{side}-{size}-{kind}"
                    # Untimed: every side starts with nothing waiting to be written back. Without it the plain numpy
                    # side's unsynced pages were written back while the next side was being timed (charging numpy's
                    # deferred writes, and an fsync's journal commit, to whichever side came after it).
                    os.sync()
                    if side == "trajview":
                        times[side].append(_trajview_round(rb, rb2, d))
                    else:
                        times[side].append(_numpy_round(arrays, d, fsync=side == "numpy+fsync"))
                    if side == "trajview" and r == 0:  # the load is the dump, byte for byte
                        assert rb2.trajectories() == rb.trajectories()
                        assert all(np.array_equal(a, b) for a, b in zip(_arrays(rb), _arrays(rb2)))
            for side, ts in times.items():
                bw = {"dump": [mib / a for a, _ in ts], "load": [mib / b for _, b in ts],
                      "total": [mib / (a + b) for a, b in ts]}
                rows.append({"size_mib": size, "kind": kind, "side": side, "mib": mib, "repeats": repeats,
                             **{f"{k}_median": statistics.median(v) for k, v in bw.items()},
                             **{f"{k}_min": min(v) for k, v in bw.items()},
                             **{f"{k}_max": max(v) for k, v in bw.items()}})
            base = next(r for r in rows if r["size_mib"] == size and r["kind"] == kind and r["side"] == "numpy")
            for r in rows:
                if r["size_mib"] == size and r["kind"] == kind:
                    r["share_of_numpy"] = r["total_median"] / base["total_median"]
            for d in where.iterdir():
                shutil.rmtree(d, ignore_errors=True)
            del rb, rb2, arrays
    return rows


def print_table(rows: list[dict]) -> None:
    print("| rows | kind | side | dump MiB/s | load MiB/s | dump + load MiB/s | share of numpy |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cell = {k: f"{r[f'{k}_median']:.0f} ({r[f'{k}_min']:.0f}..{r[f'{k}_max']:.0f})"
                for k in ("dump", "load", "total")}
        print(f"| {r['size_mib']} MiB | {r['kind']} | {r['side']} | {cell['dump']} | {cell['load']} | "
              f"{cell['total']} | {r['share_of_numpy']:.2f} |")
    print(f"\nmedian of {rows[0]['repeats']} rounds (min..max); share: dump + load bandwidth over numpy's "
          f"(np.save + np.load, no fsync); goal >= 0.50")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="16 MiB, 3 rounds")
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 512], help="MiB of rows")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="folder for the files (default: a temporary one)")
    args = ap.parse_args()
    sizes, repeats = ([16], 3) if args.quick else (args.sizes, args.repeats)
    base = Path(tempfile.mkdtemp(prefix="trajview-bench-", dir=args.dir))
    try:
        print(f"files in {base}; {os.cpu_count()} CPUs")
        print_table(measure(sizes, args.kinds, repeats, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
