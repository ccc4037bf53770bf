"""A checkpoint's share of an iteration of ``trajview train`` (issue 23): PPO's default run (the frame stack on
Stateless CartPole, its preset) and DQN's (``--algo dqn``, its replay buffer in the checkpoint).

Each iteration is timed in two parts, as `trajview.train.loop.run_loop` runs them: ``train_iteration()``
(sampling, learning, the fsynced metrics row) and ``save_checkpoint()`` (the committed folder: ``weights.pt``
via ``torch.save``, the replay buffer's files for DQN, each fsynced with its crc32, the manifest replaced
atomically, the folder fsynced). PPO's loop writes the checkpoint in a thread while the next iteration runs:
measured both ways (synchronous, and what the loop waits in the background mode, with the wall-clock per
iteration of both). Side by side, in the synchronous runs on the same state: the earlier format (one
``torch.save`` pickle to a temporary file and a rename, no fsync, no checksum) and reading the checkpoint back
(`read_checkpoint`: manifest, crc32, ``torch.load(weights_only=True)``). Median and [min, max] over the
iterations after the first (warm-up).

    python bench/train_checkpoint.py [--iterations 10] [--repeats 1] [--algo ppo dqn] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trajview.train import PPOTrainer, TrainConfig
from trajview.train.checkpoint import read_checkpoint
from trajview.train.dqn_trainer import DQNConfig, DQNTrainer


def make_trainer(algo: str, out: Path, overrides: dict[str, Any] | None = None) -> Any:
    """``trajview train``'s default run of ``algo`` (no stop reward: every iteration runs), into ``out``."""
    kw = {"stop_reward": None, "timesteps": 10**9, "out_dir": str(out), **(overrides or {})}
    if algo == "ppo":
        return PPOTrainer(TrainConfig.with_model_presets(model="framestack", **kw))
    return DQNTrainer(DQNConfig(**kw))


def _earlier_format(t: Any, algo: str, path: Path) -> float:
    """Seconds to write what trajview 0.1.0 wrote: one torch.save pickle to a temporary file, renamed."""
    t0 = time.perf_counter()
    state = {"config": dataclasses.asdict(t.config), "policy": t.policy.get_state(), **t.counters_state(),
             "torch_rng": torch.get_rng_state()}
    if algo == "dqn":
        state["buffer"] = t.buffer.state_dict()
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return time.perf_counter() - t0


def measure(algo: str, iterations: int, folder: Path, overrides: dict[str, Any] | None = None,
            background: bool = False) -> dict[str, Any]:
    """``iterations`` iterations of a fresh run, each followed by its checkpoint as `run_loop` takes it
    (``background``: PPO's is written by a thread while the next iteration runs; the time counted is what the
    loop waits: the state's serialization, and the previous checkpoint's write if it is not done)."""
    out = Path(tempfile.mkdtemp(prefix=f"{algo}-{'bg' if background else 'sync'}-", dir=folder)) / "run"
    t = make_trainer(algo, out, overrides)
    it_s, ck_s, old_s, read_s, share = [], [], [], [], []
    try:
        for _ in range(iterations):
            t0 = time.perf_counter()
            t.train_iteration()
            t1 = time.perf_counter()
            t.save_checkpoint(background=background)  # background: first waits for the previous one's write
            t2 = time.perf_counter()
            it_s.append(t1 - t0)
            ck_s.append(t2 - t1)
            share.append((t2 - t1) / (t2 - t0))
            if background:  # the write goes on during the next iteration, as in the loop
                continue
            old_s.append(_earlier_format(t, algo, folder / f"{algo}-earlier.pt"))
            t3 = time.perf_counter()
            read_checkpoint(t.config.checkpoint_path)
            read_s.append(time.perf_counter() - t3)
        t.wait_checkpoint()
    finally:
        t.stop() if hasattr(t, "stop") else t.worker.stop()
    ck = read_checkpoint(t.config.checkpoint_path, weights=False)
    keep = slice(1, None) if iterations > 1 else slice(None)  # the first iteration warms up
    total = [a + b for a, b in zip(it_s, ck_s)]
    return {"algo": algo, "background": background, "iterations": len(it_s[keep]), "iteration_s": it_s[keep],
            "total_s": total[keep],
            "checkpoint_s": ck_s[keep], "share": share[keep], "earlier_s": old_s[keep], "read_s": read_s[keep],
            "env_steps": t.env_steps, "checkpoint_bytes": sum(s for s, _ in ck.manifest.files.values()),
            "earlier_bytes": (folder / f"{algo}-earlier.pt").stat().st_size if old_s else 0}


def _fmt(xs: list[float], scale: float, unit: str, digits: int = 1) -> str:
    return (f"{statistics.median(xs) * scale:.{digits}f} {unit} "
            f"[{min(xs) * scale:.{digits}f}, {max(xs) * scale:.{digits}f}]")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | iterations | iteration (train_iteration) | checkpoint: the loop waits | checkpoint's share "
             "of the iteration | wall-clock per iteration (both) | earlier format (torch.save pickle, no fsync) | read back (verified, weights_only) "
             "| checkpoint bytes (earlier) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        how = "in the background, as trajview train" if r["background"] else "synchronous"
        earlier = _fmt(r["earlier_s"], 1e3, "ms") if r["earlier_s"] else "–"
        read = _fmt(r["read_s"], 1e3, "ms") if r["read_s"] else "–"
        nbytes = f"{r['checkpoint_bytes']:,}" + (f" ({r['earlier_bytes']:,})" if r["earlier_bytes"] else "")
        lines.append(f"| {r['algo']} default, checkpoint {how} ({r['env_steps']:,} env steps) | {r['iterations']} | "
                     f"{_fmt(r['iteration_s'], 1, 's', 2)} | {_fmt(r['checkpoint_s'], 1e3, 'ms')} | "
                     f"{_fmt(r['share'], 100, '%', 2)} | {_fmt(r['total_s'], 1, 's', 3)} | {earlier} | {read} | "
                     f"{nbytes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--algo", nargs="+", choices=("ppo", "dqn"), default=["ppo", "dqn"])
    p.add_argument("--repeats", type=int, default=1, help="PPO's two modes measured this many times, alternating")
    p.add_argument("--dir", default=None, help="where the runs are written (default: a temporary folder)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        rows = []
        for algo in args.algo:
            for _ in range(args.repeats if algo == "ppo" else 1):
                rows.append(measure(algo, args.iterations, Path(d)))
                if algo == "ppo":  # DQN's is always synchronous (its replay files are written under the buffer's lock)
                    rows.append(measure(algo, args.iterations, Path(d), background=True))
    print(f"# a checkpoint's share of a trajview train iteration ({os.cpu_count()} cores, torch {torch.__version__}; "
          f"median [min, max] over the iterations after the first)\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
