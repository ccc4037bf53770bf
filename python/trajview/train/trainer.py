"""`PPOTrainer`, the loop behind ``trajview train``: PPO driving rollout workers (sample, then learn), checkpoints."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..algorithms.models import has_image_leaves
from ..algorithms.ppo import PPOPolicy
from ..algorithms.schedules import SCHEDULED, progress_remaining
from .config import IMAGE_MODEL_PRESETS, TrainConfig
from .envs import env_creator, import_env_modules, make_env
from .._extras import missing
from .._io import atomic_write
from .checkpoint import Checkpoint, fitting, optimizer_fits, tensor_state
from .loop import RunCounters, run_loop, summarize
from .sampling import LocalRollouts, ParallelRollouts, make_rollouts

__all__ = ["PPOTrainer", "TENSORBOARD_SCALARS", "load_ppo_policy", "ppo_policy"]

#: The metrics written as TensorBoard scalars (tag ``trajview/<name>``, step = env steps) with ``config.tensorboard``.
TENSORBOARD_SCALARS = ("episode_return_mean", "episode_len_mean", "episodes", "time_s", "steps_per_s",
                       "policy_loss", "vf_loss", "entropy", "kl", "learner_idle_s", "worker_steps_per_s",
                       "staleness_mean")

log = logging.getLogger("trajview.train")


def ppo_policy(config: TrainConfig, device: str = "cpu", what: str = "--env") -> PPOPolicy:
    """The run's `PPOPolicy`, freshly initialized on ``device``: the spaces of ``config.env`` (made once, with
    ``drop_obs_keys``; ``env_modules`` imported first; an unknown id named as ``what``: `make_env`), the model's
    settings (an image observation with the preset ``model_config``: `IMAGE_MODEL_PRESETS` over it, written back
    into ``config``)."""
    import_env_modules(config.env_modules)
    probe = make_env(config.env, config.drop_obs_keys, what=what)
    obs_space, act_space = probe.observation_space, probe.action_space
    probe.close()
    preset = IMAGE_MODEL_PRESETS.get(config.model)
    if preset and getattr(config, "model_config_is_preset", False) and has_image_leaves(obs_space):
        config.model_config = {**config.model_config, **preset}
    return PPOPolicy(obs_space, act_space, {**config.ppo_config(), "device": device})


def load_ppo_policy(policy: PPOPolicy, ck: Checkpoint) -> None:
    """Loads a PPO checkpoint's model and optimizer state into ``policy`` (`FileIntegrityError` naming
    ``weights.pt`` for a state that is missing or does not fit; ``policy`` is then left as it was)."""
    policy_state = tensor_state(ck, "policy")
    what = "policy['optimizer']"
    model = policy_state.get("model") if isinstance(policy_state, dict) else None
    # The optimizer's state checked before anything is loaded, against the parameters it goes to. A model state
    # of other keys is refused by the model, or is the earlier GTrXL layout, which set_state converts (its
    # optimizer state then starts afresh): checked as loaded, then.
    same_keys = isinstance(model, dict) and set(model) == set(policy.model.state_dict())
    if same_keys:
        optimizer_fits(ck, what, policy_state.get("optimizer"), policy.get_optimizer(), policy.model)

    def load() -> None:
        policy.set_state(policy_state)
        if not same_keys:
            optimizer = policy.get_optimizer()
            optimizer_fits(ck, what, optimizer.state_dict(), optimizer, policy.model)

    fitting(ck, "the policy's state", load, keep=policy)


class PPOTrainer(RunCounters):
    """PPO on ``config.env`` with ``config.workers`` rollout workers.

    ``config.backend``: "local" (RolloutWorkers in this process, sampled in
    turn, acting with the learner's own policy), "process" or "ray" (a
    `WorkerSet`: each worker in a process or a Ray actor, sampled in
    parallel; the learner's weights are sent to them after each update, and
    with ``config.async_sampling`` they sample on while the learner trains).
    See `trajview.train.sampling`.

    The run directory (``config.out_dir``) is created by the first iteration's
    metrics, with ``config.json`` (a new run): a run that fails before that
    (an unknown env, a space no model reads) leaves no directory behind.
    """

    def __init__(self, config: TrainConfig, resume: bool = False) -> None:
        self.config = config
        self.resume = resume
        self._out_ready = False
        self.start_counters(config.seed, config.threads, config.smoothing_episodes)
        self.policy = ppo_policy(config, config.resolved_device())
        # Made here, not in the first (timed) iteration: torch's fused Adam imports torch._dynamo (1.4 s).
        self.policy.get_optimizer()
        if resume:
            ck = self.load_checkpoint("ppo")
            load_ppo_policy(self.policy, ck)
            self.restore_counters(ck)  # and the metrics rows written after the checkpoint go
        #: The iteration this process started from (0, or the checkpoint's on resume).
        self.start_iteration = self.iteration
        per = config.workers * config.envs_per_worker
        fragment = config.train_batch_size // per
        # On resume, fresh env seeds (the envs' own state is not in the checkpoint). Worker i's envs are seeded
        # from base + i * envs_per_worker on, whichever the backend.
        base = config.seed * 100_003 + self.iteration * 7_919
        self.tb_writer: Any = None  # made with the run directory (`_prepare_out_dir`), which it writes into
        if config.tensorboard:
            # torch's writer needs the tensorboard package (the tensorboard extra): checked here, before any step.
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError as e:
                raise missing(e, "TrainConfig(tensorboard=True) (--logger tensorboard)")  # chained to e
        #: Bumped by every update of the learner's weights; the workers have `_synced_version`'s.
        self._weights_version = 0
        self._synced_version = 0
        # The workers act on the CPU (one env step's batch is too small for a GPU to pay off): with the learner
        # elsewhere, they act with a CPU copy of the policy (the resumed weights), then the learner's after each
        # update (`sync_weights`).
        acting = self.policy
        if self.policy.device.type != "cpu":
            acting = ppo_policy(config, "cpu")
            acting.set_weights(self.policy.get_weights())
        # Last: worker processes or Ray actors start here (`stop` or the end of `train` ends them).
        self.rollouts: LocalRollouts | ParallelRollouts = make_rollouts(
            config, env_creator(config.env, config.drop_obs_keys), acting, fragment, base
        )

    # -- the loop ------------------------------------------------------------------

    def train_iteration(self) -> dict:
        t0 = time.perf_counter()
        # The learner's newest weights to the workers, only when they changed since the last sync.
        sync_bytes, sync_s = 0, 0.0
        if self._synced_version != self._weights_version:
            sync_bytes, sync_s = self.rollouts.sync_weights(self.policy)
            self._synced_version = self._weights_version
        got = self.rollouts.sample()
        self.returns.extend(got.episode_returns)
        self.lengths.extend(got.episode_lengths)
        self.episodes += len(got.episode_returns)
        t_learn = time.perf_counter()
        # The schedules (lr, clip, entropy) at SB3's point: the env steps sampled so far, this batch's included.
        self.policy.progress_remaining = progress_remaining(self.env_steps + got.env_steps, self.config.timesteps)
        stats = self.policy.learn_on_batch(got.batch)
        self._weights_version += 1
        t1 = time.perf_counter()
        dt = t1 - t0
        self.iteration += 1
        self.env_steps += got.env_steps
        self.elapsed += dt
        row = {
            **self.progress_row(got.env_steps, dt),
            **{k: stats.get(k, math.nan) for k in ("policy_loss", "vf_loss", "entropy", "kl")},
            "learn_s": round(t1 - t_learn, 4),
            "learner_idle_s": round(got.learner_idle_s, 4),
            "worker_steps_per_s": round(got.worker_steps_per_s(), 1),
            "weights_sync_bytes": sync_bytes,
            "weights_sync_s": round(sync_s, 4),
            "staleness_mean": float(np.mean(got.staleness)) if got.staleness else math.nan,
            "staleness_max": max(got.staleness) if got.staleness else math.nan,
            "stale_batches_dropped": got.stale_batches_dropped,
            "worker_restarts": self.rollouts.worker_restarts,
            **{name: self.policy.scheduled(name) for name in SCHEDULED},  # the values this update used
        }
        self._prepare_out_dir()
        self.append_row(row)
        if self.tb_writer is not None:
            # One scalar per metric, against env steps (TensorBoard's step axis).
            for key in TENSORBOARD_SCALARS:
                value = row[key]
                if isinstance(value, (int, float)) and not math.isnan(value):
                    self.tb_writer.add_scalar(f"trajview/{key}", value, global_step=self.env_steps)
            self.tb_writer.flush()
        return row

    def _prepare_out_dir(self) -> None:
        """Creates the run directory, for a new run writes ``config.json``, and starts the TensorBoard writer (once,
        at the first metrics row)."""
        if self._out_ready:
            return
        out = Path(self.config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if not self.resume:
            atomic_write(out / "config.json", json.dumps(dataclasses.asdict(self.config), indent=2).encode())
        if self.config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb_writer = SummaryWriter(log_dir=str(self.config.tensorboard_dir))
        self._out_ready = True

    def done(self) -> bool:
        c = self.config
        if self.env_steps >= c.timesteps:
            return True
        return c.stop_reward is not None and bool(self.returns) and self.mean_return >= c.stop_reward

    def save_checkpoint(self, background: bool = False, defer: bool = False) -> None:
        """Commits the checkpoint (`trajview.train.checkpoint`): the model's and optimizer's state with the
        settings and counters. ``background``: the state taken now, written by a thread (`wait_checkpoint`);
        ``defer``: the state taken now, written by `flush_checkpoint` unless a later checkpoint comes first."""
        self.commit_checkpoint("ppo", {"policy": self.policy}, background=background, defer=defer)

    def stop(self) -> None:
        """Ends the workers (their processes or Ray actors) and closes the TensorBoard writer; `train` does this
        when it ends. For a PPOTrainer made and not trained."""
        try:
            self.rollouts.stop()
        finally:
            self.close_metrics()
            if self.tb_writer is not None:
                self.tb_writer.close()
                self.tb_writer = None

    def train(self, progress: bool = True, on_iteration: Callable[[dict], None] | None = None) -> dict:
        """Runs until ``timesteps`` env steps or the mean return reaches ``stop_reward``; returns a summary.

        The workers are stopped at the end: a PPOTrainer trains once."""
        c = self.config

        def log_line(row: dict) -> str:
            line = (f"iter {row['iteration']} steps {row['env_steps']} return {row['episode_return_mean']:.1f} "
                    f"{row['steps_per_s']:.0f} steps/s, {row['worker_steps_per_s']:.0f} per worker sampling, "
                    f"learner idle {row['learner_idle_s']:.2f} s")
            if c.async_sampling:
                line += f", staleness {row['staleness_mean']:.2f} (max {row['staleness_max']})"
            return line

        run_loop(self, desc=f"{c.model} seed {c.seed}", progress=progress, on_iteration=on_iteration, close=self.stop,
                 log_line=log_line)
        return summarize(self, f"PPO {c.model} on {c.env} (seed {c.seed})")
