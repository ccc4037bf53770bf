"""The learner's profile per model (issue 25, deliverable 5): its SGD step against the limit, and the framework's share.

Two measurements per setting, each with ``trajview train``'s own code paths
(`TrainConfig.with_model_presets`, `PPOTrainer` / `DQNTrainer`, their
`train_iteration` inside `trajview.train.loop.run_loop`, checkpoints and all),
on trajview's Stateless CartPole, torch on the trainer's threads (``--threads``,
default 1, set by the trainer itself):

* **(a) the SGD step**: milliseconds per minibatch step of trajview's learner
  (`PPOPolicy.learn_on_batch` over one training batch, divided by the Adam
  steps it took; for DQN, `DQNPolicy.learn_on_replay`, with and without the
  replay buffer's ``sample``) against **the limit**: a minimal loop written
  below in plain torch (no framework), with the same layers and sizes
  (checked: the same parameter count as trajview's model), Adam with the same
  settings, the same loss arithmetic, the same minibatches (random rows; for
  the memory models whole sequences grouped to at least the minibatch size, as
  `trajview.algorithms.ppo.minibatches` does) on the same training batch,
  whose input features it builds once per batch. The training batch is
  sampled by the trainer's own `RolloutWorker` (``trainer.rollouts.sample()``:
  postprocessed with GAE, exactly what `learn_on_batch` gets). For the GTrXL the
  minimal loop reuses trajview's attention core (`_GTrXLCore.flat`, a copy) and
  heads, with features, minibatches, loss and optimizer written out. For DQN it
  samples uniform rows of frame stacks already gathered in tensors. Neither
  minimal loop computes trajview's per-minibatch statistics (kl, clip
  fraction, means): that is overhead trajview adds.
* **(b) the framework's share of a run**: the trainer's loop in this process
  for a fixed number of iterations (after one untimed warm-up iteration, which
  holds torch's first-call costs), and of its wall-clock (``time.perf_counter``):

  - **env %**: inside the env's ``reset`` / ``step`` (the env is
    ``gym.make("trajview/StatelessCartPole-v1")`` wrapped in a timer,
    registered as `TIMED_ENV_ID`, so the collector steps it as any env;
    the timer's own cost is printed);
  - **torch %** measured two ways: *profiler*: the union of the top-level
    op spans of ``torch.profiler`` (every op and torch's own annotated calls,
    Adam's step included) in a second, identical run (same seed, same batches),
    less the profiler's own cost per event recorded (the larger of two
    calibrations: on a loop of small ops, `profiler_cost_us`, and on the
    setting's minimal SGD loop, `profiler_cost_on`, where part (a) ran), all
    of it charged to the op spans (a lower
    bound of torch's time), over that run's wall-clock less the same cost (so
    that the noise between the two runs does not enter; the profiled run's
    measured extra time per event is printed next to it as a check);
    *direct*: the time inside the calls that hold the learner's and the
    policy's compute (acting's ``action_sampler``: forward, sample, logp; the
    model's forward passes, PPO's loss, ``backward``, the gradient clip, the
    optimizer's step; DQN's Q-network calls), timed around each call: an upper
    bound (it holds the models' own Python too);
  - **trajview+Python %**: the rest (sampling, batch building, GAE, minibatch
    assembly, tensor conversion, metrics, checkpoints), from each torch figure
    (profiler: an upper bound; direct: a lower bound). Goal: under 10 %.
  - **ckpt %**: of which the checkpoints, the part in the loop's thread
    (DQN: written after each iteration; PPO: its state copied after each
    iteration, written every ``--checkpoint-interval`` seconds, the files by
    a thread; both: the last one written when the loop ends).
  - **by phase** (a second table, and ``--plot``'s chart, default
    ``bench/learner_profile.png``): the trajview+Python share (direct) split
    into the run's phases, each phase's wall-clock less the env's and the
    compute calls' inside it (`Phase`: a phase inside another stops the
    outer one's clock): sampling, replay (DQN), learner, checkpoint, and the
    loop's own bookkeeping (what the phases leave).

  Then one run under ``cProfile``: its top functions by own time and its own
  time split by where the code lives (torch's C ops, torch's Python, the env,
  trajview, numpy, the rest). cProfile inflates every Python call; the shares
  say where to look, the tables above say how much.

Settings: ``framestack-zoo`` (rl-baselines3-zoo's CartPoleNoVel PPO: 8 envs x
32 steps = 256-row batches, minibatch 256, 20 epochs, lr 1e-3, gamma 0.98,
lambda 0.8, 16 frames, 64x64 policy and value MLPs, gradient clip 0.5, and
Adam as ``trajview train --model framestack`` gives it: fused, eps 1e-5), and
trajview's presets (`trajview.train.config.MODEL_PRESETS`) for ``framestack``,
``lstm`` and ``attention``; ``dqn`` is `DQNConfig`'s defaults. Figures are
medians over ``--reps`` runs (seeds 0, 1, ...) with their spread (min..max).

    python bench/learner_profile.py                     # every setting, 5 runs each (~10-15 min on 2 quiet cores)
    python bench/learner_profile.py --quick             # a smoke: 1 run, 2 short iterations each (~2 min)
    python bench/learner_profile.py --models lstm dqn   # some settings
    python bench/learner_profile.py --top 30            # more cProfile rows (0: no cProfile run)
    python bench/learner_profile.py --threads 2         # torch on 2 threads (trajview train --threads 2)
    python bench/learner_profile.py --plot out.png      # part (b)'s chart elsewhere

What dominated the rest on main at 3c034ac (one run per setting on the shared
2-core machine: shares only, the lead measures): see `OVERHEAD_NOTES`, printed
at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import cProfile
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import trajview  # noqa: F401  (registers trajview's gymnasium ids)

#: What the cProfile runs of the quick smoke showed (written down for the lead; the script prints it last).
OVERHEAD_NOTES = """\
Written down from one run per setting on main at 3c034ac (`--reps 1 --sgd-reps 3 --top 30`, default
iterations; the learner already gathers each column once per epoch and reads its statistics once per update) on
the shared 2-core machine at load 2-3 (absolute figures slow and noisy there; read the shares and ratios; the
lead measures on a quiet machine):

* (b) trajview+Python is 19-46 % of a run for the zoo frame stack, 24-48 % for the frame-stack preset, 21-38 %
  for the LSTM, 14-32 % for the GTrXL, 20-44 % for DQN (direct .. profiler bounds): over the 10 % goal on every
  model. The env's own step is 1-13 %. Most of the gap between the two bounds is torch's own Python between the
  ops (nn.Module.__call__, the optimizer's Python, autograd's engine): cProfile's "torch (Python)" is 9-18 % of
  the PPO runs and 18 % of DQN's.
* (a) trajview's SGD step is within 0.9-1.1x of the minimal hand-written loop's on every model (the minimal loops
  compute trajview's loss exactly: relative difference 0): the step is bound by eager torch's per-op cost on the
  CPU, so the learner's next factor is fewer ops per step (policy and value as one batched network, as the GTrXL
  already is; a compiled step), not less bookkeeping around it.
* Where the rest goes (cProfile's cumulative share of a run; frame-stack preset / zoo / LSTM / GTrXL): sampling
  57 / 41 / 43 / 50 %, of which acting (compute_actions_from_input_dict: the input dict to tensors, the forward,
  Categorical's multinomial and logp, back to numpy) 23 / 22 / 18 / 23 % and GAE with the bootstrap value
  6 / 5 / 7 / 9 %; learn_on_batch 40 / 52 / 52 / 47 %; checkpoints 2 / 5 / 3 / 2 %.
  What to speed up next, in order of what it would save:
  1. Acting, per env step (18-23 % of a run, more than the env's own step): one forward for policy and value
     under inference_mode without the SampleBatch / dict round trip, sampling by torch.multinomial on the
     probabilities directly; with 8 envs (the zoo) each call is amortized over few rows.
  2. nn.Module call machinery: ~37,000 Module calls in a 10,000-step zoo run (a Sequential of 5 layers per
     network, SpaceEncoder -> ModuleList -> leaf encoder, per forward): _call_impl, __getattr__, Linear.forward and
     Sequential.forward are the top Python entries. One batched pi+vf network with F.linear / baddbmm (the GTrXL's
     _Linears), encoders as plain functions, or a compiled forward remove most of it, in acting too.
  3. GAE (5-9 %): discount_cumsum is a Python loop over the steps of each segment, and each truncated segment
     costs a forward_step for its bootstrap value (the GTrXL's builds a memory window per segment): one vectorized
     pass over the batch, and the bootstrap values of all segments in one forward call. (Bootstrap values: done
     2026-11-30, `PPOPolicy.values_of_next_steps` in `_postprocessing`; the samplers' postprocessing went from 5-7 %
     of an iteration to 2-5 %. Then, stop 50: the whole batch in one pass, `PPOPolicy.flat_postprocessor`: GAE by
     `_core.discounted_sums` over the flat batch, each model's `bootstrap_inputs` read in one pass; 0.5-1.3 %.)
  4. Checkpoints after every iteration (2-5 %; torch.save's pickling in the loop's thread, the fsyncs in a
     thread): the zoo settings' 256-step iterations write 40 per 10,000 steps. A time-based interval would cut it.
     (Done: PPO's --checkpoint-interval, default 1 s; a checkpoint then cost about 10 ms of CPU, more than the
     share in the loop's thread showed, and 200 zoo iterations took 11.3 s without them against 14.4-16.0 s.)
     (Stop 51: the per-iteration copy of a deferred checkpoint is the policy's `state_snapshot`: where the numpy
     learner holds the weights, its three buffers copied whole and the tensors made only if written; in a zoo run
     it went from 575-730 us per iteration to 380-400 us, of which the model's state_dict is most.)
  5. The memory models' minibatches still index every column of the training batch per minibatch (ppo.py's
     dict comprehension in the sequence branch, 1.8 % of the LSTM run): keep only the columns the model and the
     loss read. (Done 2026-11-30: each column is gathered when first read, and the sequences' index arithmetic
     runs in numpy; the LSTM preset's step went from 1.22-1.28x the minimal loop's to 1.16-1.19x.)
  6. torch.optim's per-step Python: the Optimizer.step / zero_grad wrappers (their record_function annotations,
     _record_function_enter_new ~1 %), _init_group, autograd's _make_grads: a compiled or hand-fused step avoids
     them. (zero_grad's: done in stop 50, `grads_clearer`; 2 % of a GTrXL update.)
  7. DQN (fused Adam and the parameter list taken once are on main already): three forward passes per step
     (q(s), q(s2), target(s2)), 26 Module calls per gradient step: q over [s; s2] in one call saves one pass, a
     functional forward most of the calls. The replay sample is 7 % (`_core.sample` 4 % own; its sampler's
     _next_seed, rng.integers(0, 2**63) under a lock, ~4 us, where bit_generator.random_raw() is 0.5 us).
     (Stop 50: threadpoolctl's BLAS limit was set and put back at every gradient step, 2-3 % of a run, and the
     learner's checks walked the networks' modules at each: both once per run of steps now.)
  8. GTrXL: its block's forward has the most Python per op (gtrxl.py:120, 8 % own time); _valid rebuilds
     arange(M + 1) per call."""

# -- the settings -----------------------------------------------------------------------------------------------

#: PPO settings as `TrainConfig.with_model_presets` keyword arguments (what `trajview train` builds from its flags).
PPO_SETTINGS: dict[str, dict[str, Any]] = {
    # rl-baselines3-zoo's CartPoleNoVel-v1 (PPO over VecFrameStack(16)); SB3's defaults for the rest: clip 0.2,
    # vf_coef 0.5, ent_coef 0, max_grad_norm 0.5 (trajview's defaults too). Adam fused: the frame stack's preset.
    "framestack-zoo": {"model": "framestack", "envs_per_worker": 8, "train_batch_size": 256, "sgd_minibatch_size": 256,
                       "num_sgd_iter": 20, "lr": 1e-3, "gamma": 0.98, "lambda_": 0.8,
                       "model_config": {"num_frames": 16}},
    "framestack": {"model": "framestack"},
    "lstm": {"model": "lstm"},
    "attention": {"model": "attention"},
}
SETTINGS = (*PPO_SETTINGS, "dqn")

#: Env steps a run times (after the warm-up iteration): about 10,000 for the frame stacks, 5,000-6,000 for the
#: others, as whole iterations (`timed_iterations`). (Until stop 51 these were fixed counts of iterations, set when the
#: frame-stack and GTrXL presets sampled 2,000 steps per iteration; the presets' later 512- and 1,000-step
#: iterations left those runs at 2,560 and 3,000 env steps, their last checkpoint's write a larger share.)
TIMED_STEPS = {"framestack-zoo": 10_240, "framestack": 10_240, "lstm": 5_000, "attention": 6_000, "dqn": 6_000}


def timed_iterations(name: str) -> int:
    """Timed iterations of a setting's runs: `TIMED_STEPS` over its env steps per iteration (`trajview train`'s
    own: the preset's ``train_batch_size``, DQN's ``iteration_steps``)."""
    if name == "dqn":
        from trajview.train.dqn_trainer import DQNConfig

        per = DQNConfig(env=TIMED_ENV_ID).iteration_steps
    else:
        from trajview.train import TrainConfig

        per = TrainConfig.with_model_presets(env=TIMED_ENV_ID, **copy.deepcopy(PPO_SETTINGS[name])).train_batch_size
    return max(1, round(TIMED_STEPS[name] / per))

#: torch intra-op threads of every trainer (``trajview train --threads``, default 1; ``--threads`` here).
THREADS = 1
#: The learners' "learner" setting (``--learner``): "auto" (numpy where it applies, as trajview train), or "torch".
LEARNER = "auto"

#: The env the runs sample: trajview's Stateless CartPole inside `TimedEnv`.
TIMED_ENV_ID = "trajview-bench/TimedStatelessCartPole-v1"
STATELESS_CARTPOLE_ID = "trajview/StatelessCartPole-v1"


# -- timers -------------------------------------------------------------------------------------------------------


class Clock:
    """Seconds inside the calls wrapped with `timed` (a call inside another timed call counts once)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0
        self.depth = 0

    def reset(self) -> None:
        self.total, self.calls, self.depth = 0.0, 0, 0


def timed(fn: Callable[..., Any], clock: Clock) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if clock.depth:
            return fn(*args, **kwargs)
        clock.depth = 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.total += time.perf_counter() - t0
            clock.calls += 1
            clock.depth = 0

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


ENV_CLOCK = Clock()


class Phase:
    """Seconds inside the calls wrapped with `phased` (a call inside another of the same phase counts once; inside
    another phase's, the outer one's clock stops until it returns: each second counts in one phase), and of them
    the seconds the env (`ENV_CLOCK`) and the compute calls (``compute``: `compute_timers`' clock) took: what is
    left is the framework's part of that phase of a run."""

    active: list[Phase] = []  # the phases inside one another now, the innermost last

    def __init__(self, compute: Clock) -> None:
        self.compute_clock = compute
        self.total = self.env = self.compute = 0.0
        self.depth = 0
        self._at = (0.0, 0.0, 0.0)

    def framework(self) -> float:
        return self.total - self.env - self.compute

    def _start(self) -> None:
        self._at = (time.perf_counter(), ENV_CLOCK.total, self.compute_clock.total)

    def _stop(self) -> None:
        t0, env0, compute0 = self._at
        self.total += time.perf_counter() - t0
        self.env += ENV_CLOCK.total - env0
        self.compute += self.compute_clock.total - compute0

    def enter(self) -> bool:
        """Starts this phase's clock (stopping the enclosing phase's); False where it runs already (nothing done)."""
        if self.depth:
            return False
        if Phase.active:
            Phase.active[-1]._stop()
        self.depth = 1
        Phase.active.append(self)
        self._start()
        return True

    def exit(self) -> None:
        self._stop()
        Phase.active.pop()
        self.depth = 0
        if Phase.active:
            Phase.active[-1]._start()


def phased(fn: Callable[..., Any], phase: Phase) -> Callable[..., Any]:
    """``fn`` with its calls timed into ``phase``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not phase.enter():
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            phase.exit()

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def phased_context(fn: Callable[..., Any], phase: Phase) -> Callable[..., Any]:
    """A method returning a context manager (``fn``) whose block, entry and exit included, is timed into ``phase``."""
    @contextlib.contextmanager
    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        entered = phase.enter()
        try:
            with fn(*args, **kwargs) as value:
                yield value
        finally:
            if entered:
                phase.exit()

    return wrapper


#: The phases of a run the framework's share is split into (`phase_calls`), in the order tables and plots show
#: them; the loop's own bookkeeping (counters, the metrics row, the progress) is what the run's wall-clock leaves.
PHASES = ("sampling", "replay", "learner", "checkpoint")


def phase_calls(trainer: Any) -> dict[str, list[tuple[Any, str, bool]]]:
    """Per phase, the calls (object, attribute, whether it returns a context manager) that make it: sampling (PPO's
    ``rollouts.sample``: acting, env steps, the batch with its GAE; DQN's ``worker.sample``), replay (DQN: the
    buffer's ``add``, ``sample`` and ``update_priority``), learner (``learn_on_batch``; DQN: the block of gradient
    steps, ``policy.learning_steps``, less its replay calls: ``learn_on_replay`` itself is left as it is, since
    a function set on the policy's instance changes the columns its samples gather), checkpoint
    (``save_checkpoint`` and ``flush_checkpoint``, in the loop's thread)."""
    ckpt = [(trainer, "save_checkpoint", False), (trainer, "flush_checkpoint", False)]
    if hasattr(trainer, "rollouts"):  # PPO
        return {"sampling": [(trainer.rollouts, "sample", False)], "replay": [],
                "learner": [(trainer.policy, "learn_on_batch", False)], "checkpoint": ckpt}
    buf = trainer.buffer
    return {"sampling": [(trainer.worker, "sample", False)],
            "replay": [(buf, "add", False), (buf, "sample", False), (buf, "update_priority", False)],
            "learner": [(trainer.policy, "learning_steps", True)], "checkpoint": ckpt}


class TimedEnv(gym.Wrapper):
    """The env's ``step`` and ``reset`` timed into `ENV_CLOCK` (everything inside: the env and gym.make's wrappers)."""

    def step(self, action: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            ENV_CLOCK.total += time.perf_counter() - t0
            ENV_CLOCK.calls += 1

    def reset(self, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.env.reset(**kwargs)
        finally:
            ENV_CLOCK.total += time.perf_counter() - t0
            ENV_CLOCK.calls += 1


def _make_timed_env(**kwargs: Any) -> gym.Env:
    return TimedEnv(gym.make(STATELESS_CARTPOLE_ID, **kwargs))


if TIMED_ENV_ID not in gym.registry:
    # No checker or order wrapper of its own: the timer is the outermost layer (the inner gym.make has them).
    gym.register(id=TIMED_ENV_ID, entry_point=_make_timed_env, disable_env_checker=True, order_enforce=False)


def added_cost_us(bare: Callable[[int], Any], wrapped: Callable[[int], Any], n: int, rounds: int) -> float:
    """Microseconds ``wrapped(i)`` takes more than ``bare(i)`` per call: the best of ``rounds`` loops of ``n`` calls
    each, the two alternating."""
    best = {False: math.inf, True: math.inf}
    for _ in range(rounds):
        for wrap in (False, True):
            f = wrapped if wrap else bare
            t0 = time.perf_counter()
            for i in range(n):
                f(i)
            best[wrap] = min(best[wrap], time.perf_counter() - t0)
    return max(0.0, best[True] - best[False]) / n * 1e6


def env_timer_cost_us(n: int = 20_000, rounds: int = 5) -> float:
    """Microseconds `TimedEnv` adds per step (`added_cost_us`: wrapped steps against bare ones)."""
    env = gym.make(STATELESS_CARTPOLE_ID)
    wrapped = TimedEnv(env)
    env.reset(seed=0)

    def stepper(e: gym.Env) -> Callable[[int], Any]:
        def step(i: int) -> None:
            _, _, te, tr, _ = e.step(i & 1)
            if te or tr:
                e.reset()
        return step

    cost = added_cost_us(stepper(env), stepper(wrapped), n, rounds)
    ENV_CLOCK.reset()
    return cost


def compute_timer_cost_us(n: int = 50_000, rounds: int = 5) -> float:
    """Microseconds a `timed` wrapper adds per call (the compute calls' timers; `added_cost_us`: a wrapped no-op
    function against the bare one)."""
    def noop(x: Any) -> Any:
        return x

    return added_cost_us(noop, timed(noop, Clock()), n, rounds)


# -- trainers as `trajview train` makes them --------------------------------------------------------------------


def _on_cpu(config_class: Any) -> dict[str, Any]:
    """``{"device": "cpu"}`` where the config has a learner device (``--device``): this profile is of the CPU."""
    return {"device": "cpu"} if "device" in {f.name for f in dataclasses.fields(config_class)} else {}


def make_trainer(name: str, out: str, seed: int, env: str = TIMED_ENV_ID, quick: bool = False) -> Any:
    """The trainer `trajview train` makes for this setting (no stop reward; ``out``: its run folder)."""
    if name == "dqn":
        from trajview.train.dqn_trainer import DQNConfig, DQNTrainer

        extra: dict[str, Any] = {"iteration_steps": 256, "learning_starts": 128} if quick else {}
        return DQNTrainer(DQNConfig(env=env, seed=seed, timesteps=10**9, stop_reward=None, out_dir=out,
                                    threads=THREADS, learner=LEARNER, **_on_cpu(DQNConfig), **extra))
    from trajview.train import PPOTrainer, TrainConfig

    cfg = TrainConfig.with_model_presets(env=env, seed=seed, timesteps=10**9, stop_reward=None, out_dir=out,
                                         threads=THREADS, learner=LEARNER, **_on_cpu(TrainConfig),
                                         **copy.deepcopy(PPO_SETTINGS[name]))
    return PPOTrainer(cfg)


def stop_trainer(trainer: Any) -> None:
    if hasattr(trainer, "rollouts"):
        trainer.stop()
    else:
        trainer.worker.stop()


def summary(xs: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min..max)``, or the one value."""
    if not xs:
        return "–"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


# -- (a) the SGD step: trajview's against the minimal loop ------------------------------------------------------


def adam_steps(opt: torch.optim.Optimizer) -> int:
    """The optimizer's step count (Adam's per-parameter ``step``)."""
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st and "step" in st:
                return int(st["step"])
    return 0


def ppo_loss(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor,
             adv: torch.Tensor, targets: torch.Tensor, clip: float, vf_coeff: float, ent_coeff: float) -> torch.Tensor:
    """PPO's clipped loss, written out: the arithmetic of `PPOPolicy.loss` with a categorical over ``logits``."""
    logp_all = logits - logits.logsumexp(-1, keepdim=True)
    logp = logp_all.gather(-1, actions[:, None]).squeeze(-1)
    adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    vf_loss = torch.mean((values - targets) ** 2)
    entropy = -(torch.clamp(logp_all, min=torch.finfo(logp_all.dtype).min) * torch.softmax(logp_all, -1)).sum(-1).mean()
    return -surrogate.mean() + vf_coeff * vf_loss - ent_coeff * entropy


def orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [orthogonal(nn.Linear(in_dim, h), math.sqrt(2)), nn.Tanh()]
        in_dim = h
    return nn.Sequential(*layers, orthogonal(nn.Linear(in_dim, out_dim), out_gain))


def sequence_groups(seq_lens: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Shuffled sequences grouped until a group holds >= ``size`` rows (trajview's minibatches of sequences)."""
    perm = torch.randperm(len(seq_lens))
    groups, rows_in, first = [], 0, 0
    for j, n in enumerate(seq_lens[perm].tolist()):
        rows_in += n
        if rows_in >= size:
            groups.append(perm[first: j + 1])
            rows_in, first = 0, j + 1
    if first < len(seq_lens):
        groups.append(perm[first:])
    return groups


class MinimalPPO:
    """The minimal loop of one PPO setting: ``learn(tensors)`` runs the epochs over one training batch and returns
    the minibatch steps taken. ``modules``: its layers (the parameter count is checked against trajview's)."""

    def __init__(self, cfg: Any, tensors: dict[str, torch.Tensor], n_actions: int, trajview_model: Any) -> None:
        self.cfg, self.t, self.n_actions = cfg, tensors, n_actions
        mc = cfg.model_config
        if cfg.model == "framestack":
            k = int(mc.get("num_frames", 16))
            hidden = tuple(mc.get("hidden", (64, 64)))
            obs_dim = int(np.prod(tensors["prev_n_obs"].shape[2:]))
            in_dim = k * obs_dim + k * n_actions + k
            self.modules = nn.ModuleDict({"pi": mlp(in_dim, hidden, n_actions, 0.01),
                                          "vf": mlp(in_dim, hidden, 1, 1.0)})
        elif cfg.model == "lstm":
            fc, cell = int(mc.get("hidden", 64)), int(mc.get("cell_size", 64))
            if mc.get("prev_reward", False):
                raise NotImplementedError("the minimal LSTM loop reads obs and the previous action (the preset)")
            d = int(tensors["obs"].shape[1]) + n_actions
            self.modules = nn.ModuleDict({
                "pi_fc": orthogonal(nn.Linear(d, fc), math.sqrt(2)), "pi_lstm": nn.LSTM(fc, cell),
                "vf_fc": orthogonal(nn.Linear(d, fc), math.sqrt(2)), "vf_lstm": nn.LSTM(fc, cell),
                "pi_head": orthogonal(nn.Linear(cell, n_actions), 0.01),
                "vf_head": orthogonal(nn.Linear(cell, 1), 1.0)})
        elif cfg.model == "attention":
            if mc.get("prev_reward", False):
                raise NotImplementedError("the minimal GTrXL loop reads obs and the previous action (the preset)")
            # trajview's attention core and heads (a copy): features, minibatches, loss and optimizer written here.
            self.modules = nn.ModuleDict({"core": copy.deepcopy(trajview_model.core),
                                          "pi_head": copy.deepcopy(trajview_model.pi_head),
                                          "vf_head": copy.deepcopy(trajview_model.vf_head)})
            self.num_layers = int(mc.get("num_layers", 1))
        else:
            raise ValueError(f"no minimal loop for model {cfg.model!r}")
        self.params = [p for p in self.modules.parameters()]
        ours = sum(p.numel() for p in self.params)
        theirs = sum(p.numel() for p in trajview_model.parameters() if p.requires_grad)
        self.same_size = ours == theirs
        if not self.same_size:
            print(f"WARNING: {cfg.model}: the minimal loop has {ours} parameters, trajview's model {theirs}",
                  file=sys.stderr)
        self.opt = torch.optim.Adam(self.params, lr=float(cfg.lr), eps=1e-5, fused=True if cfg.adam_fused else None)

    def _loss(self, logits: torch.Tensor, values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        c, t = self.cfg, self.t
        return ppo_loss(logits, values, t["actions"][rows], t["action_logp"][rows], t["advantages"][rows],
                        t["value_targets"][rows], float(c.clip_param), float(c.vf_loss_coeff), float(c.entropy_coeff))

    def _step(self, loss: torch.Tensor) -> None:
        self.opt.zero_grad()
        loss.backward()
        if self.cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, float(self.cfg.grad_clip), foreach=True)
        self.opt.step()

    def _features(self) -> torch.Tensor:
        t = self.t
        return torch.cat([t["obs"].float().flatten(1),
                          nn.functional.one_hot(t["prev_actions"].long(), self.n_actions).float()], -1)

    def prepare(self) -> None:
        """What a hand-written loop computes once per training batch: the input features (and for the memory
        models the sequences' layout)."""
        t, model = self.t, self.cfg.model
        if model == "framestack":
            self.x = torch.cat([t["prev_n_obs"].float().flatten(1),
                                nn.functional.one_hot(t["prev_n_actions"].long(), self.n_actions).float().flatten(1),
                                t["prev_n_rewards"].float()], -1)
            return
        x = self._features()
        self.lens = lens = t["seq_lens"].long()
        self.starts = torch.cumsum(lens, 0) - lens
        if model == "lstm":
            n, s, t_max = len(x), len(lens), int(lens.max())
            time_idx = torch.arange(t_max)[:, None]
            self.mask = time_idx < lens[None]  # [T, S]
            self.pad_idx = torch.where(self.mask, self.starts[None] + time_idx, torch.full((t_max, s), n))  # n: zeros
            self.xpad = torch.cat([x, x.new_zeros(1, x.shape[1])])[self.pad_idx]  # [T, S, d]
            self.h = [t[f"state_in_{i}"].float() for i in range(4)]
        else:
            L = self.num_layers
            self.inputs = x[None].expand(2, *x.shape)
            self.tt = t["t"].long()
            self.mems = [torch.stack([t[f"state_in_{i}"].float(), t[f"state_in_{L + i}"].float()]) for i in range(L)]

    def minibatch_loss(self, pick: torch.Tensor) -> torch.Tensor:
        """The loss of one minibatch: ``pick`` holds its rows (frame stack) or its sequences (memory models)."""
        m, model = self.modules, self.cfg.model
        if model == "framestack":
            xb = self.x[pick]
            return self._loss(m["pi"](xb), m["vf"](xb)[:, 0], pick)
        if model == "lstm":
            tm = int(self.lens[pick].max())
            mk = self.mask[:tm, pick]
            rows = self.pad_idx[:tm, pick][mk]
            xs = self.xpad[:tm, pick]
            h = self.h
            po, _ = m["pi_lstm"](torch.tanh(m["pi_fc"](xs)), (h[0][pick][None], h[1][pick][None]))
            vo, _ = m["vf_lstm"](torch.tanh(m["vf_fc"](xs)), (h[2][pick][None], h[3][pick][None]))
            return self._loss(m["pi_head"](po[mk]), m["vf_head"](vo[mk])[:, 0], rows)
        ls = self.lens[pick]
        offsets = torch.cumsum(ls, 0) - ls
        rows = torch.repeat_interleave(self.starts[pick] - offsets, ls) + torch.arange(int(ls.sum()))
        core: Any = m["core"]
        out = core.flat(self.inputs[:, rows], self.tt[rows], ls, [mem[:, pick] for mem in self.mems])
        return self._loss(m["pi_head"](out[0]), m["vf_head"](out[1])[:, 0], rows)

    def learn(self) -> int:
        """``num_sgd_iter`` epochs of shuffled minibatches over the batch; returns the steps taken."""
        self.prepare()
        c, steps = self.cfg, 0
        size = int(c.sgd_minibatch_size)
        for _ in range(int(c.num_sgd_iter)):
            if c.model == "framestack":
                n = len(self.x)
                perm = torch.randperm(n)
                picks = [perm[a: a + size] for a in range(0, n, size)]
            else:
                picks = sequence_groups(self.lens, size)
            for pick in picks:
                self._step(self.minibatch_loss(pick))
                steps += 1
        return steps

    def load_from(self, model: nn.Module) -> bool:
        """trajview's weights into these layers (frame stack and LSTM; the GTrXL's are a copy already); False
        where the layouts differ."""
        sd = model.state_dict()
        if self.cfg.model == "framestack":
            mine = {k: v for k, v in sd.items() if k.startswith(("pi.", "vf."))}
        elif self.cfg.model == "lstm":
            mine = {}
            for k, v in sd.items():
                for theirs, ours in (("pi_core.fc.", "pi_fc."), ("pi_core.lstm.", "pi_lstm."),
                                     ("vf_core.fc.", "vf_fc."), ("vf_core.lstm.", "vf_lstm."),
                                     ("pi_head.", "pi_head."), ("vf_head.", "vf_head.")):
                    if k.startswith(theirs):
                        mine[ours + k[len(theirs):]] = v
        else:
            return True
        try:
            self.modules.load_state_dict(mine)
        except (RuntimeError, KeyError):
            return False
        return True


def check_loss(minimal: MinimalPPO, policy: Any, tensors: dict[str, torch.Tensor]) -> str:
    """The minimal loop's loss on the whole batch (one minibatch of every row, every sequence in order) against
    `PPOPolicy.loss` with the same weights: the relative difference, or why it was not compared."""
    if not minimal.load_from(policy.model):
        return "not compared (trajview's layout differs)"
    minimal.prepare()
    with torch.no_grad():
        pick = torch.arange(len(minimal.x)) if minimal.cfg.model == "framestack" else torch.arange(len(minimal.lens))
        ours = float(minimal.minibatch_loss(pick))
        try:
            theirs = float(policy.loss(policy._to_torch(tensors)))
        except Exception as e:  # noqa: BLE001  (the lead may change the learner's internals: say so, go on)
            return f"not compared ({type(e).__name__}: {e})"
    rel = abs(ours - theirs) / max(1e-12, abs(theirs))
    if rel > 1e-4:
        print(f"WARNING: {minimal.cfg.model}: the minimal loop's loss {ours} differs from trajview's {theirs}",
              file=sys.stderr)
    return f"{rel:.0e}"


def sgd_ppo(name: str, reps: int, seed: int = 0) -> dict[str, Any]:
    """(a) for a PPO setting: ms per minibatch step of `learn_on_batch` and of the minimal loop, ``reps`` rounds
    alternating (after one warm-up of each), on one training batch sampled by the trainer's workers."""
    with tempfile.TemporaryDirectory(prefix="tv-learner-profile-") as out:
        trainer = make_trainer(name, out, seed, env=STATELESS_CARTPOLE_ID)
        try:
            batch = trainer.rollouts.sample().batch
            policy, cfg = trainer.policy, trainer.config
            tensors = {k: v for k, v in policy._to_torch(batch).items()}
            t = tensors["is_init"] if "is_init" in tensors else None
            if t is not None and "seq_lens" in tensors:
                lens = tensors["seq_lens"].long()
                starts = torch.cumsum(lens, 0) - lens
                inside = t.clone()
                inside[starts[lens > 0]] = False
                if bool(inside.any()):
                    print(f"WARNING: {name}: episodes start inside sequences; the minimal loop starts every sequence "
                          f"from its state_in (trajview splits them)", file=sys.stderr)
            minimal = MinimalPPO(cfg, tensors, int(policy.action_space.n), policy.model)
            loss_check = check_loss(minimal, policy, tensors)
            opt = policy.get_optimizer()
            policy.learn_on_batch(batch)  # warm-up
            minimal.learn()
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(reps):
                s0 = adam_steps(opt)
                t0 = time.perf_counter()
                policy.learn_on_batch(batch)
                dt = time.perf_counter() - t0
                taken = adam_steps(opt) - s0
                if taken <= 0:
                    raise RuntimeError(f"{name}: learn_on_batch took no Adam step that this script can count")
                ours.append(1e3 * dt / taken)
                t0 = time.perf_counter()
                steps = minimal.learn()
                theirs.append(1e3 * (time.perf_counter() - t0) / steps)
            event_us = profiler_cost_on(minimal.learn, 3 if reps < 3 else 5)
        finally:
            stop_trainer(trainer)
    return {"setting": name, "rows": [("learn_on_batch", ours, theirs)], "same_size": minimal.same_size,
            "event_us": event_us,
            "loss_check": loss_check,
            "batch": len(batch), "minibatch": cfg.sgd_minibatch_size, "epochs": cfg.num_sgd_iter}


class MinimalDQN:
    """Double DQN's update written out: the same Q-network (dueling MLP), Adam, Huber loss, clip and target sync;
    minibatches of uniform rows of frame stacks already gathered in tensors."""

    def __init__(self, cfg: Any, data: dict[str, torch.Tensor], n_actions: int, policy_config: dict) -> None:
        self.cfg, self.data = cfg, data
        # Adam and the clip as the policy has them (its config: the trainer's settings over DEFAULT_DQN_CONFIG).
        self.fused = bool(policy_config.get("adam_fused", False))
        self.grad_clip = float(policy_config.get("grad_clip", 10.0))
        in_dim = int(np.prod(data["stack"].shape[1:]))
        h = int(cfg.hidden)
        self.body = nn.Sequential(nn.Linear(in_dim, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.adv = nn.Linear(h, n_actions)
        self.value = nn.Linear(h, 1)
        self.q = nn.ModuleList([self.body, self.adv, self.value])
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=float(cfg.lr), fused=True if self.fused else None)
        self.params = list(self.q.parameters())
        self.grad_steps = 0

    @staticmethod
    def _q(net: nn.ModuleList, s: torch.Tensor) -> torch.Tensor:
        body, adv, value = net
        hdn = body(s)
        a = adv(hdn)
        return value(hdn) + a - a.mean(dim=1, keepdim=True)

    def check(self, policy: Any) -> str:
        """trajview's Q-network weights into these layers; the relative difference of the Q-values of the data's
        stacks (or why they were not compared)."""
        mine = {}
        for k, v in policy.q.state_dict().items():
            for prefix, index in (("body.", "0."), ("adv.", "1."), ("value.", "2.")):
                if k.startswith(prefix):
                    mine[index + k[len(prefix):]] = v
        try:
            self.q.load_state_dict(mine)
        except (RuntimeError, KeyError):
            return "not compared (trajview's layout differs)"
        self.target.load_state_dict(self.q.state_dict())
        with torch.no_grad():
            ours = self._q(self.q, self.data["stack"])
            theirs = policy.q(self.data["stack"].view(len(self.data["stack"]), policy.num_frames, -1))
        rel = float((ours - theirs).abs().max() / theirs.abs().max().clamp(min=1e-12))
        if rel > 1e-4:
            print(f"WARNING: dqn: the minimal loop's Q-values differ from trajview's by {rel:.1e}", file=sys.stderr)
        return f"{rel:.0e} (Q-values)"

    def update(self, n: int) -> None:
        d, c = self.data, self.cfg
        rows = len(d["stack"])
        gamma = float(c.gamma)
        for _ in range(n):
            idx = torch.randint(rows, (int(c.batch_size),))
            s, s2, a = d["stack"][idx], d["next_stack"][idx], d["actions"][idx]
            r, term = d["rewards"][idx], d["terminateds"][idx]
            q = self._q(self.q, s).gather(1, a[:, None]).squeeze(1)
            with torch.no_grad():
                a2 = self._q(self.q, s2).argmax(dim=1, keepdim=True)
                y = r + gamma * (1.0 - term) * self._q(self.target, s2).gather(1, a2).squeeze(1)
            loss = nn.functional.smooth_l1_loss(q, y)
            self.opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
            self.opt.step()
            self.grad_steps += 1
            if self.grad_steps % int(c.target_update_interval) == 0:
                self.target.load_state_dict(self.q.state_dict())


def sgd_dqn(reps: int, seed: int = 0, steps: int = 200, quick: bool = False) -> dict[str, Any]:
    """(a) for DQN: ms per gradient step of `learn_on_replay` (on samples drawn before) and of the replay sample plus
    `learn_on_replay` (the trainer's step), against the minimal update, ``reps`` rounds of ``steps`` each."""
    with tempfile.TemporaryDirectory(prefix="tv-learner-profile-") as out:
        trainer = make_trainer("dqn", out, seed, env=STATELESS_CARTPOLE_ID, quick=quick)
        try:
            trainer.train_iteration()  # fills the replay buffer past learning_starts (and trains: the warm-up)
            c, policy, buf = trainer.config, trainer.policy, trainer.buffer
            big = buf.sample(min(len(buf), 4096)) if hasattr(buf, "__len__") else buf.sample(4096)
            data = {k: torch.as_tensor(np.asarray(big[k], dtype=dt)).reshape(len(np.asarray(big[k])), -1)
                    if k in ("stack", "next_stack") else torch.as_tensor(np.asarray(big[k], dtype=dt))
                    for k, dt in (("stack", np.float32), ("next_stack", np.float32), ("actions", np.int64),
                                  ("rewards", np.float32), ("terminateds", np.float32))}
            minimal = MinimalDQN(c, data, int(policy.num_actions), dict(policy.config))
            loss_check = minimal.check(policy)
            same = sum(p.numel() for p in minimal.params) == sum(p.numel() for p in policy.q.parameters())
            samples = [buf.sample(c.batch_size) for _ in range(steps)]
            minimal.update(steps)  # warm-up
            learn, both, mini = [], [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                for s in samples:
                    policy.learn_on_replay(s)
                learn.append(1e3 * (time.perf_counter() - t0) / steps)
                t0 = time.perf_counter()
                for _ in range(steps):
                    policy.learn_on_replay(buf.sample(c.batch_size))
                both.append(1e3 * (time.perf_counter() - t0) / steps)
                t0 = time.perf_counter()
                minimal.update(steps)
                mini.append(1e3 * (time.perf_counter() - t0) / steps)
            event_us = profiler_cost_on(lambda: minimal.update(steps), 3 if reps < 3 else 5)
        finally:
            stop_trainer(trainer)
    return {"setting": "dqn", "rows": [("learn_on_replay", learn, mini), ("sample + learn_on_replay", both, mini)],
            "event_us": event_us,
            "same_size": same, "loss_check": loss_check, "batch": c.batch_size, "minibatch": c.batch_size, "epochs": 1}


def sgd_table(results: list[dict[str, Any]]) -> str:
    lines = ["| setting | step | minibatch rows | trajview ms | minimal ms | ratio | same parameter count | "
             "minimal's loss vs trajview's (relative difference) | profiler us/event on the minimal loop |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for what, ours, theirs in r["rows"]:
            ratio = [a / b for a, b in zip(ours, theirs)]
            lines.append(f"| {r['setting']} | {what} | {r['minibatch']} | {summary(ours, '{:.3f}')} | "
                         f"{summary(theirs, '{:.3f}')} | {summary(ratio)} | {'yes' if r['same_size'] else 'NO'} | "
                         f"{r['loss_check']} | {r['event_us']:.2f} |")
    return "\n".join(lines)


# -- (b) the framework's share of a run ------------------------------------------------------------------------


@contextlib.contextmanager
def compute_timers(trainer: Any, clock: Clock) -> Iterator[None]:
    """The learner's and the policy's compute calls timed into ``clock`` (module attributes put back after).

    PPO: ``policy.action_sampler``, ``policy.loss``, ``model.forward_train`` / ``forward_step``, the optimizer's
    ``step``; DQN: the Q-network's and the target's ``forward``, the optimizer's ``step``; both:
    ``torch.autograd.backward`` and ``torch.nn.utils.clip_grad_norm_``; the numpy learners' steps (PPO's
    ``MLPLearner._step``, acting through ``MLPActor.act_numpy`` (not ``action_sampler``: patched on the instance, it
    would change the way the policy acts), the bootstrap value through ``MLPActor.value`` as the
    torch path's through ``forward_step``; DQN's ``DQNLearner._learn`` and ``greedy``). A learner
    that routes its step through other calls (a compiled step function) needs them added here, or the direct figure
    misses them. (The profiler's figure counts torch's ops only: not the numpy learners' arithmetic.)"""
    saved = (torch.autograd.backward, torch.nn.utils.clip_grad_norm_)
    torch.autograd.backward = timed(torch.autograd.backward, clock)
    torch.nn.utils.clip_grad_norm_ = timed(torch.nn.utils.clip_grad_norm_, clock)
    policy = trainer.policy
    patched: list[tuple[Any, str]] = []

    def patch(obj: Any, attr: str) -> None:
        if obj is not None and hasattr(obj, attr):
            setattr(obj, attr, timed(getattr(obj, attr), clock))
            patched.append((obj, attr))

    if hasattr(trainer, "rollouts"):  # PPO
        acting = {id(policy): policy}  # and the workers' own copy where it is one (a learner on another device)
        workers = getattr(trainer.rollouts, "workers", [])
        for w in workers if isinstance(workers, list) else []:  # the local backend's RolloutWorkers
            acting.setdefault(id(getattr(w, "policy", policy)), getattr(w, "policy", policy))
        for p in acting.values():
            # Acting: the forward, the distribution's sample and logp. Where the numpy actor acts, its own call:
            # an ``action_sampler`` set on the instance would turn the policy to the torch path's way (tensors in
            # and out around the same actor: `PPOPolicy._act_on_arrays`), which a plain run does not take.
            actor = p.numpy_actor()
            if actor is not None:
                patch(actor, "act_numpy")
                patch(actor, "act")  # (the torch path's way to it, where a caller takes that way)
            else:
                patch(p, "action_sampler")
            patch(p.model, "forward_step")
        patch(policy, "loss")
        patch(policy.model, "forward_train")
        patch(policy.get_optimizer(), "step")
        patch(policy.numpy_learner(), "_step")  # the numpy learner's step (forward, loss, backward, clip, Adam)
        for p in acting.values():  # the numpy actor's critic: the bootstrap value (the torch path's forward_step)
            patch(p.numpy_actor(), "value")
    else:  # DQN
        patch(policy.q, "forward")
        patch(policy.target, "forward")
        patch(policy.optimizer, "step")
        learner = policy.numpy_learner()  # the numpy learner's step and greedy actions
        patch(learner, "_learn")
        patch(learner, "greedy")
    try:
        yield
    finally:
        torch.autograd.backward, torch.nn.utils.clip_grad_norm_ = saved
        for obj, attr in patched:
            delattr(obj, attr)  # the instance attribute goes: the class's method again


def profiler_cost_us(n: int = 2000, rounds: int = 5) -> float:
    """Microseconds torch.profiler adds per event it records: a loop of small ops (a linear layer and a tanh,
    several events each) with and without the profiler, the best of ``rounds`` each, over the events recorded."""
    from torch.profiler import ProfilerActivity, profile

    x, lin = torch.randn(256, 64), nn.Linear(64, 64)

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            torch.tanh(lin(x))
        return time.perf_counter() - t0

    plain, prof, events = math.inf, math.inf, 0
    with torch.no_grad():
        loop()
        for _ in range(rounds):
            plain = min(plain, loop())
            with profile(activities=[ProfilerActivity.CPU]) as p:
                prof = min(prof, loop())
            events = len(p.events())
    return max(0.0, prof - plain) / max(1, events) * 1e6


def profiler_cost_on(fn: Callable[[], Any], rounds: int = 5) -> float:
    """Microseconds torch.profiler adds per event it records in ``fn()`` (a setting's minimal SGD loop: its own mix
    of forward, backward and optimizer ops): the best of ``rounds`` calls with and without it, over the events."""
    from torch.profiler import ProfilerActivity, profile

    plain, prof, events = math.inf, math.inf, []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        plain = min(plain, time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            t0 = time.perf_counter()
            fn()
            prof = min(prof, time.perf_counter() - t0)
        events.append(len(p.events()))
    return max(0.0, prof - plain) / max(1.0, statistics.mean(events)) * 1e6


def top_level_op_seconds(prof: Any) -> tuple[float, int]:
    """(seconds in the union of the top-level op spans of every thread, events recorded)."""
    spans = []
    n = 0
    for e in prof.events():
        n += 1
        if e.cpu_parent is None:
            spans.append((e.time_range.start, e.time_range.end))
    spans.sort()
    total, end = 0.0, -math.inf
    for a, b in spans:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total * 1e-6, n


def one_run(name: str, iterations: int, seed: int, mode: str = "plain", quick: bool = False) -> dict[str, Any]:
    """The trainer's loop (`run_loop`, with its checkpoints) for ``iterations`` after one warm-up iteration;
    ``mode``: "plain", "profiler" (under torch.profiler) or "cprofile" (under cProfile: its Stats in the result)."""
    from trajview.train.loop import run_loop

    with tempfile.TemporaryDirectory(prefix="tv-learner-profile-") as out:
        trainer = make_trainer(name, out, seed, quick=quick)
        try:
            trainer.train_iteration()  # warm-up (torch's first calls), not timed
            trainer.save_checkpoint()
            trainer.config.timesteps = trainer.env_steps * (1 + iterations)  # iterations more, then done()
            compute = Clock()
            phases = {name: Phase(compute) for name in PHASES}
            for name, calls in phase_calls(trainer).items():
                for obj, attr, context in calls:
                    setattr(obj, attr, (phased_context if context else phased)(getattr(obj, attr), phases[name]))
            result: dict[str, Any] = {}
            with (contextlib.nullcontext() if mode == "cprofile" else compute_timers(trainer, compute)):
                ENV_CLOCK.reset()
                it0, steps0 = trainer.iteration, trainer.env_steps
                if mode == "profiler":
                    from torch.profiler import ProfilerActivity, profile

                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        t0 = time.perf_counter()
                        run_loop(trainer, desc=name, log_line=str, progress=False, on_iteration=None,
                                 close=lambda: None)
                        wall = time.perf_counter() - t0
                    result["op_s"], result["events"] = top_level_op_seconds(prof)
                elif mode == "cprofile":
                    pr = cProfile.Profile()
                    t0 = time.perf_counter()
                    pr.enable()
                    run_loop(trainer, desc=name, log_line=str, progress=False, on_iteration=None, close=lambda: None)
                    pr.disable()
                    wall = time.perf_counter() - t0
                    result["stats"] = pstats.Stats(pr)
                else:
                    t0 = time.perf_counter()
                    run_loop(trainer, desc=name, log_line=str, progress=False, on_iteration=None, close=lambda: None)
                    wall = time.perf_counter() - t0
            result.update(wall=wall, env_s=ENV_CLOCK.total, env_calls=ENV_CLOCK.calls, compute_s=compute.total,
                          compute_calls=compute.calls, ckpt_s=phases["checkpoint"].total,
                          phase_fw_s={name: ph.framework() for name, ph in phases.items()},
                          iterations=trainer.iteration - it0, env_steps=trainer.env_steps - steps0)
        finally:
            stop_trainer(trainer)
    if result["iterations"] != iterations:
        raise AssertionError(f"{name}: ran {result['iterations']} iterations, expected {iterations}")
    return result


def share(name: str, iterations: int, reps: int, quick: bool = False, timer_us: float = 0.0,
          event_us: float = 0.0, compute_timer_us: float = 0.0) -> dict[str, Any]:
    """(b): per run (seed 0, 1, ...), a plain run and an identical profiled one (same seed: the same batches and
    ops). Env, direct and checkpoint shares are of the plain run's wall-clock; the profiler's share is of the
    profiled run's, both its op spans and its wall-clock less ``event_us`` per event recorded (`profiler_cost_us`;
    all of it charged to the spans: a lower bound), so that the two runs' noise does not enter."""
    keys = ("total", "env", "torch_prof", "torch_direct", "rest_prof", "rest_direct", "ckpt", "env_steps_per_s",
            "prof_added_us", "timer", "event_us", "timers", "rest_direct_less", *(f"fw_{p}" for p in PHASES),
            "fw_loop")
    rows: dict[str, list[float]] = {k: [] for k in keys}
    for seed in range(reps):
        plain = one_run(name, iterations, seed, "plain", quick)
        prof = one_run(name, iterations, seed, "profiler", quick)
        w = plain["wall"]
        added = event_us * 1e-6 * prof["events"]
        torch_prof = max(0.0, prof["op_s"] - added) / max(1e-9, prof["wall"] - added)
        env = plain["env_s"] / w
        torch_direct = plain["compute_s"] / w
        rows["total"].append(w)
        rows["env"].append(100 * env)
        rows["torch_prof"].append(100 * torch_prof)
        rows["torch_direct"].append(100 * torch_direct)
        rows["rest_prof"].append(100 * (1 - env - torch_prof))
        rows["rest_direct"].append(100 * (1 - env - torch_direct))
        rows["ckpt"].append(100 * plain["ckpt_s"] / w)
        rows["env_steps_per_s"].append(plain["env_steps"] / w)
        # What the profiled run took more per event: against event_us, a check of the correction (noisy).
        rows["prof_added_us"].append(1e6 * (prof["wall"] - w) / max(1, prof["events"]))
        rows["event_us"].append(event_us)
        rows["timer"].append(100 * plain["env_calls"] * timer_us * 1e-6 / w)
        # The harness's own cost in the direct share: the env's timer and the compute calls' (`timed`) wrappers.
        rows["timers"].append(100 * (plain["env_calls"] * timer_us + plain["compute_calls"] * compute_timer_us) * 1e-6 / w)
        rows["rest_direct_less"].append(rows["rest_direct"][-1] - rows["timers"][-1])
        # The direct share's split by phase (each phase's time less the env's and the compute calls' in it; the
        # timers' own cost stays in the phase it was spent in); the loop: what the phases leave of it.
        for p in PHASES:
            rows[f"fw_{p}"].append(100 * plain["phase_fw_s"][p] / w)
        rows["fw_loop"].append(rows["rest_direct"][-1] - sum(rows[f"fw_{p}"][-1] for p in PHASES))
    rows["steps"] = [plain["env_steps"]]
    rows["env_calls"] = [plain["env_calls"]]
    return {"setting": name, "iterations": iterations, **rows}


def share_table(results: list[dict[str, Any]]) -> str:
    lines = ["| setting | iterations (env steps) | total s | env steps/s | env % | torch ops % (profiler) | "
             "torch calls % (direct) | trajview+Python % (profiler .. direct) | of which ckpt % | "
             "of which env timer % | direct, less all timers % | "
             "profiler us/event: subtracted (calibrated) .. the profiled run's extra (noisy) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rest = f"{summary(r['rest_prof'], '{:.1f}')} .. {summary(r['rest_direct'], '{:.1f}')}"
        lines.append(f"| {r['setting']} | {r['iterations']} ({r['steps'][0]:,}) | {summary(r['total'])} | "
                     f"{summary(r['env_steps_per_s'], '{:,.0f}')} | {summary(r['env'], '{:.1f}')} | "
                     f"{summary(r['torch_prof'], '{:.1f}')} | {summary(r['torch_direct'], '{:.1f}')} | {rest} | "
                     f"{summary(r['ckpt'], '{:.1f}')} | {summary(r['timer'], '{:.1f}')} | "
                     f"{summary(r['rest_direct_less'], '{:.1f}')} | "
                     f"{r['event_us'][0]:.2f} .. {summary(r['prof_added_us'])} |")
    return "\n".join(lines)


def split_table(results: list[dict[str, Any]]) -> str:
    """Where the trajview+Python share (direct) of each setting goes, by phase of the run."""
    lines = ["| setting | trajview+Python % (direct) | sampling | replay | learner | checkpoint | the loop |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = [summary(r[f"fw_{p}"], "{:.1f}") for p in (*PHASES, "loop")]
        lines.append(f"| {r['setting']} | {summary(r['rest_direct'], '{:.1f}')} | {' | '.join(cells)} |")
    return "\n".join(lines)


#: The plot's colours: the env and the compute calls, then the framework's phases.
_COLOURS = {"env": "#b0b0b0", "compute": "#4c72b0", "sampling": "#dd8452", "replay": "#937860",
            "learner": "#c44e52", "checkpoint": "#8172b3", "loop": "#da8bc3"}


def draw_shares(results: list[dict[str, Any]], png: str, title: str) -> None:
    """Two panels per setting (medians): the run's wall-clock split into the env, the compute calls (direct) and the
    framework's phases; and the framework's share alone, by phase, against the 10 % goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = statistics.median
    names = [r["setting"] for r in results]
    y = np.arange(len(results))[::-1]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.6 * len(results)), sharey=True,
                                   gridspec_kw={"width_ratios": [3, 2]})
    parts = [("env", "env"), ("compute", "torch_direct"), *((p, f"fw_{p}") for p in (*PHASES, "loop"))]
    for ax, keep in ((ax1, parts), (ax2, parts[2:])):
        left = np.zeros(len(results))
        for label, key in keep:
            width = np.array([max(0.0, med(r[key])) for r in results])
            ax.barh(y, width, left=left, color=_COLOURS[label], label=label if ax is ax1 else None, height=0.6)
            left += width
    ax2.axvline(10, color="black", linestyle="--", linewidth=1)
    ax2.text(10.2, y.max() + 0.4, "goal: 10 %", fontsize=8, va="bottom")
    for k, r in zip(y, results):
        ax2.text(med(r["rest_direct"]) + 0.2, k, f"{med(r['rest_direct']):.1f} %", va="center", fontsize=8)
    ax1.set_yticks(y, names)
    ax1.set_xlim(0, 100)
    ax1.set_xlabel("% of the run's wall-clock (medians over seeds)")
    ax2.set_xlabel("trajview+Python % (direct), by phase")
    ax2.set_xlim(0, max(12.0, 1.25 * max(med(r["rest_direct"]) for r in results)))
    fig.legend(loc="lower center", ncol=len(_COLOURS), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(png, dpi=110)
    plt.close(fig)


# -- cProfile: where the rest goes -------------------------------------------------------------------------------


def where(func: tuple[str, int, str]) -> str:
    """Where a cProfile entry's code lives: torch (C op), torch (Python), env, trajview, numpy or other."""
    filename, _, fname = func
    if filename == "~":  # a builtin: named by its object
        if "torch" in fname or "Tensor" in fname:
            return "torch (C ops)"
        if "_core." in fname or "trajview" in fname:
            return "trajview"
        if "numpy" in fname or "ndarray" in fname:
            return "numpy"
        return "other (Python builtins)"
    if os.sep + "torch" + os.sep in filename:
        return "torch (Python)"
    timed_env = filename == __file__ and fname in ("step", "reset")
    if "gymnasium" in filename or "stateless_cartpole" in filename or timed_env:
        return "env"
    if os.sep + "trajview" + os.sep in filename:
        return "trajview"
    if os.sep + "numpy" + os.sep in filename:
        return "numpy"
    return "other (Python)"


#: Stages of a run, as cProfile's cumulative time of the function that does each: (label, file, function).
STAGES = (
    ("sampling (RolloutWorker.sample: acting, env steps, GAE)", "rollout/worker.py", "sample"),
    ("  acting (the policy's compute_actions_from_input_dict)", "policy/torch_policy.py",
     "compute_actions_from_input_dict"),
    ("  acting (DQN's compute_actions_from_input_dict)", "algorithms/dqn.py", "compute_actions_from_input_dict"),
    ("  postprocessing (PPO's GAE with the bootstrap value)", "algorithms/ppo.py", "postprocess_trajectory"),
    ("batch building (concat_samples)", "views/concat.py", "concat_samples"),
    ("PPO learn_on_batch", "algorithms/ppo.py", "learn_on_batch"),
    ("  tensor conversion (TorchPolicy._to_torch, acting included)", "policy/torch_policy.py", "_to_torch"),
    ("  minibatch assembly (ppo.minibatches)", "algorithms/ppo.py", "minibatches"),
    ("  loss (forward passes, loss, statistics)", "algorithms/ppo.py", "loss"),
    ("replay add", "replay/buffer.py", "add"),
    ("replay sample", "replay/buffer.py", "sample"),
    ("DQN learn_on_replay", "algorithms/dqn.py", "learn_on_replay"),
    ("checkpoint (commit_checkpoint, in the loop's thread)", "train/loop.py", "commit_checkpoint"),
    ("metrics (append_metrics)", "train/metrics.py", "append_metrics"),
)


def cprofile_report(name: str, stats: pstats.Stats, top: int) -> str:
    raw: dict = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    stage_lines = []
    for label, path, fname in STAGES:
        cum = sum(v[3] for (f, _, fn), v in raw.items() if fn == fname and f.replace(os.sep, "/").endswith(path))
        if cum > 0:
            stage_lines.append(f"| {label} | {100 * cum / total:.1f} |")
    by: dict[str, float] = {}
    for func, (_, _, tt, _, _) in raw.items():
        by[where(func)] = by.get(where(func), 0.0) + tt
    lines = [f"#### {name}: cProfile, own time by where the code lives (total {total:.2f} s under cProfile)", "",
             "| where | own time % |", "|---|---|"]
    lines += [f"| {k} | {100 * v / total:.1f} |" for k, v in sorted(by.items(), key=lambda kv: -kv[1])]
    lines += ["", "Stages (cumulative time, nested stages indented):", "", "| stage | cumulative % |", "|---|---|",
              *stage_lines]
    lines += ["", f"Top {top} by own time:", "", "| own s | own % | cumulative s | calls | function | where |",
              "|---|---|---|---|---|---|"]
    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]
    for (filename, line, fname), (_, nc, tt, ct, _) in rows:
        short = filename if filename == "~" else "/".join(filename.split(os.sep)[-2:])
        label = fname if filename == "~" else f"{short}:{line} {fname}"
        lines.append(f"| {tt:.3f} | {100 * tt / total:.1f} | {ct:.3f} | {nc} | `{label}` | "
                     f"{where((filename, line, fname))} |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------------------------


def machine() -> str:
    try:
        load = "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "load average unknown"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {load}; python "
            f"{platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, trajview "
            f"{getattr(trajview, '__version__', '?')}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=SETTINGS, default=list(SETTINGS), help="settings to profile")
    p.add_argument("--reps", type=int, default=None, help="runs per setting (seeds 0..reps-1); default 5 (quick: 1)")
    p.add_argument("--iterations", type=int, default=None,
                   help="timed iterations per run (default: TIMED_STEPS per setting, as iterations: timed_iterations; quick: 2)")
    p.add_argument("--sgd-reps", type=int, default=None, help="(a) rounds per setting; default 7 (quick: 2)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (trajview train's --threads)")
    p.add_argument("--top", type=int, default=15, help="cProfile rows per setting (0: no cProfile run)")
    p.add_argument("--quick", action="store_true", help="a smoke: 1 run, 2 iterations each, short DQN iterations")
    p.add_argument("--skip", choices=("a", "b"), action="append", default=[], help="leave out a part")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="where part (b)'s chart goes (default: bench/learner_profile.png; none in --quick unless given)")
    p.add_argument("--learner", choices=("auto", "torch"), default="auto",
                   help="the learners' setting: auto (the numpy learners where they apply, as trajview train) or torch")
    args = p.parse_args(argv)
    reps = args.reps or (1 if args.quick else 5)
    sgd_reps = args.sgd_reps or (2 if args.quick else 7)
    print(f"# learner_profile: {machine()}")
    global THREADS, LEARNER
    THREADS, LEARNER = args.threads, args.learner
    torch.set_num_threads(THREADS)  # for the calibrations; each trainer sets its own (the same)
    timer_us = env_timer_cost_us(5_000, 3) if args.quick else env_timer_cost_us()
    event_us = profiler_cost_us(500, 3) if args.quick else profiler_cost_us()
    call_us = compute_timer_cost_us(5_000, 3) if args.quick else compute_timer_cost_us()
    print(f"torch threads: {THREADS} (trajview train's --threads, default 1); the env timer's own cost "
          f"{timer_us:.2f} us per step and a compute call's timer {call_us:.2f} us per call (both in the "
          f"trajview+Python share; the column 'direct, less all timers' takes them out); torch.profiler's cost "
          f"{event_us:.2f} us per event on small ops (on each setting's minimal SGD loop: in (a)'s table)\n")
    out: dict[str, Any] = {"sgd": [], "share": [], "cprofile": {}}
    if "a" not in args.skip:
        print("## (a) ms per SGD (minibatch) step: trajview's learner against the minimal torch loop "
              f"(median (min..max) of {sgd_reps} rounds)\n")
        for name in args.models:
            out["sgd"].append(sgd_dqn(sgd_reps, quick=args.quick, steps=20 if args.quick else 200) if name == "dqn"
                              else sgd_ppo(name, sgd_reps))
        print(sgd_table(out["sgd"]) + "\n")
    if "b" not in args.skip:
        print(f"## (b) shares of a run's wall-clock (median (min..max) of {reps} runs, seeds 0..{reps - 1})\n")
        for name in args.models:
            it = args.iterations or (2 if args.quick else timed_iterations(name))
            # The profiler's cost per event: the larger of the two calibrations, on small ops and on this setting's
            # minimal SGD loop (where (a) ran; noisier: fewer events per second), for a lower bound of torch's time.
            own = [r["event_us"] for r in out["sgd"] if r["setting"] == name]
            out["share"].append(share(name, it, reps, args.quick, timer_us, max([event_us, *own]), call_us))
        print(share_table(out["share"]) + "\n")
        print("Where the trajview+Python share (direct) goes, by phase (each phase's time less the env's and the "
              "compute calls' in it): sampling (acting's framework, the envs' loop, the store, the batch, GAE), "
              "replay (DQN's buffer), learner (minibatches, columns, checks around the SGD steps), checkpoint (the "
              "copies and writes in the loop's thread), the loop (counters, the metrics row):\n")
        print(split_table(out["share"]) + "\n")
        plot = args.plot or (None if args.quick else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                  "learner_profile.png"))
        if plot:
            draw_shares(out["share"], plot, f"learner_profile (b), {reps} run(s) per setting: {machine()}")
            print(f"chart: {plot}\n")
        print("torch ops % (profiler): union of torch.profiler's top-level spans, less the profiler's cost per "
              "event recorded (the larger of its calibrations on small ops and on the setting's minimal SGD loop; "
              "all charged to the spans: a lower bound), of the profiled run's wall-clock less the same; torch "
              "calls % (direct): acting, forward passes, loss, backward, clip and optimizer step timed around each "
              "call (an upper bound: the models' own Python is inside). trajview+Python % = 100 - env - torch, "
              "from each.\n")
        if args.top > 0:
            print("## cProfile of one run per setting (seed 0): where the rest goes\n")
            for name in args.models:
                it = args.iterations or (2 if args.quick else timed_iterations(name))
                stats = one_run(name, it, 0, "cprofile", args.quick)["stats"]
                print(cprofile_report(name, stats, args.top) + "\n")
                out["cprofile"][name] = stats
    print("## What dominates the rest (notes)\n")
    print(OVERHEAD_NOTES)
    return out


if __name__ == "__main__":
    main()
