"""``trajview evaluate``: a trained policy's returns and episode lengths over N episodes of its run's env.

The episodes are sampled by a `RolloutWorker` (one env, fragments of `FRAGMENT` steps, the finished episodes
read from its metrics until there are N), acting deterministically unless ``explore``; with ``video_dir``,
gymnasium's ``RecordVideo`` records each of them (the env made with ``render_mode="rgb_array"``).
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from .._extras import install_hint
from ..rollout.worker import RolloutWorker
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
    return gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda i: i < episodes,
                                    name_prefix="eval", disable_logger=True)


def evaluate(trained: TrainedPolicy, episodes: int = 10, explore: bool = False, seed: int = 0,
             video_dir: str | os.PathLike[str] | None = None, max_steps: int | None = None) -> Evaluation:
    """Runs ``episodes`` episodes of the run's env with the trained policy (deterministic actions unless
    ``explore``), the env seeded from ``seed``; with ``video_dir``, an mp4 of each episode there
    (`EvaluateError` when the env does not render rgb_array frames or moviepy is missing). `EvaluateError`
    after ``max_steps`` env steps (default `MAX_STEPS_PER_EPISODE` per episode asked) without the episodes
    asked."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise EvaluateError(f"--episodes must be an int >= 1, got {episodes!r}")
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

    worker: RolloutWorker[Any] = RolloutWorker(creator, trained.policy, num_envs=1,
                                               rollout_fragment_length=FRAGMENT,
                                               seed=seed, explore=explore)
    steps = 0
    limit = MAX_STEPS_PER_EPISODE * episodes if max_steps is None else max_steps
    try:
        while len(out.returns) < episodes:
            steps += len(worker.sample())
            m = worker.get_metrics()
            out.returns.extend(float(x) for x in m["episode_returns"])
            out.lengths.extend(int(x) for x in m["episode_lengths"])
            if steps >= limit and len(out.returns) < episodes:
                raise EvaluateError(f"{steps} env steps and only {len(out.returns)} of {episodes} episodes ended: "
                                    f"does {trained.config.env} end its episodes?")
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
