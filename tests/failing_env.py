"""An env for the worker-failure tests of `trajview train` (``--env-module failing_env``): episodes of 20 steps,
reward 1 a step, and one failure when a process's envs reach ``TV_FAIL_AT`` steps in all.

``TV_FAIL_HOW``: ``raise`` (the env raises), ``exit`` (its process exits with code 3) or ``hang`` (it sleeps).
``TV_FAIL_ONCE``: a path; only the first process to get there fails (it creates the file), so a replacement
worker goes on. Unset: every process fails when it gets there. Workers read these from the environment they
inherit.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np


class FailingEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    #: Steps taken by this process's envs (a forked worker starts from the trainer's, which steps none).
    steps_in_process = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        FailingEnv.steps_in_process += 1
        self.t += 1
        if FailingEnv.steps_in_process == int(os.environ.get("TV_FAIL_AT", "0")) and self._first():
            how = os.environ["TV_FAIL_HOW"]
            if how == "raise":
                raise RuntimeError("FailingEnv: the env failed on purpose")
            if how == "exit":
                os._exit(3)
            if how == "hang":
                time.sleep(3600)
        return np.full(2, self.t / 20, np.float32), 1.0, self.t >= 20, False, {}

    @staticmethod
    def _first() -> bool:
        once = os.environ.get("TV_FAIL_ONCE")
        if not once:
            return True
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


if "tvtest/Failing-v0" not in gym.registry:
    gym.register("tvtest/Failing-v0", entry_point=FailingEnv)
