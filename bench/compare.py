#!/usr/bin/env python3
"""trajview side by side with RLlib (old and new stack), TorchRL, Stable-Baselines3 and Tianshou.

    python -m venv --system-site-packages .venv-compare      # see bench/requirements-compare.txt (torch 2.15.0; trajview from this tree)
    .venv-compare/bin/pip install -r bench/requirements-compare.txt
    .venv-compare/bin/python bench/compare.py                  # ~5 min on 2 cores; --quick for a smoke run

One process, the same workloads for every system, timed rounds alternating
between the systems (round r runs every system once, in the same order):

1. data equivalence: on one seeded CartPole-v1, trajview's RolloutWorker and
   RLlib's old-stack RolloutWorker (SimpleListCollector) with the same view
   requirements (prev_actions, prev_rewards, a 4-frame stack ``obs@"-3:0"``,
   new_obs) and the same deterministic policy: the same values column by column;
2. collection: ``steps`` env steps (4000 at 1 env, 64 x 63 = 4032 at 64 envs)
   of a dummy env (its step costs almost nothing: obs from a pool, reward 1,
   50-step episodes) with a constant policy; W1 obs float32[4], W2 obs
   uint8[84, 84] with a 4-frame stack. Per env-step overhead = the system's
   median time per env step minus the bare env + policy loop's (same envs,
   same policy, nothing stored);
3. memory (W2, 64 envs, one child process per system): bytes the system
   stores per step, in frames (7056 bytes), and the peak RSS growth while its
   collector is built and runs one 4032-step sample (VmHWM reset through
   /proc/self/clear_refs; imports excluded);
4. training-batch build (W2, 64 envs x 63 steps, 4-frame stacks);
5. replay: 256 slices x 32 steps from a 100k-step W2 buffer (4-frame stacks).

Prints one table, writes OUT/compare.json and draws OUT/compare.png.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare_systems as cs  # noqa: E402

# Targets (issue 6), ratios within one run.
TARGET_VS_RLLIB_OLD = 100.0   # trajview's per env-step overhead at least 100x lower than RLlib's old stack
TARGET_VS_BEST_TRL_SB3 = 3.0  # ... and at least 3x lower than the best of TorchRL and SB3 (64 envs, W1 and W2)
TARGET_BYTES = 1.05           # W2 bytes per stored step, in frames
TARGET_SLICES_VS_TORCHRL = 3.0  # 256x32 W2 slice sampling at least 3x faster than TorchRL's SliceSampler

CASES = (("W1", 1), ("W1", 64), ("W2", 1), ("W2", 64))


def steps_for(num_envs: int, total: int) -> int:
    """Env steps of a sample of about ``total`` steps: ``num_envs * ceil(total / num_envs)`` (4032 at 64 envs)."""
    return num_envs * -(-total // num_envs)


# ----------------------------------------------------------------------------- memory


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise KeyError(key)


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def memory_child(system: str, workload: str, num_envs: int, steps: int) -> dict[str, Any]:
    """Runs in a fresh process: build the system's collector, one sample; peak RSS growth and stored bytes."""
    # Import the system's modules first, so that imports do not count.
    run = cs.MAKERS[system](workload, 1, steps_for(1, 100))
    if run.setup:
        run.setup()
    run.sample()
    del run
    _trim()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    rss0 = _status_kb("VmRSS")
    run = cs.MAKERS[system](workload, num_envs, steps)
    data = run.sample()  # the first sample: what it takes to build the collector and hold one sample
    stored = run.stored_bytes(data)
    peak = _status_kb("VmHWM") - rss0
    return {"peak_mb": peak / 1024, "stored_bytes": stored, "steps": steps,
            "bytes_per_step_frames": stored / steps / cs.FRAME_BYTES, **run.notes}


def measure_memory(system: str, workload: str, num_envs: int, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", system, "--mem-workload", workload,
           "--mem-envs", str(num_envs), "--mem-steps", str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1]}


# ----------------------------------------------------------------------------- data equivalence


EQUIV_COLUMNS = ("obs", "new_obs", "actions", "rewards", "prev_actions", "prev_rewards", "prev_n_obs",
                 "terminateds", "truncateds", "t")


def equivalence(fragments: int = 10, fragment_len: int = 100) -> dict[str, Any]:
    """trajview vs RLlib's old stack on one seeded CartPole-v1, column by column."""
    import trajview as tv
    from ray.rllib.evaluation.rollout_worker import RolloutWorker

    base = cs.trajview_policy_cls(True, padding="reset")

    class TVPolicy(base):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
            return cs.cartpole_rule(input_dict["obs"]), [], {}

        def loss(self, train_batch):  # reads every compared column: nothing is pruned
            return [train_batch[k] for k in EQUIV_COLUMNS]

    env = cs.SeededCartPole(0)
    spaces = (env.observation_space, env.action_space)
    tvw = tv.RolloutWorker(lambda cfg: cs.SeededCartPole(0), TVPolicy, num_envs=1,
                           rollout_fragment_length=fragment_len)
    rlw = RolloutWorker(env_creator=lambda c: cs.SeededCartPole(0), config=cs.rllib_old_config(1, fragment_len, spaces),
                        default_policy_class=cs.rllib_old_policy_cls(True, equivalence=True))
    a = [tvw.sample() for _ in range(fragments)]
    b = [cs.rllib_policy_batch(rlw.sample()) for _ in range(fragments)]
    A = {k: np.concatenate([np.asarray(x[k]) for x in a]) for k in (*EQUIV_COLUMNS, "eps_id")}
    B = {k: np.concatenate([np.asarray(x[k]) for x in b]) for k in (*EQUIV_COLUMNS, "eps_id")}
    cols: dict[str, Any] = {}
    for k in EQUIV_COLUMNS:
        x, y = A[k], B[k]
        same = x.shape == y.shape and np.array_equal(x, y)
        cols[k] = {"equal": bool(same), "trajview": f"{x.dtype}{list(x.shape)}", "rllib": f"{y.dtype}{list(y.shape)}"}
        if not same and x.shape == y.shape:
            bad = np.flatnonzero((x != y).reshape(len(x), -1).any(axis=1))
            cols[k]["first_diff_rows"] = bad[:5].tolist()
    # Episode ids differ (RLlib draws random ones): the same rows must share an episode in both.
    sa, sb = A["eps_id"][1:] == A["eps_id"][:-1], B["eps_id"][1:] == B["eps_id"][:-1]
    cols["eps_id (boundaries)"] = {"equal": bool(np.array_equal(sa, sb)), "trajview": "", "rllib": ""}
    episodes = int((~sa).sum()) + 1
    return {"rows": int(len(A["obs"])), "episodes": episodes, "columns": cols,
            "all_equal": all(c["equal"] for c in cols.values()),
            "setup": "CartPole-v1 seeded 0, 1 env, truncate_episodes, fragment 100 x 10; policy a = "
                     "(theta > 0); views prev_actions, prev_rewards, prev_n_obs = obs@'-3:0' "
                     "(trajview padding='reset': RLlib repeats the first obs before t = 0), new_obs"}


# ----------------------------------------------------------------------------- timing helpers


def alternate(fns: dict[str, Any], rounds: int, warmup: int, pbar, setup: dict[str, Any] | None = None) -> dict[str, list[float]]:
    """Round r runs every fn once, in the same order; setup[name]() (untimed) before each run if given."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(warmup + rounds):
        for name, fn in fns.items():
            if setup and name in setup:
                setup[name]()
            gc.collect()
            t = time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t
            del out
            if r >= warmup:
                times[name].append(dt)
            if pbar is not None:
                pbar.update(1)
    return times


def median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


# ----------------------------------------------------------------------------- report


def fmt(x: Any, spec: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and (np.isnan(x) or np.isinf(x))):
        return "-"
    return f"{x:{spec}}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def draw(res: dict[str, Any], png: Path, systems: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"trajview": "#1f77b4", "trajview-collector": "#17becf", "rllib-old": "#d62728", "rllib-new": "#ff7f0e", "torchrl": "#9467bd",
              "sb3": "#2ca02c", "tianshou": "#8c564b"}
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6), gridspec_kw={"width_ratios": [3, 1.3, 1.3, 1.1]})
    ax = axes[0]
    width = 0.8 / len(systems)
    cases = [f"{w} B={b}" for w, b in CASES]
    for i, s in enumerate(systems):
        ys = [res["collection"].get(c, {}).get(s, {}).get("overhead_ns") for c in cases]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(cases))]
        vals = [max(y, 1.0) if y is not None else np.nan for y in ys]  # log axis: overheads <= 1 ns drawn at 1
        bars = ax.bar(xs, vals, width, label=s, color=colors.get(s))
        for bar, y in zip(bars, ys):
            if y is not None:
                ax.annotate(f"{y / 1000:.1f}" if abs(y) >= 1000 else f"{y:.0f}",
                            (bar.get_x() + bar.get_width() / 2, max(y, 1.0)), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(cases)), cases)
    ax.set_yscale("log")
    ax.set_ylabel("ns per env step (median), minus the bare loop")
    ax.set_title("collection overhead per env step\n(labels: us if >= 1000 ns)", fontsize=10)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.09), frameon=False)
    ax.grid(axis="y", which="both", alpha=0.3)

    def bars(ax, values: dict[str, float | None], title: str, ylabel: str, spec: str, log: bool = False):
        names = [s for s in systems if values.get(s) is not None]
        vals = [values[s] for s in names]
        b = ax.bar(range(len(names)), vals, color=[colors.get(s) for s in names])
        for bar, y in zip(b, vals):
            ax.annotate(format(y, spec), (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=30, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)

    mem = res.get("memory", {})
    bars(axes[1], {s: mem.get(s, {}).get("bytes_per_step_frames") for s in systems},
         "W2: bytes stored per step\n(in 84x84 frames)", "frames per step", ".2f")
    bars(axes[2], {s: res.get("batch_build", {}).get(s, {}).get("median_ms") for s in systems},
         f"W2: training-batch build\n({res['args']['steps_64']} steps, 4-frame stacks)", "ms (median)", ".0f")
    bars(axes[3], {s: res.get("replay", {}).get(s, {}).get("median_ms") for s in systems},
         "W2: 256x32 slices from 100k steps", "ms (median)", ".0f", log=True)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def report(res: dict[str, Any], systems: list[str]) -> str:
    lines = []
    v = res["versions"]
    lines.append("versions: " + ", ".join(f"{k} {v[k]}" for k in v))
    lines.append(f"machine: {res['machine']}; rounds {res['args']['rounds']}; steps per sample {res['args']['steps']}"
                 f" (64 envs: {steps_for(64, res['args']['steps'])})")
    eq = res.get("equivalence") or {}
    if eq:
        if "error" in eq:
            lines.append(f"\ndata equivalence vs RLlib old stack: ERROR {eq['error']}")
        else:
            lines.append(f"\ndata equivalence vs RLlib old stack ({eq['rows']} rows, {eq['episodes']} episodes): "
                         + ("ALL COLUMNS EQUAL" if eq["all_equal"] else "DIFFERENCES"))
            lines.append(md_table(["column", "equal", "trajview", "rllib"],
                                  [[k, str(c["equal"]), c["trajview"], c["rllib"]] for k, c in eq["columns"].items()]))

    col = res["collection"]
    header = ["system"] + [f"{c} total" for c in col] + [f"{c} overhead" for c in col]
    rows = []
    for s in ["bare", *systems]:
        r = [s]
        r += [fmt(col[c].get(s, {}).get("per_step_ns"), ".0f") for c in col]
        r += [fmt(col[c].get(s, {}).get("overhead_ns"), ".0f") if s != "bare" else "-" for c in col]
        rows.append(r)
    lines.append("\ncollection, ns per env step (median); overhead = total - bare env+policy loop")
    lines.append(md_table(header, rows))

    rows = []
    for s in systems:
        m = res.get("memory", {}).get(s, {})
        bb = res.get("batch_build", {}).get(s, {})
        rp = res.get("replay", {}).get(s, {})
        rows.append([s, fmt(m.get("bytes_per_step_frames"), ".3f"), fmt(m.get("peak_mb"), ".0f"),
                     fmt(bb.get("median_ms"), ".1f"), fmt(rp.get("median_ms"), ".1f"), m.get("store", m.get("error", ""))])
    n64 = res["args"]["steps_64"]
    lines.append(f"\nW2 (84x84 frames, 4-frame stack), 64 envs x {n64 // 64} steps; replay: 256x32 slices from "
                 f"{res['args']['replay_capacity']} steps")
    lines.append(md_table(["system", "bytes/stored step (frames)", "peak RSS growth (MB)", "batch build (ms)",
                           "256x32 slices (ms)", "store"], rows))
    copied = res.get("batch_build", {}).get("trajview-copied", {}).get("median_ms")
    if copied is not None:
        lines.append(f"trajview batch build with lazy_views=False (obs, new_obs and the stack copied out, "
                     f"6 frames per step): {copied:.1f} ms")
    mem_tv = res.get("memory", {}).get("trajview", {})
    if "carried_rows_per_env" in mem_tv:
        lines.append(f"trajview RolloutWorker: the training batch it returns holds "
                     f"{mem_tv.get('batch_bytes_per_step_frames', float('nan')):.3f} frames per step; between samples "
                     f"the store carries {mem_tv['carried_rows_per_env']:.1f} frames per env (3 look-back frames "
                     f"and the newest obs); its blocks allocate "
                     f"{mem_tv.get('allocated_bytes_per_step_frames', float('nan')):.3f} frames per step")
    if "sb3_replay_bytes_per_step_frames" in res:
        lines.append(f"SB3 ReplayBuffer(optimize_memory_usage=True) with VecFrameStack: "
                     f"{res['sb3_replay_bytes_per_step_frames']:.3f} frames per step")
    for s, r in res.get("replay", {}).items():
        if "what" in r:
            lines.append(f"replay {s}: {r['what']}")

    lines.append("\ntargets")
    trows = []
    for t in res["targets"]:
        trows.append([t["name"], fmt(t["value"], ".2f"), t["wanted"],
                      "-" if t["ok"] is None else ("met" if t["ok"] else "NOT MET")])
    lines.append(md_table(["target", "measured", "wanted", ""], trows))
    return "\n".join(lines)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def add(name, value, op, target):
        ok = None if value is None or np.isnan(value) else (value >= target if op == ">=" else value <= target)
        out.append({"name": name, "value": value, "wanted": f"{op} {target:g}", "ok": ok})

    for tvname in ("trajview", "trajview-collector"):
        for w in ("W1", "W2"):
            c = res["collection"].get(f"{w} B=64", {})
            tvo = c.get(tvname, {}).get("overhead_ns")
            old = c.get("rllib-old", {}).get("overhead_ns")
            best = min((c[s]["overhead_ns"] for s in ("torchrl", "sb3") if c.get(s, {}).get("overhead_ns") is not None),
                       default=None)

            def ratio(other):
                if other is None or tvo is None:
                    return None
                return other / tvo if tvo > 0 else float("inf")  # trajview at or below the bare loop

            add(f"{w} 64 envs: RLlib old-stack overhead / {tvname} overhead", ratio(old), ">=", TARGET_VS_RLLIB_OLD)
            add(f"{w} 64 envs: best of TorchRL, SB3 overhead / {tvname} overhead", ratio(best), ">=",
                TARGET_VS_BEST_TRL_SB3)
    for tvname in ("trajview", "trajview-collector"):
        add(f"W2 bytes per stored step (frames), {tvname}",
            res.get("memory", {}).get(tvname, {}).get("bytes_per_step_frames"), "<=", TARGET_BYTES)
    add("W2 bytes per stored step (frames), trajview ReplayBuffer (100k)",
        res.get("replay", {}).get("trajview", {}).get("stored_bytes_per_step_per_frame"), "<=", TARGET_BYTES)
    rp = res.get("replay", {})
    tr, tt = rp.get("torchrl", {}).get("median_ms"), rp.get("trajview", {}).get("median_ms")
    add("W2 256x32 slices: TorchRL time / trajview time", None if tr is None or tt is None else tr / tt, ">=",
        TARGET_SLICES_VS_TORCHRL)
    return out


# ----------------------------------------------------------------------------- main


def available(systems: list[str]) -> tuple[list[str], dict[str, str]]:
    mods = {"trajview": "trajview", "trajview-collector": "trajview", "rllib-old": "ray.rllib", "rllib-new": "ray.rllib", "torchrl": "torchrl",
            "sb3": "stable_baselines3", "tianshou": "tianshou"}
    ok, missing = [], {}
    for s in systems:
        try:
            __import__(mods[s])
            ok.append(s)
        except Exception as e:  # noqa: BLE001 - report why a system is left out
            missing[s] = f"{type(e).__name__}: {e}"
    return ok, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "compare")
    ap.add_argument("--systems", default=",".join(cs.SYSTEMS), help="comma-separated subset of " + ",".join(cs.SYSTEMS))
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per measurement (median)")
    ap.add_argument("--steps", type=int, default=4000, help="env steps per sample at 1 env; 64 envs run "
                                                            "ceil(steps / 64) steps each (4032)")
    ap.add_argument("--replay-capacity", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, 1000 steps, 10k replay buffer")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: equivalence,collection,memory,batch,replay")
    ap.add_argument("--from-json", type=Path, help="print the report and draw the chart of an earlier run's JSON")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)
    ap.add_argument("--mem-workload", default="W2", help=argparse.SUPPRESS)
    ap.add_argument("--mem-envs", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--mem-steps", type=int, default=4032, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.mem_workload, args.mem_envs, args.mem_steps)))
        return
    if args.from_json:
        res = json.loads(args.from_json.read_text())
        systems = [s for s in cs.SYSTEMS if any(s in c for c in res["collection"].values()) or s in res["memory"]]
        print(report(res, systems))
        draw(res, args.from_json.with_suffix(".png"), systems)
        print(f"\nchart: {args.from_json.with_suffix('.png')}")
        return
    if args.quick:
        args.rounds, args.steps, args.replay_capacity = 2, 1000, 10_000
    skip = set(filter(None, args.skip.split(",")))

    from tqdm import tqdm

    systems, missing = available([s for s in args.systems.split(",") if s])
    for s, why in missing.items():
        print(f"left out: {s} ({why})", flush=True)

    def case_steps(num_envs: int) -> int:
        return steps_for(num_envs, args.steps)

    res: dict[str, Any] = {
        "versions": cs.versions(), "missing": missing,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "args": {"rounds": args.rounds, "steps": args.steps, "replay_capacity": args.replay_capacity,
                 "steps_64": case_steps(64)},
        "collection": {}, "memory": {}, "batch_build": {}, "replay": {},
    }
    R, W = args.rounds, 2
    n_replay = [s for s in systems if s in cs.REPLAYS]
    n_build = [s for s in systems if s in cs.BUILDERS]
    if "trajview" in n_build:
        n_build.insert(n_build.index("trajview") + 1, "trajview-copied")  # the same batch with every view copied out
    total = (("equivalence" not in skip) * 1
             + ("collection" not in skip) * len(CASES) * (len(systems) + 1) * (R + W)
             + ("memory" not in skip) * len(systems)
             + ("batch" not in skip) * len(n_build) * (R + W)
             + ("replay" not in skip) * len(n_replay) * (R + 1 + 1))
    pbar = tqdm(total=total, desc="compare", unit="run", dynamic_ncols=True)

    # 1. data equivalence
    if "equivalence" not in skip and "rllib-old" in systems and "trajview" in systems:
        pbar.set_postfix_str("data equivalence vs RLlib old stack")
        try:
            res["equivalence"] = equivalence()
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            res["equivalence"] = {"error": f"{type(e).__name__}: {e}"}
        pbar.update(1)

    # 2. collection
    if "collection" not in skip:
        for w, B in CASES:
            key = f"{w} B={B}"
            n = case_steps(B)
            pbar.set_postfix_str(f"collection {key}: building")
            runs, out = {}, {}
            for s in ["bare", *systems]:
                try:
                    runs[s] = cs.MAKERS[s](w, B, n)
                except Exception as e:  # noqa: BLE001
                    out[s] = {"error": f"{type(e).__name__}: {e}"}
                    pbar.update(R + W)
            pbar.set_postfix_str(f"collection {key}")
            times = alternate({s: r.sample for s, r in runs.items()}, R, W, pbar,
                              setup={s: r.setup for s, r in runs.items() if r.setup})
            bare = median(times["bare"]) / n * 1e9 if "bare" in times else float("nan")
            for s, ts in times.items():
                per = median(ts) / n * 1e9
                out[s] = {"per_step_ns": per, "overhead_ns": per - bare, "steps": n,
                          "rounds_ns": [t / n * 1e9 for t in ts]}
            res["collection"][key] = out
            del runs
            _trim()

    # 3. memory, one child process per system
    if "memory" not in skip:
        n = case_steps(64)
        for s in systems:
            pbar.set_postfix_str(f"memory {s}")
            res["memory"][s] = measure_memory(s, "W2", 64, n)
            pbar.update(1)
        if "sb3" in systems:
            res["sb3_replay_bytes_per_step_frames"] = cs.sb3_replay_bytes_per_step("W2", 64, n) / cs.FRAME_BYTES

    # 4. training-batch build
    if "batch" not in skip and n_build:
        n = case_steps(64)
        pbar.set_postfix_str("batch build: filling")
        pairs = {s: cs.BUILDERS[s](64, n) for s in n_build}
        times = alternate({s: p[1] for s, p in pairs.items()}, R, W, pbar, setup={s: p[0] for s, p in pairs.items()})
        for s, ts in times.items():
            res["batch_build"][s] = {"median_ms": median(ts) * 1e3, "rounds_ms": [t * 1e3 for t in ts], "steps": n}
        res["batch_build"]["torchrl"] = {"note": "stacks built at every env step by CatFrames: the collector's output is "
                                                 "the batch (in the collection figures)"}
        del pairs
        _trim()

    # 5. replay
    if "replay" not in skip and n_replay:
        samplers = {}
        for s in n_replay:
            pbar.set_postfix_str(f"replay: filling {s}")
            try:
                samplers[s], info = cs.REPLAYS[s](args.replay_capacity, 256, 32)
                res["replay"][s] = info
            except Exception as e:  # noqa: BLE001
                res["replay"][s] = {"error": f"{type(e).__name__}: {e}"}
            pbar.update(1)
        pbar.set_postfix_str("replay: sampling")
        times = alternate(samplers, R, 1, pbar)
        for s, ts in times.items():
            res["replay"][s].update({"median_ms": median(ts) * 1e3, "rounds_ms": [t * 1e3 for t in ts]})
        del samplers
        _trim()
    pbar.close()

    res["targets"] = targets(res)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.json").write_text(json.dumps(res, indent=1, default=str))
    text = report(res, systems)
    print("\n" + text)
    try:
        draw(res, args.out / "compare.png", systems)
        print(f"\nchart: {args.out / 'compare.png'}")
    except ImportError as e:
        print(f"\nno chart ({e})")
    print(f"json: {args.out / 'compare.json'}")


if __name__ == "__main__":
    main()
