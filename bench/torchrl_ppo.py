#!/usr/bin/env python3
"""TorchRL's PPO tutorial loop with trajview's drop-ins next to TorchRL's own collector and storage.

    python bench/torchrl_ppo.py                          # both sides, 50k frames, seeds 0 1 2
    python bench/torchrl_ppo.py --frames 100000 --seeds 0 1 2 3 4 --plot bench/torchrl_ppo.png
    python bench/torchrl_ppo.py --smoke                  # seconds: checks the script runs

The loop is ``examples/torchrl_ppo.py``'s ``train`` (Pendulum-v1, ``ProbabilisticActor`` + ``ValueOperator``,
``GAE``, ``ClipPPOLoss``, a ``SamplerWithoutReplacement`` replay buffer of minibatches): ``trajview`` collects
with ``TrajviewCollector`` and replays from ``TrajviewStorage``, ``torchrl`` with ``Collector`` and
``LazyTensorStorage``. Each seed seeds both sides alike (model init, env, torch). Prints each side's mean
reward per step of each batch (mean over seeds) side by side, the final figures, and each side's wall-clock
for the whole loop; draws both curves (mean and each seed) into ``--plot``. Needs torchrl (and matplotlib for
the plot). Time the loop on a quiet machine: this one prints wall-clock but does not average it.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("torchrl_ppo_example", HERE.parent / "examples" / "torchrl_ppo.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=50_000)
    p.add_argument("--frames-per-batch", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--plot", default=str(HERE / "torchrl_ppo.png"), help="where to draw the curves ('' for none)")
    p.add_argument("--smoke", action="store_true", help="400 frames, one seed, 2 epochs")
    args = p.parse_args()
    if args.smoke:
        args.frames, args.frames_per_batch, args.epochs, args.seeds = 400, 200, 2, [0]
    ex = load_example()
    sides = ("trajview", "torchrl")
    runs: dict[str, list[list[tuple[int, float, float]]]] = {s: [] for s in sides}
    for seed in args.seeds:
        for side in sides:
            runs[side].append(ex.train(side, args.frames, args.frames_per_batch, args.epochs, seed=seed))
    n = min(len(r) for s in sides for r in runs[s])
    frames = [runs[sides[0]][0][i][0] for i in range(n)]
    mean = {s: [statistics.fmean(r[i][1] for r in runs[s]) for i in range(n)] for s in sides}
    print(f"mean reward per step, mean of seeds {args.seeds}")
    print(f"{'frames':>8}  {'trajview':>10}  {'torchrl':>10}")
    for i in range(n):
        print(f"{frames[i]:8d}  {mean['trajview'][i]:10.3f}  {mean['torchrl'][i]:10.3f}")
    last = max(1, n // 10)
    for s in sides:
        final = statistics.fmean(mean[s][-last:])
        walls = [r[-1][2] for r in runs[s]]
        print(f"{s}: last {last} batches' mean reward per step {final:.3f}; loop wall-clock per run: median "
              f"{statistics.median(walls):.1f} s ({min(walls):.1f}-{max(walls):.1f}); runs: "
              f"{', '.join(f'{w:.1f}' for w in walls)}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for s, color in zip(sides, ("tab:blue", "tab:orange")):
            for r in runs[s]:
                ax.plot([x[0] for x in r], [x[1] for x in r], color=color, alpha=0.25, lw=0.8)
            ax.plot(frames, mean[s], color=color, lw=2, label=f"{s} (mean of {len(args.seeds)} seeds)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("mean reward per step (batch)")
        ax.set_title("TorchRL PPO loop on Pendulum-v1: trajview drop-ins vs TorchRL's")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
