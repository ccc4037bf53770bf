"""``trajview evaluate``: a trained policy's returns and episode lengths over N episodes of its run's env.

The episodes are sampled by a `RolloutWorker` (one env, fragments of `FRAGMENT` steps, the finished episodes
read from its metrics until there are N), acting deterministically unless ``explore``; with ``video_dir``,
gymnasium's ``RecordVideo`` records each of them (the env made with ``render_mode="rgb_array"``). Everything
random in an evaluation follows from its ``seed``: the env's resets, and with ``explore`` the sampled actions
(torch's generator for PPO, the epsilon-greedy draws for DQN), drawn from RNGs seeded for the evaluation and
put back as they were after it (`_seeded_actions`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .._extras import install_hint
from .._validate import int_at_least
from ..algorithms.dqn import DQNPolicy
from ..policy.policy import Policy
from ..rollout.worker import RolloutWorker
from .config import MAX_SEED
from .saved import TrainedPolicy

__all__ = ["Evaluation", "EvaluateError", "evaluate", "evaluation_table"]

#: The most env steps one evaluation runs per episode asked before it gives up (an env whose episodes never end).
MAX_STEPS_PER_EPISODE = 1_000_000
#: Env steps per sample: the step limit is checked between samples.
FRAGMENT = 200


class EvaluateError(Exception):
    """An evaluation that cannot run as asked (one line, what to change)."""


@dataclass
class Evaluation:
    """The finished episodes' returns and lengths (in the order they ended)."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        r, n = np.asarray(self.returns, np.float64), np.asarray(self.lengths, np.float64)
        return {"episodes": len(r), "return_mean": float(r.mean()), "return_std": float(r.std()),
                "length_mean": float(n.mean()), "length_std": float(n.std())}


def _video_env(trained: TrainedPolicy, video_dir: Path, episodes: int) -> Any:
    probe = trained.make_env()  # its metadata says whether it renders (gymnasium warns when asked anyway)
    modes = list(probe.metadata.get("render_modes") or [])
    probe.close()
    if "rgb_array" not in modes:
        raise EvaluateError(f"--video: {trained.config.env} does not render rgb_array frames (its render_modes: "
                            f"{modes}); evaluate without --video")
    if importlib.util.find_spec("moviepy") is None:
        raise EvaluateError(f"--video needs the moviepy package (gymnasium's RecordVideo writes the files with it): "
                            f"{install_hint('moviepy')}")
    env = trained.make_env(render_mode="rgb_array")
    try:  # a frame, before any episode: an env that cannot draw one (e.g. pygame missing) says so here
        env.reset()
        frame = env.render()
    except Exception as e:
        env.close()
        raise EvaluateError(f"--video: {trained.config.env} could not render an rgb_array frame: "
                            f"{type(e).__name__}: {' '.join(str(e).split())}") from None
    if not isinstance(frame, np.ndarray):
        env.close()
        raise EvaluateError(f"--video: {trained.config.env}'s render() gave {type(frame).__name__}, not an "
                            f"rgb_array frame")
    return gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda i: i < episodes,
                                    name_prefix="eval", disable_logger=True)


@contextlib.contextmanager
def _seeded_actions(policy: Policy, seed: int) -> Iterator[None]:
    """The policy's random actions drawn from RNGs seeded from ``seed`` for the block, the caller's as they were
    after it: torch's CPU generator (PPO samples its actions from it, ``dist.sample()``; `load_trained` puts the
    policy on the CPU) forked and seeded as ``trajview train`` seeds it, and a DQN policy's epsilon-greedy RNG
    (the checkpoint's, which each evaluation would otherwise advance) replaced by one seeded from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)  # the CPU's only: CUDA's generators are not forked here
        if not isinstance(policy, DQNPolicy):
            yield
            return
        saved, policy._rng = policy._rng, np.random.default_rng(seed)
        try:
            yield
        finally:
            policy._rng = saved


def evaluate(trained: TrainedPolicy, episodes: int = 10, explore: bool = False, seed: int = 0,
             video_dir: str | os.PathLike[str] | None = None, max_steps: int | None = None) -> Evaluation:
    """Runs ``episodes`` episodes of the run's env with the trained policy (deterministic actions unless
    ``explore``), the env and the sampled actions seeded from ``seed`` (the same seed, the same episodes; the
    caller's torch RNG and the policy's own exploration RNG are left as they were; ValueError for a seed
    outside ``[0, MAX_SEED]``, as ``trajview train`` takes it); with ``video_dir``, an mp4 of each episode
    there (`EvaluateError` when the env does not render rgb_array frames or moviepy is missing).
    `EvaluateError` after ``max_steps`` env steps (default `MAX_STEPS_PER_EPISODE` per episode asked) without
    the episodes asked."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise EvaluateError(f"--episodes must be an int >= 1, got {episodes!r}")
    seed = int_at_least("--seed", seed, 0, MAX_SEED)
    out = Evaluation()
    if video_dir is not None:
        video = Path(video_dir)
        if video.exists() and not video.is_dir():
            raise EvaluateError(f"--video {video} is a file: give a folder for the videos")
        first = _video_env(trained, video, episodes)  # checked before any episode runs
        made = [first]

        def creator(cfg: dict) -> Any:
            return made.pop() if made else _video_env(trained, video, episodes)
    else:
        def creator(cfg: dict) -> Any:
            return trained.make_env()

    steps = 0
    limit = MAX_STEPS_PER_EPISODE * episodes if max_steps is None else max_steps
    with _seeded_actions(trained.policy, seed):
        worker: RolloutWorker[Any] = RolloutWorker(creator, trained.policy, num_envs=1,
                                                   rollout_fragment_length=FRAGMENT,
                                                   seed=seed, explore=explore)
        try:
            while len(out.returns) < episodes:
                steps += len(worker.sample())
                m = worker.get_metrics()
                out.returns.extend(float(x) for x in m["episode_returns"])
                out.lengths.extend(int(x) for x in m["episode_lengths"])
                if steps >= limit and len(out.returns) < episodes:
                    raise EvaluateError(f"{steps} env steps and only {len(out.returns)} of {episodes} episodes "
                                        f"ended: does {trained.config.env} end its episodes?")
        finally:
            worker.stop()
    del out.returns[episodes:], out.lengths[episodes:]
    if video_dir is not None:
        out.videos = sorted(str(p) for p in Path(video_dir).glob("eval-episode-*.mp4"))
    return out


def evaluation_table(run: str, trained: TrainedPolicy, ev: Evaluation, explore: bool) -> str:
    """A markdown table of the evaluation: mean and std of the returns and lengths."""
    s = ev.summary()

    def num(x: float) -> str:
        return "nan" if math.isnan(x) else f"{x:.2f}"

    return "\n".join([
        "| run | algo | env | iteration | env steps trained | episodes | actions | return mean | return std "
        "| length mean | length std |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {run} | {trained.algo} | {trained.config.env} | {trained.counters['iteration']} "
        f"| {trained.counters['env_steps']} | {s['episodes']} | {'explore' if explore else 'deterministic'} "
        f"| {num(s['return_mean'])} | {num(s['return_std'])} | {num(s['length_mean'])} | {num(s['length_std'])} |",
    ])
