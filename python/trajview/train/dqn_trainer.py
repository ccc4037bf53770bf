"""`DQNTrainer`, the loop behind ``trajview train --algo dqn``: double DQN from a replay buffer whose frame
stacks are views built at sample time (each observation stored once), with the PPO job's metrics, plot,
checkpoints and ``--resume`` (the replay buffer is in the checkpoint)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import gymnasium as gym
import numpy as np
import torch

from .. import envs as _envs  # noqa: F401  (registers trajview's gymnasium ids)
from ..algorithms.dqn import DQNPolicy
from ..replay import PrioritizedSampler, RandomSampler, ReplayBuffer, Sampler
from ..rollout.worker import RolloutWorker
from ..views import SampleBatch
from .loop import RunCounters, interrupted, run_loop, save_atomically, saved_config, summarize
from .metrics import append_metrics, truncate_metrics

__all__ = ["DQNConfig", "DQNTrainer", "is_dqn_run", "train_dqn_from_args"]

log = logging.getLogger("trajview.train")


@dataclasses.dataclass
class DQNConfig:
    """Everything a DQN run depends on (stored in its checkpoint)."""

    env: str = "trajview/StatelessCartPole-v1"
    model: str = "dqn-framestack"
    seed: int = 0
    timesteps: int = 200_000
    num_frames: int = 4
    envs: int = 8
    rollout_fragment_length: int = 4  # per env: 32 env steps per sample
    buffer_size: int = 100_000
    batch_size: int = 128
    lr: float = 1e-3
    gamma: float = 0.99
    hidden: int = 256
    dueling: bool = True
    learning_starts: int = 1_000
    gradient_steps: int = 16  # per sample of envs x rollout_fragment_length steps
    target_update_interval: int = 500
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_steps: int = 20_000
    prioritized: bool = False
    per_alpha: float = 0.6
    per_beta: float = 0.4
    iteration_steps: int = 2_000  # env steps per metrics row and checkpoint
    stop_reward: float | None = 150.0
    smoothing_episodes: int = 100
    out_dir: str = "runs/dqn"
    metrics_format: str = "csv"
    threads: int = 1

    def __post_init__(self) -> None:
        if self.metrics_format not in ("csv", "jsonl"):
            raise ValueError(f"metrics_format must be 'csv' or 'jsonl', got {self.metrics_format!r}")
        for name in ("timesteps", "num_frames", "envs", "rollout_fragment_length", "buffer_size", "batch_size",
                     "iteration_steps", "target_update_interval"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")

    @property
    def metrics_path(self) -> Path:
        return Path(self.out_dir) / ("metrics.csv" if self.metrics_format == "csv" else "metrics.jsonl")

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.out_dir) / "checkpoint.pt"

    def policy_config(self) -> dict:
        return {"num_frames": self.num_frames, "hidden": self.hidden, "dueling": self.dueling, "lr": self.lr,
                "gamma": self.gamma, "target_update_interval": self.target_update_interval, "seed": self.seed}


class DQNTrainer(RunCounters):
    """Double DQN on ``config.env`` with one `RolloutWorker` of ``config.envs`` envs and a `ReplayBuffer`."""

    def __init__(self, config: DQNConfig, resume: bool = False) -> None:
        self.config = c = config
        Path(c.out_dir).mkdir(parents=True, exist_ok=True)
        self.start_counters(c.seed, c.threads, c.smoothing_episodes)
        self.resumes = 0
        probe = gym.make(c.env)
        self.policy = DQNPolicy(probe.observation_space, probe.action_space, c.policy_config())
        probe.close()
        sampler: Sampler = (PrioritizedSampler(None, c.per_alpha, c.per_beta, seed=c.seed) if c.prioritized
                            else RandomSampler(seed=c.seed))
        # Each observation is stored once; the stacks are views built at sample time.
        self.buffer = ReplayBuffer(c.buffer_size, sampler=sampler, views=self.policy.replay_views())
        if resume:
            state = torch.load(c.checkpoint_path, weights_only=False)
            self.policy.set_state(state["policy"])
            self.buffer.load_state_dict(state["buffer"])
            self.restore_counters(state)
            self.resumes = state["resumes"] + 1
            truncate_metrics(c.metrics_path, self.iteration, c.metrics_format)
        env_id = c.env
        # On resume: fresh env seeds and a new worker_index, so new episode ids never meet the open
        # trajectories of the restored buffer.
        self.worker = RolloutWorker(lambda cfg: gym.make(env_id), self.policy, num_envs=c.envs,
                                    rollout_fragment_length=c.rollout_fragment_length,
                                    seed=c.seed * 100_003 + self.iteration * 7_919, worker_index=self.resumes)

    def _epsilon(self) -> float:
        c = self.config
        frac = min(1.0, self.env_steps / max(1, c.eps_steps))
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def train_iteration(self) -> dict:
        c = self.config
        t0 = time.perf_counter()
        stats: dict[str, list[float]] = {"td_loss": [], "q_mean": []}
        steps = 0
        while steps < c.iteration_steps:
            self.policy.epsilon = self._epsilon()
            batch = cast(SampleBatch, self.worker.sample())
            self.buffer.add(batch)
            steps += len(batch)
            self.env_steps += len(batch)
            m = self.worker.get_metrics()
            self.returns.extend(m["episode_returns"])
            self.lengths.extend(m["episode_lengths"])
            self.episodes += len(m["episode_returns"])
            if self.env_steps < c.learning_starts:
                continue
            for _ in range(c.gradient_steps):
                if c.prioritized:
                    sample, info = self.buffer.sample(c.batch_size, return_info=True)
                    out = self.policy.learn_on_replay(sample, info["_weight"])
                    self.buffer.update_priority(info["index"], out["td_errors"])
                else:
                    out = self.policy.learn_on_replay(cast(SampleBatch, self.buffer.sample(c.batch_size)))
                stats["td_loss"].append(out["td_loss"])
                stats["q_mean"].append(out["q_mean"])
        dt = time.perf_counter() - t0
        self.iteration += 1
        self.elapsed += dt
        row = {
            **self.progress_row(steps, dt),
            # The PPO job's columns, DQN's meaning: TD loss, mean Q, epsilon.
            "policy_loss": float(np.mean(stats["td_loss"])) if stats["td_loss"] else math.nan,
            "vf_loss": float(np.mean(stats["q_mean"])) if stats["q_mean"] else math.nan,
            "entropy": self.policy.epsilon,
            "kl": math.nan,
        }
        append_metrics(c.metrics_path, row, c.metrics_format)
        return row

    def done(self) -> bool:
        c = self.config
        if self.env_steps >= c.timesteps:
            return True
        return c.stop_reward is not None and len(self.returns) > 0 and self.mean_return >= c.stop_reward

    def save_checkpoint(self) -> None:
        state = {
            "algo": "dqn",
            "config": dataclasses.asdict(self.config),
            "policy": self.policy.get_state(),
            "buffer": self.buffer.state_dict(),
            "resumes": self.resumes,
            **self.counters_state(),
        }
        save_atomically(state, self.config.checkpoint_path)

    def train(self, progress: bool = True, on_iteration: Callable[[dict], None] | None = None) -> dict:
        """Runs until ``timesteps`` env steps or the mean return reaches ``stop_reward``; returns a summary."""
        c = self.config
        run_loop(self, desc=f"dqn seed {c.seed}", progress=progress, on_iteration=on_iteration, close=self.worker.stop,
                 log_line=lambda row: f"iter {row['iteration']} steps {row['env_steps']} return "
                                      f"{row['episode_return_mean']:.1f} eps {row['entropy']:.2f} "
                                      f"{row['steps_per_s']:.0f} steps/s")
        summary = summarize(self, f"DQN (frame-stack view) on {c.env} (seed {c.seed})")
        summary["replay_bytes_per_step"] = self.buffer.nbytes() / max(1, self.buffer.capacity)
        return summary


def is_dqn_run(out: str) -> bool:
    """Whether the run directory ``out`` holds a DQN run (its ``config.json``), so ``--resume`` finds it
    without ``--algo dqn``."""
    try:
        cfg = json.loads((Path(out) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("model") == DQNConfig.model and "buffer_size" in cfg


def train_dqn_from_args(args: argparse.Namespace, ppo_defaults: object) -> int:
    """``trajview train --algo dqn``: the shared options that apply (env, seed, timesteps, lr when given,
    stop reward, out, metrics format, threads, resume, progress); the rest are `DQNConfig`'s defaults."""
    out = args.out or f"runs/dqn-seed{args.seed}"
    if args.resume:
        saved = saved_config(out, args.timesteps, getattr(ppo_defaults, "timesteps"))
        if saved is None:
            return 2
        config = DQNConfig(**saved)
    else:
        kw = dict(env=args.env, seed=args.seed, timesteps=args.timesteps, out_dir=out,
                  metrics_format=args.metrics_format, threads=args.threads,
                  stop_reward=args.stop_reward)  # a number, or None ('none': never)
        if args.lr is not None:
            kw["lr"] = args.lr
        config = DQNConfig(**kw)
    trainer = DQNTrainer(config, resume=args.resume)
    if not args.resume:
        with open(Path(out) / "config.json", "w") as f:
            json.dump(dataclasses.asdict(config), f, indent=2)
    log.info("%s %s: DQN on %s, seed %d, up to %d env steps", "resuming" if args.resume else "training", out,
             config.env, config.seed, config.timesteps)
    try:
        summary = trainer.train(progress=not args.no_progress)
    except KeyboardInterrupt:  # Ctrl-C: as for PPO, where the run stands instead of a traceback
        if getattr(args, "traceback", False):
            raise
        return interrupted(trainer, config)
    log.info("final mean return %.1f after %d env steps, %.1f s", summary["episode_return_mean"],
             summary["env_steps"], summary["time_s"])
    print(json.dumps(summary))
    return 0
