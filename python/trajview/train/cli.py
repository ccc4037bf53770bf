"""``trajview``: the command line (``trajview train``, ``evaluate``, ``export``, ``report``)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

from .._extras import extra_hint, install_hint
from ..errors import WorkerError
from ..rollout.worker_set import STARTING
from ..algorithms.schedules import SCHEDULES
from ..algorithms.settings import CHOICES
from .config import DEVICES, DQN_ITERATION_STEPS, MAX_SEED, MODEL_PRESETS, TrainConfig
from .metrics import read_metrics

LEARNERS = CHOICES["learner"]

__all__ = ["main", "build_parser"]

log = logging.getLogger("trajview")

#: What ``trajview train`` needs besides trajview's core dependencies: the ``train`` extra.
TRAIN_EXTRA = ("torch", "tqdm", "matplotlib")

#: ``--logger`` choices: the metrics file's format (csv or jsonl), and TensorBoard event files besides it.
LOGGERS = ("csv", "jsonl", "tensorboard")


def _loggers(chosen: list[str] | None) -> tuple[str, bool]:
    """(metrics file format, TensorBoard on) from the ``--logger`` values."""
    chosen = chosen or []
    formats = sorted({c for c in chosen if c != "tensorboard"})
    if len(formats) > 1:
        raise ValueError(f"--logger takes one metrics file format (csv or jsonl), got {formats}")
    return (formats[0] if formats else "csv"), "tensorboard" in chosen


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _stop_reward(text: str) -> float | None:
    if text.strip().lower() in ("none", "never", "off"):
        return None
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number or 'none', got {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return v


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int in [0, {MAX_SEED}], got {text!r}") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an int in [0, {MAX_SEED}], got {text!r}")
    return v


#: ``--timesteps`` / ``--stop-reward`` not given (a new run: `TrainConfig`'s default; ``--resume``: the run's own).
UNSET: Any = argparse.Namespace(unset=True)


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of the model's keyword arguments, e.g. "
                                         f"'{{\"num_frames\": 4}}', got {type(value).__name__} {text!r}")
    return value


ENV_MODULE_SAVED_HELP = ("import MODULE first (repeatable): the run's env modules (--env-module of its training, or "
                         "the module of a module:EnvId id) are imported only when given here, since nothing read "
                         "from a file imports a module")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors one line (``trajview train: error: argument --lr: invalid float value: 'abc'``,
    exit 2) as trajview's own are, where argparse prints its usage text first; ``--help`` prints the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    # "%(default).0s" prints nothing: it keeps ArgumentDefaultsHelpFormatter from adding "(default: None)".
    PRESET_HELP = "default: the model's preset (MODEL_PRESETS), else %s%%(default).0s"
    p = _Parser(prog="trajview", description="trajview: RL experience collection with trajectory views")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser(
        "train",
        help="train PPO (default: frame-stack model on Stateless CartPole)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train PPO with a view-fed model. Writes metrics, a learning-curve PNG and a checkpoint to --out.",
    )
    t.add_argument("--algo", choices=("ppo", "dqn"), default=None,
                   help="ppo (the options below) or dqn (double DQN from replay with a frame-stack view; "
                        "see trajview.train.dqn_trainer.DQNConfig); with --resume: the run's own. "
                        "default: ppo%(default).0s")
    t.add_argument("--env", default=d.env,
                   help="any registered gymnasium env id (trajview's ids are registered; others with --env-module)")
    t.add_argument("--env-module", dest="env_modules", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers env ids (e.g. minigrid, ale_py); repeatable. With --resume: "
                        "the run's own modules are imported only when given here again (nothing read from a file "
                        "imports a module)")
    t.add_argument("--drop-obs-keys", nargs="+", default=[], metavar="KEY",
                   help="leave these top-level keys out of a Dict observation (e.g. MiniGrid's text 'mission')")
    t.add_argument("--model", default=None, choices=sorted(MODEL_PRESETS), help=f"default: {d.model}%(default).0s")
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--timesteps", type=int, default=None,
                   help=f"stop after this many env steps; default: {d.timesteps}, with --resume the run's%(default).0s")
    t.add_argument("--workers", type=int, default=d.workers,
                   help="rollout workers, each sampling train-batch-size / workers env steps per iteration "
                        "(where: --backend)")
    t.add_argument("--backend", default="auto", metavar="{auto,local,process,ray}",
                   help="where the workers sample: local (in the trainer's process, one after another, acting with "
                        "the learner's own policy), process (a process each, in parallel) or ray (a Ray actor each, "
                        "on any node of the Ray cluster: pip install 'trajview[ray]'). auto: local for 1 worker, "
                        "process for more or with --async")
    t.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --backend ray: the Ray cluster to join (auto, the head's HOST:6379 that `ray start "
                        "--head` printed, or ray://HOST:10001 through Ray Client); default: a Ray instance of this "
                        "machine, started for the run. A cluster with Ray's token authentication needs "
                        "RAY_AUTH_MODE=token and its token here (docs/guides/scaling.md)")
    t.add_argument("--async", dest="async_sampling", action="store_true",
                   help="the workers sample the next batch with the weights they have while the learner trains on "
                        "this one (process or ray backend; the workers at the lowest CPU priority), each batch then "
                        "one policy version stale: PPO keeps it with the decoupled clipped objective, its ratio "
                        "clipped against the learner's weights at the start of the update, and importance-weights "
                        "each row by those weights' probability over the behaviour policy's (logp stored in the "
                        "batch; no V-trace: advantages come from the behaviour policy's critic); batches more than "
                        "--max-staleness versions behind are discarded. Not reproducible run to run")
    t.add_argument("--max-staleness", type=int, default=d.max_staleness, metavar="K",
                   help="with --async: discard batches sampled with weights more than K policy versions behind "
                        "(their env steps still count); 0 waits for fresh weights")
    t.add_argument("--recreate-failed-workers", action="store_true",
                   help="process or ray backend: replace a rollout worker whose process died, whose Ray node went "
                        "away, whose env raised or (--sample-timeout) that hung, and go on (the replacement gets "
                        "the learner's weights and envs of new seeds; the failed sample is lost, never counted); "
                        "without it such a failure stops the run, its checkpoint kept for --resume")
    t.add_argument("--max-worker-restarts", type=int, default=None, metavar="N",
                   help=f"with --recreate-failed-workers: the replacements allowed (default {d.max_worker_restarts})")
    t.add_argument("--sample-timeout", type=float, default=None, metavar="S", dest="sample_timeout_s",
                   help="process or ray backend: a worker with no batch after S seconds of one sample counts as "
                        "hung and is killed (then replaced with --recreate-failed-workers); default: no limit")
    t.add_argument("--start-timeout", type=float, default=None, metavar="S", dest="start_timeout_s",
                   help="process or ray backend: a new worker not ready after S seconds of building its envs and "
                        "policy counts as hung and is killed (a replacement is then replaced again with "
                        "--recreate-failed-workers); default: no limit")
    t.add_argument("--envs-per-worker", type=int, default=None, help=PRESET_HELP % d.envs_per_worker)
    t.add_argument("--train-batch-size", type=int, default=None, help=PRESET_HELP % d.train_batch_size)
    t.add_argument("--minibatch-size", type=int, default=None, help=PRESET_HELP % d.sgd_minibatch_size)
    t.add_argument("--num-sgd-iter", type=int, default=None, help=PRESET_HELP % d.num_sgd_iter)
    t.add_argument("--lr", type=float, default=None, help=PRESET_HELP % d.lr)
    t.add_argument("--entropy-coeff", type=float, default=None, help=PRESET_HELP % d.entropy_coeff)
    t.add_argument("--gamma", type=float, default=None, help=f"discount (PPO and DQN), in [0, 1]; default: PPO: the model's preset, else {d.gamma}"
                                                                 "%(default).0s")
    t.add_argument("--lambda", dest="lambda_", type=float, default=None,
                   help=f"GAE lambda, in [0, 1]; default: the model's preset, else {d.lambda_}%(default).0s")
    t.add_argument("--clip-param", type=float, default=None,
                   help=f"PPO's ratio clip, > 0; default: {d.clip_param}%(default).0s")
    t.add_argument("--vf-loss-coeff", type=float, default=None, help=PRESET_HELP % d.vf_loss_coeff)
    for flag, what in (("--lr-schedule", "--lr"), ("--clip-schedule", "--clip-param"),
                       ("--entropy-schedule", "--entropy-coeff")):
        t.add_argument(flag, choices=SCHEDULES, default=None,
                       help=f"{what} over the run: constant, or linear from it to zero at --timesteps env steps, as "
                            f"Stable-Baselines3's linear_schedule (the value of each update from the env steps "
                            f"sampled so far, its batch included; kept by --resume); default: constant%(default).0s")
    t.add_argument("--grad-clip", type=float, default=None,
                   help="global gradient norm clip (<= 0: none); " + PRESET_HELP % d.grad_clip)
    t.add_argument("--stop-reward", type=_stop_reward, default=UNSET,
                   help=f"stop once the mean return of the last 100 episodes reaches it (any number, e.g. -300 on "
                        f"Pendulum; 'none': never); default: {d.stop_reward:g}, with --resume the run's "
                        f"(give another to continue a run that reached its own)%(default).0s")
    t.add_argument("--model-config", type=_json_object, default=None,
                   help="JSON keyword arguments of the model (default: the model's preset)")
    t.add_argument("--out", default=None,
                   help="run directory (default: runs/<model>-seed<seed>, DQN's runs/dqn-seed<seed>); one run at a "
                        "time holds it (a second gets an error naming the first's pid)")
    t.add_argument("--logger", "--metrics-format", dest="loggers", action="append", choices=LOGGERS, default=None,
                   help="where metrics go: a csv or jsonl file in --out (default csv), and with tensorboard also "
                   "TensorBoard event files in --out/tensorboard (needs the tensorboard package); repeat to combine, "
                   "e.g. --logger jsonl --logger tensorboard. --metrics-format is the old name")
    t.add_argument("--iteration-steps", type=int, default=None,
                   help=f"DQN: env steps per iteration (a metrics row and a checkpoint; PPO's iteration is "
                        f"--train-batch-size); default: {DQN_ITERATION_STEPS}%(default).0s")
    t.add_argument("--checkpoint-interval", type=float, default=None, metavar="S", dest="checkpoint_interval_s",
                   help=f"PPO: seconds between the checkpoints written while the run goes; the last iteration's "
                        f"state is written when the run ends or stops (Ctrl-C, SIGTERM, an error), so only a run "
                        f"killed outright (SIGKILL, a power cut) loses up to S seconds; 0: after every iteration "
                        f"(DQN writes after every iteration); default: {d.checkpoint_interval_s:g} (--resume keeps the run's unless given)%(default).0s")
    t.add_argument("--threads", type=int, default=d.threads, help="torch intra-op threads")
    t.add_argument("--device", choices=DEVICES, default=None,
                   help="where the learner trains: cpu, cuda, or auto (cuda where torch sees a device). The "
                        "rollout workers act on the CPU (a copy of the policy, its weights synced after each "
                        "update); checkpoints hold CPU tensors, so a run resumes on either (with --resume: this "
                        "session's device, default the run's). default: cpu")
    t.add_argument("--learner", choices=LEARNERS, default=None,
                   help="who takes the gradient steps: numpy (the same steps, several times faster on the CPU: PPO "
                        "with the mlp and framestack models over vector observations and a Discrete action space, "
                        "and DQN), torch, or auto (numpy where it can, torch elsewhere; with --resume: this "
                        "session's choice, default the run's). default: auto")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint (its settings; --timesteps may be raised, "
                        "above the env steps the checkpoint holds)")
    t.add_argument("--no-progress", action="store_true", help="log a line per iteration instead of a progress bar")
    t.add_argument("--traceback", action="store_true",
                   help="on a setup error (bad env id, module or space), raise with the traceback instead of one line")

    e = sub.add_parser(
        "evaluate", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="a trained policy's mean/std return and episode length over N episodes",
        description="Loads a run folder (what `trajview train --out` wrote) or its checkpoint folder, rebuilds the "
                    "run's env and policy from its settings, runs N episodes and prints a table of the return's and "
                    "the episode length's mean and std.")
    e.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="a run folder or its checkpoint/ folder")
    e.add_argument("--episodes", type=_positive_int, default=10, help="episodes to run")
    e.add_argument("--explore", action="store_true",
                   help="sample actions as in training (PPO: from the action distribution; DQN: epsilon-greedy with "
                        "the checkpoint's epsilon) instead of the deterministic ones")
    e.add_argument("--seed", type=_seed, default=0, help="the envs' seed")
    e.add_argument("--video", default=None, metavar="DIR",
                   help="record each episode into DIR with gymnasium's RecordVideo (the env made with "
                        "render_mode='rgb_array'; needs moviepy: pip install 'trajview[video]')")
    e.add_argument("--env-module", dest="env_modules", action="append", default=[], metavar="MODULE",
                   help=ENV_MODULE_SAVED_HELP)
    e.add_argument("--traceback", action="store_true", help="on an error, raise with the traceback instead of one line")

    x = sub.add_parser(
        "export", help="a trained policy's acting network and view spec as one TorchScript or ONNX file",
        description="Writes the deterministic acting step of a run's policy (what it reads to act, after the "
                    "view-pruning pass, in; the action and the recurrent state out) with its view spec (JSON: "
                    "which columns, shifts, shapes and dtypes each input reads) into one file; "
                    "examples/serve_exported.py acts from it without trajview.")
    x.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="a run folder or its checkpoint/ folder")
    x.add_argument("--format", dest="fmt", choices=("torchscript", "onnx"), default="torchscript",
                   help="torchscript (torch.jit.load; the spec in the extra file view_spec.json) or onnx "
                        "(onnxruntime; the spec in the model's metadata 'view_spec'; needs pip install "
                        "'trajview[export]'). default: torchscript")
    x.add_argument("--out", default=None, metavar="FILE",
                   help="where to write it (default: RUN/policy.pt, or RUN/policy.onnx)")
    x.add_argument("--env-module", dest="env_modules", action="append", default=[], metavar="MODULE",
                   help=ENV_MODULE_SAVED_HELP)
    x.add_argument("--traceback", action="store_true", help="on an error, raise with the traceback instead of one line")

    r = sub.add_parser("report", help="a markdown table of runs: env steps and time to the stop reward")
    r.add_argument("runs", nargs="+", help="run directories")
    r.add_argument("--target", type=float, default=150.0)
    return p


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    if "observation_space leaf" in msg and "unsupported space" in msg:
        leaf = msg.split("observation_space leaf '", 1)[1].split("'", 1)[0].split(".")[0]
        msg += f" (--drop-obs-keys {leaf} leaves it out of the observation)"
    return msg


def _worker_failure(e: WorkerError, trainer: Any, config: Any) -> str:
    """What ``trajview train`` prints when a rollout worker failed and was not replaced: the worker's failure (its
    env's traceback, when it raised), where the run stands, and the settings that would have gone on."""
    from .loop import where_it_stopped

    msg = e.failure.rstrip()  # without the library's hint, in WorkerSet's terms: the flags' follows
    where = where_it_stopped(trainer, config)
    if e.reason == "timeout" and e.detail == STARTING and getattr(config, "start_timeout_s", None) is not None:
        where += f"; --start-timeout above {config.start_timeout_s:g} gives a new worker longer to build its envs"
    if e.restarts_used_up:
        where += (f"; all {config.max_worker_restarts} worker restarts allowed are used up: raise "
                  f"--max-worker-restarts for more")
    elif config is not None and not hasattr(config, "backend"):
        pass  # DQN: one worker in the trainer's process, never replaced
    elif config is not None and config.backend == "local":
        where += "; --backend process --recreate-failed-workers replaces a failed worker and goes on"
    elif trainer is None:
        pass  # the first workers failed to start: a replacement would not be made (WorkerSet raises those)
    elif config is None or not config.recreate_failed_workers:
        where += "; --recreate-failed-workers replaces a failed worker and goes on"
    return f"trajview train: error: {msg}\n{where}"


#: PPO's options, which ``--algo dqn`` refuses when given (DQN's settings are `DQNConfig`'s): (flag, dest).
PPO_ONLY = (("--workers", "workers"), ("--backend", "backend"), ("--async", "async_sampling"),
            ("--ray-address", "ray_address"), ("--recreate-failed-workers", "recreate_failed_workers"),
            ("--max-worker-restarts", "max_worker_restarts"), ("--sample-timeout", "sample_timeout_s"),
            ("--start-timeout", "start_timeout_s"), ("--checkpoint-interval", "checkpoint_interval_s"),
            ("--max-staleness", "max_staleness"), ("--drop-obs-keys", "drop_obs_keys"), ("--model", "model"), ("--envs-per-worker", "envs_per_worker"),
            ("--train-batch-size", "train_batch_size"), ("--minibatch-size", "minibatch_size"),
            ("--num-sgd-iter", "num_sgd_iter"), ("--entropy-coeff", "entropy_coeff"), ("--lambda", "lambda_"),
            ("--clip-param", "clip_param"), ("--vf-loss-coeff", "vf_loss_coeff"), ("--grad-clip", "grad_clip"),
            ("--lr-schedule", "lr_schedule"), ("--clip-schedule", "clip_schedule"),
            ("--entropy-schedule", "entropy_schedule"), ("--model-config", "model_config"))


def _given(args: argparse.Namespace, parser_defaults: dict, dests: tuple[tuple[str, str], ...]) -> list[str]:
    return [flag for flag, dest in dests if getattr(args, dest) != parser_defaults[dest]]


def _ppo_config(args: argparse.Namespace, out: str, metrics_format: str, tensorboard: bool) -> TrainConfig:
    """A new PPO run's settings: the options given over the model's preset over `TrainConfig`'s defaults."""
    d = TrainConfig()
    model = args.model or d.model
    return TrainConfig.with_model_presets(
        env=args.env,
        env_modules=list(args.env_modules),
        drop_obs_keys=list(args.drop_obs_keys),
        model=model,
        seed=args.seed,
        timesteps=d.timesteps if args.timesteps is None else args.timesteps,
        workers=args.workers,
        backend=None if args.backend == "auto" else args.backend,
        ray_address=args.ray_address,
        async_sampling=args.async_sampling,
        max_staleness=args.max_staleness,
        recreate_failed_workers=args.recreate_failed_workers,
        max_worker_restarts=(d.max_worker_restarts if args.max_worker_restarts is None
                             else args.max_worker_restarts),
        sample_timeout_s=args.sample_timeout_s,
        start_timeout_s=args.start_timeout_s,
        envs_per_worker=args.envs_per_worker,
        train_batch_size=args.train_batch_size,
        sgd_minibatch_size=args.minibatch_size,
        num_sgd_iter=args.num_sgd_iter,
        lr=args.lr,
        gamma=args.gamma,  # None: the preset's, else the default
        lambda_=args.lambda_,
        clip_param=d.clip_param if args.clip_param is None else args.clip_param,
        vf_loss_coeff=args.vf_loss_coeff,
        grad_clip=args.grad_clip,  # None: the preset's; <= 0: none
        entropy_coeff=args.entropy_coeff,
        lr_schedule=args.lr_schedule or d.lr_schedule,
        clip_schedule=args.clip_schedule or d.clip_schedule,
        entropy_schedule=args.entropy_schedule or d.entropy_schedule,
        stop_reward=d.stop_reward if args.stop_reward is UNSET else args.stop_reward,
        model_config=args.model_config or {},
        out_dir=out,
        metrics_format=metrics_format,
        tensorboard=tensorboard,
        threads=args.threads,
        device=args.device or d.device,
        learner=args.learner or d.learner,
        checkpoint_interval_s=d.checkpoint_interval_s if args.checkpoint_interval_s is None else args.checkpoint_interval_s,
    )


def _resumed_ppo_config(args: argparse.Namespace, ck: Any, out: str) -> TrainConfig:
    """A resumed PPO run's settings: its checkpoint's, with --timesteps (when given), the cluster's address and the
    failed-worker options of this session."""
    from .runs import config_from

    saved: dict[str, Any] = {}
    if args.ray_address is not None:  # the cluster's address may differ from the first session's
        saved["ray_address"] = args.ray_address
    # A run stopped by a failed worker resumes with failed workers replaced, if asked.
    if args.recreate_failed_workers:
        saved["recreate_failed_workers"] = True
    if args.max_worker_restarts is not None:
        saved["max_worker_restarts"] = args.max_worker_restarts
    if args.sample_timeout_s is not None:
        saved["sample_timeout_s"] = args.sample_timeout_s
    if args.start_timeout_s is not None:
        saved["start_timeout_s"] = args.start_timeout_s
    if args.device is not None:  # where this session trains (a GPU run may resume on a CPU, and the other way)
        saved["device"] = args.device
    if args.learner is not None:  # who takes the SGD steps (the same arithmetic either way)
        saved["learner"] = args.learner
    if args.checkpoint_interval_s is not None:  # how often this session writes (the run's learning is the same)
        saved["checkpoint_interval_s"] = args.checkpoint_interval_s
    if args.stop_reward is not UNSET:  # a run that reached its stop reward continues with another (or none)
        saved["stop_reward"] = args.stop_reward
    return config_from(TrainConfig, ck, out, args.timesteps, saved)


#: A run's settings as ``trajview train`` options, (flag, argparse dest, the config's field): ``--resume`` continues
#: the run with its own, and refuses one given with another value.
RUN_SETTINGS = (
    ("--env", "env", "env"), ("--model", "model", "model"), ("--seed", "seed", "seed"),
    ("--workers", "workers", "workers"), ("--backend", "backend", "backend"), ("--async", "async_sampling", "async_sampling"),
    ("--max-staleness", "max_staleness", "max_staleness"), ("--drop-obs-keys", "drop_obs_keys", "drop_obs_keys"),
    ("--envs-per-worker", "envs_per_worker", "envs_per_worker"),
    ("--train-batch-size", "train_batch_size", "train_batch_size"),
    ("--minibatch-size", "minibatch_size", "sgd_minibatch_size"), ("--num-sgd-iter", "num_sgd_iter", "num_sgd_iter"),
    ("--lr", "lr", "lr"), ("--entropy-coeff", "entropy_coeff", "entropy_coeff"), ("--gamma", "gamma", "gamma"),
    ("--lambda", "lambda_", "lambda_"), ("--clip-param", "clip_param", "clip_param"),
    ("--vf-loss-coeff", "vf_loss_coeff", "vf_loss_coeff"), ("--lr-schedule", "lr_schedule", "lr_schedule"),
    ("--clip-schedule", "clip_schedule", "clip_schedule"),
    ("--entropy-schedule", "entropy_schedule", "entropy_schedule"), ("--grad-clip", "grad_clip", "grad_clip"),
    ("--model-config", "model_config", "model_config"), ("--threads", "threads", "threads"),
    ("--iteration-steps", "iteration_steps", "iteration_steps"),
)

#: DQN's options, which PPO refuses when given: (flag, dest).
DQN_ONLY = (("--iteration-steps", "iteration_steps"),)


def _resume_conflicts(args: argparse.Namespace, saved: dict[str, Any], metrics_format: str,
                      tensorboard: bool) -> list[str]:
    """The run settings given with ``--resume`` whose values differ from the run's (``saved``: its checkpoint's
    settings), as ``"--lr 0.5 (the run's: 0.0003)"``; a setting the run does not have counts as differing."""
    defaults = vars(build_parser().parse_args(["train"]))
    out = []
    missing = object()
    for flag, dest, field in RUN_SETTINGS:
        given = getattr(args, dest)
        if given == defaults[dest]:
            continue
        have = saved.get(field, missing)
        if field == "grad_clip" and isinstance(given, (int, float)) and given <= 0:
            given = None  # (<= 0: no clip, stored as None)
        same = (isinstance(given, dict) and isinstance(have, dict) and all(
            k in have and have[k] == v for k, v in given.items())) or given == have
        if not same:
            shown = json.dumps(given) if isinstance(given, (dict, list)) else given
            out.append(f"{flag} {shown} (the run's: {'none' if have is missing else have})")
    if args.loggers is not None and (metrics_format, tensorboard) != (saved.get("metrics_format", "csv"),
                                                                      bool(saved.get("tensorboard", False))):
        out.append(f"--logger {' --logger '.join(args.loggers)} (the run's: {saved.get('metrics_format', 'csv')}"
                   f"{' and tensorboard' if saved.get('tensorboard') else ''})")
    return out


def _train_extra_missing(command: str) -> bool:
    """Prints what ``trajview <command>`` needs and how to install it when the ``train`` extra is missing."""
    missing = _missing(TRAIN_EXTRA)
    if missing:
        print(f"trajview {command} needs {', '.join(missing)}: {extra_hint('train')}", file=sys.stderr)
    return bool(missing)


def _train(args: argparse.Namespace) -> int:
    try:
        metrics_format, tensorboard = _loggers(args.loggers)
    except ValueError as e:
        print(f"trajview train: error: {e}", file=sys.stderr)
        return 2
    if _train_extra_missing("train"):
        return 1
    if tensorboard and _missing(("tensorboard",)):
        print(f"trajview train --logger tensorboard needs the tensorboard package: {install_hint('tensorboard')}",
              file=sys.stderr)
        return 1
    from ..errors import FileIntegrityError
    from .loop import on_sigterm
    from .runs import RunFolder, RunFolderError, damaged_advice

    out = args.out or (f"runs/dqn-seed{args.seed}" if args.algo == "dqn"
                       else f"runs/{args.model or TrainConfig.model}-seed{args.seed}")
    try:
        folder = RunFolder(out, resume=args.resume)
    except RunFolderError as e:
        print(f"trajview train: error: {e}", file=sys.stderr)
        return 2
    except FileIntegrityError as e:
        if args.traceback:
            raise
        print(f"trajview train: error: {damaged_advice(e, out)}", file=sys.stderr)
        return 2
    restore = on_sigterm()  # SIGTERM stops the run as Ctrl-C does (exit code 143)
    try:
        algo = folder.algo or args.algo or "ppo"
        if args.resume and args.algo is not None and args.algo != algo:
            print(f"trajview train: error: --out {out} holds a {algo.upper()} run (its checkpoint says so): --resume "
                  f"continues it as {algo.upper()}; leave out --algo {args.algo}", file=sys.stderr)
            return 2
        parser_defaults = vars(build_parser().parse_args(["train"]))
        if algo == "dqn":
            ppo_only = _given(args, parser_defaults, PPO_ONLY)
            if tensorboard:
                ppo_only.append("--logger tensorboard")
            if ppo_only:
                print(f"trajview train: error: --algo dqn samples with one worker in the trainer's process and takes "
                      f"DQNConfig's settings; {', '.join(ppo_only)} {'is' if len(ppo_only) == 1 else 'are'} "
                      f"PPO's, got {' '.join(ppo_only)}", file=sys.stderr)
                return 2
        else:
            dqn_only = _given(args, parser_defaults, DQN_ONLY)
            if dqn_only:
                print(f"trajview train: error: {', '.join(dqn_only)} {'is' if len(dqn_only) == 1 else 'are'} "
                      f"DQN's (--algo dqn); PPO's iteration is --train-batch-size env steps", file=sys.stderr)
                return 2
        ck, given = folder.checkpoint, args.timesteps
        if ck is not None:
            conflicts = _resume_conflicts(args, ck.config, metrics_format, tensorboard)
            if conflicts:
                print(f"trajview train: error: --resume continues the run in {out} with its own settings; "
                      f"{', '.join(conflicts)} {'differs' if len(conflicts) == 1 else 'differ'}: leave "
                      f"{'it' if len(conflicts) == 1 else 'them'} out, or start a new run in another --out",
                      file=sys.stderr)
                return 2
        if ck is not None and given is not None and given <= ck.counters["env_steps"]:
            print(f"trajview train: error: --resume --timesteps {given}: the run in {out} already has "
                  f"{ck.counters['env_steps']} env steps (its checkpoint holds iteration {ck.counters['iteration']}); "
                  f"give --timesteps above {ck.counters['env_steps']} to continue it", file=sys.stderr)
            return 2
        return _run(args, algo, out, ck, metrics_format, tensorboard)
    except FileIntegrityError as e:  # a damaged file met after the start (the metrics, read by the summary)
        if args.traceback:
            raise
        print(f"trajview train: error: {damaged_advice(e, out)}", file=sys.stderr)
        return 2
    finally:
        restore()
        folder.close()


def _run(args: argparse.Namespace, algo: str, out: str, ck: Any, metrics_format: str, tensorboard: bool) -> int:
    """Makes the run's config and trainer and trains; setup errors are one line (exit code 2), Ctrl-C and SIGTERM
    say where the run stands (130, 143), a failed worker what failed (1)."""
    import gymnasium as gym

    from ..errors import FileIntegrityError
    from .envs import check_saved_modules, import_env_modules
    from .loop import interrupted

    # Setup errors (a bad setting, an unknown env id, a module that fails to import, a space no model reads,
    # and whatever the first iteration's sampling refuses) are one line and exit code 2; the run directory is
    # created by the first iteration's metrics, so such a run leaves none behind.
    setup_errors = (ValueError, TypeError, ImportError, NotImplementedError, gym.error.Error)
    trainer: Any = None
    config: Any = None
    try:
        import_env_modules(args.env_modules)  # (PPO's are in its config as well, for its workers)
        if algo == "dqn":
            from .dqn_trainer import DQNTrainer, dqn_config

            config = dqn_config(args, ck, out, metrics_format, args.timesteps, None if args.stop_reward is UNSET
                                else (args.stop_reward,))
            if ck is not None:
                check_saved_modules(config.env, [], str(ck.manifest_path))
            trainer = DQNTrainer(config, resume=ck is not None)
            what = f"DQN on {config.env}"
        else:
            from .trainer import PPOTrainer  # torch: imported once the extra is known to be there

            config = (_resumed_ppo_config(args, ck, out) if ck is not None
                      else _ppo_config(args, out, metrics_format, tensorboard))
            if ck is not None:
                check_saved_modules(config.env, config.env_modules, str(ck.manifest_path))
            trainer = PPOTrainer(config, resume=ck is not None)
            what = (f"PPO {config.model} on {config.env}, {config.workers} worker(s) ({config.backend}"
                    f"{f', async, max staleness {config.max_staleness}' if config.async_sampling else ''})")
        log.info("%s %s: %s, seed %d, up to %d env steps -> %s", "resuming" if ck is not None else "training", out,
                 what, config.seed, config.timesteps, out)
        summary = trainer.train(progress=not args.no_progress)
    except WorkerError as e:
        if args.traceback:
            raise
        print(_worker_failure(e, trainer, config), file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the workers are stopped (run_loop's close), the checkpoint stands
        if args.traceback:
            raise
        return interrupted(trainer, config, e)
    except FileIntegrityError:
        raise  # the caller's: what to do about the damaged file
    except OSError as e:  # a write failed (a full disk): the last complete checkpoint stands
        if args.traceback or trainer is None:
            raise
        from .loop import where_it_stopped

        print(f"trajview train: error: {' '.join(str(e).split())}\n{where_it_stopped(trainer, config)}",
              file=sys.stderr)
        return 1
    except setup_errors as e:
        if args.traceback or (trainer is not None and trainer.iteration > trainer.start_iteration):
            raise
        print(f"trajview train: error: {_one_line(e)}", file=sys.stderr)
        return 2
    if summary["reached_stop_reward"]:
        log.info("mean return reached %g after %d env steps (%.1f s)", config.stop_reward,
                 summary["steps_to_stop_reward"], summary["time_to_stop_reward_s"])
    elif config.stop_reward is not None:
        log.info("mean return did not reach %g in %d env steps", config.stop_reward, summary["env_steps"])
    log.info("final mean return %.1f after %d env steps, %.1f s; metrics %s, plot %s, checkpoint %s",
             summary["episode_return_mean"], summary["env_steps"], summary["time_s"], summary["metrics"],
             summary["plot"], summary["checkpoint"])
    print(json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in summary.items()},
                     allow_nan=False))  # (strict JSON: no episode ended means no mean return, null)
    return 0


def _load_trained(command: str, args: argparse.Namespace) -> Any:
    """The trained policy of ``args.run`` (`trajview.train.saved.load_trained`), or the exit code after one line
    on stderr: 2 for a path without a checkpoint, a damaged checkpoint or an env that cannot be made here."""
    import gymnasium as gym

    from ..errors import FileIntegrityError
    from .runs import damaged_advice
    from .saved import SavedRunError, checkpoint_folder, load_trained

    from .envs import import_env_modules

    try:
        import_env_modules(args.env_modules)
        return load_trained(args.run)
    except (SavedRunError, FileIntegrityError, ValueError, TypeError, ImportError, NotImplementedError,
            gym.error.Error) as e:
        if args.traceback:
            raise
        if isinstance(e, FileIntegrityError):
            msg = damaged_advice(e, checkpoint_folder(args.run)[1], {"evaluate": "evaluated"}.get(command, "exported"))
        else:
            msg = _one_line(e)
        print(f"trajview {command}: error: {msg}", file=sys.stderr)
        return 2


def _evaluate(args: argparse.Namespace) -> int:
    if _train_extra_missing("evaluate"):
        return 1
    import gymnasium as gym

    from .evaluate import EvaluateError, evaluate, evaluation_table

    trained = _load_trained("evaluate", args)
    if isinstance(trained, int):
        return trained
    try:
        ev = evaluate(trained, args.episodes, args.explore, args.seed, args.video)
    except (EvaluateError, ValueError, TypeError, gym.error.Error) as e:
        if args.traceback:
            raise
        print(f"trajview evaluate: error: {_one_line(e)}", file=sys.stderr)
        return 2
    print(evaluation_table(args.run, trained, ev, args.explore))
    if ev.videos:
        print(f"videos: {', '.join(ev.videos)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    if _train_extra_missing("export"):
        return 1
    from .export import ExportError, check_out_path, export_policy
    from .saved import checkpoint_folder

    if args.out:  # (checked before the run is read)
        try:
            check_out_path(Path(args.out))
        except ExportError as e:
            print(f"trajview export: error: {_one_line(e)}", file=sys.stderr)
            return 2
    trained = _load_trained("export", args)
    if isinstance(trained, int):
        return trained
    out = Path(args.out) if args.out else checkpoint_folder(args.run)[1] / (
        "policy.onnx" if args.fmt == "onnx" else "policy.pt")
    try:
        spec = export_policy(trained.policy, out, args.fmt, cli=True, algo=trained.algo, env=trained.config.env,
                             model=trained.config.model, iteration=trained.counters["iteration"],
                             env_steps=trained.counters["env_steps"])
    except (ExportError, OSError) as e:
        if args.traceback:
            raise
        print(f"trajview export: error: {_one_line(e)}", file=sys.stderr)
        return 2
    views = ", ".join(f"{i['name']} ({i['column']} at {i['shift'][0]}..{i['shift'][-1]}, {i['dtype']} "
                      f"{tuple(i['shape'])})" for i in spec["inputs"])
    print(f"wrote {out} ({args.fmt}): {trained.algo} {trained.config.model} on {trained.config.env}; inputs: {views}; "
          f"outputs: {', '.join(o['name'] for o in spec['outputs'])}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from .._io import read_json
    from ..errors import FileIntegrityError

    lines = [f"| run | model | seed | env steps to mean return {args.target:g} | wall-clock to it (s) | best mean return "
             f"| final mean return | env steps run | wall-clock (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for run in args.runs:
        d = Path(run)
        try:
            cfg = read_json(d / "config.json", "the run's settings") if (d / "config.json").exists() else {}
            if not isinstance(cfg, dict):
                raise FileIntegrityError(d / "config.json", f"expected a JSON object of the run's settings, got "
                                                            f"{type(cfg).__name__}")
            path = d / ("metrics.jsonl" if cfg.get("metrics_format") == "jsonl" else "metrics.csv")
            rows = read_metrics(path)
        except FileIntegrityError as e:
            print(f"trajview report: error: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
        if not rows:
            lines.append(f"| {d.name} | {cfg.get('model', '?')} | {cfg.get('seed', '?')} | no metrics | | | | | |")
            continue
        hit = next((r for r in rows if r["episode_return_mean"] >= args.target), None)
        last = rows[-1]
        steps = f"{int(hit['env_steps']):,}" if hit else "not reached"
        secs = f"{hit['time_s']:.0f}" if hit else "–"
        ret = last["episode_return_mean"]
        best = max((r["episode_return_mean"] for r in rows if not math.isnan(r["episode_return_mean"])), default=math.nan)
        lines.append(f"| {d.name} | {cfg.get('model', '?')} | {cfg.get('seed', '?')} | {steps} | {secs} | {best:.1f} | "
                     f"{'nan' if math.isnan(ret) else f'{ret:.1f}'} | {int(last['env_steps']):,} | {last['time_s']:.0f} |")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.command == "train":
        return _train(args)
    if args.command == "evaluate":
        return _evaluate(args)
    if args.command == "export":
        return _export(args)
    return _report(args)


if __name__ == "__main__":
    sys.exit(main())
