#!/usr/bin/env python3
"""PPO and DQN on Stateless CartPole at rl-baselines3-zoo's settings: SB3 and sb3-contrib next to ``trajview train``.

    PYTHONPATH=python .venv-compare/bin/python bench/compare_sb3_train.py                  # 8 systems, seeds 0-4
    PYTHONPATH=python .venv-compare/bin/python bench/compare_sb3_train.py --systems sb3-dqn trajview-dqn
    PYTHONPATH=python .venv-compare/bin/python bench/compare_sb3_train.py --systems sb3-framestack \\
        trajview-framestack --seeds 0 1 2 --budget 100000
    PYTHONPATH=python .venv-compare/bin/python bench/compare_sb3_train.py --quick          # smoke: seed 0, 1,024 steps
    PYTHONPATH=python .venv-compare/bin/python bench/compare_sb3_train.py --table-from bench/out/sb3_train/results.json

The experiment of issue 25. Eight systems, each run a fresh subprocess of this
script, one at a time (seed by seed, the systems in turn within a seed, so a
machine whose load drifts touches every system alike):

* ``sb3-framestack``: Stable-Baselines3 ``PPO("MlpPolicy")`` over
  ``VecFrameStack(DummyVecEnv(8 envs), 16)`` (the 16 last observations,
  2 x 16 inputs): separate 64x64 tanh policy and value MLPs.
* ``trajview-framestack``: ``trajview train --model framestack`` with 16
  frames of the observation alone (``prev_actions`` / ``prev_rewards``
  false: 2 x 16 inputs, as SB3's) and 64x64 tanh policy and value MLPs: the
  same networks.
* ``trajview-framestack-torch``: the same with ``--learner torch``: its SGD
  steps by eager torch (autograd and ``torch.optim.Adam``), where
  ``trajview-framestack`` takes them with the numpy learner
  (``trajview.algorithms.mlp_learner``, the default for this model since
  issue 25): the same arithmetic, up to float32 rounding.
* ``sb3-lstm``: sb3-contrib ``RecurrentPPO("MlpLstmPolicy")``: an actor LSTM
  and a critic LSTM of ``--lstm-cell`` (256) over the observation, then 64x64
  tanh MLPs (SB3's default ``net_arch``) to the heads.
* ``trajview-lstm``: ``trajview train --model lstm`` with RecurrentPPO's
  networks (``hidden: 0, post_hidden: [64, 64]``): per network an LSTM of
  ``--lstm-cell`` (256) over the observation, then 64x64 tanh layers, then
  the head; an actor and a critic LSTM; no previous action in the input (SB3
  has none); sequences of up to 32 steps (SB3's: the 32-step rollout of each
  env, cut at episode starts).
* ``trajview-dqn-torch``: the same with the torch learner (``learner="torch"``),
  where ``trajview-dqn`` takes its gradient steps and greedy actions with the
  numpy learner (``trajview.algorithms.dqn_learner``, the default since issue
  25): the same arithmetic, up to float32 rounding.
* ``sb3-dqn``: Stable-Baselines3 ``DQN("MlpPolicy")`` over
  ``VecFrameStack(DummyVecEnv(1 env), 16)``: a 256x256 ReLU Q-network
  (``net_arch=[256, 256]``) over the 2 x 16 inputs.
* ``trajview-dqn``: trajview's DQN (``DQNTrainer``, what ``trajview train
  --algo dqn`` runs; model ``dqn-framestack``): a 16-frame stack view of the
  observation, the same 256x256 ReLU Q-network (no dueling head), DQN's
  target (``double_q`` false), the settings below.

PPO settings, the same for the four PPO systems (rl-baselines3-zoo's
``CartPoleNoVel-v1``, in ``hyperparams/ppo_lstm.yml``, and its
``CartPole-v1`` in ``ppo.yml``): 8
envs, 32 steps per env per iteration (256-step batches), minibatch 256, 20
epochs, gae_lambda 0.8, gamma 0.98, learning rate linear from 1e-3 and clip
range linear from 0.2 to zero over the budget (``lin_0.001``,
``lin_0.2``; trajview: ``--lr-schedule linear --clip-schedule linear``),
entropy 0, value-loss coefficient 0.5, gradient-norm clip 0.5, Adam (eps 1e-5;
trajview's fused Adam, its presets' choice: the same update). The zoo's
``n_timesteps`` is 1e5: the PPO systems' default ``--budget``, also the
schedules' length.
The zoo's current ``ppo_lstm.yml`` has since moved this env to an LSTM of 64
with ReLU MLPs and observation normalization; the older settings above are
issue 25's (``--lstm-cell 64`` for the smaller cell).

DQN settings, the same for both DQN systems: rl-baselines3-zoo's
``CartPole-v1`` in ``hyperparams/dqn.yml`` (the zoo has no DQN entry for
the stateless env; the frame stack is the PPO systems' 16 frames). Each in
trajview's ``DQNConfig`` terms, read off SB3 2.x's ``DQN`` /
``OffPolicyAlgorithm`` source:

* ``n_envs`` 1 (the zoo's default) -> ``envs=1``.
* ``train_freq`` 256: SB3 counts it in calls of the vec env's ``step()``
  (``n_envs`` env steps each), then runs ``gradient_steps`` 128 ->
  ``rollout_fragment_length=256`` (one sample of ``envs x 256`` env steps),
  ``gradient_steps=128`` per sample; ``iteration_steps=256`` (one sample and
  its gradient steps per iteration: the stop is checked as often as SB3's).
* ``learning_starts`` 1000: SB3 trains after a round once its env steps are
  ``> 1000``, trajview once they are ``>=`` its ``learning_starts`` ->
  ``learning_starts=1001``: both first train after the round that ends at
  1,024 env steps.
* ``target_update_interval`` 10: SB3 counts it in env steps (a hard copy
  every ``max(10 // n_envs, 1)`` vec steps) and makes it in
  ``collect_rollouts``, while the Q-network does not change; 256 vec steps a
  round hold one, so every round's 128 gradient steps read the target copied
  from the Q-network as the previous round left it (the first round: the
  initial one) -> ``target_update_interval=128`` gradient steps (trajview
  counts gradient steps; the copy after each round's last step).
* ``exploration_fraction`` 0.16, ``exploration_initial_eps`` 1,
  ``exploration_final_eps`` 0.04: epsilon linear in env steps from 1 to 0.04
  over 0.16 of the budget -> ``eps_start=1``, ``eps_end=0.04``,
  ``eps_steps=round(0.16 * budget)`` (8,000 of the 5e4 default).
* SB3's warm-up: uniform random actions while its env steps are
  ``< learning_starts`` -> ``random_warmup=True`` (epsilon 1 in the samples
  that start before ``learning_starts``).
* ``learning_rate`` 2.3e-3 (constant), ``batch_size`` 64, ``buffer_size``
  1e5, ``gamma`` 0.99 -> ``lr``, ``batch_size``, ``buffer_size``, ``gamma``
  alike; replay samples uniform over every stored step, with replacement,
  on both sides (``prioritized=False``).
* ``VecFrameStack(16)``: the last 16 observations, zeros before the
  episode's first -> ``num_frames=16`` (the stack views read the same).
* ``net_arch`` [256, 256] (ReLU; SB3's DQN has no dueling head) ->
  ``hidden=256`` (trajview's Q-network body is two layers of ``hidden``),
  ``dueling=False``.
* SB3's DQN target is the target network's max (not double DQN) ->
  ``double_q=False``. Both: Huber loss (``smooth_l1_loss``, mean over the
  batch), no bootstrap past a termination, bootstrapped past a time-limit
  truncation (SB3's ``handle_timeout_termination``, trajview's
  ``terminateds``), gradient-norm clip 10 (SB3's ``max_grad_norm`` default;
  trajview's ``grad_clip`` default), Adam with torch's defaults (betas 0.9,
  0.999, eps 1e-8; trajview's fused Adam: the same update up to rounding),
  torch's default initialization.
* The budget: the zoo's ``n_timesteps`` 5e4 (the default ``--budget`` of
  the DQN systems); SB3 runs whole rounds, trajview whole samples: both
  stop at 50,176 env steps (196 rounds of 256).

What is left different: SB3 sets epsilon before each env step, trajview
before each sample of 256 env steps. So trajview's warm-up runs to 1,024
env steps (SB3's to 1,000: its env steps 1,000-1,023 have epsilon 0.88),
and while epsilon decays trajview's runs up to 0.03 above SB3's.

The env is trajview's ``trajview/StatelessCartPole-v1`` on both sides: CartPole-v1
with the velocities removed (observation ``[x, theta]``, the zoo's
``CartPoleNoVel-v1`` drops indices 1 and 3 alike), 500-step limit.

How each measure is taken, the same way for every system:

* mean return: the mean of the returns of the last 100 completed episodes
  (SB3's ``ep_info_buffer``, ``stats_window_size=100``; trajview's
  ``smoothing_episodes=100``), read once per iteration, after its batch is
  sampled; the run stops after the update of the first iteration where it
  is >= 150 (``--run-to-budget``: never, to measure the whole budget).
  *Env steps to 150* are the env steps sampled by then.
* wall-clock: the training loop, from the start of the first iteration to
  the end of the last (no process start, imports, model construction):
  SB3 from ``learn()``'s training start to the stop; trajview from the start
  of ``PPOTrainer.train()`` / ``DQNTrainer.train()`` to its last iteration's
  end (including what ``trajview train`` does per iteration: metrics row,
  checkpoint; DQN's holds the replay buffer).
  An iteration is PPO's batch and update, DQN's round of 256 env steps and
  its 128 gradient steps.
  *Env steps/s* = env steps run / wall-clock of the loop.
* the split: SB3's rollout (``collect_rollouts``) and update (``train()``)
  seconds from its callbacks; trajview's from its metrics rows: SGD
  (``learn_s``), sampling (the rest of each iteration: acting and env
  steps), postprocessing (GAE, timed around ``postprocess_trajectory``,
  inside sampling and subtracted from it) and the rest of the loop (metrics
  row, checkpoint). DQN: SB3's the same way (``train()`` samples the
  replay buffer); trajview's SGD is its metrics rows' ``learn_s`` (the
  gradient steps: replay samples and updates), sampling the rest of each
  iteration (acting, env steps, adding to the buffer), other the rest of the
  loop (metrics row, checkpoint).

``--threads`` (default 1) sets torch's intra-op threads for every system
(``torch.set_num_threads``; trajview's ``--threads``). ``--device cpu cuda``
runs each system's learner on each device in turn (SB3's ``device=``, which
also acts there; trajview's ``--device``, which acts on the CPU with the
learner's weights synced after each update); the table has a row per system
and device. Prints each run, then a
markdown table with medians over seeds and their spread (min-max); writes
``--out/results.json`` and, with matplotlib, ``--out/sb3_train.png``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEMS = ("sb3-framestack", "trajview-framestack", "trajview-framestack-torch", "sb3-lstm", "trajview-lstm", "sb3-dqn",
           "trajview-dqn", "trajview-dqn-torch")
DQN_SYSTEMS = ("sb3-dqn", "trajview-dqn", "trajview-dqn-torch")
ENV_ID = "trajview/StatelessCartPole-v1"
TARGET = 150.0
WINDOW = 100  # episodes in the mean return
#: rl-baselines3-zoo's CartPoleNoVel-v1 (and CartPole-v1) PPO settings.
ZOO = {"n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gae_lambda": 0.8, "gamma": 0.98,
       "learning_rate": 1e-3, "clip_range": 0.2, "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5}
NUM_FRAMES = 16
#: rl-baselines3-zoo's CartPole-v1 DQN settings (hyperparams/dqn.yml; n_envs: the zoo's default), with SB3 DQN's
#: defaults the zoo leaves as they are (initial epsilon, gradient-norm clip, hard target updates).
ZOO_DQN = {"n_envs": 1, "n_timesteps": 50_000, "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
           "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10, "train_freq": 256,
           "gradient_steps": 128, "exploration_fraction": 0.16, "exploration_initial_eps": 1.0,
           "exploration_final_eps": 0.04, "net_arch": [256, 256], "max_grad_norm": 10.0, "tau": 1.0}
#: The default --budget of each kind of system: the zoo's n_timesteps.
BUDGETS = {"ppo": 100_000, "dqn": ZOO_DQN["n_timesteps"]}

#: What each system imports (module, the package that provides it).
NEEDS = {
    "sb3-framestack": [("stable_baselines3", "stable-baselines3"), ("torch", "torch")],
    "sb3-lstm": [("stable_baselines3", "stable-baselines3"), ("sb3_contrib", "sb3-contrib"), ("torch", "torch")],
    "trajview-framestack": [("trajview.train", "trajview (PYTHONPATH=python, with its built _core)"),
                            ("torch", "torch")],
    "trajview-framestack-torch": [("trajview.train", "trajview (PYTHONPATH=python, with its built _core)"),
                                  ("torch", "torch")],
    "trajview-lstm": [("trajview.train", "trajview (PYTHONPATH=python, with its built _core)"), ("torch", "torch")],
    "sb3-dqn": [("stable_baselines3", "stable-baselines3"), ("torch", "torch")],
    "trajview-dqn": [("trajview.train", "trajview (PYTHONPATH=python, with its built _core)"), ("torch", "torch")],
    "trajview-dqn-torch": [("trajview.train", "trajview (PYTHONPATH=python, with its built _core)"), ("torch", "torch")],
}


def budget_of(system: str, budget: int | None) -> int:
    """``--budget``, or the zoo's ``n_timesteps`` of the system's algorithm when it is not given."""
    if budget is not None:
        return budget
    return BUDGETS["dqn" if system in DQN_SYSTEMS else "ppo"]


def missing(systems: list[str]) -> list[str]:
    """The packages the chosen systems need that do not import here."""
    out: list[str] = []
    for system in systems:
        for module, package in NEEDS[system]:
            try:
                importlib.import_module(module)
            except ImportError as e:
                what = f"{package} (import {module}: {e})"
                if what not in out:
                    out.append(what)
    return out


def linear(initial: float):
    """rl-baselines3-zoo's ``linear_schedule`` (``lin_<initial>``): progress_remaining * initial."""
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


# ----------------------------------------------------------------------------------------------------------- SB3


class Stop(Exception):
    """Raised by the SB3 callback to end ``learn()`` after the update of the iteration that reached the target."""


def sb3_dqn_kwargs(seed: int, device: str = "cpu") -> dict[str, Any]:
    """SB3 ``DQN``'s arguments: the zoo's settings (`ZOO_DQN`)."""
    z = ZOO_DQN
    return dict(learning_rate=z["learning_rate"], buffer_size=z["buffer_size"], learning_starts=z["learning_starts"],
                batch_size=z["batch_size"], tau=z["tau"], gamma=z["gamma"], train_freq=z["train_freq"],
                gradient_steps=z["gradient_steps"], target_update_interval=z["target_update_interval"],
                exploration_fraction=z["exploration_fraction"],
                exploration_initial_eps=z["exploration_initial_eps"],
                exploration_final_eps=z["exploration_final_eps"], max_grad_norm=z["max_grad_norm"],
                policy_kwargs={"net_arch": list(z["net_arch"])}, stats_window_size=WINDOW, seed=seed, device=device,
                verbose=0)


def run_sb3(system: str, seed: int, budget: int, run_to_budget: bool, lstm_cell: int,
            device: str = "cpu") -> dict[str, Any]:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    import trajview.envs  # noqa: F401  (registers trajview/StatelessCartPole-v1)

    if system == "sb3-dqn":
        from stable_baselines3 import DQN

        dqn_env = VecFrameStack(make_vec_env(ENV_ID, n_envs=ZOO_DQN["n_envs"], seed=seed), NUM_FRAMES)
        model = DQN("MlpPolicy", dqn_env, **sb3_dqn_kwargs(seed, device))
        return sb3_learn(system, seed, model, budget, run_to_budget)
    z = ZOO
    common = dict(n_steps=z["n_steps"], batch_size=z["batch_size"], n_epochs=z["n_epochs"],
                  gae_lambda=z["gae_lambda"], gamma=z["gamma"], learning_rate=linear(z["learning_rate"]),
                  clip_range=linear(z["clip_range"]), ent_coef=z["ent_coef"], vf_coef=z["vf_coef"],
                  max_grad_norm=z["max_grad_norm"], stats_window_size=WINDOW, seed=seed, device=device, verbose=0)
    env = make_vec_env(ENV_ID, n_envs=z["n_envs"], seed=seed)  # DummyVecEnv of Monitor-wrapped envs
    if system == "sb3-framestack":
        from stable_baselines3 import PPO

        env = VecFrameStack(env, NUM_FRAMES)
        model = PPO("MlpPolicy", env, **common)
    else:
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO("MlpLstmPolicy", env, policy_kwargs={"lstm_hidden_size": lstm_cell,
                                                                  "enable_critic_lstm": True}, **common)
    return sb3_learn(system, seed, model, budget, run_to_budget)


def sb3_learn(system: str, seed: int, model: Any, budget: int, run_to_budget: bool) -> dict[str, Any]:
    """``model.learn()`` to the budget or the target, timed by callbacks: an iteration is a rollout (PPO's
    batch; DQN's round of ``train_freq`` steps) and the update after it (``train()``)."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    rec: dict[str, Any] = {"rollout_s": 0.0, "update_s": 0.0, "curve": [], "reached": None}

    class Timer(BaseCallback):
        def _on_training_start(self) -> None:
            rec["t0"] = rec["t_update"] = time.perf_counter()
            rec["first"] = True

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            if not rec.pop("first", False):
                rec["update_s"] += now - rec["t_update"]  # the previous iteration's train()
                rec["t_end"] = now
                if rec["stop"]:
                    raise Stop
            rec["t_rollout"] = now

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            now = time.perf_counter()
            rec["rollout_s"] += now - rec["t_rollout"]
            rec["t_update"] = now
            buf = self.model.ep_info_buffer
            ret = float(np.mean([e["r"] for e in buf])) if buf else math.nan
            steps = int(self.model.num_timesteps)
            rec["curve"].append((steps, ret))
            rec["stop"] = False
            if rec["reached"] is None and ret >= TARGET:
                rec["reached"] = steps
                rec["stop"] = not run_to_budget

        def _on_training_end(self) -> None:  # learn() ran to the budget
            now = time.perf_counter()
            rec["update_s"] += now - rec["t_update"]
            rec["t_end"] = now

    try:
        model.learn(total_timesteps=budget, callback=Timer())
    except Stop:
        pass
    wall = rec["t_end"] - rec["t0"]
    # The time to 150: the loop up to the end of the update of the iteration that reached it.
    return finish(system, seed, rec["curve"], rec["reached"], wall, {"sampling": rec["rollout_s"],
                                                                     "sgd": rec["update_s"]})


# ------------------------------------------------------------------------------------------------------ trajview


def trajview_config(system: str, seed: int, budget: int, run_to_budget: bool, lstm_cell: int, threads: int,
                    out_dir: str, device: str = "cpu"):
    """The `TrainConfig` of a trajview run: the zoo's settings (`ZOO`) in ``trajview train``'s terms."""
    from trajview.train import TrainConfig

    z = ZOO
    if system.startswith("trajview-framestack"):
        model, model_config = "framestack", {"num_frames": NUM_FRAMES, "hidden": [64, 64], "prev_actions": False,
                                             "prev_rewards": False}
    else:
        model, model_config = "lstm", {"max_seq_len": z["n_steps"], "cell_size": lstm_cell, "hidden": 0,
                                       "post_hidden": [64, 64], "prev_action": False, "prev_reward": False}
    return TrainConfig(
        env=ENV_ID, model=model, model_config=model_config, seed=seed, timesteps=budget,
        envs_per_worker=z["n_envs"], train_batch_size=z["n_envs"] * z["n_steps"], sgd_minibatch_size=z["batch_size"],
        num_sgd_iter=z["n_epochs"], lr=z["learning_rate"], lr_schedule="linear", clip_param=z["clip_range"],
        clip_schedule="linear", entropy_coeff=z["ent_coef"], gamma=z["gamma"], lambda_=z["gae_lambda"],
        vf_loss_coeff=z["vf_coef"], grad_clip=z["max_grad_norm"], adam_fused=True,
        stop_reward=None if run_to_budget else TARGET, smoothing_episodes=WINDOW, threads=threads, out_dir=out_dir,
        device=device, learner="torch" if system.endswith("-torch") else "auto",
    )


def trajview_command(config) -> str:
    """The ``trajview train`` command line of ``config`` (what the bench runs, in-process)."""
    c = config
    return (f"trajview train --model {c.model} --model-config '{json.dumps(c.model_config)}' --seed {c.seed} "
            f"--timesteps {c.timesteps} --envs-per-worker {c.envs_per_worker} --train-batch-size "
            f"{c.train_batch_size} --minibatch-size {c.sgd_minibatch_size} --num-sgd-iter {c.num_sgd_iter} "
            f"--lr {c.lr:g} --lr-schedule {c.lr_schedule} --clip-param {c.clip_param:g} --clip-schedule "
            f"{c.clip_schedule} --entropy-coeff {c.entropy_coeff:g} --gamma {c.gamma:g} --lambda {c.lambda_:g} "
            f"--vf-loss-coeff {c.vf_loss_coeff:g} --grad-clip {c.grad_clip:g} --stop-reward "
            f"{'none' if c.stop_reward is None else f'{c.stop_reward:g}'} --threads {c.threads} --device {c.device} "
            f"--learner {c.learner} --out RUN")


def trajview_dqn_config(seed: int, budget: int, run_to_budget: bool, threads: int, out_dir: str,
                        device: str = "cpu", learner: str = "auto"):
    """The `DQNConfig` of the trajview DQN run: the zoo's settings (`ZOO_DQN`) in trajview's terms (the module's
    docs say how each maps)."""
    from trajview.train.dqn_trainer import DQNConfig

    z = ZOO_DQN
    hidden = z["net_arch"][0]
    if list(z["net_arch"]) != [hidden, hidden]:
        raise ValueError(f"trajview's Q-network has two hidden layers of one size, SB3's net_arch is {z['net_arch']}")
    if z["tau"] != 1.0:
        raise ValueError(f"trajview's DQN copies the target network whole (tau 1), the zoo's tau is {z['tau']}")
    # SB3 copies the target every max(target_update_interval // n_envs, 1) vec steps of a round's collection (the
    # Q-network unchanged meanwhile): with one copy or more per round, each round's gradient steps read the
    # Q-network as the previous round left it; trajview copies after every round's last gradient step.
    if z["train_freq"] < max(z["target_update_interval"] // z["n_envs"], 1):
        raise ValueError("SB3 would skip target copies in some rounds: no trajview target_update_interval maps it")
    return DQNConfig(
        env=ENV_ID, model="dqn-framestack", seed=seed, timesteps=budget, num_frames=NUM_FRAMES, envs=z["n_envs"],
        rollout_fragment_length=z["train_freq"], buffer_size=z["buffer_size"], batch_size=z["batch_size"],
        lr=z["learning_rate"], gamma=z["gamma"], hidden=hidden, dueling=False, double_q=False,
        learning_starts=z["learning_starts"] + 1,  # SB3 trains once its env steps are > learning_starts
        gradient_steps=z["gradient_steps"], target_update_interval=z["gradient_steps"],
        eps_start=z["exploration_initial_eps"], eps_end=z["exploration_final_eps"],
        eps_steps=round(z["exploration_fraction"] * budget), random_warmup=True, prioritized=False,
        iteration_steps=z["n_envs"] * z["train_freq"], stop_reward=None if run_to_budget else TARGET,
        smoothing_episodes=WINDOW, threads=threads, out_dir=out_dir, device=device, learner=learner,
    )


def trajview_dqn_command(config) -> str:
    """The trajview DQN run's settings that differ from `DQNConfig`'s defaults (``trajview train --algo dqn``
    takes the shared options only: the bench makes the `DQNConfig`, in-process)."""
    import dataclasses

    defaults = type(config)()
    diff = [f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
            if f.name not in ("seed", "out_dir") and getattr(config, f.name) != getattr(defaults, f.name)]
    return f"DQNTrainer(DQNConfig(seed=SEED, {', '.join(diff)}))"


def timed_train(trainer: Any) -> tuple[list[dict[str, Any]], float]:
    """Runs a trajview trainer's loop: (its metrics rows, the loop's wall-clock from its start to the end of its
    last iteration)."""
    rows: list[dict[str, Any]] = []
    ends: list[float] = []

    def note(row: dict[str, Any]) -> None:
        ends.append(time.perf_counter())
        rows.append(row)

    t0 = time.perf_counter()
    trainer.train(progress=False, on_iteration=note)
    return rows, (ends[-1] - t0 if ends else 0.0)


def read_rows(rows: list[dict[str, Any]]) -> tuple[list[tuple[int, float]], int | None, float, float]:
    """A run's metrics rows: (its curve of (env steps, mean return), the env steps where it first reached
    `TARGET` or None, the iterations' own seconds (sampling + learning), the learning's seconds)."""
    curve = [(int(r["env_steps"]), float(r["episode_return_mean"])) for r in rows]
    reached = next((s for s, ret in curve if ret >= TARGET), None)
    iter_s = float(rows[-1]["time_s"]) if rows else 0.0
    return curve, reached, iter_s, sum(float(r["learn_s"]) for r in rows)


def run_trajview_dqn(system: str, seed: int, budget: int, run_to_budget: bool, threads: int,
                     device: str = "cpu") -> dict[str, Any]:
    from trajview.train.dqn_trainer import DQNTrainer

    with tempfile.TemporaryDirectory(prefix="tv-sb3-") as tmp:
        config = trajview_dqn_config(seed, budget, run_to_budget, threads, str(Path(tmp) / "run"), device,
                                     "torch" if system.endswith("-torch") else "auto")
        rows, wall = timed_train(DQNTrainer(config))
    curve, reached, iter_s, sgd = read_rows(rows)
    res = finish(system, seed, curve, reached, wall, {"sampling": iter_s - sgd, "sgd": sgd, "other": wall - iter_s})
    res["command"] = trajview_dqn_command(config)
    return res


def run_trajview(system: str, seed: int, budget: int, run_to_budget: bool, lstm_cell: int,
                 threads: int, device: str = "cpu") -> dict[str, Any]:
    from trajview.train import PPOTrainer

    if system in DQN_SYSTEMS:
        return run_trajview_dqn(system, seed, budget, run_to_budget, threads, device)

    with tempfile.TemporaryDirectory(prefix="tv-sb3-") as tmp:
        config = trajview_config(system, seed, budget, run_to_budget, lstm_cell, threads, str(Path(tmp) / "run"),
                                 device)
        trainer = PPOTrainer(config)
        # The local backend: the workers postprocess with the policy they act with (the learner's own on the CPU,
        # its CPU copy with the learner on a GPU).
        policy = trainer.rollouts.workers[0].policy
        post = {"s": 0.0}
        inner = policy.postprocess_trajectory

        def timed_postprocess(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                post["s"] += time.perf_counter() - t

        policy.postprocess_trajectory = timed_postprocess  # type: ignore[method-assign]
        rows, wall = timed_train(trainer)
    curve, reached, iter_s, sgd = read_rows(rows)
    res = finish(system, seed, curve, reached, wall,
                 {"sampling": iter_s - sgd - post["s"], "postprocessing": post["s"], "sgd": sgd,
                  "other": wall - iter_s})
    res["command"] = trajview_command(config)
    return res


# --------------------------------------------------------------------------------------------------- results


def finish(system: str, seed: int, curve: list[tuple[int, float]], reached: int | None, wall: float,
           split: dict[str, float]) -> dict[str, Any]:
    steps = curve[-1][0] if curve else 0
    return {"system": system, "seed": seed, "steps_to_150": reached, "steps_run": steps, "wall_s": round(wall, 3),
            "steps_per_s": round(steps / wall, 1) if wall > 0 else math.nan,
            "final_return": curve[-1][1] if curve else math.nan,
            "split_s": {k: round(v, 3) for k, v in split.items()}, "curve": curve}


def one_run(system: str, seed: int, budget: int, run_to_budget: bool, lstm_cell: int, threads: int,
            device: str = "cpu") -> dict:
    import torch

    torch.set_num_threads(threads)
    if system.startswith("sb3"):
        res = run_sb3(system, seed, budget, run_to_budget, lstm_cell, device)
    else:
        res = run_trajview(system, seed, budget, run_to_budget, lstm_cell, threads, device)
    res["device"] = device
    return res


def spawn(system: str, seed: int, device: str, args: argparse.Namespace, out: Path) -> dict:
    """One run in a subprocess of its own (this script, ``--one``)."""
    result = out / f"{system}-{device}-seed{seed}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", system, str(seed), "--budget",
           str(budget_of(system, args.budget)), "--device", device,
           "--lstm-cell", str(args.lstm_cell), "--threads", str(args.threads), "--result", str(result)]
    if args.run_to_budget:
        cmd.append("--run-to-budget")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"compare_sb3_train: the {system} run of seed {seed} on {device} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-4000:]}")
    return json.loads(result.read_text())


def spread(values: list[float]) -> str:
    """The median and (min-max) of ``values``; "–" when there are none."""
    if not values:
        return "–"
    med = statistics.median(values)
    return f"{med:,.0f}" if len(values) == 1 else f"{med:,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def spread_f(values: list[float], digits: int = 1) -> str:
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run_line(r: dict) -> str:
    split = ", ".join(f"{k} {v:.2f}" for k, v in r["split_s"].items())
    to = f"{r['steps_to_150']:,}" if r["steps_to_150"] is not None else "not reached"
    return (f"{label(r):<26} seed {r['seed']}: env steps to {TARGET:g}: {to}; ran {r['steps_run']:,} env steps in "
            f"{r['wall_s']:.2f} s, {r['steps_per_s']:,.0f} env steps/s; final mean return {r['final_return']:.1f}; "
            f"split (s): {split}")


def label(r: dict) -> str:
    """A run's system, with its learner's device where that is not the CPU (results of old runs have none)."""
    device = r.get("device", "cpu")
    return r["system"] if device == "cpu" else f"{r['system']} ({device})"


def table(results: list[dict]) -> str:
    labels = {label(r): (SYSTEMS.index(r["system"]), r.get("device", "cpu")) for r in results}
    systems = sorted(labels, key=lambda k: labels[k])
    lines = [f"| system | seeds | reached {TARGET:g} | env steps to {TARGET:g} | wall-clock to the stop (s) "
             f"| env steps/s | sampling s | postprocessing s | SGD s | other s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in systems:
        rs = [r for r in results if label(r) == s]
        reached = [r["steps_to_150"] for r in rs if r["steps_to_150"] is not None]

        def part(name: str) -> str:
            vals = [r["split_s"][name] for r in rs if name in r["split_s"]]
            return spread_f(vals, 2) if vals else "–"

        lines.append(f"| {s} | {','.join(str(r['seed']) for r in rs)} | {len(reached)}/{len(rs)} | {spread(reached)} "
                     f"| {spread_f([r['wall_s'] for r in rs])} | {spread([r['steps_per_s'] for r in rs])} "
                     f"| {part('sampling')} | {part('postprocessing')} | {part('sgd')} | {part('other')} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(label(r) for r in results))}
    for r in results:
        xs = [c[0] for c in r["curve"]]
        ys = [c[1] for c in r["curve"]]
        ax.plot(xs, ys, color=colors[label(r)], alpha=0.7, linewidth=1,
                label=label(r) if r["seed"] == min(q["seed"] for q in results if label(q) == label(r)) else None)
    ax.axhline(TARGET, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"mean return (last {WINDOW} episodes)")
    ax.set_title("Stateless CartPole, rl-baselines3-zoo's settings")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def report(results: list[dict], out: Path | None) -> None:
    print(table(results))
    if out is not None and plot(results, out / "sb3_train.png"):
        print(f"\nplot: {out / 'sb3_train.png'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--budget", type=int, default=None,
                   help="env steps per run at most (rounded up to whole 256-step iterations), also the length of "
                        f"the linear schedules (PPO) and of the exploration schedule (DQN: 0.16 of it); default: "
                        f"the zoo's n_timesteps, {BUDGETS['ppo']:,} (PPO) and {BUDGETS['dqn']:,} (DQN)")
    p.add_argument("--run-to-budget", action="store_true",
                   help=f"do not stop at mean return {TARGET:g}: every run samples the whole budget")
    p.add_argument("--lstm-cell", type=int, default=256, help="the LSTMs' cell size (both systems)")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads, every system")
    p.add_argument("--device", nargs="+", choices=("cpu", "cuda"), default=["cpu"],
                   help="where each system's learner trains (SB3's device=, trajview's --device); several: every "
                        "system on each, one after the other within a seed")
    p.add_argument("--quick", action="store_true", help="a smoke: seed 0, --budget 1024 (4 iterations per run)")
    p.add_argument("--out", default="bench/out/sb3_train", help="results.json, per-run JSON and the plot go here")
    p.add_argument("--table-from", nargs="+", metavar="JSON", help="print the table of earlier results.json files")
    p.add_argument("--one", nargs=2, metavar=("SYSTEM", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.budget = [0], 1024
    if (args.budget is not None and args.budget < 1) or args.threads < 1 or args.lstm_cell < 1:
        p.error(f"--budget, --threads and --lstm-cell must be >= 1, got {args.budget}, {args.threads}, "
                f"{args.lstm_cell}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table_from:
        results = [r for path in args.table_from for r in json.loads(Path(path).read_text())]
        report(results, None)
        return 0
    if args.one:
        system, seed = args.one
        res = one_run(system, int(seed), budget_of(system, args.budget), args.run_to_budget, args.lstm_cell,
                      args.threads, args.device[0])
        Path(args.result).write_text(json.dumps(res))
        return 0
    lacking = missing(args.systems)
    if lacking:
        print("compare_sb3_train: missing " + "; ".join(lacking) + ".\nInstall the compare extra into a virtualenv "
              "(bench/README.md, 'Next to RLlib, TorchRL, SB3 and Tianshou'): pip install -r "
              "bench/requirements-compare.txt, and run trajview from this tree (PYTHONPATH=python with the built "
              "_core), or choose other --systems.", file=sys.stderr)
        return 2
    if "cuda" in args.device:
        import torch

        if not torch.cuda.is_available():
            print("compare_sb3_train: --device cuda asked for, but torch sees no CUDA device here "
                  f"(torch {torch.__version__})", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budgets = sorted({budget_of(s, args.budget) for s in args.systems})
    dqn = any(s in DQN_SYSTEMS for s in args.systems)
    print(f"Stateless CartPole, zoo settings PPO {ZOO}{f', DQN {ZOO_DQN}' if dqn else ''}, budget "
          f"{' / '.join(f'{b:,}' for b in budgets)} env steps, seeds {args.seeds}, "
          f"{args.threads} torch thread(s), LSTM cell {args.lstm_cell}, learner on {' / '.join(args.device)}; one "
          "run at a time", flush=True)
    results = []
    for seed in args.seeds:
        for system in args.systems:
            for device in args.device:
                r = spawn(system, seed, device, args, out)
                results.append(r)
                print(run_line(r), flush=True)
                # what has run so far, so that a run cut short (a time limit) leaves its results
                (out / "results.json").write_text(json.dumps(results, indent=1))
    commands = sorted({r["command"].replace(f"--seed {r['seed']}", "--seed SEED") for r in results
                       if "command" in r})
    for c in commands:
        print(f"trajview side: {c}")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print()
    report(results, out)
    print(f"results: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
