"""What the trainers of ``trajview train`` (`PPOTrainer`, `DQNTrainer`) share: the iteration loop with its
progress bar, the atomic checkpoint write, and the run's summary (metrics, learning-curve plot)."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from .metrics import plot_learning_curve, read_metrics

__all__ = ["RunCounters", "interrupted", "run_loop", "save_atomically", "saved_config", "summarize", "where_it_stopped"]

log = logging.getLogger("trajview.train")


class RunCounters:
    """A run's counters (iterations, env steps, episodes, seconds, the last episodes' returns and lengths), set
    up, checkpointed and restored the same way for every trainer."""

    #: What `counters_state` holds besides the return and length windows and torch's RNG.
    COUNTERS = ("iteration", "env_steps", "episodes", "elapsed")

    iteration: int
    env_steps: int
    episodes: int
    elapsed: float
    returns: deque[float]
    lengths: deque[int]
    #: (iteration, env steps) of the run's checkpoint on disk: written by `run_loop` after each iteration, taken
    #: back by `restore_counters`; None before the first.
    checkpointed: tuple[int, int] | None

    def start_counters(self, seed: int, threads: int, smoothing_episodes: int) -> None:
        """Zero counters, empty windows of ``smoothing_episodes``, and torch and numpy seeded (torch on
        ``threads`` threads)."""
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.iteration = self.env_steps = self.episodes = 0
        self.elapsed = 0.0
        self.returns = deque(maxlen=smoothing_episodes)
        self.lengths = deque(maxlen=smoothing_episodes)
        self.checkpointed = None

    def counters_state(self) -> dict[str, Any]:
        """The counters, the windows and torch's RNG, for a checkpoint."""
        return {**{k: getattr(self, k) for k in self.COUNTERS}, "returns": list(self.returns),
                "lengths": list(self.lengths), "torch_rng": torch.get_rng_state()}

    def restore_counters(self, state: dict[str, Any]) -> None:
        """Takes back what `counters_state` saved (from a checkpoint)."""
        for k in self.COUNTERS:
            setattr(self, k, state[k])
        self.returns.extend(state["returns"])
        self.lengths.extend(state["lengths"])
        torch.set_rng_state(state["torch_rng"])
        self.checkpointed = (self.iteration, self.env_steps)

    @property
    def mean_return(self) -> float:
        """The mean return of the last ``smoothing_episodes`` episodes (NaN before the first)."""
        return float(np.mean(self.returns)) if self.returns else math.nan

    def progress_row(self, steps: int, seconds: float) -> dict[str, Any]:
        """A metrics row's first columns, the same for every trainer: the counters (as they are after the
        iteration), the last episodes' mean return and length, and the iteration's ``steps`` env steps per second
        over its ``seconds``."""
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "episode_return_mean": self.mean_return,
            "episode_len_mean": float(np.mean(self.lengths)) if self.lengths else math.nan,
            "time_s": round(self.elapsed, 3),
            "steps_per_s": round(steps / seconds, 1),
        }


class _Run(Protocol):
    config: Any
    env_steps: int
    iteration: int
    elapsed: float
    checkpointed: tuple[int, int] | None

    @property
    def mean_return(self) -> float: ...

    def done(self) -> bool: ...

    def train_iteration(self) -> dict: ...

    def save_checkpoint(self) -> None: ...


def save_atomically(state: dict, path: Path) -> None:
    """``torch.save`` to a temporary file, then renamed: a run killed meanwhile keeps its last checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def saved_config(out: str, timesteps: int, default_timesteps: int) -> dict | None:
    """For ``--resume``: the settings saved in ``out``'s checkpoint (``timesteps`` replaced when it was given,
    i.e. differs from ``default_timesteps``; ``out_dir`` = ``out``), or None (logged) when there is none."""
    ckpt = Path(out) / "checkpoint.pt"
    if not ckpt.exists():
        log.error("--resume: no checkpoint at %s", ckpt)
        return None
    saved: dict = torch.load(ckpt, weights_only=False)["config"]
    if timesteps != default_timesteps:
        saved["timesteps"] = timesteps
    saved["out_dir"] = out
    return saved


def run_loop(
    run: _Run,
    *,
    desc: str,
    log_line: Callable[[dict], str],
    progress: bool,
    on_iteration: Callable[[dict], None] | None,
    close: Callable[[], None],
) -> None:
    """Iterations until ``run.done()``, a checkpoint after each; a progress bar (or, without, ``log_line(row)``
    logged per iteration); ``close()`` at the end, whatever happened."""
    from tqdm import tqdm

    c = run.config
    bar = tqdm(total=c.timesteps, initial=min(run.env_steps, c.timesteps), unit="step", disable=not progress,
               dynamic_ncols=True, desc=desc)
    try:
        while not run.done():
            row = run.train_iteration()
            run.save_checkpoint()
            run.checkpointed = (run.iteration, run.env_steps)
            bar.update(min(row["env_steps"], c.timesteps) - bar.n)
            post = {"ret": f"{row['episode_return_mean']:.1f}", "sps": f"{row['steps_per_s']:.0f}"}
            if "worker_steps_per_s" in row:  # PPO: each worker's sampling rate, the learner's wait for the batch
                post["worker_sps"] = f"{row['worker_steps_per_s']:.0f}"
                post["idle"] = f"{row['learner_idle_s']:.2f}s"
            bar.set_postfix(post, refresh=False)
            if on_iteration is not None:
                on_iteration(row)
            if not progress:
                log.info("%s", log_line(row))
    finally:
        bar.close()
        close()


def summarize(run: _Run, title: str) -> dict[str, Any]:
    """The run's summary (where the mean return first reached ``stop_reward``), with the learning curve plotted."""
    c = run.config
    rows = read_metrics(c.metrics_path)
    reached = None
    if c.stop_reward is not None:
        reached = next((r for r in rows if r["episode_return_mean"] >= c.stop_reward), None)
    png = Path(c.out_dir) / "learning_curve.png"
    plot_learning_curve(rows, png, title, c.stop_reward)
    return {
        "env_steps": run.env_steps,
        "iterations": run.iteration,
        "episode_return_mean": run.mean_return,
        "time_s": run.elapsed,
        "reached_stop_reward": reached is not None,
        "steps_to_stop_reward": int(reached["env_steps"]) if reached else None,
        "time_to_stop_reward_s": float(reached["time_s"]) if reached else None,
        "metrics": str(c.metrics_path),
        "plot": str(png),
        "checkpoint": str(c.checkpoint_path),
    }


def where_it_stopped(trainer: Any, config: Any) -> str:
    """Where a run that stopped early stands: the iteration its checkpoint holds (`RunCounters.checkpointed`:
    written after every iteration, so an iteration cut short is not in it), and how to go on."""
    if config is None or not config.checkpoint_path.exists():
        return "the run stopped before its first iteration (nothing written)"
    saved = getattr(trainer, "checkpointed", None)
    if saved is None:  # the trainer did not get as far as its checkpoint's counters: a resumed run's start failed
        return f"the run's checkpoint {config.checkpoint_path} is as it was; --resume --out {config.out_dir} continues it"
    iteration, env_steps = saved
    session = "" if iteration > getattr(trainer, "start_iteration", 0) else " (none of this session's)"
    return (f"the run's checkpoint {config.checkpoint_path} holds iteration {iteration} "
            f"({env_steps} env steps){session}; --resume --out {config.out_dir} continues it")


def interrupted(trainer: Any, config: Any) -> int:
    """``trajview train`` stopped by Ctrl-C (PPO or DQN): prints where the run stands (`where_it_stopped`) instead
    of a traceback; the exit code, 130."""
    print(f"trajview train: interrupted\n{where_it_stopped(trainer, config)}", file=sys.stderr)
    return 130
