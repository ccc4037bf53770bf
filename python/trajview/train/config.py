"""`TrainConfig`, everything a training run depends on, and `MODEL_PRESETS`, each model's default settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from .._validate import boolean, finite_number, int_at_least, timeout_seconds
from ..algorithms.settings import check_ppo_settings
from ..algorithms.schedules import SCHEDULED, check_schedule

__all__ = ["RunConfig", "TrainConfig", "MODEL_PRESETS", "IMAGE_MODEL_PRESETS", "PRESET_KEYS", "BACKENDS", "FLAGS",
           "setting", "check_common"]

#: Where a run's rollout workers sample (``--backend``): in the trainer's process one after another, in a
#: process each, or in a Ray actor each (on any node of the Ray cluster).
BACKENDS = ("local", "process", "ray")

#: Per model: its model_config and, under "ppo", the `TrainConfig` settings that differ from its defaults for this
#: model (applied by `TrainConfig.with_model_presets`, which ``trajview train`` uses, under what is given).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "mlp": {"model_config": {}},
    # The frame stack: 16 envs, 512-step batches in minibatches of 256, 10 SGD epochs, Adam 1e-3 (fused: one
    # kernel per step instead of a loop over the parameters), gamma 0.98 and GAE lambda 0.8 (rl-baselines3-zoo's
    # for CartPoleNoVel). On StatelessCartPole, seeds 0-4: 26,112-34,304 env steps to a mean return of 150, median
    # 26,624 (SB3 at the zoo's settings: 28,160), 2.9-3.7 s; the earlier preset (20 envs, 2,000-step batches, 5
    # epochs, gamma 0.99, lambda 0.95) took 38,000-42,000 env steps in 2.3-2.7 s (bench/README.md, issue 25).
    "framestack": {"model_config": {"num_frames": 16},
                   "ppo": {"envs_per_worker": 16, "train_batch_size": 512, "sgd_minibatch_size": 256,
                           "num_sgd_iter": 10, "lr": 1e-3, "gamma": 0.98, "lambda_": 0.8, "adam_fused": True}},
    # The memory models: no gradient-norm clip (the global clip of 0.5 over both networks was taken up by the
    # value function's gradient, so the policy's steps shrank), Adam 2e-3 (fused), 5 epochs, many envs (fewer,
    # wider policy calls while sampling). LSTM: cells of 32 (oneDNN's LSTM time grows with the cell size squared),
    # 1,000 env steps per iteration in minibatches of 250 rows (GTrXL: the same, below). Env steps
    # to a mean return of 150 on StatelessCartPole, seeds 0-9, are as with the earlier presets (cells of 64, 10
    # epochs, Adam 1e-3) at a third of the wall-clock (bench/HISTORY.md, "Training passes").
    "lstm": {"model_config": {"max_seq_len": 20, "cell_size": 32, "prev_action": True},
             "ppo": {"train_batch_size": 1000, "sgd_minibatch_size": 250, "num_sgd_iter": 5, "envs_per_worker": 20,
                     "lr": 2e-3, "grad_clip": None, "adam_fused": True}},
    # GTrXL: the LSTM's batches (20 envs, 1,000 env steps per iteration, minibatches of 250 rows): on seeds 0-9,
    # 30,500 env steps to 150 (median; 23,000-38,000) against 36,000 (34,000-60,000) with the earlier 40 envs,
    # 2,000-step batches and minibatches of 500 (issue 25; RecurrentPPO at the zoo's settings: 35,584 on seeds 0-2).
    "attention": {"model_config": {"max_seq_len": 20, "memory": 16, "attention_dim": 32, "num_layers": 1},
                  "ppo": {"envs_per_worker": 20, "train_batch_size": 1000, "sgd_minibatch_size": 250,
                          "num_sgd_iter": 5, "lr": 2e-3, "grad_clip": None, "adam_fused": True}},
}

#: The settings a preset's "ppo" part may hold.
PRESET_KEYS = ("envs_per_worker", "train_batch_size", "sgd_minibatch_size", "num_sgd_iter", "lr", "gamma", "lambda_",
               "vf_loss_coeff", "entropy_coeff", "grad_clip", "adam_fused")

#: What changes in a model's preset when the observation has an image leaf (applied only to a preset's
#: model_config, never to one given with --model-config): the frame stack holds 4 frames (DQN's), not 16.
IMAGE_MODEL_PRESETS: dict[str, dict[str, Any]] = {"framestack": {"num_frames": 4}}


#: The ``trajview train`` option of each setting (PPO's `TrainConfig` and DQN's `DQNConfig`): errors name both.
FLAGS = {
    "env": "--env", "env_modules": "--env-module", "drop_obs_keys": "--drop-obs-keys", "model": "--model",
    "seed": "--seed", "timesteps": "--timesteps", "workers": "--workers", "backend": "--backend",
    "ray_address": "--ray-address", "async_sampling": "--async", "max_staleness": "--max-staleness",
    "recreate_failed_workers": "--recreate-failed-workers", "max_worker_restarts": "--max-worker-restarts",
    "sample_timeout_s": "--sample-timeout", "start_timeout_s": "--start-timeout", "envs_per_worker": "--envs-per-worker",
    "train_batch_size": "--train-batch-size", "sgd_minibatch_size": "--minibatch-size",
    "num_sgd_iter": "--num-sgd-iter", "lr": "--lr", "gamma": "--gamma", "lambda_": "--lambda",
    "clip_param": "--clip-param", "vf_loss_coeff": "--vf-loss-coeff", "entropy_coeff": "--entropy-coeff",
    "grad_clip": "--grad-clip", "lr_schedule": "--lr-schedule", "clip_schedule": "--clip-schedule",
    "entropy_schedule": "--entropy-schedule", "stop_reward": "--stop-reward", "model_config": "--model-config",
    "out_dir": "--out",
    "metrics_format": "--logger", "threads": "--threads", "device": "--device", "learner": "--learner",
    "iteration_steps": "--iteration-steps", "checkpoint_interval_s": "--checkpoint-interval",
}

#: DQN's env steps per iteration (a metrics row and a checkpoint) by default (`DQNConfig.iteration_steps`; here for
#: the command line's help, which does not import the DQN trainer).
DQN_ITERATION_STEPS = 2_000

#: Where the learner's networks live (--device): "auto" is CUDA where torch sees a device, else the CPU.
DEVICES = ("cpu", "cuda", "auto")

#: The largest seed: numpy's seeding takes 32-bit seeds.
MAX_SEED = 2**32 - 1


def setting(name: str) -> str:
    """A setting's name as errors give it: with its ``trajview train`` option when it has one."""
    flag = FLAGS.get(name)
    return f"{name} ({flag})" if flag else name


def check_common(c: Any) -> None:
    """The checks PPO's and DQN's configs share (the fields both have): ValueError naming the setting."""
    if c.metrics_format not in ("csv", "jsonl"):
        raise ValueError(f"{setting('metrics_format')} must be 'csv' or 'jsonl', got {c.metrics_format!r}")
    for name in ("env", "model", "out_dir"):
        v = getattr(c, name)
        if not isinstance(v, str) or not v:
            raise ValueError(f"{setting(name)} must be a non-empty string, got {v!r}")
    int_at_least(setting("seed"), c.seed, 0, MAX_SEED)
    int_at_least(setting("timesteps"), c.timesteps, 1)
    int_at_least(setting("threads"), c.threads, 1)
    if c.device not in DEVICES:
        raise ValueError(f"{setting('device')} must be one of {', '.join(DEVICES)}, got {c.device!r}")
    int_at_least(setting("smoothing_episodes"), c.smoothing_episodes, 1)
    finite_number(setting("lr"), c.lr, 0, lo_open=True)
    finite_number(setting("gamma"), c.gamma, 0, 1)
    if c.stop_reward is not None:
        finite_number(setting("stop_reward"), c.stop_reward)


class RunConfig:
    """What PPO's `TrainConfig` and DQN's `DQNConfig` share: the settings both have, their checks
    (`check_common`, in ``__post_init__``) and the run's files.

    Each config declares these settings as its own dataclass fields, with its own defaults, so its fields'
    order (and its ``config.json``'s) is its own.
    """

    env: str
    model: str
    seed: int
    timesteps: int
    lr: float
    gamma: float
    stop_reward: float | None
    smoothing_episodes: int
    out_dir: str
    metrics_format: str
    threads: int
    device: str

    def __post_init__(self) -> None:
        # A numpy scalar (np.float32(0.5), np.int64(3)) is kept as the Python number of the same value: the checks
        # take it, and config.json writes it.
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, np.generic):
                setattr(self, f.name, v.item())
        check_common(self)

    def resolved_device(self) -> str:
        """The device the learner trains on: `device` with "auto" resolved; ValueError naming ``--device``
        when it asks for CUDA and torch sees none (a run trained on a GPU resumes on a CPU with --device cpu:
        checkpoints hold CPU tensors)."""
        import torch

        has_cuda = torch.cuda.is_available()
        if self.device == "auto":
            return "cuda" if has_cuda else "cpu"
        if self.device == "cuda" and not has_cuda:
            raise ValueError(f"{setting('device')}: cuda asked for, but torch sees no CUDA device here "
                             f"(torch {torch.__version__}, torch.cuda.is_available() is False): use cpu or auto")
        return self.device

    @property
    def metrics_path(self) -> Path:
        return Path(self.out_dir) / ("metrics.csv" if self.metrics_format == "csv" else "metrics.jsonl")

    @property
    def checkpoint_path(self) -> Path:
        """The run's checkpoint: a folder (`trajview.train.checkpoint`; a DQN run's holds its replay buffer's
        files)."""
        return Path(self.out_dir) / "checkpoint"


@dataclasses.dataclass
class TrainConfig(RunConfig):
    """Everything a run depends on (stored in its checkpoint)."""

    env: str = "trajview/StatelessCartPole-v1"
    #: Modules imported before the env is made (they register their gymnasium ids: "minigrid", "ale_py").
    env_modules: list[str] = dataclasses.field(default_factory=list)
    #: Top-level keys of a Dict observation left out of what the policy sees (MiniGrid's "mission" text).
    drop_obs_keys: list[str] = dataclasses.field(default_factory=list)
    model: str = "framestack"
    seed: int = 0
    timesteps: int = 200_000
    workers: int = 1
    #: Where the workers sample (`BACKENDS`); None: "local" for one worker, "process" for more or with
    #: ``async_sampling`` (resolved when the config is made, and stored so).
    backend: str | None = None
    #: The Ray cluster to join with backend "ray" (``ray.init(address=...)``: "auto", "HOST:6379",
    #: "ray://HOST:10001"); None: a Ray instance of this machine, started for the run.
    ray_address: str | None = None
    #: Learn on one batch while the workers sample the next with the weights they have (``--async``).
    async_sampling: bool = False
    #: With ``async_sampling``: batches sampled with weights more than this many versions behind are dropped.
    max_staleness: int = 1
    #: Replace a rollout worker whose process died, whose Ray actor was lost (its node gone) or whose env raised,
    #: and go on (``--recreate-failed-workers``); else such a failure stops the run (its checkpoint stays).
    recreate_failed_workers: bool = False
    #: With ``recreate_failed_workers``: the replacements allowed in one trainer session.
    max_worker_restarts: int = 10
    #: Seconds a worker may take for one sample before it counts as hung and is killed (``--sample-timeout``);
    #: None: no limit.
    sample_timeout_s: float | None = None
    #: Seconds a new rollout worker (the first ones and each replacement) may take to build its envs and policy
    #: before it counts as hung and is killed (``--start-timeout``); None: no limit.
    start_timeout_s: float | None = None
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
    #: The schedules of lr, clip_param and entropy_coeff over the run's ``timesteps`` env steps
    #: (`trajview.algorithms.schedules`): "constant", or "linear" from the value to zero (SB3's linear_schedule).
    lr_schedule: str = "constant"
    clip_schedule: str = "constant"
    entropy_schedule: str = "constant"
    grad_clip: float | None = 0.5
    #: PPOPolicy's "adam_fused" (torch's fused Adam; the memory models' presets).
    adam_fused: bool = False
    stop_reward: float | None = 150.0
    smoothing_episodes: int = 100
    model_config: dict = dataclasses.field(default_factory=dict)
    out_dir: str = "runs/default"
    metrics_format: str = "csv"
    #: Also write TensorBoard event files to ``<out_dir>/tensorboard`` (``--logger tensorboard``).
    tensorboard: bool = False
    threads: int = 1
    #: The learner's device (`DEVICES`); acting stays on the CPU (small batches: a CPU copy with synced weights).
    device: str = "cpu"
    #: Seconds between two checkpoints written while the run goes (``--checkpoint-interval``): an iteration that ends
    #: this long after the last one was taken is written; the state of the others is kept in memory, and the last
    #: iteration's is written when the run ends or stops (Ctrl-C, SIGTERM, an error). 0: after every iteration.
    checkpoint_interval_s: float = 1.0
    #: PPOPolicy's "learner" (``--learner``): who takes the SGD steps, "auto" (numpy for the MLP models it
    #: supports on the CPU, `trajview.algorithms.mlp_learner`), "numpy" or "torch".
    learner: str = "auto"

    @classmethod
    def with_model_presets(cls, **given: Any) -> "TrainConfig":
        """A config with ``given`` over the model's preset PPO settings (`MODEL_PRESETS`), over the defaults.

        A `PRESET_KEYS` setting given as None is not given (the preset's, else the default); ``grad_clip <= 0``
        means no clip.
        """
        model = given.get("model", cls.model)
        preset = MODEL_PRESETS.get(model, {}).get("ppo", {})
        given = {k: v for k, v in given.items() if not (k in PRESET_KEYS and v is None)}
        kw = {**preset, **given}
        if kw.get("grad_clip") is not None and kw["grad_clip"] <= 0:
            kw["grad_clip"] = None
        return cls(**kw)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("workers", "envs_per_worker", "train_batch_size"):
            int_at_least(setting(name), getattr(self, name), 1)
        # The PPO settings, by PPOPolicy's rules (`PPO_RULES`); None grad_clip: no clip.
        check_ppo_settings({"sgd_minibatch_size": self.sgd_minibatch_size, "num_sgd_iter": self.num_sgd_iter,
                            "lambda": self.lambda_, "clip_param": self.clip_param, "vf_loss_coeff": self.vf_loss_coeff,
                            "entropy_coeff": self.entropy_coeff, "grad_clip": self.grad_clip,
                            "adam_fused": self.adam_fused, "learner": self.learner}, lambda key: setting("lambda_" if key == "lambda" else key))
        for name in SCHEDULED.values():
            check_schedule(setting(name), getattr(self, name))
        boolean("tensorboard", self.tensorboard)
        finite_number(setting("checkpoint_interval_s"), self.checkpoint_interval_s, 0)
        if not isinstance(self.model_config, dict):
            raise ValueError(f"{setting('model_config')} must be a JSON object (a dict of the model's keyword "
                             f"arguments), got {type(self.model_config).__name__} {self.model_config!r}")
        if not isinstance(self.async_sampling, bool):
            raise ValueError(f"{setting('async_sampling')} must be a bool, got {self.async_sampling!r}")
        if self.backend is None:
            self.backend = "process" if self.workers > 1 or self.async_sampling else "local"
        if self.backend not in BACKENDS:
            raise ValueError(f"{setting('backend')} must be one of auto, {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.async_sampling and self.backend == "local":
            raise ValueError("async sampling (--async) needs backend 'process' or 'ray' (the local backend samples "
                             "in the trainer's process, so it cannot sample while the learner trains), got 'local'")
        if self.ray_address is not None:
            if self.backend != "ray":
                raise ValueError(f"ray_address (--ray-address) needs backend 'ray', got backend {self.backend!r}")
            if not isinstance(self.ray_address, str) or not self.ray_address.strip():
                raise ValueError(f"{setting('ray_address')} must be a non-empty string, got {self.ray_address!r}")
        if isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int) or self.max_staleness < 0:
            raise ValueError(f"{setting('max_staleness')} must be an int >= 0, got {self.max_staleness!r}")
        if not isinstance(self.recreate_failed_workers, bool):
            raise ValueError(f"{setting('recreate_failed_workers')} must be a bool, got {self.recreate_failed_workers!r}")
        if (isinstance(self.max_worker_restarts, bool) or not isinstance(self.max_worker_restarts, int)
                or self.max_worker_restarts < 0):
            raise ValueError(f"{setting('max_worker_restarts')} must be an int >= 0, got {self.max_worker_restarts!r}")
        timeout_seconds(setting("sample_timeout_s"), self.sample_timeout_s)
        timeout_seconds(setting("start_timeout_s"), self.start_timeout_s)
        for name, flag, given in (("recreate_failed_workers", "--recreate-failed-workers", self.recreate_failed_workers),
                                  ("sample_timeout_s", "--sample-timeout", self.sample_timeout_s is not None),
                                  ("start_timeout_s", "--start-timeout", self.start_timeout_s is not None)):
            if given and self.backend == "local":
                raise ValueError(f"{name} ({flag}) needs backend 'process' or 'ray' (the local backend's workers "
                                 f"run in the trainer's process: their failure is the trainer's), got 'local'")
        per = self.workers * self.envs_per_worker
        if self.train_batch_size % per:
            raise ValueError(
                f"train_batch_size ({self.train_batch_size}) must be a multiple of workers * envs_per_worker ({per})"
            )
        #: Whether model_config is the model's preset (then `IMAGE_MODEL_PRESETS` may adjust it); not stored.
        self.model_config_is_preset = not self.model_config
        if not self.model_config:
            preset = MODEL_PRESETS.get(self.model)
            if preset is None:
                raise ValueError(f"{setting('model')} must be one of {sorted(MODEL_PRESETS)}, got {self.model!r}")
            self.model_config = dict(preset["model_config"])
        for name in ("env_modules", "drop_obs_keys"):
            v = getattr(self, name)
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise ValueError(f"{setting(name)} must be a list of non-empty strings, got {v!r}")

    @property
    def tensorboard_dir(self) -> Path:
        return Path(self.out_dir) / "tensorboard"

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
            **{name: getattr(self, name) for name in SCHEDULED.values()},
            "num_sgd_iter": self.num_sgd_iter,
            "sgd_minibatch_size": self.sgd_minibatch_size,
            "grad_clip": self.grad_clip,
            "adam_fused": self.adam_fused,
            "learner": self.learner,
            # Stale batches (--async): clipped against the learner's weights, importance-weighted to the sampler's.
            "decoupled_clip": self.async_sampling,
        }
