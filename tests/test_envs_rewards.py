"""The rewards' dtype rule, one for every adapter and observation space, against a small reference of the rule.

Reference (docs/contract.md, Columns): batches carry float32 rewards while
every reward the env returned so far was a numpy float32 (or float16), else
float64; the values are the env's exactly. Before one step loop served every
space, an env with numpy float32 rewards gave float32 batches with a ``Box``
observation and float64 ones with a ``Dict`` one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.envs import GymEnvList
from trajview.views.nest import Nest

SETTINGS = dict(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

OBS_SPACES = {
    "box": spaces.Box(-1.0, 1.0, (3,), np.float32),
    "discrete": spaces.Discrete(4),
    "dict": spaces.Dict(a=spaces.Box(-1.0, 1.0, (2,), np.float32), b=spaces.Discrete(3)),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.Dict(c=spaces.Box(0, 9, (2, 2), np.int64)))),
}

#: Reward kinds an env may return, each a function of a float.
KINDS = {
    "float": float,
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int": lambda v: int(round(v)),
}


def reference_dtype(returned: list) -> np.dtype:
    """The rule: float32 iff at least one reward came and every one was a numpy float32 / float16."""
    f32 = bool(returned) and all(type(r) in (np.float32, np.float16) for r in returned)
    return np.dtype(np.float32 if f32 else np.float64)


class RewardEnv(gym.Env):
    """Returns the rewards of ``script`` in turn (kind, value), logging each; episodes of 3 steps."""

    action_space = spaces.Discrete(2)

    def __init__(self, space, script, log):
        self.observation_space = space
        self.script, self.log, self.k, self.t = script, log, 0, 0
        self.observation_space.seed(len(log))

    def reset(self, seed=None, options=None):
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        kind, value = self.script[self.k % len(self.script)]
        self.k += 1
        self.t += 1
        r = KINDS[kind](value)
        self.log.append(r)
        return self.observation_space.sample(), r, self.t >= 3, False, {}


scripts = st.lists(
    st.tuples(st.sampled_from(sorted(KINDS)), st.floats(-1e3, 1e3, allow_nan=False, width=16)), min_size=1, max_size=4
)


@settings(**SETTINGS)
@given(
    space=st.sampled_from(sorted(OBS_SPACES)),
    env_scripts=st.lists(scripts, min_size=1, max_size=3),
    steps=st.integers(1, 6),
    mode=st.sampled_from(["all", "isolate", "some"]),
)
def test_adapter_reward_dtype_is_the_rule_for_every_space(space, env_scripts, steps, mode):
    log: list = []
    envs = [RewardEnv(OBS_SPACES[space], s, log) for s in env_scripts]
    adapter = GymEnvList(envs)
    adapter.reset(seed=0)
    n = len(envs)
    for step in range(steps):
        ids = np.arange(n) if mode != "some" else np.arange(step % n, n)
        before = len(log)
        out = adapter.step(
            np.zeros(len(ids), np.int64), isolate_failures=mode == "isolate", env_ids=ids if mode == "some" else None
        )
        returned = log[before:]
        assert out.rewards.dtype == np.float64
        assert [float(r) for r in returned] == out.rewards[: len(ids)].tolist()  # exactly the env's values
        assert adapter.reward_dtype == reference_dtype(log), (space, [type(r).__name__ for r in log])
        for i, d in zip(ids, (out.terminateds | out.truncateds).tolist()):
            if d:
                adapter.reset_envs([int(i)])


class ReadsRewards(tv.Policy):
    """Zero actions; reads ``prev_rewards`` at action time and records its dtype."""

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["prev_rewards"] = tv.ViewRequirement("rewards", shift=-1)
        self.nest = Nest.from_space(obs_space)
        self.input_dtypes: list = []

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        self.input_dtypes.append(np.asarray(d["prev_rewards"]).dtype)
        n = len(self.nest.leaf_values(d["obs"], "obs")[0])
        return np.zeros(n, np.int64), [], {}


@settings(**SETTINGS)
@given(
    space=st.sampled_from(sorted(OBS_SPACES)),
    kind=st.sampled_from(sorted(KINDS)),
    other=st.none() | st.sampled_from(sorted(KINDS)),
    num_envs=st.integers(1, 3),
)
def test_batch_reward_dtype_is_the_rule_for_every_space(space, kind, other, num_envs):
    """Worker batches (and ``prev_rewards``) carry the rule's dtype whatever the observation space; with
    ``other``, the env's last reward of its script is of another kind."""
    log: list = []
    script = [(kind, 1.5), (kind, -2.25)] + ([(other, 3.0)] if other else [])
    w = tv.RolloutWorker(lambda cfg: RewardEnv(OBS_SPACES[space], script, log), ReadsRewards, num_envs=num_envs,
                         rollout_fragment_length=4)
    batch = w.sample()
    want = reference_dtype(log)
    assert batch["rewards"].dtype == want and batch["prev_rewards"].dtype == want
    assert sorted(batch["rewards"].tolist()) == sorted(want.type(r).item() for r in log)
    # Every input dict after the first step: the dtype the rule gave at that step.
    assert w.policy.input_dtypes[-1] == want


@pytest.mark.parametrize(
    "dtype, want",
    [(np.float32, np.float32), (np.float16, np.float32), (np.float64, np.float64), (np.int64, np.float64)],
)
def test_vector_env_rewards_follow_the_same_rule(dtype, want):
    class V(gym.vector.SyncVectorEnv):
        def step(self, a):
            o, r, te, tr, i = super().step(a)
            return o, r.astype(dtype), te, tr, i

    w = tv.RolloutWorker(lambda c: V([lambda: gym.make("CartPole-v1")] * 2), ReadsRewards, rollout_fragment_length=5)
    assert w.sample()["rewards"].dtype == want


class TwoAgentRewardEnv:
    """A PettingZoo-style parallel env of two agents, each given the rewards of its ``script`` in turn."""

    possible_agents = ["x", "y"]

    def __init__(self, scripts, log):
        self.scripts, self.log, self.k = scripts, log, 0

    def observation_space(self, agent):
        return spaces.Discrete(2)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return {a: 0 for a in self.possible_agents}, {a: {} for a in self.possible_agents}

    def step(self, actions):
        rew = {}
        for a, script in zip(self.possible_agents, self.scripts):
            kind, value = script[self.k % len(script)]
            rew[a] = KINDS[kind](value)
            self.log.append(rew[a])
        self.k += 1
        keys = self.possible_agents
        return {a: 0 for a in keys}, rew, {a: False for a in keys}, {a: False for a in keys}, {a: {} for a in keys}


@settings(**SETTINGS)
@given(agent_scripts=st.lists(scripts, min_size=2, max_size=2), num_envs=st.integers(1, 2), steps=st.integers(1, 5))
def test_multi_agent_adapters_note_rewards_by_the_same_rule(agent_scripts, num_envs, steps):
    from trajview.envs import MultiAgentDictEnv, PettingZooParallelEnv

    for cls in (PettingZooParallelEnv, MultiAgentDictEnv):
        log: list = []
        adapter = cls([TwoAgentRewardEnv(agent_scripts, log) for _ in range(num_envs)])
        for i in range(num_envs):
            adapter.reset(i)
        for _ in range(steps):
            adapter.step([{"x": 0, "y": 0}] * num_envs)
            assert adapter.reward_dtype == reference_dtype(log)
