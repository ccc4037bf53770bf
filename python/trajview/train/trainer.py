"""The training loop behind ``trajview train``: PPO driving RolloutWorkers, metrics, plots, checkpoints."""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from .. import envs as _envs  # noqa: F401  (registers trajview's gymnasium ids)
from ..algorithms.ppo import PPOPolicy
from ..rollout.worker import RolloutWorker
from ..views.sample_batch import SampleBatch, concat_samples

__all__ = ["TrainConfig", "Trainer", "MODEL_PRESETS", "read_metrics", "plot_learning_curve"]

log = logging.getLogger("trajview.train")

#: Per model: its model_config and the PPO settings that differ from `TrainConfig`'s defaults.
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "mlp": {"model_config": {}},
    "framestack": {"model_config": {"num_frames": 16}},
    "lstm": {"model_config": {"max_seq_len": 20, "cell_size": 64, "prev_action": True}},
    "attention": {"model_config": {"max_seq_len": 20, "memory": 16, "attention_dim": 32, "num_layers": 1}},
}

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
]


@dataclasses.dataclass
class TrainConfig:
    """Everything a run depends on (stored in its checkpoint)."""

    env: str = "trajview/StatelessCartPole-v1"
    model: str = "framestack"
    seed: int = 0
    timesteps: int = 200_000
    workers: int = 1
    envs_per_worker: int = 8
    train_batch_size: int = 2000
    sgd_minibatch_size: int = 250
    num_sgd_iter: int = 10
    lr: float = 3e-4
    gamma: float = 0.99
    lambda_: float = 0.95
    clip_param: float = 0.2
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.0
    grad_clip: float | None = 0.5
    stop_reward: float | None = 150.0
    smoothing_episodes: int = 100
    model_config: dict = dataclasses.field(default_factory=dict)
    out_dir: str = "runs/default"
    metrics_format: str = "csv"
    threads: int = 1

    def __post_init__(self) -> None:
        if self.metrics_format not in ("csv", "jsonl"):
            raise ValueError(f"metrics_format must be 'csv' or 'jsonl', got {self.metrics_format!r}")
        for name in ("timesteps", "workers", "envs_per_worker", "train_batch_size", "sgd_minibatch_size", "num_sgd_iter"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        per = self.workers * self.envs_per_worker
        if self.train_batch_size % per:
            raise ValueError(
                f"train_batch_size ({self.train_batch_size}) must be a multiple of workers * envs_per_worker ({per})"
            )
        if not self.model_config:
            preset = MODEL_PRESETS.get(self.model)
            if preset is None:
                raise ValueError(f"model must be one of {sorted(MODEL_PRESETS)}, got {self.model!r}")
            self.model_config = dict(preset["model_config"])

    @property
    def metrics_path(self) -> Path:
        return Path(self.out_dir) / ("metrics.csv" if self.metrics_format == "csv" else "metrics.jsonl")

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.out_dir) / "checkpoint.pt"

    def ppo_config(self) -> dict:
        return {
            "model": self.model,
            "model_config": dict(self.model_config),
            "lr": self.lr,
            "gamma": self.gamma,
            "lambda": self.lambda_,
            "clip_param": self.clip_param,
            "vf_loss_coeff": self.vf_loss_coeff,
            "entropy_coeff": self.entropy_coeff,
            "num_sgd_iter": self.num_sgd_iter,
            "sgd_minibatch_size": self.sgd_minibatch_size,
            "grad_clip": self.grad_clip,
        }


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


class Trainer:
    """PPO on ``config.env`` with ``config.workers`` RolloutWorkers (sampled in turn, in this process)."""

    def __init__(self, config: TrainConfig, resume: bool = False) -> None:
        self.config = config
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        self.iteration = 0
        self.env_steps = 0
        self.episodes = 0
        self.elapsed = 0.0
        self.returns: deque[float] = deque(maxlen=config.smoothing_episodes)
        self.lengths: deque[int] = deque(maxlen=config.smoothing_episodes)
        probe = gym.make(config.env)
        self.policy = PPOPolicy(probe.observation_space, probe.action_space, config.ppo_config())
        probe.close()
        state = None
        if resume:
            state = torch.load(config.checkpoint_path, weights_only=False)
            self.policy.set_state(state["policy"])
            self.iteration = state["iteration"]
            self.env_steps = state["env_steps"]
            self.episodes = state["episodes"]
            self.elapsed = state["elapsed"]
            self.returns.extend(state["returns"])
            self.lengths.extend(state["lengths"])
            torch.set_rng_state(state["torch_rng"])
            self._truncate_metrics(self.iteration)
        per = config.workers * config.envs_per_worker
        fragment = config.train_batch_size // per
        # On resume, fresh env seeds (the envs' own state is not in the checkpoint).
        base = config.seed * 100_003 + self.iteration * 7_919
        env_id = config.env
        self.workers = [
            RolloutWorker(
                lambda cfg: gym.make(env_id),
                self.policy,
                num_envs=config.envs_per_worker,
                rollout_fragment_length=fragment,
                seed=base + i * config.envs_per_worker,
                worker_index=i,
            )
            for i in range(config.workers)
        ]

    # -- metrics -------------------------------------------------------------------

    def _truncate_metrics(self, iteration: int) -> None:
        """Drops metric rows written after the checkpoint (a run killed between the two)."""
        path = self.config.metrics_path
        rows = [r for r in read_metrics(path) if r["iteration"] <= iteration]
        if path.exists():
            path.unlink()
        for r in rows:
            self._write_metrics(r)

    def _write_metrics(self, row: dict) -> None:
        path = self.config.metrics_path
        if self.config.metrics_format == "jsonl":
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
            return
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
            if new:
                w.writeheader()
            w.writerow({k: row.get(k, "") for k in METRIC_FIELDS})

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else math.nan

    # -- the loop ------------------------------------------------------------------

    def train_iteration(self) -> dict:
        t0 = time.perf_counter()
        # gymnasium envs (single-agent): every worker returns a SampleBatch.
        batch = concat_samples([cast(SampleBatch, w.sample()) for w in self.workers])
        for w in self.workers:
            m = w.get_metrics()
            self.returns.extend(m["episode_returns"])
            self.lengths.extend(m["episode_lengths"])
            self.episodes += len(m["episode_returns"])
        stats = self.policy.learn_on_batch(batch)
        dt = time.perf_counter() - t0
        self.iteration += 1
        self.env_steps += len(batch)
        self.elapsed += dt
        row = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "episode_return_mean": self.mean_return,
            "episode_len_mean": float(np.mean(self.lengths)) if self.lengths else math.nan,
            "time_s": round(self.elapsed, 3),
            "steps_per_s": round(len(batch) / dt, 1),
            **{k: stats.get(k, math.nan) for k in ("policy_loss", "vf_loss", "entropy", "kl")},
        }
        self._write_metrics(row)
        return row

    def done(self) -> bool:
        c = self.config
        if self.env_steps >= c.timesteps:
            return True
        return c.stop_reward is not None and bool(self.returns) and self.mean_return >= c.stop_reward

    def save_checkpoint(self) -> None:
        state = {
            "config": dataclasses.asdict(self.config),
            "policy": self.policy.get_state(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "elapsed": self.elapsed,
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "torch_rng": torch.get_rng_state(),
        }
        path = self.config.checkpoint_path
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def train(self, progress: bool = True, on_iteration: Callable[[dict], None] | None = None) -> dict:
        """Runs until ``timesteps`` env steps or the mean return reaches ``stop_reward``; returns a summary."""
        from tqdm import tqdm

        c = self.config
        bar = tqdm(total=c.timesteps, initial=min(self.env_steps, c.timesteps), unit="step", disable=not progress,
                   dynamic_ncols=True, desc=f"{c.model} seed {c.seed}")
        reached = None
        try:
            while not self.done():
                row = self.train_iteration()
                self.save_checkpoint()
                bar.update(min(row["env_steps"], c.timesteps) - bar.n)
                bar.set_postfix(ret=f"{row['episode_return_mean']:.1f}", sps=f"{row['steps_per_s']:.0f}", refresh=False)
                if on_iteration is not None:
                    on_iteration(row)
                if not progress:
                    log.info("iter %d steps %d return %.1f %.0f steps/s", row["iteration"], row["env_steps"],
                             row["episode_return_mean"], row["steps_per_s"])
        finally:
            bar.close()
            for w in self.workers:
                w.stop()
        rows = read_metrics(c.metrics_path)
        if c.stop_reward is not None:
            reached = next((r for r in rows if r["episode_return_mean"] >= c.stop_reward), None)
        png = Path(c.out_dir) / "learning_curve.png"
        plot_learning_curve(rows, png, f"PPO {c.model} on {c.env} (seed {c.seed})", c.stop_reward)
        return {
            "env_steps": self.env_steps,
            "iterations": self.iteration,
            "episode_return_mean": self.mean_return,
            "time_s": self.elapsed,
            "reached_stop_reward": reached is not None,
            "steps_to_stop_reward": int(reached["env_steps"]) if reached else None,
            "time_to_stop_reward_s": float(reached["time_s"]) if reached else None,
            "metrics": str(c.metrics_path),
            "plot": str(png),
            "checkpoint": str(c.checkpoint_path),
        }
