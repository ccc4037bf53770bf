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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import gymnasium as gym
import numpy as np

from .. import envs as _envs  # noqa: F401  (registers trajview's gymnasium ids)
from .._io import atomic_write
from .._validate import boolean, finite_number, int_at_least
from ..algorithms.dqn import DQNPolicy
from ..algorithms.settings import check_dqn_settings
from ..errors import FileIntegrityError
from ..replay import PrioritizedSampler, RandomSampler, ReplayBuffer, Sampler
from ..replay.persistence import dump_parts, load_parts
from ..rollout.worker import RolloutWorker
from ..views import SampleBatch
from .envs import make_env
from .checkpoint import Checkpoint, fitting, optimizer_fits, tensor_state
from .loop import RunCounters, run_loop, summarize
from .config import DQN_ITERATION_STEPS, RunConfig, setting
from .runs import config_from
from .sampling import sample_in_process

__all__ = ["DQNConfig", "DQNTrainer", "REPLAY_PREFIX", "dqn_config", "dqn_policy", "load_dqn_policy"]

log = logging.getLogger("trajview.train")

#: The replay buffer's files in a DQN checkpoint are named with this prefix.
REPLAY_PREFIX = "replay."
#: At most this many bytes of rows in one uniform replay sample drawn for several gradient steps
#: (`DQNTrainer._uniform_samples`).
GROUPED_SAMPLE_BYTES = 16 << 20


@dataclasses.dataclass
class DQNConfig(RunConfig):
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
    #: Double DQN's target; False: the target network's max (DQN's, Stable-Baselines3's).
    double_q: bool = True
    learning_starts: int = 1_000
    gradient_steps: int = 16  # per sample of envs x rollout_fragment_length steps
    target_update_interval: int = 500
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_steps: int = 20_000
    #: Uniform random actions (epsilon 1) in the samples that start before ``learning_starts`` env steps
    #: (Stable-Baselines3's warm-up); the linear schedule, still counted from step 0, after. False: the schedule
    #: from the start.
    random_warmup: bool = False
    prioritized: bool = False
    per_alpha: float = 0.6
    per_beta: float = 0.4
    iteration_steps: int = DQN_ITERATION_STEPS  # env steps per metrics row and checkpoint (--iteration-steps)
    stop_reward: float | None = 150.0
    smoothing_episodes: int = 100
    out_dir: str = "runs/dqn"
    metrics_format: str = "csv"
    threads: int = 1
    #: The learner's device (`DEVICES`); acting stays on the CPU (small batches: a CPU copy with synced weights).
    device: str = "cpu"
    #: DQNPolicy's "learner" (``--learner``): who takes the gradient steps, "auto" (numpy on the CPU,
    #: `trajview.algorithms.dqn_learner`), "numpy" or "torch".
    learner: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("envs", "rollout_fragment_length", "buffer_size", "batch_size", "gradient_steps",
                     "iteration_steps"):
            int_at_least(setting(name), getattr(self, name), 1)
        # The policy's settings, by DQNPolicy's rules (`DQN_RULES`).
        check_dqn_settings({k: getattr(self, k) for k in ("num_frames", "hidden", "target_update_interval")}, setting)
        int_at_least(setting("learning_starts"), self.learning_starts, 0)
        int_at_least(setting("eps_steps"), self.eps_steps, 0)
        if self.batch_size > self.buffer_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be at most buffer_size ({self.buffer_size})")
        finite_number(setting("eps_start"), self.eps_start, 0, 1)
        finite_number(setting("eps_end"), self.eps_end, 0, 1)
        finite_number(setting("per_alpha"), self.per_alpha, 0)
        finite_number(setting("per_beta"), self.per_beta, 0, 1)
        check_dqn_settings({"dueling": self.dueling, "double_q": self.double_q}, str)
        check_dqn_settings({"learner": self.learner}, setting)
        for name in ("random_warmup", "prioritized"):
            boolean(name, getattr(self, name))

    def policy_config(self) -> dict:
        return {"num_frames": self.num_frames, "hidden": self.hidden, "dueling": self.dueling, "double_q": self.double_q,
                "lr": self.lr,
                "gamma": self.gamma, "target_update_interval": self.target_update_interval, "seed": self.seed,
                "device": self.resolved_device(), "learner": self.learner}


def dqn_policy(config: DQNConfig, what: str = "--env") -> DQNPolicy:
    """The run's `DQNPolicy`, freshly initialized, for the spaces of ``config.env`` (made once: `make_env`, an
    unknown id named as ``what``)."""
    probe = make_env(config.env, what=what)
    try:
        return DQNPolicy(probe.observation_space, probe.action_space, config.policy_config())
    finally:
        probe.close()


def load_dqn_policy(policy: DQNPolicy, ck: Checkpoint) -> dict:
    """Loads a DQN checkpoint's networks, optimizer, epsilon, gradient steps and exploration RNG into ``policy``
    (`FileIntegrityError` naming the file for a state that is missing or does not fit; ``policy`` is then left as
    it was); returns the checkpoint's ``extra``, checked."""
    extra = ck.extra
    resumes, pol = extra.get("resumes"), extra.get("policy")
    if (isinstance(resumes, bool) or not isinstance(resumes, int) or resumes < 0 or not isinstance(pol, dict)
            or not isinstance(pol.get("rng"), dict)):
        raise FileIntegrityError(ck.manifest_path, f"'extra' must hold 'resumes' (an int >= 0) and 'policy' "
                                                   f"(epsilon, grad_steps, rng), got {extra!r:.200}")
    tensors = {k: tensor_state(ck, k) for k in ("q", "target", "optimizer")}
    optimizer_fits(ck, "optimizer", tensors["optimizer"], policy.optimizer, policy.q)  # before anything is loaded
    fitting(ck, "the policy's state", lambda: policy.set_state({**tensors, **pol}), keep=policy)
    return extra


class DQNTrainer(RunCounters):
    """Double DQN on ``config.env`` with one `RolloutWorker` of ``config.envs`` envs and a `ReplayBuffer`."""

    def __init__(self, config: DQNConfig, resume: bool = False) -> None:
        self.config = c = config
        self.resume = resume
        self._out_ready = False
        self.start_counters(c.seed, c.threads, c.smoothing_episodes)
        self.resumes = 0
        self._sample_row_bytes: int | None = None  # (`_uniform_samples`)
        self.policy = dqn_policy(c)
        sampler: Sampler = (PrioritizedSampler(None, c.per_alpha, c.per_beta, seed=c.seed) if c.prioritized
                            else RandomSampler(seed=c.seed))
        # Each observation is stored once; the stacks are views built at sample time.
        self.buffer = ReplayBuffer(c.buffer_size, sampler=sampler, views=self.policy.replay_views(),
                                   default_views=False)  # next_stack holds what new_obs would
        if resume:
            self._restore(self.load_checkpoint("dqn"))
        #: The iteration this process started from (0, or the checkpoint's on resume).
        self.start_iteration = self.iteration
        env_id = c.env
        # On resume: fresh env seeds and a new worker_index, so new episode ids never meet the open
        # trajectories of the restored buffer.
        self.worker = RolloutWorker(lambda cfg: gym.make(env_id), self.policy, num_envs=c.envs,
                                    rollout_fragment_length=c.rollout_fragment_length,
                                    seed=c.seed * 100_003 + self.iteration * 7_919, worker_index=self.resumes)

    def _restore(self, ck: Checkpoint) -> None:
        """The policy (networks and optimizer from ``weights.pt``; epsilon, gradient steps and the exploration RNG
        from the manifest), the replay buffer (its files, checked) and the counters of a checkpoint."""
        resumes = load_dqn_policy(self.policy, ck)["resumes"]
        replay = ck.manifest.meta.get("replay")
        load_parts(self.buffer, ck.manifest, replay, REPLAY_PREFIX)
        self.restore_counters(ck)  # and the metrics rows written after the checkpoint go
        self.resumes = resumes + 1

    def _epsilon(self) -> float:
        c = self.config
        if c.random_warmup and self.env_steps < c.learning_starts:
            return 1.0
        frac = min(1.0, self.env_steps / max(1, c.eps_steps))
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def train_iteration(self) -> dict:
        c = self.config
        t0 = time.perf_counter()
        stats: dict[str, list[float]] = {"td_loss": [], "q_mean": []}
        steps = 0
        learn_s = 0.0  # the gradient steps' seconds (replay samples, updates, priorities)
        # An iteration ends at iteration_steps, or at the run's timesteps: the budget is kept within one sample
        # (envs x rollout_fragment_length env steps).
        while steps < c.iteration_steps and self.env_steps < c.timesteps:
            self.policy.epsilon = self._epsilon()
            batch = cast(SampleBatch, sample_in_process(self.worker, 1))
            self.buffer.add(batch)
            steps += len(batch)
            self.env_steps += len(batch)
            m = self.worker.get_metrics()
            self.returns.extend(m["episode_returns"])
            self.lengths.extend(m["episode_lengths"])
            self.episodes += len(m["episode_returns"])
            if self.env_steps < c.learning_starts:
                continue
            t_learn = time.perf_counter()
            with self.policy.learning_steps():  # (the learner's support checked once for these steps)
                for sample, info in self._replay_samples():
                    out = self.policy.learn_on_replay(sample, None if info is None else info["_weight"])
                    if info is not None:
                        self.buffer.update_priority(info["index"], out["td_errors"])
                    stats["td_loss"].append(out["td_loss"])
                    stats["q_mean"].append(out["q_mean"])
            learn_s += time.perf_counter() - t_learn
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
            "learn_s": round(learn_s, 4),
        }
        if not self._out_ready:  # the run folder and (a new run) its config.json, at the first metrics row
            Path(c.out_dir).mkdir(parents=True, exist_ok=True)
            if not self.resume:
                atomic_write(Path(c.out_dir) / "config.json", json.dumps(dataclasses.asdict(c), indent=2).encode())
            self._out_ready = True
        self.append_row(row)
        return row

    def _replay_samples(self) -> Iterator[tuple[SampleBatch, dict[str, np.ndarray] | None]]:
        """The replay samples of one round of ``gradient_steps`` steps, in order, each with its info (prioritized
        replay; else None). A prioritized one is drawn when asked for: after the previous step's priority update,
        which changes the draw. Uniform ones: `_uniform_samples`."""
        if not self.config.prioritized:
            yield from ((sample, None) for sample in self._uniform_samples())
            return
        for _ in range(self.config.gradient_steps):
            yield cast(tuple[SampleBatch, dict[str, np.ndarray]],
                       self.buffer.sample(self.config.batch_size, columns=self.policy.replay_columns(),
                                          return_info=True))

    def _uniform_samples(self) -> Iterator[SampleBatch]:
        """The replay samples of one round of ``gradient_steps`` uniform steps, in order. The buffer does not change
        between them and a uniform sample's rows are independent draws with replacement, so ``g`` steps' samples
        are one sample of ``g * batch_size`` rows, cut in turn (the same distribution; one call of the C++ gather
        instead of ``g``: per call it cost 3-5x its isolated time in a run, issue 25). ``g`` is what fits in
        `GROUPED_SAMPLE_BYTES` at the row size of the run's first draw (one step's sample)."""
        c = self.config
        left = c.gradient_steps
        while left > 0:
            per_row = self._sample_row_bytes
            g = 1 if per_row is None else max(1, min(left, GROUPED_SAMPLE_BYTES // max(1, per_row * c.batch_size)))
            drawn = cast(SampleBatch, self.buffer.sample(g * c.batch_size, columns=self.policy.replay_columns()))
            if per_row is None:
                self._sample_row_bytes = -(-sum(np.asarray(v).nbytes for v in dict.values(drawn)) // max(1, len(drawn)))
            for j in range(g):
                yield drawn if g == 1 else drawn[j * c.batch_size : (j + 1) * c.batch_size]
            left -= g

    def done(self) -> bool:
        c = self.config
        if self.env_steps >= c.timesteps:
            return True
        return c.stop_reward is not None and len(self.returns) > 0 and self.mean_return >= c.stop_reward

    def save_checkpoint(self, background: bool = False, defer: bool = False) -> None:
        """Commits the checkpoint (`trajview.train.checkpoint`) as one unit: the networks and optimizer, the
        settings and counters, epsilon, gradient steps and the exploration RNG, and the replay buffer's files
        (`trajview.replay.persistence.dump_parts`). Always written before it returns (``background`` and ``defer``
        are not taken: the replay files are written from the buffer's memory, under its lock, which the next
        iteration's adds need)."""
        p = self.policy.get_state()
        weights = {k: p[k] for k in ("q", "target", "optimizer")}
        extra = {"resumes": self.resumes, "policy": {"epsilon": float(p["epsilon"]), "grad_steps": int(p["grad_steps"]),
                                                     "rng": p["rng"]}}
        with dump_parts(self.buffer, REPLAY_PREFIX) as (files, replay):
            self.commit_checkpoint("dqn", weights, extra, files=files, extra_meta={"replay": replay})

    def _close(self) -> None:
        try:
            self.worker.stop()
        finally:
            self.close_metrics()

    def train(self, progress: bool = True, on_iteration: Callable[[dict], None] | None = None) -> dict:
        """Runs until ``timesteps`` env steps or the mean return reaches ``stop_reward``; returns a summary."""
        c = self.config
        run_loop(self, desc=f"dqn seed {c.seed}", progress=progress, on_iteration=on_iteration, close=self._close,
                 log_line=lambda row: f"iter {row['iteration']} steps {row['env_steps']} return "
                                      f"{row['episode_return_mean']:.1f} eps {row['entropy']:.2f} "
                                      f"{row['steps_per_s']:.0f} steps/s")
        summary = summarize(self, f"DQN (frame-stack view) on {c.env} (seed {c.seed})")
        summary["replay_bytes_per_step"] = self.buffer.nbytes() / max(1, self.buffer.capacity)
        return summary


def dqn_config(args: argparse.Namespace, ck: Checkpoint | None, out: str, metrics_format: str,
               timesteps: int | None, stop_reward: tuple[float | None] | None = None) -> DQNConfig:
    """``trajview train --algo dqn``'s settings: a resumed run's checkpoint's (``timesteps`` and ``stop_reward``,
    a 1-tuple, when given), else the shared options that apply (env, seed, timesteps, lr, gamma and iteration steps
    when given, stop reward, out, metrics format, threads) over `DQNConfig`'s defaults."""
    if ck is not None:
        overrides: dict = {"device": args.device} if args.device else {}
        if args.learner is not None:
            overrides["learner"] = args.learner
        if stop_reward is not None:
            overrides["stop_reward"] = stop_reward[0]
        return config_from(DQNConfig, ck, out, timesteps, overrides)
    kw = dict(env=args.env, seed=args.seed, out_dir=out, metrics_format=metrics_format, threads=args.threads)
    if timesteps is not None:
        kw["timesteps"] = timesteps
    if stop_reward is not None:
        kw["stop_reward"] = stop_reward[0]  # a number, or None ('none': never)
    if args.device is not None:
        kw["device"] = args.device
    if args.learner is not None:
        kw["learner"] = args.learner
    for name in ("lr", "gamma", "iteration_steps"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    return DQNConfig(**kw)
