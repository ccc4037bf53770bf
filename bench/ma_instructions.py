#!/usr/bin/env python3
"""bench/ma_compare.py's workload counted in CPU instructions (valgrind's callgrind), not timed.

    .venv-compare/bin/python bench/ma_instructions.py                 # trajview, the bare loop and RLlib (~20 min)
    .venv-compare/bin/python bench/ma_instructions.py --systems tv bare   # without RLlib (~2 min)

Wall-clock on a shared machine moves with the load; instruction counts do
not. For each system, two runs under ``valgrind --tool=callgrind`` (each: set
up, 2 warm-up samples, then ``n`` samples, n = ``--low`` and ``--high``) give
the instructions of one sample as the difference divided by ``high - low``
(start-up and warm-up cancel). The overhead per agent step is a system's
instructions per sample minus the bare loop's (the same envs stepped with the
same actions, nothing stored), per agent step. ``PYTHONHASHSEED=0`` and one
OpenBLAS thread keep the runs alike (repeats agree within about 1%).

Instructions are not time: a system that waits on memory more takes longer
per instruction. The timed comparison is bench/ma_compare.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENT_STEPS = 3200  # per sample: 16 envs x 100 env steps x 2 agents observed per env step (ma_compare.py)
NAMES = {"tv": "trajview", "bare": "bare loop", "rllib": "RLlib old stack"}


def child(system: str, n: int) -> None:
    sys.path.insert(0, str(HERE))
    import ma_compare

    make = {"tv": ma_compare.make_trajview, "bare": ma_compare.make_bare, "rllib": ma_compare.make_rllib}[system]
    sample = make(100)
    sample()
    sample()
    for _ in range(n):
        sample()


def count(system: str, n: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
           "--child", system, str(n)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if r.returncode != 0 or m is None:
        raise RuntimeError(f"{system} n={n}: valgrind failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", choices=sorted(NAMES), default=["bare", "tv", "rllib"])
    ap.add_argument("--low", type=int, default=1)
    ap.add_argument("--high", type=int, default=3)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt install valgrind)", file=sys.stderr)
        return 2
    if args.high <= args.low:
        ap.error("--high must be more than --low")
    systems = list(dict.fromkeys(["bare", *args.systems]))  # the bare loop is the baseline
    per_sample = {}
    for s in systems:
        lo, hi = count(s, args.low), count(s, args.high)
        per_sample[s] = (hi - lo) / (args.high - args.low)
        print(f"{NAMES[s]}: {per_sample[s] / 1e6:.1f} million instructions per sample", flush=True)
    bare = per_sample["bare"]
    print("\n| system | instructions per sample | per agent step | overhead per agent step |")
    print("|---|---|---|---|")
    for s in systems:
        over = (per_sample[s] - bare) / AGENT_STEPS
        print(f"| {NAMES[s]} | {per_sample[s] / 1e6:.1f} M | {per_sample[s] / AGENT_STEPS:,.0f} | "
              f"{over:,.0f} |")
    if "tv" in per_sample and "rllib" in per_sample:
        ratio = (per_sample["rllib"] - bare) / (per_sample["tv"] - bare)
        print(f"\nRLlib old stack / trajview overhead in instructions per agent step: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
