"""Scripted envs and policies for the rollout tests: every value says where it came from."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import trajview as tv

UID_STRIDE = 10_000


class ScriptedEnv(gym.Env):
    """obs float32[2] = (episode uid, t); reward t + 1 after step t; ends after the scripted length.

    The uid is ``env_index * UID_STRIDE + k`` for the env's k-th episode, so a
    batch row says which episode and step it holds. Episode k lasts
    ``lengths[k % len(lengths)]`` steps and then terminates (or truncates, if
    ``truncate=True``).
    """

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(5)

    def __init__(self, lengths=(10,), env_index=0, truncate=False):
        self.lengths = list(lengths)
        self.env_index = env_index
        self.truncate = truncate
        self.k = -1
        self.t = 0
        self.actions: list[tuple[int, int, int]] = []  # (uid, t, action) as the env saw them

    @property
    def uid(self) -> int:
        return self.env_index * UID_STRIDE + self.k

    def _obs(self) -> np.ndarray:
        return np.array([self.uid, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k += 1
        self.t = 0
        return self._obs(), {"uid": self.uid, "reset": True}

    def step(self, action):
        self.actions.append((self.uid, self.t, int(action)))
        self.t += 1
        end = self.t >= self.lengths[self.k % len(self.lengths)]
        return self._obs(), float(self.t), end and not self.truncate, end and self.truncate, {"uid": self.uid, "t": self.t}


class FailingEnv(ScriptedEnv):
    """A ScriptedEnv whose step raises at t = 2 (for error-propagation tests)."""

    def step(self, action):
        if self.t == 2:
            raise RuntimeError("the env broke at t=2")
        return super().step(action)


def assert_failure_reported_then_stopped(ws) -> None:
    """``ws``: a WorkerSet over FailingEnvs. Its sample() names worker 1 and the env's error; stop() ends it."""
    try:
        with pytest.raises(RuntimeError, match=r"rollout worker 1 failed:(.|\n)*the env broke at t=2"):
            ws.sample()
    finally:
        ws.stop()
    with pytest.raises(RuntimeError, match="WorkerSet is stopped"):
        ws.sample()


class ObsActionPolicy(tv.Policy):
    """Action = (uid + t) % 5 of the observation: deterministic, so tests can predict it."""

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        obs = np.asarray(input_dict["obs"])
        return (obs[:, 0].astype(np.int64) + obs[:, 1].astype(np.int64)) % 5, [], {}


def expected_action(uid: float, t: float) -> int:
    return (int(uid) + int(t)) % 5


def make_envs(num_envs, lengths=(10,), truncate=False):
    return [ScriptedEnv(lengths, i, truncate) for i in range(num_envs)]


def creator_from(envs):
    """An env_creator that hands out the given envs one per call."""
    it = iter(envs)
    return lambda cfg: next(it)


class FaultOnFileEnv(ScriptedEnv):
    """A ScriptedEnv whose step raises while the file ``<fault_dir>/fail-<this process's pid>`` exists.

    A test makes one worker process's env fail (and not its replacement's, which runs in a new process) by
    creating that worker's file.
    """

    def __init__(self, fault_dir, lengths=(10,), env_index=0):
        super().__init__(lengths, env_index)
        self.fault_dir = str(fault_dir)

    def step(self, action):
        import os

        if os.path.exists(os.path.join(self.fault_dir, f"fail-{os.getpid()}")):
            raise RuntimeError(f"injected fault in process {os.getpid()}")
        return super().step(action)


class CounterPolicy(tv.Policy):
    """Weights ``{"count": int64[1]}`` (initially 0); action = count % 5, so a batch shows the weights it was
    sampled with."""

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.count = 0

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.full(len(input_dict["obs"]), self.count % 5, np.int64), [], {}

    def get_weights(self):
        return {"count": np.array([self.count], np.int64)}

    def set_weights(self, weights):
        self.count = int(weights["count"][0])


def pid_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (absent, or a zombie that its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")
