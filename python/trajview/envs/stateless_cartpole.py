"""Environments for trajview's examples: `StatelessCartPole` (CartPole-v1 without the velocities).

Importing this module registers, with gymnasium:

* ``"trajview/StatelessCartPole-v1"``: `StatelessCartPole`, 500-step time limit
  (as CartPole-v1).
* ``"trajview/RepeatPrevious-v0"``: `RepeatPreviousEnv`, a tiny memory task for
  tests: reward 1 when the action equals the previous observation's bit.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["StatelessCartPole", "RepeatPreviousEnv", "STATELESS_CARTPOLE_ID", "REPEAT_PREVIOUS_ID", "make_env"]

STATELESS_CARTPOLE_ID = "trajview/StatelessCartPole-v1"
REPEAT_PREVIOUS_ID = "trajview/RepeatPrevious-v0"


class StatelessCartPole(CartPoleEnv):
    """gymnasium's CartPole with the two velocities removed: observation ``[x, theta]`` (float32).

    The cart velocity and the pole's angular velocity are not observable from
    one observation; a policy has to infer them from several (RLlib's
    ``StatelessCartPole``). Dynamics, rewards and termination are CartPole's.
    Make it with ``gym.make("trajview/StatelessCartPole-v1")`` for
    CartPole-v1's 500-step time limit.
    """

    _KEEP = np.array([0, 2])

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode=render_mode, **kwargs)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        return np.asarray(obs, dtype=np.float32)[self._KEEP], reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return np.asarray(obs, dtype=np.float32)[self._KEEP], info


class RepeatPreviousEnv(gym.Env):
    """A memory task small enough for unit tests.

    Each step shows a random bit (observation ``[bit]``, float32); the reward
    is 1 when the action equals the bit shown one step *before* (0 at t = 0,
    where there is none). A memoryless policy earns 0.5 per step on average;
    one that reads the previous observation (a frame stack, an LSTM or an
    attention memory) earns 1. Episodes last ``length`` steps (truncated).
    """

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 20) -> None:
        self.length = int(length)
        self._bits = np.zeros(2, np.int64)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._bits[1]], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._bits[:] = (0, self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: Any):
        reward = float(self._t > 0 and int(action) == self._bits[0])
        self._t += 1
        self._bits[:] = [self._bits[1], self.np_random.integers(2)]
        return self._obs(), reward, False, self._t >= self.length, {}


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make(env_id)``; trajview's ids work once this module is imported (it is, by ``import trajview``)."""
    return gym.make(env_id, **kwargs)


def _register() -> None:
    if STATELESS_CARTPOLE_ID not in gym.registry:
        gym.register(
            id=STATELESS_CARTPOLE_ID,
            entry_point="trajview.envs:StatelessCartPole",
            max_episode_steps=500,
            reward_threshold=475.0,
        )
    if REPEAT_PREVIOUS_ID not in gym.registry:
        gym.register(id=REPEAT_PREVIOUS_ID, entry_point="trajview.envs:RepeatPreviousEnv")


_register()
