"""A run's metrics: one row per training iteration in CSV or JSON lines, read back as numbers, plotted as a PNG.

No torch here: ``trajview report`` reads runs with the core dependencies only
(the plot needs matplotlib, imported when called).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

__all__ = ["METRIC_FIELDS", "append_metrics", "truncate_metrics", "read_metrics", "plot_learning_curve"]

#: The columns of a metrics CSV, in order (JSON lines rows carry the same keys).
METRIC_FIELDS = [
    "iteration",
    "env_steps",
    "episodes",
    "episode_return_mean",
    "episode_len_mean",
    "time_s",
    "steps_per_s",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    # How the iteration's experience was sampled (PPO; see trajview.train.sampling): the learner's SGD seconds,
    # the seconds it waited for the batch, the workers' mean env steps per second of sampling, the bytes of
    # weights sent to the workers and the seconds that took, and (--async) how many policy versions behind the
    # batches were and how many stale ones were dropped.
    "learn_s",
    "learner_idle_s",
    "worker_steps_per_s",
    "weights_sync_bytes",
    "weights_sync_s",
    "staleness_mean",
    "staleness_max",
    "stale_batches_dropped",
    # Failed rollout workers replaced so far in this trainer session (--recreate-failed-workers).
    "worker_restarts",
]


def append_metrics(path: str | Path, row: dict, metrics_format: str = "csv") -> None:
    """Appends one row to the metrics file at ``path`` (``"csv"``: with a header if the file is new; ``"jsonl"``)."""
    path = Path(path)
    if metrics_format == "jsonl":
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        return
    new = not path.exists()
    fields = METRIC_FIELDS
    if not new:  # a resumed run's file keeps its own columns (those of the trajview that started it)
        with open(path, newline="") as f:
            fields = next(csv.reader(f), []) or METRIC_FIELDS
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        w.writerow({k: row.get(k, "") for k in fields})


def truncate_metrics(path: str | Path, iteration: int, metrics_format: str = "csv") -> None:
    """Drops the rows after ``iteration`` (written by a run killed between a metrics row and its checkpoint)."""
    path = Path(path)
    rows = [r for r in read_metrics(path) if r["iteration"] <= iteration]
    if path.exists():
        path.unlink()
    for r in rows:
        append_metrics(path, r, metrics_format)


def _number(v: str | None) -> float | int:
    if v in ("", None):
        return math.nan
    try:
        return int(v)
    except ValueError:
        return float(v)


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics file (CSV or JSON lines), as numbers."""
    path = Path(path)
    if not path.exists():
        return []
    if path.suffix == ".jsonl":
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def plot_learning_curve(rows: list[dict], path: str | Path, title: str, stop_reward: float | None = None) -> None:
    """Mean episode return against env steps, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = [r["env_steps"] for r in rows]
    y = [r["episode_return_mean"] for r in rows]
    ax.plot(x, y, label="mean return (last episodes)")
    if stop_reward is not None:
        ax.axhline(stop_reward, color="gray", linestyle="--", linewidth=1, label=f"target {stop_reward:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
