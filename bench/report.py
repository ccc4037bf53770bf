#!/usr/bin/env python3
"""Run the benchmarks and print what the targets ask for.

    python bench/report.py                    # run pytest bench/ --benchmark-only, then report
    python bench/report.py --json FILE        # report on an earlier --benchmark-json run
    python bench/report.py -- -k W1           # extra pytest arguments after "--"

Prints the medians per group, then the target ratios:

(a) W1 B=64: trajview / numpy time per env step (target <= 1.0) and
    reference / trajview (target >= 100x); W2 B=64: trajview / numpy (<= 1.25);
(b) GB/s written building the 4000-step W2 batch vs memcpy GB/s (>= 25 %);
(c) bytes stored per step / bytes of one frame, W2 with the frame stack (<= 1.05);
replay (issue 5): 256x32 stacked-frame slices / numpy gather (<= 2), float32[4] slices (< 1 ms),
stored bytes per step / frame (<= 1.05).

and draws a bar chart of the per env-step costs (``--png``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IMPLS = ("trajview", "numpy", "reference")

# Targets: (a) W1 B64 tv/numpy, (a) W1 B64 ref/tv, (a) W2 B64 tv/numpy, (b) batch / memcpy, (c) bytes ratio.
TARGET_W1_VS_NUMPY = 1.0
TARGET_W1_SPEEDUP_VS_REFERENCE = 100.0
TARGET_W2_VS_NUMPY = 1.25
TARGET_BATCH_VS_MEMCPY = 0.25
TARGET_BYTES_RATIO = 1.05
TARGET_WORKER_OVERHEAD_NS = {1: 5000.0, 64: 1000.0}  # issue 3: sample() minus the bare env+policy loop
# issue 5 (replay): 256x32 slices from a 100k-step buffer
TARGET_REPLAY_W2_VS_NUMPY = 2.0   # 4-frame stacks of 84x84 frames vs the numpy fancy-index gather of the same bytes
TARGET_REPLAY_W1_MS = 1.0         # float32[4] obs
TARGET_REPLAY_BYTES_RATIO = 1.05  # stored bytes per step / one frame
BYTES_B = 8  # the B of the headline bytes-per-step ratio (a B=8, L=200 rollout)


def run_benchmarks(json_path: Path, extra: list[str]) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pytest", str(HERE), "--benchmark-only", f"--benchmark-json={json_path}",
        "-q", "-p", "no:cacheprovider", "--benchmark-columns=median,min,max,rounds", *extra,
    ]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc != 0:
        sys.exit(f"pytest failed (exit status {rc}); no report")


def load(json_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = json.loads(json_path.read_text())
    return data, data["benchmarks"]


def fmt_time(s: float | None) -> str:
    if s is None or math.isnan(s):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None or math.isnan(x) else f"{x:{spec}}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="report on this --benchmark-json file instead of running pytest")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="where the run's JSON and PNG go (default bench/out)")
    ap.add_argument("--png", type=Path, help="bar chart path (default OUT/per_env_step.png)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()

    json_path = args.json
    if json_path is None:
        json_path = args.out / "benchmarks.json"
        run_benchmarks(json_path, args.pytest_args)
    data, benches = load(json_path)

    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in benches:
        groups[b["group"]].append(b)

    mi = data.get("machine_info", {})
    ci = data.get("commit_info", {})
    print()
    print(f"machine: {mi.get('cpu', {}).get('brand_raw', mi.get('processor', '?'))}, "
          f"{os.cpu_count()} cpus here; python {mi.get('python_version', '?')}; "
          f"commit {str(ci.get('id', '?'))[:10]}{' (dirty)' if ci.get('dirty') else ''}; {data.get('datetime', '')}")

    # ---------------------------------------------------------------- medians per group
    print("\n== medians per group ==")
    for g in sorted(groups):
        rows = []
        for b in sorted(groups[g], key=lambda b: b["stats"]["median"]):
            s, e = b["stats"], b["extra_info"]
            extra = []
            if "per_env_step_ns" in e:
                extra.append(f"{e['per_env_step_ns']:.1f} ns/env-step")
            if "gb_per_s" in e:
                extra.append(f"{e['gb_per_s']:.2f} GB/s")
            if "steady_end" in e:
                extra.append(f"bytes/step/frame end {e['first_end']:.3f} (1st) {e['steady_end']:.3f} (steady)")
            rows.append([b["name"], fmt_time(s["median"]), fmt_time(s["min"]), str(s["rounds"]), "; ".join(extra)])
        print(f"\n[{g}]")
        print(table(["benchmark", "median", "min", "rounds", ""], rows))

    # ---------------------------------------------------------------- (a) per env step
    step: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for b in benches:
        e = b["extra_info"]
        if e.get("question") == "step":
            step[(e["workload"], e["num_envs"])][e["impl"]] = b["stats"]["median"] / (e["steps_per_round"] * e["num_envs"])
    print("\n== (a) per env-step cost: add a step + build the next inference dict (median, ns) ==")
    rows = []
    for (w, B) in sorted(step):
        c = step[(w, B)]
        ns = {k: v * 1e9 for k, v in c.items()}
        rows.append([f"{w} B={B}", fmt(ns.get("trajview"), ".1f"), fmt(ns.get("numpy"), ".1f"), fmt(ns.get("reference"), ".0f"),
                     fmt(ratio(c.get("trajview"), c.get("numpy")), ".2f"),
                     fmt(ratio(c.get("reference"), c.get("trajview")), ".0f", "x")])
    print(table(["workload", "trajview", "numpy", "reference", "tv/numpy", "ref/tv"], rows))

    # ---------------------------------------------------------------- (b) batch build
    batch: dict[tuple[str, int], tuple[float, float]] = {}
    memcpy: dict[str, float] = {}
    for b in benches:
        e = b["extra_info"]
        gbs = e["bytes_out"] / b["stats"]["median"] / 1e9 if "bytes_out" in e else None
        if e.get("question") == "batch":
            batch[(e["impl"], e["num_envs"])] = (b["stats"]["median"], gbs)
        elif e.get("question") == "memcpy":
            memcpy[e["impl"]] = gbs
    print("\n== (b) building the 4000-step W2 training batch (frame stack included) ==")
    rows = []
    order = (*IMPLS, "trajview-lazy")
    for (impl, B), (med, gbs) in sorted(batch.items(), key=lambda kv: (kv[0][1], order.index(kv[0][0]))):
        rows.append([f"{impl} B={B}", fmt_time(med), fmt(gbs, ".2f"),
                     fmt(100 * ratio(gbs, memcpy.get("copyto-prealloc")) if gbs and memcpy.get("copyto-prealloc") else None, ".0f", " %"),
                     fmt(100 * ratio(gbs, memcpy.get("copyto-fresh")) if gbs and memcpy.get("copyto-fresh") else None, ".0f", " %")])
    for k, v in sorted(memcpy.items()):
        rows.append([f"memcpy {k}", "", fmt(v, ".2f"), "", ""])
    print(table(["batch", "median", "GB/s", "vs memcpy prealloc", "vs memcpy fresh"], rows))

    # ---------------------------------------------------------------- (c) bytes per step
    print("\n== (c) bytes stored per step / 7056 (one 84x84 frame), W2 + frame stack, L=200 ==")
    rows = []
    bytes_rows: dict[tuple[str, int, int], dict[str, float]] = {}
    for b in sorted(benches, key=lambda b: (b["extra_info"].get("num_envs", 0), b["name"])):
        e = b["extra_info"]
        if e.get("question") != "bytes":
            continue
        bytes_rows[(e["impl"], e["num_envs"], e["chunk_rows"])] = e
        rows.append([f"{e['impl']} B={e['num_envs']} chunk_rows={e['chunk_rows']}",
                     fmt(e["first_mid"], ".3f"), fmt(e["first_end"], ".3f"), fmt(e["steady_mid"], ".3f"),
                     fmt(e["steady_end"], ".3f"), str(e["fragments"])])
    print(table(["collector", "1st mid", "1st end", "steady mid", "steady end", "fragments"], rows))
    print("  (mid = L/2 steps into a fragment, end = L steps, before build_batch; steady = the last fragment run;"
          "\n   the reference never frees an ongoing episode, so its ratios grow with the fragments run)")

    # ---------------------------------------------------------------- worker
    print("\n== RolloutWorker.sample(): per env-step time, trivial env + constant policy, fragment 200 (ns) ==")
    worker: dict[int, dict[str, float]] = {}
    for b in benches:
        e = b["extra_info"]
        if e.get("question") == "worker" and "per_env_step_ns" in e:
            worker.setdefault(e["num_envs"], {})[e["impl"]] = e["per_env_step_ns"]
    rows = []
    for n in sorted(worker):
        w = worker[n]
        over = w["trajview"] - w["plain"] if "trajview" in w and "plain" in w else None
        rows.append([f"num_envs={n}", fmt(w.get("trajview"), ".0f"), fmt(w.get("plain"), ".0f"), fmt(over, ".0f")])
    print(table(["workload", "worker", "plain loop", "worker's own cost"], rows))

    # ---------------------------------------------------------------- replay
    print("\n== replay (issue 5): 256 slices x 32 steps from a 100k-step buffer; add 1000 W2 steps ==")
    replay: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    replay_bytes = None
    for b in benches:
        e = b["extra_info"]
        if e.get("question") in ("replay-sample", "replay-add"):
            replay[(e["question"], e["workload"])][e["impl"]] = b["stats"]["median"]
            if "bytes_per_step_per_frame" in e:
                replay_bytes = e["bytes_per_step_per_frame"]
    rows = []
    for (q, w), c in sorted(replay.items()):
        rows.append([f"{q} {w}", fmt_time(c.get("trajview")), fmt_time(c.get("numpy")),
                     fmt(ratio(c.get("trajview"), c.get("numpy")), ".2f")])
    print(table(["benchmark", "trajview", "numpy", "tv/numpy"], rows))
    print(f"  bytes stored per step / one 84x84 frame (full W2 buffer): {fmt(replay_bytes, '.4f')}")

    # ---------------------------------------------------------------- targets
    print("\n== targets ==")
    checks: list[tuple[str, float | None, str, bool | None]] = []

    def check(name: str, value: float | None, op: str, target: float, unit: str = "") -> None:
        ok = None if value is None else (value <= target if op == "<=" else value >= target)
        checks.append((name, value, f"{op} {target:g}{unit}", ok))

    w1, w2 = step.get(("W1", 64), {}), step.get(("W2", 64), {})
    check("(a) W1 B=64 trajview / numpy", ratio(w1.get("trajview"), w1.get("numpy")), "<=", TARGET_W1_VS_NUMPY)
    check("(a) W1 B=64 reference / trajview", ratio(w1.get("reference"), w1.get("trajview")), ">=",
          TARGET_W1_SPEEDUP_VS_REFERENCE, "x")
    check("(a) W2 B=64 trajview / numpy", ratio(w2.get("trajview"), w2.get("numpy")), "<=", TARGET_W2_VS_NUMPY)
    tv_gbs = batch.get(("trajview", 8), (None, None))[1]
    for k in ("copyto-prealloc", "copyto-fresh"):
        check(f"(b) batch GB/s (B=8) / memcpy {k.split('-')[1]} GB/s", ratio(tv_gbs, memcpy.get(k)), ">=",
              TARGET_BATCH_VS_MEMCPY)
    e = bytes_rows.get(("trajview", BYTES_B, 200))
    for when in ("first_end", "steady_end"):
        check(f"(c) bytes/step/frame B={BYTES_B} chunk_rows=L, {when.replace('_', ' ')}",
              None if e is None else e[when], "<=", TARGET_BYTES_RATIO)
    for n, limit in TARGET_WORKER_OVERHEAD_NS.items():
        w = worker.get(n, {})
        over = w["trajview"] - w["plain"] if "trajview" in w and "plain" in w else None
        check(f"worker's own cost per env-step (ns), num_envs={n}", over, "<=", limit)
    rs2, rs1 = replay.get(("replay-sample", "W2"), {}), replay.get(("replay-sample", "W1"), {})
    check("replay: W2 256x32 4-frame stacks, trajview / numpy gather", ratio(rs2.get("trajview"), rs2.get("numpy")),
          "<=", TARGET_REPLAY_W2_VS_NUMPY)
    check("replay: W1 256x32 slices (ms)", None if "trajview" not in rs1 else rs1["trajview"] * 1e3, "<=",
          TARGET_REPLAY_W1_MS)
    check("replay: bytes per stored step / frame", replay_bytes, "<=", TARGET_REPLAY_BYTES_RATIO)
    rows = [[n, fmt(v, ".3f"), t, "-" if ok is None else ("PASS" if ok else "FAIL")] for n, v, t, ok in checks]
    print(table(["target", "measured", "wanted", ""], rows))
    npy = bytes_rows.get(("numpy", BYTES_B, 200))
    if e is not None and npy is not None:
        print(f"  mid-fragment (info: any preallocation of a fragment holds ~2x there): trajview "
              f"{e['first_mid']:.3f} (1st) {e['steady_mid']:.3f} (steady), numpy {npy['first_mid']:.3f} / {npy['steady_mid']:.3f}")

    # ---------------------------------------------------------------- chart
    png = args.png or (json_path.parent / "per_env_step.png")
    if not step:
        print("\nno chart (no per env-step benchmarks in this run)")
        return
    try:
        draw(step, png)
        print(f"\nchart: {png}")
    except ImportError as err:  # matplotlib is optional
        print(f"\nno chart ({err})")


def draw(step: dict[tuple[str, int], dict[str, float]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({w for w, _ in step})
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4.2), squeeze=False)
    colors = {"trajview": "#1f77b4", "numpy": "#7f7f7f", "reference": "#d62728"}
    width = 0.27
    for ax, w in zip(axes[0], workloads):
        Bs = sorted(B for ww, B in step if ww == w)
        for i, impl in enumerate(IMPLS):
            xs, ys = [], []
            for j, B in enumerate(Bs):
                if impl in step[(w, B)]:
                    xs.append(j + (i - 1) * width)
                    ys.append(step[(w, B)][impl] * 1e9)
            bars = ax.bar(xs, ys, width, label=impl, color=colors[impl])
            for bar, y in zip(bars, ys):
                ax.annotate(f"{y:.0f}" if y >= 10 else f"{y:.1f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(Bs)), [f"B={B}" for B in Bs])
        ax.set_yscale("log")
        ax.set_ylabel("ns per env step (median)")
        title = {"W1": "W1: obs float32[4]", "W2": "W2: obs uint8[84,84] + 4-frame stack"}.get(w, w)
        ax.set_title(f"{title}\nadd step + next inference dict", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
