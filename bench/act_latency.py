"""Per-call latency of acting outside a worker (issue 26): the view bookkeeping on top of the model.

For the frame-stack and the LSTM PPO models (their default sizes, CartPole's spaces, one torch thread),
each call is timed on its own (``time.perf_counter``), in alternating rounds, for:

* ``single``: ``policy.compute_single_action(obs, prev_reward=r, explore=False)``, one implicit episode
  (the views built by a one-episode `PolicyRunner`);
* ``act_many``: ``runner.act_many(obs[64], episodes, rewards=r[64], explore=False)``, 64 episodes at once;

and, side by side in the same run, on inputs built once beforehand (the same rows the runner built):

* ``policy``: ``policy.compute_actions_from_input_dict(prebuilt input dict)`` (numpy in, numpy out: what the
  runner calls after building the views);
* ``model``: the model alone, ``policy.action_sampler(prebuilt tensors, False)`` under ``torch.inference_mode``.

It prints the median and the spread (25th-75th percentile) per call in microseconds, and the runner's cost
over each baseline. The goal (issue 26): the runner's median at most 20% over ``model`` in every row (the view
bookkeeping, the conversions and the output checks together at most 20% on top of the torch model on prebuilt
inputs); the ``policy`` column shows how much of that is `compute_actions_from_input_dict`'s. Episodes restart
every 200 steps.

``--env-step``: before each timed call (of every variant), untimed, the envs step as in an acting loop (one
``trajview/StatelessCartPole-v1`` step for a single call, a 64-env ``SyncVectorEnv`` step for ``act_many``). A
call right after other work runs with colder caches than one in a tight loop: the model alone then takes
longer too, and the comparison is the one a user's loop sees.

    python bench/act_latency.py               # 5 rounds of 400 calls
    python bench/act_latency.py --env-step    # the same, an env step before each call
    python bench/act_latency.py --quick       # a smoke run (timings meaningless)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import trajview as tv

EPISODES = 64
EPISODE_LEN = 200
OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)
MODELS = ("framestack", "lstm")
#: The goal (issue 26): the runner's median per call at most this factor of the model's on prebuilt inputs.
GOAL = 1.2


def make_policy(model: str) -> Any:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    return tv.PPOPolicy(OBS_SPACE, ACT_SPACE, {"model": model})


class Case:
    """One model, ``n`` rows per call: the runner's call and the two baselines on the runner's own inputs."""

    def __init__(self, model: str, n: int, calls: int, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.n = n
        self.policy = make_policy(model)
        rng = np.random.default_rng(seed)
        self.obs = rng.uniform(-1, 1, (calls, n, 4)).astype(np.float32)
        self.rewards = rng.uniform(0, 1, (calls, n))
        self.t = 0
        if n == 1:
            self.runner = None
        else:
            self.runner = tv.PolicyRunner(self.policy, max_episodes=n, explore=False)
            self.keys = list(range(n))
        # The baselines' inputs: what the runner built for a call in mid-episode (captured once).
        inner = self.policy.compute_actions_from_input_dict
        captured: list = []

        def capture(d: Any, **kw: Any) -> Any:
            captured.append(d)
            return inner(d, **kw)

        self.policy.compute_actions_from_input_dict = capture
        for _ in range(5):
            self.act(0)
        del self.policy.compute_actions_from_input_dict
        self.inputs = captured[-1]
        self.tensors = self.policy._to_torch(self.inputs)
        self.t = 0

    def act(self, i: int) -> Any:
        """The runner's call (the implicit episode of compute_single_action for one row)."""
        start = self.t % EPISODE_LEN == 0
        self.t += 1
        if self.runner is None:
            return self.policy.compute_single_action(self.obs[i, 0], prev_reward=None if start else self.rewards[i, 0],
                                                     explore=False, episode_start=start)[0]
        return self.runner.act_many(self.obs[i], self.keys, rewards=self.rewards[i], explore=False,
                                    episode_start=np.full(self.n, start))

    def policy_call(self, i: int) -> Any:
        return self.policy.compute_actions_from_input_dict(self.inputs, explore=False)[0]

    def model_call(self, i: int) -> Any:
        with self.torch.inference_mode():
            return self.policy.action_sampler(self.tensors, False)[0]


def env_stepper(n: int) -> Any:
    """A function that steps ``n`` StatelessCartPole envs once (resetting those that ended): the work an acting
    loop does between two calls (`--env-step`)."""
    if n == 1:
        env = gym.make("trajview/StatelessCartPole-v1")
        env.reset(seed=0)

        def step() -> None:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()

        return step
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("trajview/StatelessCartPole-v1") for _ in range(n)])
    envs.reset(seed=0)
    return lambda: envs.step(envs.action_space.sample())  # (the vector env resets ended envs itself)


def measure(model: str, n: int, rounds: int = 5, calls: int = 400, env_step: bool = False) -> dict[str, list[float]]:
    """Per-call seconds of ``runner`` / ``policy`` / ``model_only`` calls, alternating rounds of ``calls`` calls;
    with ``env_step``, an untimed step of ``n`` envs before each call."""
    case = Case(model, n, calls)
    out: dict[str, list[float]] = {"runner": [], "policy": [], "model_only": []}
    fns = {"runner": case.act, "policy": case.policy_call, "model_only": case.model_call}
    between = env_stepper(n) if env_step else None
    clock = time.perf_counter
    for _ in range(rounds):
        for name, fn in fns.items():
            samples = out[name]
            for i in range(calls):
                if between is not None:
                    between()
                t0 = clock()
                fn(i)
                samples.append(clock() - t0)
    return out


def summary(samples: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) in microseconds."""
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return statistics.median(samples) * 1e6, q[0] * 1e6, q[2] * 1e6


def run(rounds: int, calls: int, env_step: bool = False) -> list[dict[str, Any]]:
    rows = []
    for model in MODELS:
        for n, what in ((1, "compute_single_action"), (EPISODES, f"act_many x{EPISODES}")):
            m = measure(model, n, rounds, calls, env_step)
            s = {k: summary(v) for k, v in m.items()}
            rows.append({"model": model, "call": what, **s,
                         "over_policy": s["runner"][0] / s["policy"][0] - 1,
                         "over_model": s["runner"][0] / s["model_only"][0] - 1})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=400, help="calls per round and variant")
    ap.add_argument("--quick", action="store_true", help="1 round of 20 calls (a smoke run)")
    ap.add_argument("--env-step", action="store_true", help="an untimed env step before each call (see above)")
    args = ap.parse_args()
    rounds, calls = (1, 20) if args.quick else (args.rounds, args.calls)
    rows = run(rounds, calls, args.env_step)

    def fmt(s: tuple[float, float, float]) -> str:
        return f"{s[0]:8.1f} ({s[1]:.1f}-{s[2]:.1f})"

    print(f"per-call microseconds, median (25th-75th percentile); {rounds} rounds x {calls} calls, 1 torch thread"
          f"{'; an untimed env step before each call' if args.env_step else ''}\n")
    print("| model | call | runner | policy on prebuilt inputs | model on prebuilt tensors | runner over policy "
          "| runner over model |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['call']} | {fmt(r['runner'])} | {fmt(r['policy'])} | {fmt(r['model_only'])} | "
              f"{r['over_policy']:+.0%} | {r['over_model']:+.0%} |")
    met = [r["over_model"] <= GOAL - 1 for r in rows]
    print(f"\ngoal: runner at most {GOAL - 1:.0%} over the model on prebuilt tensors in every row: "
          f"{'met' if all(met) else 'not met'} ({sum(met)} of {len(met)} rows)")


if __name__ == "__main__":
    main()
