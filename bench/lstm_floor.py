"""How much faster could the LSTM's SGD step get on this CPU? (issue 25: the LSTM side's 5x goal)

At the zoo's CartPoleNoVel settings (8 envs x 32 steps = 256-row batches, one minibatch of every row, 20 epochs,
an actor and a critic LSTM of 256), SGD is about 90% of ``trajview train --model lstm``'s loop
(`bench/compare_sb3_train.py`), and nearly all of a step is the two LSTMs' forward and backward. This script
measures that part against two lower bounds, per network, on the run lengths trajview's training passes really
get (captured from a run of `compare_sb3_train.trajview_config`'s ``trajview-lstm`` setting: each env's
32-step rollout cut into runs at episode starts), one torch thread:

* ``trajview``: `_LSTMCore.flat` (the runs laid out as the columns of one ``[T, runs]`` tensor, zeros after a
  run's end, one ``nn.LSTM`` call, torch's oneDNN kernel), forward and backward, with the model's own sizes
  (input 4, cell 256, then 64x64 tanh layers);
* ``no padding``: one ``nn.LSTM`` call over the same number of rows with no padding at all (``[32, rows / 32]``:
  as if every run were a whole 32-step lane and the resets at episode starts cost nothing): the bound for any
  layout of the runs with torch's kernel;
* ``matmul floor``: the recurrent matrix products alone, as any LSTM written on BLAS needs them, on those lanes:
  per time step ``h @ W_hh^T`` (forward) and ``dgates @ W_hh`` (backward, batch ``rows / 32``), and one
  ``H^T @ dgates`` over every row for the weight gradient (``torch.mm`` into preallocated outputs); no gates, no
  input projection, no Python: below what any implementation can reach.

It prints the median (25th-75th percentile) ms per network per step of each, alternating rounds, and
``trajview / floor``: the most any change of the LSTM's training pass could gain on this machine.

    python bench/lstm_floor.py             # the runs of the first 24 iterations (short episodes), 7 rounds
    python bench/lstm_floor.py --iterations 150 --every 6   # 25 passes over 38,400 env steps (a run to 150)
    python bench/lstm_floor.py --quick     # a smoke (timings meaningless)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

CELL, T_MAX = 256, 32


def capture_runs(iterations: int, cell: int = CELL, every: int = 1) -> list[np.ndarray]:
    """The run lengths of the training pass of every ``every``-th of ``iterations`` iterations of trajview's LSTM
    at the zoo's settings (`compare_sb3_train.trajview_config`, seed 0), as `LSTMModel.forward_train` splits
    them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compare_sb3_train import ZOO, trajview_config

    from trajview.algorithms.models import lstm as lstm_mod
    from trajview.algorithms.models.base import _split_points
    from trajview.train import PPOTrainer

    original = lstm_mod.LSTMModel.forward_train
    rows = ZOO["n_envs"] * ZOO["n_steps"]
    seen: list[np.ndarray] = []

    def recording(self: Any, batch: Any) -> Any:
        if torch.is_grad_enabled():
            lens = _split_points(batch, batch["seq_lens"])[0]
            # A training pass over the whole batch (not the policy's dummy-batch pass), once per iteration (its
            # epochs train on the same runs: one minibatch of every row).
            if int(lens.sum()) == rows and not (seen and np.array_equal(seen[-1], lens)):
                seen.append(lens.copy())
        return original(self, batch)

    lstm_mod.LSTMModel.forward_train = recording  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory(prefix="tv-lstm-floor-") as tmp:
            steps = iterations * ZOO["n_envs"] * ZOO["n_steps"]
            config = trajview_config("trajview-lstm", 0, steps, True, cell, 1, str(Path(tmp) / "run"))
            trainer = PPOTrainer(config)
            try:
                for _ in range(iterations):
                    trainer.train_iteration()
            finally:
                trainer.stop()
    finally:
        lstm_mod.LSTMModel.forward_train = original  # type: ignore[method-assign]
    runs = seen[::every]
    return runs


class Floor:
    """The recurrent matrix products of one LSTM's forward and backward over ``rows`` rows in ``rows / T_MAX``
    lanes, into preallocated outputs."""

    def __init__(self, rows: int, cell: int) -> None:
        lanes = max(1, rows // T_MAX)
        self.steps = rows // lanes
        self.w_hh = torch.randn(4 * cell, cell) * 0.05
        self.w_t = self.w_hh.T.contiguous()
        self.h = torch.randn(lanes, cell)
        self.g = torch.randn(lanes, 4 * cell)
        self.out_g = torch.empty(lanes, 4 * cell)
        self.out_h = torch.empty(lanes, cell)
        self.hs = torch.randn(cell, lanes * self.steps)
        self.gs = torch.randn(lanes * self.steps, 4 * cell)
        self.dw = torch.empty(cell, 4 * cell)

    def __call__(self) -> None:
        for _ in range(self.steps):
            torch.mm(self.h, self.w_t, out=self.out_g)
        for _ in range(self.steps):
            torch.mm(self.g, self.w_hh, out=self.out_h)
        torch.mm(self.hs, self.gs, out=self.dw)


def measure(runs: list[np.ndarray], rounds: int, cell: int = CELL) -> dict[str, list[float]]:
    """Seconds per network per step of each variant, one sample per captured training pass per round."""
    from trajview.algorithms.models.lstm import _LSTMCore

    torch.manual_seed(0)
    core = _LSTMCore(4, 0, cell, (64, 64))
    plain = torch.nn.LSTM(4, cell)
    inputs = []
    for lens in runs:
        n = int(lens.sum())
        inputs.append((torch.randn(n, 4), torch.as_tensor(lens), torch.zeros(len(lens), cell),
                       torch.zeros(len(lens), cell), torch.randn(T_MAX, max(1, n // T_MAX), 4), Floor(n, cell)))

    def trajview(x: Any, lens: Any, h0: Any, c0: Any, lanes: Any, floor: Floor) -> None:
        core.flat(x, lens, h0, c0).sum().backward()

    def no_padding(x: Any, lens: Any, h0: Any, c0: Any, lanes: Any, floor: Floor) -> None:
        z = torch.zeros(1, lanes.shape[1], cell)
        plain(lanes, (z, z))[0].sum().backward()

    def matmul_floor(x: Any, lens: Any, h0: Any, c0: Any, lanes: Any, floor: Floor) -> None:
        floor()

    variants = {"trajview": trajview, "no padding": no_padding, "matmul floor": matmul_floor}
    out: dict[str, list[float]] = {k: [] for k in variants}
    for args in inputs[:2]:  # warm-up (oneDNN's primitives, the allocator)
        for fn in variants.values():
            fn(*args)
    clock = time.perf_counter
    for _ in range(rounds):
        for name, fn in variants.items():
            for args in inputs:
                t0 = clock()
                fn(*args)
                out[name].append(clock() - t0)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=24, help="iterations of the run whose runs are captured")
    ap.add_argument("--every", type=int, default=1, help="time the runs of every N-th iteration only")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a smoke: 2 iterations, 1 round, a cell of 32")
    args = ap.parse_args(argv)
    if args.iterations < 1 or args.rounds < 1 or args.every < 1:
        ap.error(f"--iterations, --every and --rounds must be >= 1, got {args.iterations}, {args.every} and "
                 f"{args.rounds}")
    cell = 32 if args.quick else CELL
    iterations, rounds = (2, 1) if args.quick else (args.iterations, args.rounds)
    torch.set_num_threads(1)
    runs = capture_runs(iterations, cell, 1 if args.quick else args.every)
    rows = [int(r.sum()) for r in runs]
    padded = [int(len(r) * r.max()) for r in runs]
    print(f"captured {len(runs)} training passes: {statistics.median([len(r) for r in runs]):.0f} runs each "
          f"(median), {statistics.median(rows):.0f} rows, padded to {statistics.median(padded):.0f} "
          f"({statistics.median(p / r for p, r in zip(padded, rows)):.2f}x); LSTM cell {cell}, 1 torch thread, "
          f"{rounds} rounds")
    times = measure(runs, rounds, cell)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("\n| per network per step | ms, median (25th-75th percentile) | trajview / this |")
    print("|---|---|---|")
    for name, v in times.items():
        q = statistics.quantiles([x * 1e3 for x in v], n=4) if len(v) > 1 else [v[0] * 1e3] * 3
        print(f"| {name} | {med[name]:.2f} ({q[0]:.2f}-{q[2]:.2f}) | {med['trajview'] / med[name]:.2f}x |")
    print(f"\nThe actor's and the critic's LSTMs together: trajview {2 * med['trajview']:.2f} ms per step; no "
          f"layout of the runs with torch's kernel below {2 * med['no padding']:.2f}; no implementation below "
          f"{2 * med['matmul floor']:.2f} (the recurrent matrix products alone).")
    return {"runs": runs, "times": times}


if __name__ == "__main__":
    main()
