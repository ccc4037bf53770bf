#!/usr/bin/env python3
"""PPO on Stateless CartPole to a mean return of 150: trajview's ``trajview train`` next to RLlib's old stack.

    .venv-compare/bin/python bench/compare_rllib_train.py                         # both sides, 3 models, seed 0
    .venv-compare/bin/python bench/compare_rllib_train.py --side trajview --models lstm attention --seeds 0 1 2
    .venv-compare/bin/python bench/compare_rllib_train.py --side rllib --models lstm
    .venv-compare/bin/python bench/compare_rllib_train.py --table-from A/results.json B/results.json   # merged

The experiment of issue 16: `trajview/StatelessCartPole-v1` (observation
``[x, theta]``), PPO, each run stopped when the mean return of the last 100
episodes first reaches 150 (RLlib: its ``episode_return_mean``, over the same
100-episode window, ``metrics_num_episodes_for_smoothing``) or at ``--cap``
env steps. Per run: env steps to 150 and wall-clock to 150 (the training
loop's own time: RLlib's ``algo.train()`` calls, trajview's ``time_s``; not
process start-up, imports or Ray's start). Every run is a subprocess of its
own (one ``ray.init`` each). Prints a markdown table and writes
``--out/results.json``.

RLlib's side uses RLlib's own settings for this env, from its old-stack
examples (ray-project/ray, ``rllib/examples/``), everything else PPO's
defaults (train_batch_size 4000, minibatch 128, lr 5e-5, lambda 1.0, KL
penalty, 2 env runners):

* framestack: ``trajectory_view_api.py``: a custom model reading
  ``prev_n_obs = obs@"-15:0"``, ``prev_n_actions`` / ``prev_n_rewards`` at
  ``"-16:-1"`` through trajectory-view requirements, two 256-unit ReLU layers
  with the value head on the first (``TorchFrameStackingCartPoleModel`` of
  ``examples/models/trajectory_view_utilizing_models.py``, re-written here: it
  is not shipped in ray 2.60's wheel), ``num_frames=16``,
  ``vf_share_layers=True``, ``num_sgd_iter=5``, ``vf_loss_coeff=1e-4``;
* lstm: ``cartpole_lstm.py``: ``use_lstm``, ``lstm_cell_size=256``,
  ``vf_share_layers=True``, ``num_sgd_iter=5``, ``vf_loss_coeff=1e-4``
  (prev action / reward off, the script's default);
* attention: ``attention_net.py --env StatelessCartPole``: ``use_attention``,
  ``max_seq_len=10``, one transformer unit, ``attention_dim=32``, memory 10
  (inference and training), 1 head of 32, position-wise MLP 32,
  ``num_envs_per_worker=20``, ``entropy_coeff=0.001``, ``num_sgd_iter=10``,
  ``vf_loss_coeff=1e-5``, ``gamma=0.99``.

trajview's side is ``trajview train --model MODEL --seed SEED`` with its
presets (the "Results" command of docs/guides/training.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("framestack", "lstm", "attention")
TARGET = 150.0


# ----------------------------------------------------------------------------- RLlib (old API stack)


def _rllib_framestack_model():
    """RLlib's trajectory-view frame-stack example model (torch), for ray versions that no longer ship it."""
    import torch
    from torch import nn
    from ray.rllib.models.torch.misc import SlimFC
    from ray.rllib.models.torch.torch_modelv2 import TorchModelV2
    from ray.rllib.policy.view_requirement import ViewRequirement
    from ray.rllib.utils.torch_utils import one_hot

    class FrameStackModel(TorchModelV2, nn.Module):
        def __init__(self, obs_space, action_space, num_outputs, model_config, name, num_frames=16):
            nn.Module.__init__(self)
            TorchModelV2.__init__(self, obs_space, action_space, None, model_config, name)
            self.n, self.obs_dim = num_frames, obs_space.shape[0]
            width = num_frames * (self.obs_dim + action_space.n + 1)
            self.hidden1 = SlimFC(width, 256, activation_fn="relu")
            self.hidden2 = SlimFC(256, 256, activation_fn="relu")
            self.logits = SlimFC(256, num_outputs, activation_fn="linear")
            self.value = SlimFC(256, 1, activation_fn="linear")
            self._v = None
            self.view_requirements["prev_n_obs"] = ViewRequirement("obs", shift=f"-{num_frames - 1}:0", space=obs_space)
            self.view_requirements["prev_n_rewards"] = ViewRequirement("rewards", shift=f"-{num_frames}:-1")
            self.view_requirements["prev_n_actions"] = ViewRequirement("actions", shift=f"-{num_frames}:-1",
                                                                      space=action_space)

        def forward(self, input_dict, state, seq_lens):
            obs = input_dict["prev_n_obs"].reshape(-1, self.n * self.obs_dim)
            acts = one_hot(input_dict["prev_n_actions"], self.action_space).reshape(len(obs), -1)
            rews = input_dict["prev_n_rewards"].reshape(-1, self.n)
            h = self.hidden1(torch.cat([obs, acts, rews], -1))
            self._v = self.value(h)  # the value head reads the first layer (as the example does)
            return self.logits(self.hidden2(h)), []

        def value_function(self):
            return self._v.squeeze(-1)

    return FrameStackModel


def rllib_config(model: str, seed: int, env_runners: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.models import ModelCatalog

    cfg = (PPOConfig()
           .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
           .environment("trajview/StatelessCartPole-v1")
           .framework("torch")
           .env_runners(num_env_runners=env_runners)
           .debugging(seed=seed)
           .reporting(metrics_num_episodes_for_smoothing=100))
    if model == "framestack":
        ModelCatalog.register_custom_model("tv_frame_stack", _rllib_framestack_model())
        cfg.training(num_epochs=5, vf_loss_coeff=1e-4,
                     model={"vf_share_layers": True, "custom_model": "tv_frame_stack",
                            "custom_model_config": {"num_frames": 16}})
    elif model == "lstm":
        cfg.training(num_epochs=5, vf_loss_coeff=1e-4,
                     model={"vf_share_layers": True, "use_lstm": True, "lstm_cell_size": 256,
                            "lstm_use_prev_action": False, "lstm_use_prev_reward": False})
    elif model == "attention":
        cfg.env_runners(num_envs_per_env_runner=20)
        cfg.training(gamma=0.99, entropy_coeff=0.001, num_epochs=10, vf_loss_coeff=1e-5,
                     model={"use_attention": True, "max_seq_len": 10, "attention_num_transformer_units": 1,
                            "attention_dim": 32, "attention_memory_inference": 10, "attention_memory_training": 10,
                            "attention_num_heads": 1, "attention_head_dim": 32,
                            "attention_position_wise_mlp_dim": 32})
    else:
        raise ValueError(model)
    return cfg


def run_rllib(model: str, seed: int, cap: int, env_runners: int) -> dict:
    import gymnasium as gym
    import ray
    from ray.tune.registry import register_env

    import trajview.envs  # noqa: F401  (registers trajview/StatelessCartPole-v1 with gymnasium)

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level="ERROR")

    def creator(_cfg):
        import trajview.envs  # noqa: F401  (in the env runner processes too)

        return gym.make("trajview/StatelessCartPole-v1")

    register_env("trajview/StatelessCartPole-v1", creator)
    algo = rllib_config(model, seed, env_runners).build()
    elapsed, steps, best, curve = 0.0, 0, float("-inf"), []
    reached = None
    while steps < cap:
        t0 = time.perf_counter()
        r = algo.train()
        elapsed += time.perf_counter() - t0
        er = r.get("env_runners", r)
        ret = er.get("episode_return_mean", er.get("episode_reward_mean", float("nan")))
        steps = int(r.get("num_env_steps_sampled_lifetime", r.get("timesteps_total", 0)))
        curve.append((steps, round(elapsed, 2), ret))
        if ret == ret:
            best = max(best, ret)
        if ret >= TARGET:
            reached = (steps, elapsed)
            break
    algo.stop()
    ray.shutdown()
    return {"side": "rllib", "model": model, "seed": seed, "steps_to_150": reached and reached[0],
            "time_to_150_s": reached and round(reached[1], 1), "steps_run": steps, "time_s": round(elapsed, 1),
            "best_return": best, "curve": curve}


# ----------------------------------------------------------------------------- trajview


def run_trajview(model: str, seed: int, cap: int, out: Path, python: str) -> dict:
    import csv

    run_dir = out / f"trajview-{model}-{seed}"
    cmd = [python, "-m", "trajview.train.cli", "train", "--model", model, "--seed", str(seed),
           "--timesteps", str(cap), "--out", str(run_dir), "--no-progress"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    reached = next((r for r in rows if float(r["episode_return_mean"]) >= TARGET), None)
    return {"side": "trajview", "model": model, "seed": seed,
            "steps_to_150": reached and int(reached["env_steps"]),
            "time_to_150_s": reached and round(float(reached["time_s"]), 1),
            "steps_run": int(rows[-1]["env_steps"]), "time_s": round(float(rows[-1]["time_s"]), 1),
            "best_return": max(float(r["episode_return_mean"]) for r in rows), "command": " ".join(cmd[1:]),
            "curve": [(int(r["env_steps"]), float(r["time_s"]), float(r["episode_return_mean"])) for r in rows]}


def median_estimate(res: dict) -> float | None:
    """Iterations to 150 times the median iteration's time: the time to 150 without the iterations that other
    processes on the machine stretched (a shared machine's load comes and goes; the median is what most of the
    run's iterations took)."""
    if not res.get("steps_to_150") or not res.get("curve"):
        return None
    curve = [c for c in res["curve"] if c[0] <= res["steps_to_150"]]
    times = [b[1] - a[1] for a, b in zip([(0, 0.0, 0.0)] + curve[:-1], curve)]
    times.sort()
    return len(times) * times[len(times) // 2]


# ----------------------------------------------------------------------------- driver


def _fmt(x, spec=",") -> str:
    return "not reached" if x is None else format(x, spec)


def table(results: list[dict]) -> str:
    lines = ["| model | seed | RLlib env steps to 150 | RLlib s to 150 (median-iteration estimate) "
             "| trajview env steps to 150 | trajview s to 150 (median-iteration estimate) "
             "| wall-clock ratio (of the estimates) | env-step ratio | 1-min load at start (RLlib / trajview) |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["model"], r["seed"]) for r in results}, key=lambda k: (MODELS.index(k[0]), k[1]))
    for model, seed in keys:
        by = {r["side"]: r for r in results if r["model"] == model and r["seed"] == seed}
        rl, tv = by.get("rllib", {}), by.get("trajview", {})
        ratio_t = ratio_s = "–"
        if rl.get("time_to_150_s") and tv.get("time_to_150_s"):
            ratio_t = f"{rl['time_to_150_s'] / tv['time_to_150_s']:.1f}x faster"
            est_rl, est_tv = median_estimate(rl), median_estimate(tv)
            if est_rl and est_tv:
                ratio_t += f" ({est_rl / est_tv:.1f}x)"
        if rl.get("steps_to_150") and tv.get("steps_to_150"):
            ratio_s = f"{tv['steps_to_150'] / rl['steps_to_150']:.2f}"

        def cell(r, k, spec=","):
            return "–" if not r else _fmt(r.get(k), spec)

        def secs(r):
            est = median_estimate(r) if r else None
            return cell(r, "time_to_150_s", ".1f") + (f" ({est:.1f})" if est else "")

        lines.append(f"| {model} | {seed} | {cell(rl, 'steps_to_150')} | {secs(rl)} "
                     f"| {cell(tv, 'steps_to_150')} | {secs(tv)} | {ratio_t} | {ratio_s} "
                     f"| {cell(rl, 'load_1min_at_start', '.1f')} / {cell(tv, 'load_1min_at_start', '.1f')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--side", choices=("rllib", "trajview", "both"), default="both")
    ap.add_argument("--cap", type=int, default=200_000, help="stop a run that has not reached 150 after this many "
                                                            "env steps")
    ap.add_argument("--rllib-env-runners", type=int, default=2,
                    help="RLlib's num_env_runners (PPO's default 2; 0 samples in the driver)")
    ap.add_argument("--out", default=None, help="where runs and results.json go (default: a temporary directory)")
    ap.add_argument("--trajview-python", default=sys.executable,
                    help="the interpreter of trajview's runs (default: this one; its torch decides the numerics, so "
                         "env steps to 150 may differ between torch versions)")
    ap.add_argument("--table-from", nargs="+", metavar="RESULTS_JSON",
                    help="print the table of earlier runs (their results.json files, merged) and exit")
    ap.add_argument("--one", nargs=3, metavar=("SIDE", "MODEL", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table_from:
        print(table([r for f in args.table_from for r in json.loads(Path(f).read_text())]))
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="tv-rllib-train-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.one:  # a child: one RLlib run, its result as JSON on the last line
        side, model, seed = args.one
        print(json.dumps(run_rllib(model, int(seed), args.cap, args.rllib_env_runners)))
        return 0
    sides = ("rllib", "trajview") if args.side == "both" else (args.side,)
    results = []
    for model in args.models:
        for seed in args.seeds:
            for side in sides:
                load = os.getloadavg()[0]
                if side == "rllib":
                    p = subprocess.run([sys.executable, __file__, "--one", "rllib", model, str(seed), "--cap",
                                        str(args.cap), "--rllib-env-runners", str(args.rllib_env_runners),
                                        "--out", str(out)], capture_output=True, text=True)
                    if p.returncode:
                        print(p.stderr[-3000:], file=sys.stderr)
                        raise SystemExit(f"RLlib run {model} seed {seed} failed")
                    res = json.loads(p.stdout.strip().splitlines()[-1])
                else:
                    res = run_trajview(model, seed, args.cap, out, args.trajview_python)
                res["load_1min_at_start"] = round(load, 2)
                results.append(res)
                print(f"{side} {model} seed {seed}: steps to 150 {_fmt(res['steps_to_150'])}, "
                      f"{_fmt(res['time_to_150_s'], '.1f')} s (load {load:.2f})", file=sys.stderr, flush=True)
                (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    print(f"\n(runs and results.json in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
