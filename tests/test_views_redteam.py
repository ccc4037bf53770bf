"""Trajectory-view cases a red team found against RLlib's semantics and the contract (each failed before its fix):
a ``padding="reset"`` view of ``state_out_i`` reads the initial state before the episode's start; a per-step
``state_in_0`` next to a per-sequence view stays per-step when postprocessing adds a column to a one-step
segment."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import trajview as tv
from trajview.views.sample_batch import SampleBatch

VR = tv.ViewRequirement
INIT = np.array([-7.0, -9.0], np.float32)
BOX = gym.spaces.Box(-1e9, 1e9, (2,), np.float32)


class Env(gym.Env):
    """obs (episode, t); episodes of ``lengths`` steps in turn."""

    observation_space, action_space = BOX, gym.spaces.Discrete(2)

    def __init__(self, lengths=(3,)):
        self.lengths, self.k = lengths, -1

    def reset(self, *, seed=None, options=None):
        self.k += 1
        self.t = 0
        return np.array([self.k, 0], np.float32), {}

    def step(self, a):
        self.t += 1
        return np.array([self.k, self.t], np.float32), 1.0, self.t >= self.lengths[self.k % len(self.lengths)], False, {}


@pytest.mark.parametrize("for_actions", [False, True])
def test_a_reset_padded_view_of_state_out_reads_the_initial_state(for_actions):
    class P(tv.Policy):
        def __init__(self, o, a, config=None):
            super().__init__(o, a, config)
            self.view_requirements["state_in_0"] = VR("state_out_0", shift=-1, padding="reset",
                                                      used_for_compute_actions=for_actions)
            self.seen = []

        def get_initial_state(self):
            return [INIT.copy()]

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            if for_actions:
                self.seen.append(np.array(d["state_in_0"]))
            return np.zeros(len(d["obs"]), np.int64), [np.asarray(d["obs"], np.float32) + 0.5], {}

        def loss(self, b):
            b["state_in_0"]

    worker = tv.RolloutWorker(lambda c: Env(), P, rollout_fragment_length=3)
    b = worker.sample()
    assert b["t"].tolist() == [0, 1, 2]
    assert b["state_in_0"].tolist() == [INIT.tolist(), [0.5, 0.5], [0.5, 1.5]]
    if for_actions:  # the initial state is known before the first action: the input dict reads it too
        assert [s.tolist() for s in worker.policy_map["default_policy"].seen[-3:]] == b["state_in_0"][:, None].tolist()


def test_a_per_step_state_in_stays_per_step_when_a_one_step_segment_gets_a_column():
    class P(tv.Policy):
        def __init__(self, o, a, config=None):
            super().__init__(o, a, config)
            self.view_requirements["seq_state"] = VR("state_out_0", shift=-1, batch_repeat_value=2,
                                                     used_for_compute_actions=False)

        def get_initial_state(self):
            return [np.zeros(2, np.float32)]

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            d["state_in_0"]
            return np.zeros(len(d["obs"]), np.int64), [np.asarray(d["obs"], np.float32) + 0.5], {}

        def postprocess_trajectory(self, b, other_agent_batches=None, episode=None):
            b["advantages"] = np.asarray(b["rewards"], np.float32)  # (as GAE adds its columns)
            return b

        def loss(self, b):
            b["state_in_0"], b["seq_state"], b["advantages"]

    b = tv.RolloutWorker(lambda c: Env((1, 2)), P, batch_mode="complete_episodes",
                         rollout_fragment_length=2).sample()
    assert "state_in_0" not in b.seq_keys and "seq_state" in b.seq_keys
    assert len(b["state_in_0"]) == b.count == len(b["advantages"])


def test_setting_a_column_keeps_the_kind_of_the_batchs_columns():
    one = np.zeros((1, 2), np.float32)
    b = SampleBatch._from_columns({"seq_lens": np.array([1]), "state_in_0": one, "seq_state": one,
                                   "obs": one}, 1, frozenset({"seq_lens", "seq_state"}), frozenset({"seq_state"}))
    b["advantages"] = np.zeros(1, np.float32)
    assert b.seq_keys == {"seq_lens", "seq_state"}


class Counted(gym.Env):
    """obs (100 * i + k, t): env ``i``'s ``k``-th episode, ``length`` steps long."""

    observation_space, action_space = BOX, gym.spaces.Discrete(2)

    def __init__(self, i, length):
        self.i, self.length, self.k = i, length, -1

    def reset(self, *, seed=None, options=None):
        self.k += 1
        self.t = 0
        return np.array([100 * self.i + self.k, 0], np.float32), {}

    def step(self, a):
        self.t += 1
        return np.array([100 * self.i + self.k, self.t], np.float32), 1.0, self.t >= self.length, False, {}


class Zeros(tv.Policy):
    keep_views = {"obs", "new_obs"}

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["obs"]), np.int64), [], {}


@pytest.mark.parametrize("mode", ["NEXT_STEP", "SAME_STEP"])
def test_the_horizon_resets_the_env_it_cuts_in_either_autoreset_mode(mode):
    """Env 0 ends its episodes at step 2, the step the horizon cuts env 1's 5-step episodes: env 1 is reset (a
    SAME_STEP VectorEnv reset only env 0 itself), so its next trajectory begins at a first observation."""
    make = lambda c: gym.vector.SyncVectorEnv([lambda: Counted(0, 2), lambda: Counted(1, 5)],  # noqa: E731
                                              autoreset_mode=getattr(gym.vector.AutoresetMode, mode))
    b = tv.RolloutWorker(make, Zeros, rollout_fragment_length=6, horizon=2).sample()
    env1 = b["env_id"] == 1
    assert b["obs"][env1].tolist() == [[100, 0], [100, 1], [101, 0], [101, 1], [102, 0], [102, 1]]
    assert b["truncateds"][env1].tolist() == [False, True] * 3
    env0 = b["env_id"] == 0
    assert b["obs"][env0].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]
