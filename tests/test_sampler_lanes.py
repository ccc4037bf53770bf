"""The single-agent sampler's reused input arrays (`SingleAgentSampler._lane`, `PolicyRunner`'s `_Lane`): a policy
that reads its inputs in place (`Policy._reused_inputs`) samples exactly what it samples through fresh input dicts,
even when its outputs are its inputs' arrays, changed in place (a state passed through, an action echoed), and
postprocessing reads each episode's last action after the next step's inputs were gathered."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.rollout.worker import RolloutWorker

VR = tv.ViewRequirement


class Chain(gym.Env):
    """Observations count up from the seed's start; an episode ends after its ``lengths[k]`` steps (k-th episode)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, lengths: list[int]) -> None:
        self.lengths, self.k, self.t, self.x = lengths, 0, 0, 0.0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.x = float(seed % 97)
        self.t, self.k = 0, self.k + 1
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.x += 1.0 + int(action)
        done = self.t >= self.lengths[self.k % len(self.lengths)]
        return np.array([self.x, self.t], np.float32), float(action) - 1.5, done, False, {}


class Aliasing(tv.Policy):
    """Its outputs are its input arrays, changed in place: the action is computed into the ``t`` column's array, the
    state is ``state_in_0`` plus one, an extra fetch a view of the observations. Records each segment's episode last action
    as postprocessing sees it (per segment: `postprocess_trajectory` is its own)."""

    reuse = True

    def __init__(self, obs_space, action_space, config=None):
        super().__init__(obs_space, action_space, config)
        self.view_requirements["prev_actions"] = VR("actions", space=action_space, shift=-1)
        self.view_requirements["t"] = VR("t")
        self.view_requirements["echo_obs"] = VR(used_for_compute_actions=False)
        self.last_actions: list[tuple[int, int]] = []

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        a = d["t"]  # (the action in the t column's array: the next step's t differs from it)
        a += d["prev_actions"] + d["obs"][:, 0].astype(np.int64)
        a %= 4
        s = d["state_in_0"]
        s += 1.0
        return a, [s], {"echo_obs": d["obs"][:, 0]}

    def _reused_inputs(self, inputs):
        if not self.reuse:
            return None
        cls = type(self)
        return lambda explore, timestep: cls.compute_actions_from_input_dict(self, inputs, explore, timestep)

    def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
        if episode is not None:
            self.last_actions.append((int(batch["eps_id"][0]), int(episode.last_action_for())))
        return batch


class Fresh(Aliasing):
    reuse = False


def _sample(cls, lengths, num_envs, fragment, calls):
    env = Chain(lengths)
    policy = cls(env.observation_space, env.action_space)
    w = RolloutWorker(lambda cfg: Chain(lengths), policy, num_envs=num_envs, rollout_fragment_length=fragment, seed=3)
    try:
        batches = [w.sample() for _ in range(calls)]
    finally:
        w.stop()
    return batches, policy.last_actions


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(1, 4), st.integers(1, 7), st.integers(1, 4))
def test_reused_inputs_sample_what_fresh_input_dicts_sample(lengths, num_envs, fragment, calls):
    got, got_last = _sample(Aliasing, lengths, num_envs, fragment, calls)
    want, want_last = _sample(Fresh, lengths, num_envs, fragment, calls)
    assert got_last == want_last
    for g, w in zip(got, want):
        assert sorted(g.keys()) == sorted(w.keys())
        for k in w.keys():
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)


def test_a_wrapper_on_the_policys_instance_is_called_at_every_step():
    """A ``compute_actions_from_input_dict`` set on the policy's instance (a wrapper: here one that turns every
    action into 0) is what acts, whether it was set before the worker's first step or after its lanes were made;
    removed, the lanes act again."""
    lengths, num_envs, fragment = [3, 5], 2, 4
    calls = []

    def wrap(policy):
        def zeros(d, **kw):
            calls.append(1)
            actions, states, extra = Aliasing.compute_actions_from_input_dict(policy, d, **kw)
            return np.zeros_like(actions), states, extra

        policy.compute_actions_from_input_dict = zeros

    def worker(policy):
        return RolloutWorker(lambda cfg: Chain(lengths), policy, num_envs=num_envs, rollout_fragment_length=fragment,
                             seed=3)

    env = Chain(lengths)
    early = Aliasing(env.observation_space, env.action_space)
    wrap(early)
    w = worker(early)
    try:
        for _ in range(2):
            assert not w.sample()["actions"].any()
    finally:
        w.stop()
    late = Aliasing(env.observation_space, env.action_space)
    w = worker(late)
    try:
        w.sample()
        assert w.sampler._lanes, "the lanes act for the policy"
        wrap(late)
        calls.clear()
        assert not w.sample()["actions"].any() and len(calls) == fragment
        del late.compute_actions_from_input_dict
        w.sample()
        assert len(calls) == fragment and w.sampler._lanes
    finally:
        w.stop()
