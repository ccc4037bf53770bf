"""The single-agent sampler's loop of common steps (`SingleAgentSampler._common_steps`) against its reference, the same
sampler stepping by `_step` alone: the same batches bit for bit, the same errors, the same state after each call,
over random episode lengths, envs, fragments, envs that raise (isolated and recreated, or not), a policy that raises,
and rewards that stop being float32 in the middle of a run (the lanes' reward casts change)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.rollout.worker import RolloutWorker

VR = tv.ViewRequirement


class Scripted(gym.Env):
    """Episodes of ``lengths[k]`` steps in turn; raises at its steps in ``fail_at`` (counted from its creation) and
    at its resets in ``reset_fail_at`` (its first is 1), observes NaN (in its last entry) at those in ``nan_at``;
    rewards float32 until its step ``f32_until`` (then Python floats: the lanes' float32 casts of the reward inputs
    end there)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, lengths: list[int], fail_at: set[int], f32_until: int | None, uid: int,
                 nan_at: frozenset[int] = frozenset(), reset_fail_at: frozenset[int] = frozenset()) -> None:
        self.lengths, self.fail_at, self.f32_until, self.uid, self.nan_at = lengths, fail_at, f32_until, uid, nan_at
        self.reset_fail_at = reset_fail_at
        self.k, self.t, self.steps, self.resets = 0, 0, 0, 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.resets in self.reset_fail_at:
            raise RuntimeError(f"env {self.uid} failed at its reset {self.resets}")
        self.t, self.k = 0, self.k + 1
        return np.array([self.uid, self.k, 0.0], np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps in self.fail_at:
            raise RuntimeError(f"env {self.uid} failed at its step {self.steps}")
        self.t += 1
        done = self.t >= self.lengths[self.k % len(self.lengths)]
        r = float(action) - 0.5 + 0.01 * self.t
        if self.f32_until is not None and self.steps < self.f32_until:
            r = np.float32(r)
        last = np.nan if self.steps in self.nan_at else self.t
        return np.array([self.uid, self.k, last], np.float32), r, done, False, {"t": self.t}


class LanePolicy(tv.Policy):
    """Reads its inputs in place (`Policy._reused_inputs`: the lanes), previous rewards among them (their dtype,
    float32 where the lanes cast them, changes its actions); raises at its calls in ``fail_calls`` (counted over its
    life); its ``vf_preds`` are NaN where the observation's last entry is (refused, naming the inputs' NaN)."""

    def __init__(self, obs_space, action_space, config=None):
        super().__init__(obs_space, action_space, config)
        self.view_requirements["prev_rewards"] = VR("rewards", shift=-1)
        self.view_requirements["prev_actions"] = VR("actions", space=action_space, shift=-1)
        self.view_requirements.pop("infos", None)  # (a policy that trains on infos steps by `_step`)
        self.fail_calls: set[int] = set((config or {}).get("fail_calls", ()))
        self.calls = 0

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        self.calls += 1
        if self.calls in self.fail_calls:
            raise ValueError(f"the policy failed at its call {self.calls}")
        obs, prev_r = d["obs"], np.asarray(d["prev_rewards"])
        a = (obs[:, 0].astype(np.int64) + obs[:, 1].astype(np.int64) + d["prev_actions"] + (prev_r > 0).astype(np.int64)
             + int(prev_r.dtype == np.float32) + int(timestep or 0)) % 3
        return a, [], {"vf_preds": (obs[:, 2] * 0.5).astype(np.float32)}

    def _reused_inputs(self, inputs):
        cls = type(self)
        return lambda explore, timestep: cls.compute_actions_from_input_dict(self, inputs, explore, timestep)

    def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
        # The episode's last values as postprocessing sees them (a running episode's: the newest step's).
        last = None if episode is None else episode.last_reward_for()
        batch["last_reward"] = np.full(len(batch), np.nan if last is None else float(last))
        action = None if episode is None else episode.last_action_for()
        batch["last_action"] = np.full(len(batch), -1 if action is None else int(action))
        return batch


class PlainLanePolicy(LanePolicy):
    """`LanePolicy` with `Policy`'s own postprocess_trajectory (nothing reads an episode's last values; ended
    episodes' lengths are the store's: `SingleAgentSampler._track_len` off)."""

    postprocess_trajectory = tv.Policy.postprocess_trajectory


def _run(common: bool, num_envs, lengths, fragment, fails, restart, f32_until, fail_calls, no_done, calls, nans,
         reset_fails, plain=False):
    made = []

    def creator(cfg):
        uid = len(made)
        env = Scripted(lengths, set(fails.get(uid, ())), f32_until, uid, frozenset(nans.get(uid, ())),
                       frozenset(reset_fails.get(uid, ())))
        made.append(env)
        return env

    env = Scripted(lengths, set(), None, -1)
    policy = (PlainLanePolicy if plain else LanePolicy)(env.observation_space, env.action_space,
                                                       {"fail_calls": fail_calls})
    w = RolloutWorker(creator, policy, num_envs=num_envs, rollout_fragment_length=fragment, seed=5,
                      restart_failed_sub_environments=restart, no_done_at_end=no_done)
    if not common:
        w.sampler._common_steps = lambda limit: False  # the reference: `_step` alone
    out = []
    try:
        for _ in range(calls):
            try:
                b = w.sample()
            except Exception as e:  # noqa: BLE001 (the same errors on both sides)
                out.append(("raised", type(e).__name__, str(e), getattr(e, "__notes__", None)))
            else:
                out.append(("batch", {k: np.array(b[k]) for k in sorted(b.keys())}))
            s = w.sampler
            metrics = w.get_metrics()
            out.append(("state", s._timestep, s._frag, s._steps, s._ep_ret.tolist(), dict(s._deficit),
                        s._idle.tolist(), s._next_eps_id, policy.calls, metrics["episode_returns"],
                        metrics["episode_lengths"]))
    finally:
        w.stop()
    return out


@settings(max_examples=40, deadline=None)
# The faults each once for certain: an env raising (not isolated; isolated and recreated), the policy raising, an
# observation of NaN, rewards that stop being float32, a reset raising (after an episode's end inside the loop: not
# isolated; isolated and recreated).
@example(2, [20], 4, {1: [3]}, False, None, [], False, 4, {}, {}, False)
@example(3, [6, 2], 5, {0: [4], 2: [9]}, True, None, [], False, 4, {}, {}, False)
@example(2, [9], 6, {}, False, None, [7], False, 3, {}, {}, False)
@example(2, [30], 4, {}, False, None, [], False, 3, {1: [5]}, {}, False)
@example(2, [7, 3], 5, {}, False, 6, [], True, 4, {}, {}, False)
@example(2, [2, 5], 6, {}, False, None, [], False, 4, {}, {1: [3]}, False)
@example(3, [3], 7, {}, True, None, [], False, 4, {}, {0: [2]}, False)
@example(3, [2, 4], 6, {}, True, None, [], False, 4, {}, {2: [3]}, True)
@given(
    num_envs=st.integers(1, 4),
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    fragment=st.integers(1, 10),
    fails=st.dictionaries(st.integers(0, 3), st.lists(st.integers(1, 20), max_size=2), max_size=2),
    restart=st.booleans(),
    f32_until=st.one_of(st.none(), st.integers(1, 30)),
    fail_calls=st.lists(st.integers(1, 25), max_size=2),
    no_done=st.booleans(),
    calls=st.integers(1, 6),
    nans=st.dictionaries(st.integers(0, 3), st.lists(st.integers(1, 20), max_size=1), max_size=1),
    reset_fails=st.dictionaries(st.integers(0, 3), st.lists(st.integers(2, 8), max_size=2), max_size=2),
    plain=st.booleans(),
)
def test_the_common_steps_loop_samples_what_step_samples(num_envs, lengths, fragment, fails, restart, f32_until,
                                                         fail_calls, no_done, calls, nans, reset_fails, plain):
    args = (num_envs, lengths, fragment, fails, restart, f32_until, fail_calls, no_done, calls, nans, reset_fails,
            plain)
    got, want = _run(True, *args), _run(False, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[0] == w[0]
        if g[0] == "batch":
            assert list(g[1]) == list(w[1])
            for k in w[1]:
                np.testing.assert_array_equal(g[1][k], w[1][k], err_msg=k)
                assert g[1][k].dtype == w[1][k].dtype, k
        else:
            assert g == w


def test_the_loop_takes_the_common_steps():
    """The lanes' policy samples through `_common_steps` alone while nothing fails: the first step after a batch
    and the steps after episode ends too, and a step whose input was dropped (as a policy that raised leaves it)."""
    env = Scripted([7, 3], set(), None, -1)
    policy = LanePolicy(env.observation_space, env.action_space)
    w = RolloutWorker(lambda cfg: Scripted([7, 3], set(), None, 0), policy, num_envs=2, rollout_fragment_length=20,
                      seed=1)
    try:
        w.sample()
        steps = []
        general = w.sampler._step
        w.sampler._step = lambda ids=None: (steps.append(1), general(ids))[1]
        w.sample()
        w.sample()
        assert not steps, len(steps)
        w.sampler._next_inputs = None  # (as a policy that raised leaves it: gathered anew by the loop)
        w.sample()
        assert not steps, len(steps)
    finally:
        w.stop()
