#!/usr/bin/env python3
"""Multi-agent collection overhead per agent step: trajview's RolloutWorker next to RLlib's old-stack one.

    .venv-compare/bin/python bench/ma_compare.py          # RLlib in the compare venv (bench/requirements-compare.txt)
    python bench/ma_compare.py --no-rllib                 # trajview only

Workload: 2 policies x 4 agents x 16 envs. Agents a0..a3; a0, a1 map to
policy p0 and a2, a3 to p1. Agents step on alternate turns: on even env steps
a0 and a2 are observed (and act), on odd ones a1 and a3; every agent gets a
reward every step (those waiting add it up on their next step). Obs float32[8]
(a constant row), Discrete(4) actions, 100-step episodes (``"__all__"``),
constant policies (action 0). One env step therefore holds 2 agent steps per
env, 32 per worker step.

Overhead per agent step = (the worker's median time per sample - the bare
loop's median time for the same env steps) / agent steps, where the bare loop
steps the same envs with the same constant actions and stores nothing. Rounds
alternate between the systems. Prints a table (and --json PATH writes it).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

N_ENVS = 16
N_AGENTS = 4
EP_LEN = 100


def env_class(base: type) -> type:
    """The turn-based env on ``base`` (trajview's MultiAgentEnv, or RLlib's)."""

    class AlternateTurns(base):  # type: ignore[misc, valid-type]
        def __init__(self, config=None):
            super().__init__()
            self.possible_agents = [f"a{k}" for k in range(N_AGENTS)]
            self.agents = list(self.possible_agents)
            self._agent_ids = set(self.possible_agents)
            sp = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
            self.observation_spaces = {a: sp for a in self.possible_agents}
            self.action_spaces = {a: gym.spaces.Discrete(4) for a in self.possible_agents}
            self.observation_space = gym.spaces.Dict(self.observation_spaces)
            self.action_space = gym.spaces.Dict(self.action_spaces)
            self.o = np.zeros(8, np.float32)
            self.turn = [[a for k, a in enumerate(self.possible_agents) if k % 2 == p] for p in (0, 1)]

        def get_observation_space(self, agent_id):
            return self.observation_spaces[agent_id]

        def get_action_space(self, agent_id):
            return self.action_spaces[agent_id]

        def reset(self, *, seed=None, options=None):
            self.t = 0
            o = self.o
            return {a: o for a in self.turn[0]}, {}

        def step(self, actions):
            self.t += 1
            o = self.o
            done = self.t >= EP_LEN
            obs = {a: o for a in (self.possible_agents if done else self.turn[self.t % 2])}
            rew = {a: 1.0 for a in self.possible_agents}
            return obs, rew, {"__all__": done}, {"__all__": False}, {}

    return AlternateTurns


def mapping(agent_id, *args, **kwargs):
    return "p0" if agent_id in ("a0", "a1") else "p1"


def make_trajview(fragment: int):
    import trajview as tv

    Env = env_class(tv.envs.MultiAgentEnv)

    class Constant(tv.Policy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            return np.zeros(len(d["obs"]), np.int64), [], {}

        def loss(self, b):  # trains on obs, actions, rewards, new_obs (RLlib's batches hold them too)
            return b["obs"], b["actions"], b["rewards"], b["new_obs"]

    w = tv.RolloutWorker(lambda c: Env(), {"p0": Constant, "p1": Constant}, num_envs=N_ENVS,
                         rollout_fragment_length=fragment, policy_mapping_fn=mapping)

    def sample():
        b = w.sample()
        return b.env_steps(), b.agent_steps()

    return sample


def make_rllib(fragment: int):
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.rllib.evaluation.rollout_worker import RolloutWorker
    from ray.rllib.policy.policy import Policy, PolicySpec

    Env = env_class(MultiAgentEnv)

    class Constant(Policy):
        def __init__(self, obs_space, act_space, config):
            super().__init__(obs_space, act_space, config)
            for k in ("prev_actions", "prev_rewards", "infos"):  # trajview's worker prunes these
                self.view_requirements.pop(k, None)

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
            return np.zeros(len(input_dict["obs"]), np.int64), [], {}

        def compute_actions(self, obs_batch, *a, **k):
            return np.zeros(len(obs_batch), np.int64), [], {}

        def get_weights(self):
            return {}

        def set_weights(self, weights):
            pass

    env = Env()
    sp = (env.observation_spaces["a0"], env.action_spaces["a0"])
    cfg = (AlgorithmConfig()
           .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
           .env_runners(num_envs_per_env_runner=N_ENVS, rollout_fragment_length=fragment,
                        batch_mode="truncate_episodes")
           .multi_agent(policies={"p0": PolicySpec(Constant, *sp, {}), "p1": PolicySpec(Constant, *sp, {})},
                        policy_mapping_fn=mapping, count_steps_by="env_steps"))
    w = RolloutWorker(env_creator=lambda c: Env(c), config=cfg)

    def sample():
        b = w.sample()
        return b.env_steps(), b.agent_steps()

    return sample


def make_bare(fragment: int):
    """The same envs and constant actions, nothing stored: what any collector must at least spend."""
    import trajview as tv

    Env = env_class(tv.envs.MultiAgentEnv)
    envs = [Env() for _ in range(N_ENVS)]
    obs = [e.reset()[0] for e in envs]

    def sample():
        agent_steps = 0
        for _ in range(fragment):
            for i, e in enumerate(envs):
                acts = {a: 0 for a in obs[i]}
                agent_steps += len(acts)
                o, r, te, tr, info = e.step(acts)
                obs[i] = e.reset()[0] if te["__all__"] or tr["__all__"] else o
        return fragment * N_ENVS, agent_steps

    return sample


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fragment", type=int, default=100, help="env steps per env per sample (default 100)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-rllib", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    systems = {"bare loop": make_bare(args.fragment), "trajview": make_trajview(args.fragment)}
    if not args.no_rllib:
        systems["RLlib old stack"] = make_rllib(args.fragment)
    times: dict[str, list[float]] = {k: [] for k in systems}
    counts: dict[str, tuple[int, int]] = {}
    for s in systems.values():  # warm-up (and the pruning pass)
        s()
        s()
    for _ in range(args.rounds):
        for name, s in systems.items():
            t0 = time.perf_counter()
            counts[name] = s()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    bare_per_agent = med["bare loop"] / counts["bare loop"][1]
    rows = []
    for name in systems:
        env_steps, agent_steps = counts[name]
        per_agent = med[name] / agent_steps
        overhead = per_agent - bare_per_agent if name != "bare loop" else 0.0
        rows.append({"system": name, "env_steps": env_steps, "agent_steps": agent_steps,
                     "median_s_per_sample": med[name], "us_per_agent_step": per_agent * 1e6,
                     "overhead_us_per_agent_step": overhead * 1e6})
    print(f"multi-agent: 2 policies x {N_AGENTS} agents x {N_ENVS} envs, alternate turns, fragment {args.fragment}, "
          f"{args.rounds} rounds (median); python {platform.python_version()}")
    print(f"| system | env steps | agent steps | s per sample | us per agent step | overhead us per agent step |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['env_steps']} | {r['agent_steps']} | {r['median_s_per_sample']:.4f} | "
              f"{r['us_per_agent_step']:.2f} | {r['overhead_us_per_agent_step']:.2f} |")
    by = {r["system"]: r for r in rows}
    if "RLlib old stack" in by and by["trajview"]["overhead_us_per_agent_step"] > 0:
        ratio = by["RLlib old stack"]["overhead_us_per_agent_step"] / by["trajview"]["overhead_us_per_agent_step"]
        print(f"RLlib old stack / trajview collection overhead per agent step: {ratio:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
