"""RolloutWorker.sample() throughput, side by side with the same loop written plainly.

Workload: a trivial env (obs float32[4], reward 1, terminates every
``EPISODE_LEN`` steps; its step costs almost nothing) and a constant policy
(action 0 for every row). ``num_envs`` single envs are stepped together. Per
env-step times; the worker's own cost is ``worker - plain`` (the plain loop
does the same env steps and policy calls, appends to lists and np.stacks the
columns at the end: what any collector must at least do).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import trajview as tv

L = 200  # rollout_fragment_length
EPISODE_LEN = 50
NUM_ENVS = (1, 8, 64)


class TrivialEnv(gym.Env):
    """obs float32[4] = (t, 0, 0, 0); reward 1; terminates after EPISODE_LEN steps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self._t = 0
        self._obs = [np.array([t, 0, 0, 0], np.float32) for t in range(EPISODE_LEN + 1)]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs[0], {}

    def step(self, action):
        self._t += 1
        return self._obs[self._t], 1.0, self._t >= EPISODE_LEN, False, {}


class ConstantPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {}

    def loss(self, train_batch):
        # A learner that reads the usual PPO inputs: prunes prev_*, infos and env_id.
        return [train_batch[k] for k in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds")]


def plain_loop(envs, policy, steps):
    """env.step + list appends + np.stack: the bare env + policy loop."""
    obs_l, new_obs_l, act_l, rew_l, term_l, trunc_l = [], [], [], [], [], []
    obs = np.stack([env.reset()[0] for env in envs])
    for _ in range(steps):
        actions, _, _ = policy.compute_actions_from_input_dict({"obs": obs})
        results = [env.step(a) for env, a in zip(envs, actions.tolist())]
        next_obs = []
        for i, (o, r, te, tr, _info) in enumerate(results):
            obs_l.append(obs[i])
            new_obs_l.append(o)
            act_l.append(actions[i])
            rew_l.append(r)
            term_l.append(te)
            trunc_l.append(tr)
            if te or tr:
                o, _ = envs[i].reset()
            next_obs.append(o)
        obs = np.stack(next_obs)
    return {
        "obs": np.stack(obs_l),
        "new_obs": np.stack(new_obs_l),
        "actions": np.array(act_l),
        "rewards": np.array(rew_l),
        "terminateds": np.array(term_l),
        "truncateds": np.array(trunc_l),
    }


@pytest.mark.parametrize("num_envs", NUM_ENVS)
@pytest.mark.parametrize("impl", ["trajview", "plain"])
def test_sample(benchmark, impl, num_envs):
    benchmark.group = f"worker-B{num_envs}"
    policy = ConstantPolicy(TrivialEnv.observation_space, TrivialEnv.action_space)
    if impl == "trajview":
        worker = tv.RolloutWorker(lambda cfg: TrivialEnv(), policy, num_envs=num_envs, rollout_fragment_length=L)
        worker.sample()  # warm up: pruning pass, store blocks
        batch = benchmark(worker.sample)
        obs, new_obs, t = batch["obs"], batch["new_obs"], batch["t"]
        np.testing.assert_array_equal(obs[:, 0], t)  # obs at t holds t
        np.testing.assert_array_equal(new_obs[:, 0], t + 1)
        np.testing.assert_array_equal(batch["terminateds"], t + 1 == EPISODE_LEN)
        assert "prev_actions" not in batch and "infos" not in batch  # pruned: the loss never reads them
    else:
        envs = [TrivialEnv() for _ in range(num_envs)]
        batch = benchmark(plain_loop, envs, policy, L)
        np.testing.assert_array_equal(batch["new_obs"][:, 0], batch["obs"][:, 0] + 1)
    assert len(batch["obs"]) == L * num_envs
    med = benchmark.stats.stats.median if benchmark.stats is not None else None
    benchmark.extra_info.update(question="worker", impl=impl, num_envs=num_envs, steps=L * num_envs)
    if med is not None:
        benchmark.extra_info["per_env_step_ns"] = med / (L * num_envs) * 1e9
