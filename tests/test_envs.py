"""trajview.envs: Stateless CartPole is CartPole-v1 without the velocities; the memory task for tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import trajview as tv
from trajview.envs import REPEAT_PREVIOUS_ID, STATELESS_CARTPOLE_ID, RepeatPreviousEnv, StatelessCartPole


def test_registered_ids():
    assert STATELESS_CARTPOLE_ID == "trajview/StatelessCartPole-v1"
    env = gym.make(STATELESS_CARTPOLE_ID)
    assert isinstance(env.unwrapped, StatelessCartPole)
    assert env.spec.max_episode_steps == 500
    assert env.observation_space.shape == (2,) and env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(2)
    assert isinstance(gym.make(REPEAT_PREVIOUS_ID).unwrapped, RepeatPreviousEnv)
    assert tv.envs.StatelessCartPole is StatelessCartPole


def test_observation_is_cartpole_without_velocities():
    full, stateless = gym.make("CartPole-v1"), gym.make(STATELESS_CARTPOLE_ID)
    o_full, _ = full.reset(seed=3)
    o, _ = stateless.reset(seed=3)
    np.testing.assert_array_equal(o, o_full[[0, 2]])
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        a = int(rng.integers(2))
        o_full, r_full, te_full, tr_full, _ = full.step(a)
        o, r, te, tr, _ = stateless.step(a)
        steps += 1
        np.testing.assert_array_equal(o, o_full[[0, 2]])
        assert o.dtype == np.float32 and stateless.observation_space.contains(o) or te
        assert (r, te, tr) == (r_full, te_full, tr_full)
        if te or tr:
            break
    assert steps > 1


def test_repeat_previous_rewards_the_previous_bit():
    env = RepeatPreviousEnv(length=30)
    obs, _ = env.reset(seed=1)
    prev = None
    total = 0.0
    for t in range(30):
        a = int(prev) if prev is not None else 0
        new_obs, r, te, tr, _ = env.step(a)
        assert r == (0.0 if t == 0 else 1.0)
        total += r
        assert not te and tr == (t == 29)
        prev = obs[0]
        obs = new_obs
    assert total == 29.0
    # Answering with the *current* bit is right only by chance.
    obs, _ = env.reset(seed=2)
    rewards = []
    for t in range(30):
        obs, r, *_ = env.step(int(obs[0]))
        rewards.append(r)
    assert 0 < sum(rewards) < 29
