"""The old gym API (``reset()`` returning the observation alone, ``step()`` returning ``(obs, reward, done, info)``)
gets an error naming the call and what is expected, from every adapter, before anything is stored."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import trajview as tv
from trajview.envs import GymEnvList, GymVectorEnv, MultiAgentDictEnv, PettingZooParallelEnv

OBS_SPACES = {
    # A Box of 2: its observation unpacks into two values, so "obs, info = reset()" alone would pass silently.
    "box2": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "dict": spaces.Dict(a=spaces.Discrete(3), b=spaces.Box(-1.0, 1.0, (2,), np.float32)),
    # A Tuple of 2 leaves: the old reset's observation is itself a pair.
    "tuple2": spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3))),
}

RESET_ERR = re.escape("reset() returned") + ".*" + re.escape("expected (obs, info)")
STEP_ERR = re.escape("step() returned a tuple of 4") + ".*" + re.escape(
    "expected the 5-tuple (obs, reward, terminated, truncated, info)"
)


class OldAPIEnv(gym.Env):
    """gym < 0.26: ``reset()`` returns the observation, ``step()`` the 4-tuple; either one can be old."""

    action_space = spaces.Discrete(2)

    def __init__(self, space, old_reset=True, old_step=True):
        self.observation_space = space
        self.old_reset, self.old_step = old_reset, old_step
        self.observation_space.seed(0)

    def reset(self, seed=None, options=None):
        o = self.observation_space.sample()
        return o if self.old_reset else (o, {})

    def step(self, action):
        o = self.observation_space.sample()
        return (o, 1.0, False, {}) if self.old_step else (o, 1.0, False, False, {})


@pytest.mark.parametrize("space", sorted(OBS_SPACES))
def test_old_reset_names_reset_and_the_expected_pair(space):
    adapter = GymEnvList([OldAPIEnv(OBS_SPACES[space], old_step=False) for _ in range(2)])
    with pytest.raises(ValueError, match="env 0: " + RESET_ERR):
        adapter.reset()
    with pytest.raises(ValueError, match="env 1: " + RESET_ERR):
        adapter.reset_envs([1])


@pytest.mark.parametrize("space", sorted(OBS_SPACES))
@pytest.mark.parametrize("mode", ["all", "some", "isolate"])
def test_old_step_names_step_and_the_expected_5_tuple(space, mode):
    envs = [OldAPIEnv(OBS_SPACES[space], old_reset=False, old_step=i == 1) for i in range(3)]
    adapter = GymEnvList(envs)
    adapter.reset()
    if mode == "isolate":  # the env's error is reported as its own failure, the others step on
        out = adapter.step(np.zeros(3, np.int64), isolate_failures=True)
        assert out.failed.tolist() == [1]
        assert re.search("env 1: " + STEP_ERR, str(out.errors[0]))
        return
    ids = np.array([1, 2]) if mode == "some" else None
    with pytest.raises(ValueError, match="env 1: " + STEP_ERR):
        adapter.step(np.zeros(3 if ids is None else 2, np.int64), env_ids=ids)
    assert adapter.moved_on().tolist() == [1] if mode == "some" else [0, 1]


class ZeroActions(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["eps_id"]), np.int64), [], {}


def test_the_worker_reports_the_old_api_by_call():
    with pytest.raises(ValueError, match=RESET_ERR):
        tv.RolloutWorker(lambda c: OldAPIEnv(OBS_SPACES["box2"], old_step=False), ZeroActions).sample()
    w = tv.RolloutWorker(lambda c: OldAPIEnv(OBS_SPACES["dict"], old_reset=False), ZeroActions)
    with pytest.raises(ValueError, match=STEP_ERR):
        w.sample()


def test_vector_env_old_api():
    class V(gym.vector.SyncVectorEnv):
        old_reset = old_step = False

        def reset(self, **kw):
            o, info = super().reset(**kw)
            return o if self.old_reset else (o, info)

        def step(self, a):
            o, r, te, tr, info = super().step(a)
            return (o, r, te | tr, info) if self.old_step else (o, r, te, tr, info)

    env = V([lambda: gym.make("CartPole-v1")] * 2)
    adapter = GymVectorEnv(env)
    env.old_reset = True
    with pytest.raises(ValueError, match="the VectorEnv: " + RESET_ERR):
        adapter.reset()
    env.old_reset = False
    adapter.reset()
    env.old_step = True
    with pytest.raises(ValueError, match="the VectorEnv: " + STEP_ERR):
        adapter.step(np.zeros(2, np.int64))


class OldMultiAgent:
    """A two-agent env whose reset returns only the observations dict (PettingZoo < 1.22, old RLlib)."""

    possible_agents = ["a", "b"]
    observation_spaces = {a: spaces.Discrete(2) for a in possible_agents}
    action_spaces = {a: spaces.Discrete(2) for a in possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def reset(self, seed=None, options=None):
        return {"a": 0, "b": 1}  # two keys: "obs, infos = reset()" alone would take "a" and "b"

    def step(self, actions):
        return {a: 0 for a in actions}, {a: 0.0 for a in actions}, {a: False for a in actions}, {}


@pytest.mark.parametrize("adapter_cls", [PettingZooParallelEnv, MultiAgentDictEnv])
def test_multi_agent_old_api(adapter_cls):
    adapter = adapter_cls([OldMultiAgent()])
    with pytest.raises(ValueError, match="env 0: " + re.escape("reset() returned one dict value, expected "
                                                                "(observations dict, infos dict)")):
        adapter.reset(0)
    with pytest.raises(ValueError, match="env 0: " + re.escape("step() returned a tuple of 4") + ".*" + re.escape(
            "expected the 5-tuple (observations, rewards, terminations, truncations, infos)")):
        adapter.step([{"a": 0, "b": 1}])
