"""`PolicyRunner` and `Policy.compute_single_action`'s implicit episode: a policy acting outside a worker sees
exactly the inputs a `RolloutWorker` built, and acts the same.

The worker replays: a worker samples with ``explore=False`` while every compute-actions input dict it builds
is recorded; a runner is then driven with the same observations and rewards (keyed by the worker's episode
ids and reset when an episode ends, or keyed by env index with ``episode_start``, as SB3 does) and every input
column and every action must be identical. Frame-stack, LSTM, GTrXL and MLP models (PPO) and DQN's frame stack,
Box / Dict observations, Discrete / Box / MultiDiscrete / MultiBinary actions (PPO), nested Dict actions (a numpy
policy), float32 rewards, multi-agent (a turn-based PettingZoo game, one runner per policy keyed by (episode,
agent)). A hypothesis property test checks random episodes, interleavings and resets against a pure-Python
reference of the views.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.views.nest import Nest

S = gym.spaces
VR = tv.ViewRequirement


def flat(d):
    """An input dict's columns by flat leaf name (``obs.vec``), copied."""
    return {k: np.array(v, copy=True) for k, v in dict.items(d)}


def record(policy):
    """Records every (input dict, actions) the policy computes from now on.

    A PPO policy is recorded at ``action_sampler`` (its tensor inputs): a runner calls it on tensors viewing the
    arrays it refills call after call (`Policy._reused_inputs`), not through ``compute_actions_from_input_dict``,
    which a wrapper on the instance would make it call instead."""
    if isinstance(policy, tv.PPOPolicy):
        return _record_sampler(policy)
    calls = []
    inner = policy.compute_actions_from_input_dict

    def recording(d, explore=None, timestep=None, **kw):
        out = inner(d, explore=explore, timestep=timestep, **kw)
        calls.append((flat(d), flat({"a": out[0]} if not isinstance(out[0], dict) else
                                    {f"a.{k}": v for k, v in out[0].items()})))
        return out

    policy.compute_actions_from_input_dict = recording
    return calls


def _record_sampler(policy):
    calls = []
    inner = policy.action_sampler

    def recording(tensors, explore):
        out = inner(tensors, explore)
        calls.append((flat({k: v.numpy() for k, v in dict.items(tensors)}), flat({"a": out[0].numpy()})))
        return out

    policy.action_sampler = recording
    return calls


def keep_ids(policy, *extra):
    """Runs the pruning pass, then keeps eps_id and t (and ``extra``) in compute inputs and batches, so that each
    recorded row names its episode step, and obs / rewards / ends in batches."""
    policy._initialize_view_requirements()
    for k in ("eps_id", "t", "obs", "terminateds", "truncateds", *extra):
        vr = policy.view_requirements[k]
        vr.used_for_compute_actions = k not in ("obs", "terminateds", "truncateds") or vr.used_for_compute_actions
        vr.used_for_training = True


class Walk(gym.Env):
    """Random observations; episodes of 1..9 steps, terminated or truncated; reward from the action and the obs
    (numpy float32 rewards if ``f32``)."""

    def __init__(self, obs_space, action_space, f32=False):
        self.observation_space, self.action_space, self.f32 = obs_space, action_space, f32

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.len = 0, int(self.np_random.integers(1, 10))
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        r = float(np.sum(np.asarray(np.concatenate([np.ravel(x) for x in _leaves(action)]), np.float64))) + self.t
        end = self.t >= self.len
        reward = np.float32(r) if self.f32 else r
        return self.observation_space.sample(), reward, end and self.len % 2 == 0, end and self.len % 2 == 1, {}


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return [np.asarray(x, np.float64)]


def _env_creator(obs_space, action_space, f32=False):
    count = iter(range(1000))

    def make(cfg):
        env = Walk(obs_space, action_space, f32)
        k = next(count)
        env.observation_space.seed(k)
        return env

    return make


class Lookup:
    """A batch's rows by (eps_id, t): observation leaves, reward, end, agent index."""

    def __init__(self, batch, obs_space):
        cols = flat(batch)
        self.names = Nest.from_space(obs_space).names("obs")
        self.nest = Nest.from_space(obs_space)
        self.row = {(int(e), int(t)): j for j, (e, t) in enumerate(zip(cols["eps_id"], cols["t"]))}
        self.cols = cols

    def obs(self, rows):
        idx = [self.row[r] for r in rows]
        return self.nest.unflatten([self.cols[c][idx] for c in self.names])

    def reward_before(self, e, t):
        rewards = self.cols["rewards"]
        return rewards[self.row[(e, t - 1)]] if t > 0 else rewards.dtype.type(0)

    def ends(self, e, t):
        j = self.row[(e, t)]
        return bool(self.cols["terminateds"][j] or self.cols["truncateds"][j])

    def agent_index(self, e, t):
        return int(self.cols["agent_index"][self.row[(e, t)]])


def assert_same_inputs(worker_call, runner_call):
    (wd, wa), (rd, ra) = worker_call, runner_call
    assert sorted(wd) == sorted(rd)
    for k in wd:
        if k not in ("eps_id", "env_id"):  # ids: the runner numbers its own episodes and slots
            np.testing.assert_array_equal(rd[k], wd[k], err_msg=f"input column {k!r}")
            assert rd[k].dtype == wd[k].dtype, k
    assert sorted(wa) == sorted(ra)
    for k in wa:
        np.testing.assert_array_equal(ra[k], wa[k], err_msg=f"actions {k!r}")


def replay(policy, worker_calls, lookup, keying, max_episodes=8, agent_index=False):
    """Drives a runner with the worker's observations; returns its recorded calls (one per worker call)."""
    worker_calls = list(worker_calls)  # (the worker's recorder, below the runner's, records the runner's calls too)
    runner = tv.PolicyRunner(policy, max_episodes=max_episodes, explore=False)
    calls = record(policy)
    for wd, _ in worker_calls:
        rows = list(zip(wd["eps_id"].tolist(), wd["t"].tolist()))
        rewards = np.array([lookup.reward_before(e, t) for e, t in rows], dtype=lookup.cols["rewards"].dtype)
        starts = np.array([t == 0 for _, t in rows])
        kw = {"agent_index": np.array([lookup.agent_index(e, t) for e, t in rows])} if agent_index else {}
        if keying == "eps_id":
            keys = [e for e, _ in rows]
            runner.act_many(lookup.obs(rows), keys, rewards=rewards, **kw)
            for e, t in rows:
                if lookup.ends(e, t):
                    runner.reset(e)
        else:  # one key per env, a new episode marked by episode_start (SB3's vectorized predict)
            runner.act_many(lookup.obs(rows), list(range(len(rows))), rewards=rewards, episode_start=starts, **kw)
    # A PPO policy read arrays the runner refilled call after call (one set per row count).
    assert bool(runner._lanes) == isinstance(policy, tv.PPOPolicy)
    return calls


def ppo(model, obs_space, action_space, **model_config):
    import torch

    torch.manual_seed(0)
    if model == "dqn":
        return tv.DQNPolicy(obs_space, action_space, {"hidden": 16, **model_config})
    return tv.PPOPolicy(obs_space, action_space, {"model": model, "model_config": model_config})


BOX = S.Box(-1.0, 1.0, (3,), np.float32)
DICT_OBS = S.Dict({"vec": S.Box(-1.0, 1.0, (2,), np.float32), "flag": S.Discrete(3)})
MODELS = {
    "framestack": {"num_frames": 4, "hidden": (16,)},
    "lstm": {"max_seq_len": 5, "hidden": 16, "cell_size": 16, "prev_reward": True},
    "attention": {"max_seq_len": 5, "memory": 6, "attention_dim": 16, "num_heads": 2, "ff_dim": 16,
                  "prev_reward": True},
    "mlp": {"hidden": (16,)},
    "dqn": {"num_frames": 3},
}
CASES = [
    ("framestack", BOX, S.Discrete(3)),
    ("framestack", DICT_OBS, S.Box(-1.0, 1.0, (2,), np.float32)),
    ("lstm", BOX, S.Discrete(3)),
    ("lstm", DICT_OBS, S.MultiDiscrete([2, 3])),
    ("attention", BOX, S.Discrete(3)),
    ("attention", DICT_OBS, S.Box(-1.0, 1.0, (2,), np.float32)),
    ("mlp", BOX, S.MultiBinary(2)),
    ("dqn", BOX, S.Discrete(3)),
]


@pytest.mark.parametrize("keying", ["eps_id", "env"])
@pytest.mark.parametrize("model,obs_space,action_space", CASES, ids=[f"{m}-{type(o).__name__}-{type(a).__name__}"
                                                                     for m, o, a in CASES])
def test_a_runner_replays_a_workers_episodes_exactly(model, obs_space, action_space, keying):
    pytest.importorskip("torch")
    policy = ppo(model, obs_space, action_space, **MODELS[model])
    keep_ids(policy)
    worker_calls = record(policy)
    w = tv.RolloutWorker(_env_creator(obs_space, action_space), policy, num_envs=3, rollout_fragment_length=45,
                         explore=False, seed=1, lazy_views=False)
    batch = w.sample()
    worker_calls = list(worker_calls)
    assert len(worker_calls) == 45 and len(np.unique(batch["eps_id"])) > 10  # many episodes, some mid-fragment
    runner_calls = replay(policy, worker_calls, Lookup(batch, obs_space), keying)
    assert len(runner_calls) == len(worker_calls)
    for wc, rc in zip(worker_calls, runner_calls):
        assert_same_inputs(wc, rc)


def test_a_wrapper_on_the_policy_is_called_and_the_reused_inputs_are_the_runners():
    """A ``compute_actions_from_input_dict`` set on the policy instance (a user's wrapper) is what the runner calls;
    without one, the runner's reused input arrays give the same inputs and actions, and none of them is handed
    back: the actions returned are copies, and later calls do not change them."""
    pytest.importorskip("torch")
    policy = ppo("lstm", BOX, S.Discrete(3), **MODELS["lstm"])
    twin = ppo("lstm", BOX, S.Discrete(3), **MODELS["lstm"])
    policy._initialize_view_requirements()
    twin._initialize_view_requirements()
    runner, plain = tv.PolicyRunner(policy, max_episodes=4), tv.PolicyRunner(twin, max_episodes=4)
    wrapped = []
    inner = twin.compute_actions_from_input_dict

    def wrapper(d, **kw):  # on the instance: the runner must call it (no reused inputs)
        wrapped.append(flat(d))
        return inner(d, **kw)

    twin.compute_actions_from_input_dict = wrapper
    seen = record(policy)
    rng = np.random.default_rng(0)
    kept = []
    for step in range(12):
        obs = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
        rewards = rng.uniform(0, 1, 4)
        start = np.array([step % 5 == 0, False, step == 7, False])
        a = runner.act_many(obs, range(4), rewards=rewards, episode_start=start, explore=False)
        b = plain.act_many(obs, range(4), rewards=rewards, episode_start=start, explore=False)
        np.testing.assert_array_equal(a, b)
        kept.append((a, a.copy()))
        assert len(wrapped) == step + 1 and not plain._lanes
        for k, v in wrapped[-1].items():
            np.testing.assert_array_equal(seen[-1][0][k], v, err_msg=k)
    assert runner._lanes
    for a, copy in kept:
        np.testing.assert_array_equal(a, copy)
    # The wrapper removed: the twin's runner reuses arrays from then on, and still acts the same.
    del twin.compute_actions_from_input_dict
    for _ in range(3):
        obs = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
        np.testing.assert_array_equal(runner.act_many(obs, range(4), rewards=np.ones(4), explore=False),
                                      plain.act_many(obs, range(4), rewards=np.ones(4), explore=False))
    assert plain._lanes


def test_a_wrapper_set_after_the_runner_reused_arrays_gets_a_workers_input_dict():
    """A wrapper set on the instance once the runner reuses arrays: from its first call on, it gets the input dict
    a worker hands a policy (nested columns read as their structure), not the runner's flat arrays."""
    pytest.importorskip("torch")
    policy = ppo("mlp", DICT_OBS, S.Discrete(3), **MODELS["mlp"])
    runner = tv.PolicyRunner(policy, max_episodes=2, explore=False)
    obs = {"vec": np.zeros((2, 2), np.float32), "flag": np.array([0, 2])}
    for _ in range(2):
        runner.act_many(obs, [0, 1])
    assert runner._lanes
    inner, got = policy.compute_actions_from_input_dict, []

    def wrapper(d, **kw):
        got.append((d["obs"]["vec"].copy(), d["obs"]["flag"].copy()))
        return inner(d, **kw)

    policy.compute_actions_from_input_dict = wrapper
    for t in range(3):
        obs = {"vec": np.full((2, 2), t, np.float32), "flag": np.array([t % 3, 1])}
        runner.act_many(obs, [0, 1])
        np.testing.assert_array_equal(got[-1][0], obs["vec"])
        np.testing.assert_array_equal(got[-1][1], obs["flag"])
    assert len(got) == 3


def test_a_sampler_that_replaces_an_input_reads_each_calls_inputs():
    """An ``action_sampler`` that sets a column of its input batch (a normalisation, say) sees each call's inputs:
    the runner hands it a batch of its own at every call, over the reused arrays."""
    pytest.importorskip("torch")

    class Clamped(tv.PPOPolicy):
        def action_sampler(self, input_dict, explore):
            input_dict["obs"] = input_dict["obs"].clamp(-0.5, 0.5)
            self.read = input_dict["obs"].numpy().copy()
            return super().action_sampler(input_dict, explore)

    policy = Clamped(BOX, S.Discrete(3), {"model": "mlp", "model_config": MODELS["mlp"]})
    runner = tv.PolicyRunner(policy, max_episodes=2, explore=False)
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
        runner.act_many(obs, [0, 1], rewards=np.zeros(2))
        np.testing.assert_array_equal(policy.read, np.clip(obs, -0.5, 0.5))
    assert runner._lanes
    for x in (-0.1, 0.2, 0.3):
        policy.compute_single_action(np.full(3, x, np.float32))
        np.testing.assert_array_equal(policy.read, np.full((1, 3), x, np.float32))


def test_a_patch_of_the_policys_class_is_called_by_runners_made_before_it():
    """``mock.patch.object(PPOPolicy, "compute_actions_from_input_dict", ...)`` after a runner reused arrays: that
    runner calls the patched method too, as one made after the patch does."""
    pytest.importorskip("torch")
    from unittest import mock

    policy = ppo("mlp", BOX, S.Discrete(3), **MODELS["mlp"])
    old = tv.PolicyRunner(policy, max_episodes=2, explore=False)
    obs = np.zeros((2, 3), np.float32)
    old.act_many(obs, [0, 1])
    old.act_many(obs, [0, 1])
    assert old._lanes
    orig, calls = tv.PPOPolicy.compute_actions_from_input_dict, []

    def patched(self, d, **kw):
        calls.append(d["obs"].copy())
        return orig(self, d, **kw)

    with mock.patch.object(tv.PPOPolicy, "compute_actions_from_input_dict", patched):
        new = tv.PolicyRunner(policy, max_episodes=2, explore=False)
        for k, runner in enumerate((old, new, old)):
            runner.act_many(obs + k, [0, 1])
            assert len(calls) == k + 1
            np.testing.assert_array_equal(calls[-1], obs + k)
    old.act_many(obs, [0, 1])  # the patch undone: the runner goes on (through the policy's own method)
    assert len(calls) == 3


def test_float32_rewards_reach_the_policy_as_in_a_worker():
    """An env with numpy float32 rewards: the worker's reward inputs are float32, and so are the runner's when it
    is given float32 rewards."""
    pytest.importorskip("torch")
    policy = ppo("lstm", BOX, S.Discrete(3), **MODELS["lstm"])
    keep_ids(policy)
    worker_calls = record(policy)
    w = tv.RolloutWorker(_env_creator(BOX, S.Discrete(3), f32=True), policy, num_envs=2, rollout_fragment_length=30,
                         explore=False, seed=2, lazy_views=False)
    batch = w.sample()
    worker_calls = list(worker_calls)
    assert batch["rewards"].dtype == np.float32 and worker_calls[-1][0]["prev_rewards"].dtype == np.float32
    runner_calls = replay(policy, worker_calls, Lookup(batch, BOX), "env")
    for wc, rc in zip(worker_calls, runner_calls):
        assert_same_inputs(wc, rc)


class NestedActs(tv.Policy):
    """A numpy policy with Dict actions reading a frame stack of a Dict observation and previous actions and
    rewards: its action is a deterministic function of everything it reads."""

    def __init__(self, obs_space, action_space, config=None):
        super().__init__(obs_space, action_space, config)
        self.view_requirements["stack"] = VR("obs", space=obs_space, shift="-2:0")

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        s = d["stack"]
        n = len(s["flag"])
        pa = d["prev_actions"]
        x = (s["vec"].reshape(n, -1).sum(1) + s["flag"].sum(1) + pa["b"].sum(1) + 3 * pa["a"] + d["prev_rewards"])
        acts = {"a": np.abs(x * 10).astype(np.int64) % 3, "b": np.tanh(np.stack([x, -x], 1)).astype(np.float32)}
        return acts, [], {}


@pytest.mark.parametrize("keying", ["eps_id", "env"])
def test_nested_observations_and_actions_replay_exactly(keying):
    act_space = S.Dict({"a": S.Discrete(3), "b": S.Box(-1.0, 1.0, (2,), np.float32)})
    policy = NestedActs(DICT_OBS, act_space)
    keep_ids(policy)
    worker_calls = record(policy)
    w = tv.RolloutWorker(_env_creator(DICT_OBS, act_space), policy, num_envs=2, rollout_fragment_length=60, seed=3,
                         lazy_views=False)
    batch = w.sample()
    worker_calls = list(worker_calls)
    runner_calls = replay(policy, worker_calls, Lookup(batch, DICT_OBS), keying)
    assert "prev_actions.a" in worker_calls[0][0] and "stack.vec" in worker_calls[0][0]
    for wc, rc in zip(worker_calls, runner_calls):
        assert_same_inputs(wc, rc)


def test_multi_agent_one_runner_per_policy_keyed_by_agent_episode():
    """A turn-based PettingZoo game, a frame-stack and an LSTM policy: each agent's trajectory (its own eps_id in
    the worker) is one runner episode, its reward what it earned since it last acted, ``agent_index`` given."""
    pytest.importorskip("torch")
    pytest.importorskip("pettingzoo")
    from ma_envs import CountingGame

    obs_space, act_space = S.Box(-1e6, 1e6, (3,), np.float32), S.Discrete(3)
    policies = {"fs": ppo("framestack", obs_space, act_space, **MODELS["framestack"]),
                "rnn": ppo("lstm", obs_space, act_space, **MODELS["lstm"])}
    calls = {}
    for pid, p in policies.items():
        keep_ids(p, "agent_index")
        calls[pid] = record(p)
    w = tv.RolloutWorker(lambda cfg: CountingGame(n_players=2, moves=7), policies, num_envs=2,
                         policy_mapping_fn=lambda agent, *a, **k: "fs" if agent == "p0" else "rnn",
                         rollout_fragment_length=30, explore=False, seed=0, lazy_views=False)
    batch = w.sample()
    for pid, p in policies.items():
        pb = batch.policy_batches[pid]
        assert len(calls[pid]) > 10 and "agent_index" in calls[pid][0][0]
        lookup = Lookup(pb, obs_space)
        # Only the calls whose rows the batch holds (an agent's newest step may be held back for the next one).
        done = [c for c in list(calls[pid]) if all((e, t) in lookup.row for e, t in zip(c[0]["eps_id"], c[0]["t"]))]
        assert len(done) >= len(calls[pid]) - 2
        runner_calls = replay(p, done, lookup, "eps_id", agent_index=True)
        for wc, rc in zip(done, runner_calls):
            assert_same_inputs(wc, rc)


# -- the views against a pure-Python reference -----------------------------------------------------------------

INIT = np.array([-1.0, -2.0], np.float32)


class Echo(tv.Policy):
    """Reads a 3-frame stack of obs, prev_actions, prev_rewards, t and a recurrent state; acts from all of it."""

    def __init__(self, obs_space, action_space, config=None):
        super().__init__(obs_space, action_space, config)
        self.view_requirements["stack"] = VR("obs", space=obs_space, shift="-2:0")
        self.seen = []

    def get_initial_state(self):
        return [INIT.copy()]

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        inputs = {k: np.array(d[k], copy=True) for k in ("stack", "prev_actions", "prev_rewards", "t", "state_in_0")}
        self.seen.append(inputs)
        x = inputs["stack"].sum((1, 2)) + 7 * inputs["prev_actions"] + inputs["prev_rewards"] + inputs["t"]
        acts = np.abs(np.round(x * 3)).astype(np.int64) % 4
        return acts, [np.stack([inputs["stack"][:, -1, 0], x], 1).astype(np.float32)], {}


class ReferenceEpisode:
    """What one episode's views hold, from plain lists: the obvious definition."""

    def __init__(self, obs):
        self.obs, self.actions, self.rewards, self.states = [obs], [], [], []

    def inputs(self):
        t = len(self.obs) - 1
        stack = [self.obs[i] if i >= 0 else np.zeros(2, np.float32) for i in (t - 2, t - 1, t)]
        return {"stack": np.stack(stack), "prev_actions": self.actions[-1] if t else 0,
                "prev_rewards": self.rewards[-1] if t else 0.0, "t": t,
                "state_in_0": self.states[-1] if t else INIT}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("act"), st.lists(st.tuples(st.integers(0, 4), st.booleans(),
                                                     st.floats(-5, 5, allow_nan=False, width=32)),
                                           min_size=1, max_size=5, unique_by=lambda x: x[0])),
        st.tuples(st.just("reset"), st.integers(0, 4)),
    ),
    min_size=1, max_size=90,
)


@settings(max_examples=60)
@given(ops)
def test_views_match_a_pure_python_reference(script):
    """Random episodes: which of 5 keys act in each call, episode starts, resets, rewards; past the runner's
    periodic freeing of emitted rows (every 32 calls)."""
    space = S.Box(-100.0, 100.0, (2,), np.float32)
    p = Echo(space, S.Discrete(4))
    runner = tv.PolicyRunner(p, max_episodes=5)
    ref: dict[int, ReferenceEpisode] = {}
    for n_call, op in enumerate(script):
        if op[0] == "reset":
            k = op[1]
            if k in ref:
                runner.reset(k)
                del ref[k]
            else:
                with pytest.raises(KeyError, match="no running episode"):
                    runner.reset(k)
            continue
        keys = [k for k, _, _ in op[1]]
        obs = np.array([[n_call, k] for k in keys], np.float32)
        starts = np.array([s for _, s, _ in op[1]])
        rewards = np.array([r for _, _, r in op[1]])
        for j, k in enumerate(keys):
            if starts[j] or k not in ref:
                ref[k] = ReferenceEpisode(obs[j])
            else:
                ref[k].obs.append(obs[j])
                ref[k].rewards.append(rewards[j])
        p.seen.clear()
        actions, states, _ = runner.act_many(obs, keys, rewards=rewards, episode_start=starts, full_fetch=True)
        seen = p.seen[-1]
        for j, k in enumerate(keys):
            want = ref[k].inputs()
            for col, v in want.items():
                np.testing.assert_array_equal(seen[col][j], v, err_msg=f"{col} of episode {k} at call {n_call}")
            ref[k].actions.append(int(actions[j]))
            ref[k].states.append(states[0][j])
        assert sorted(runner.episodes) == sorted(ref)


class ReusingEcho(Echo):
    """Echo run on the runner's reused input arrays (as a `TorchPolicy` is: `Policy._reused_inputs`): the runner
    refills the same arrays call after call; records each call's explore and timestep, and raises when told."""

    def __init__(self, obs_space, action_space, config=None):
        super().__init__(obs_space, action_space, config)
        self.calls: list[tuple] = []
        self.fail_next = False

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        self.calls.append((explore, timestep))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected")
        return super().compute_actions_from_input_dict(d, explore=explore, timestep=timestep)

    def _reused_inputs(self, inputs):
        cls = type(self)
        return lambda explore, timestep: cls.compute_actions_from_input_dict(self, inputs, explore, timestep)

    def wrap(self):
        """A wrapper on the instance (the runner calls it instead, with new arrays), until `unwrap`."""
        self.compute_actions_from_input_dict = lambda d, **kw: ReusingEcho.compute_actions_from_input_dict(self, d, **kw)

    def unwrap(self):
        self.__dict__.pop("compute_actions_from_input_dict", None)


REWARD_KINDS = {"float": float, "f32": np.float32, "f64": np.float64, "int": lambda r: int(round(r))}
# Each op: (kind, key, episode_start, reward kind, reward, explore). Mostly "act": the next step of the episode that
# acted last, with a float reward (on the arrays the runner reuses); "reset" forgets ``key``'s episode, "raise"
# makes the policy raise at its next call, "wrap" makes the next call go through a wrapper on the policy's instance.
single_ops = st.lists(
    st.tuples(st.sampled_from(["act"] * 12 + ["reset", "raise", "wrap"]), st.sampled_from([0, 0, 0, 1]),
              st.sampled_from([False] * 5 + [True]), st.sampled_from(["float"] * 3 + sorted(REWARD_KINDS)),
              st.floats(-5, 5, allow_nan=False, width=32), st.sampled_from([None, True, False])),
    min_size=10, max_size=80,
)


@settings(max_examples=100)
@given(single_ops)
def test_single_acts_match_a_pure_python_reference(script):
    """`act` one episode at a time, as `compute_single_action` does, whatever comes between two steps of an
    episode: the other key's steps, restarts, resets, rewards of every type (float32 inputs while every reward
    was float32), a policy that raised (its episode forgotten, the rewards' dtype and the timestep as they were), a
    call through a wrapper on the policy; past the runner's periodic freeing of emitted rows."""
    p, runner = echo_runner(2, ReusingEcho)
    ref: dict[int, ReferenceEpisode] = {}
    saw_f32 = saw_other = False
    timestep = 0
    for n_call, op in enumerate(script):
        if op[0] == "reset":
            if op[1] in ref:
                runner.reset(op[1])
                del ref[op[1]]
            continue
        if op[0] == "raise":
            p.fail_next = True
            continue
        if op[0] == "wrap":
            p.wrap()
            continue
        _, k, start, kind, r, explore = op
        reward = REWARD_KINDS[kind](r)
        obs = np.array([n_call, k], np.float32)
        steps = not start and k in ref
        before = (saw_f32, saw_other, ref.get(k))
        if steps:
            saw_f32, saw_other = saw_f32 or kind == "f32", saw_other or kind != "f32"
            episode = ref[k]
            episode.obs.append(obs)
            episode.rewards.append(float(reward))
        else:
            episode = ref[k] = ReferenceEpisode(obs)
        p.seen.clear()
        try:
            if p.fail_next:
                with pytest.raises(RuntimeError, match="injected"):
                    runner.act(obs, k, reward=reward, episode_start=start, explore=explore)
                saw_f32, saw_other = before[:2]  # (as they were)
                del ref[k]  # the call's episode is forgotten
                assert k not in runner.episodes
                continue
            action, states, _ = runner.act(obs, k, reward=reward, episode_start=start, explore=explore,
                                           full_fetch=True)
        finally:
            p.unwrap()  # (a wrapper is on for one call)
        assert p.calls[-1] == (explore, timestep)
        timestep += 1
        want = episode.inputs()
        seen = p.seen[-1]
        for col, v in want.items():
            np.testing.assert_array_equal(seen[col][0], v, err_msg=f"{col} of episode {k} at call {n_call}")
        assert seen["prev_rewards"].dtype == (np.float32 if saw_f32 and not saw_other else np.float64)
        episode.actions.append(int(action))
        episode.states.append(states[0])
        assert sorted(runner.episodes) == sorted(ref)


ARRAY_REWARDS = {"f64": np.float64, "f32": np.float32, "int": np.int64, "list": None}
KEY_GROUPS = [(0, 1), (0, 1), (0, 1), (1, 0), (0, 1, 2), (2,), (0,)]
# Each op: (kind, key group, whether the group's first episode restarts, reward kind, rewards, explore).
many_ops = st.lists(
    st.tuples(st.sampled_from(["act"] * 12 + ["reset", "raise", "wrap"]), st.sampled_from(range(len(KEY_GROUPS))),
              st.sampled_from([False] * 5 + [True]), st.sampled_from(["f64"] * 3 + sorted(ARRAY_REWARDS)),
              st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=3, max_size=3),
              st.sampled_from([None, True, False])),
    min_size=10, max_size=80,
)


@settings(max_examples=100)
@given(many_ops)
def test_calls_of_many_episodes_match_a_pure_python_reference(script):
    """`act_many` over groups of episodes, the same group call after call (on the reused arrays) or another one,
    restarts, resets, rewards as arrays of every dtype or a list, a policy that raised (the call's episodes
    forgotten), a call through a wrapper on the policy: each call's inputs are the reference's."""
    p, runner = echo_runner(3, ReusingEcho)
    ref: dict[int, ReferenceEpisode] = {}
    saw_f32 = saw_other = False
    timestep = 0
    for n_call, (kind, group, start, rkind, rs, explore) in enumerate(script):
        keys = list(KEY_GROUPS[group])
        if kind == "reset":
            if keys[0] in ref:
                runner.reset(keys[0])
                del ref[keys[0]]
            continue
        if kind == "raise":
            p.fail_next = True
            continue
        if kind == "wrap":
            p.wrap()
            continue
        n = len(keys)
        values = [round(r) for r in rs[:n]] if rkind == "int" else rs[:n]
        rewards = list(values) if rkind == "list" else np.array(values, ARRAY_REWARDS[rkind])
        starts = [start] + [False] * (n - 1)
        obs = np.array([[n_call, k] for k in keys], np.float32)
        before = (saw_f32, saw_other, dict(ref))
        if any(not s and k in ref for k, s in zip(keys, starts)):  # (a call that steps an episode notes its rewards)
            f32 = rkind == "f32"
            saw_f32, saw_other = saw_f32 or f32, saw_other or not f32
        for k, s, r in zip(keys, starts, values):
            if s or k not in ref:
                ref[k] = ReferenceEpisode(obs[keys.index(k)])
            else:
                ref[k].obs.append(obs[keys.index(k)])
                ref[k].rewards.append(float(np.float32(r)) if rkind == "f32" else float(r))
        p.seen.clear()
        kwargs = {"rewards": rewards, "episode_start": starts if start else None, "explore": explore}
        try:
            if p.fail_next:
                with pytest.raises(RuntimeError, match="injected"):
                    runner.act_many(obs, keys, **kwargs)
                saw_f32, saw_other, ref = before
                for k in keys:  # the call's episodes are forgotten
                    ref.pop(k, None)
                assert sorted(runner.episodes) == sorted(ref)
                continue
            actions, states, _ = runner.act_many(obs, keys, full_fetch=True, **kwargs)
        finally:
            p.unwrap()  # (a wrapper is on for one call)
        assert p.calls[-1] == (explore, timestep)
        timestep += n
        seen = p.seen[-1]
        for j, k in enumerate(keys):
            for col, v in ref[k].inputs().items():
                np.testing.assert_array_equal(seen[col][j], v, err_msg=f"{col} of episode {k} at call {n_call}")
            ref[k].actions.append(int(actions[j]))
            ref[k].states.append(states[0][j])
        assert seen["prev_rewards"].dtype == (np.float32 if saw_f32 and not saw_other else np.float64)
        assert sorted(runner.episodes) == sorted(ref)


# -- compute_single_action -----------------------------------------------------------------------------------------


def test_compute_single_action_keeps_a_frame_stack_episode():
    """The issue's case: a frame-stack PPOPolicy's compute_single_action(obs) raised KeyError('prev_n_obs')."""
    pytest.importorskip("torch")
    env = Walk(BOX, S.Discrete(3))
    p = ppo("framestack", BOX, S.Discrete(3), **MODELS["framestack"])
    twin = tv.PolicyRunner(p, max_episodes=1, explore=False)
    seen = record(p)
    obs, _ = env.reset(seed=0)
    r, first = 0.0, True
    for _ in range(40):
        a, state, extra = p.compute_single_action(obs, prev_reward=None if first else r, explore=False,
                                                  episode_start=first)
        b = twin.act(obs, reward=r, episode_start=first)
        assert a == b and state == [] and set(extra) == {"action_logp", "vf_preds"}
        np.testing.assert_array_equal(seen[-2][0]["prev_n_obs"], seen[-1][0]["prev_n_obs"])
        first = False
        obs, r, te, tr, _ = env.step(int(a))
        if te or tr:
            obs, _ = env.reset()
            first = True
    # A new episode's stack holds its first observation only (zeros before it).
    p.compute_single_action(obs, episode_start=True, explore=False)
    stack = seen[-1][0]["prev_n_obs"][0]
    assert not stack[:-1].any() and np.array_equal(stack[-1], obs)


def test_compute_single_action_with_an_lstm_returns_the_state_it_keeps():
    pytest.importorskip("torch")
    p = ppo("lstm", BOX, S.Discrete(3), **MODELS["lstm"])
    p._initialize_view_requirements()  # (the pruning pass's dummy calls are not recorded)
    seen = record(p)
    obs = [BOX.sample() for _ in range(4)]
    outs = [p.compute_single_action(o, prev_reward=1.0, explore=False, episode_start=i == 0) for i, o in enumerate(obs)]
    for i in range(1, 4):  # state_in of each step is the state_out the previous call returned
        for s_in, s_out in zip([seen[i][0][f"state_in_{j}"][0] for j in range(4)], outs[i - 1][1]):
            np.testing.assert_array_equal(s_in, s_out)
    # The caller may still carry the state (RLlib's stateless call): the same action from the same inputs.
    a, s, _ = p.compute_single_action(obs[1], outs[0][1], prev_action=outs[0][0], prev_reward=1.0, explore=False)
    assert a == outs[1][0]
    for x, y in zip(s, outs[1][1]):
        np.testing.assert_allclose(x, y, rtol=1e-6)


def test_compute_single_action_needs_the_reward_when_the_policy_reads_rewards():
    p = Echo(S.Box(-1.0, 1.0, (2,), np.float32), S.Discrete(4))
    p.compute_single_action(np.zeros(2, np.float32))  # the first step needs none
    with pytest.raises(ValueError, match=r"reads rewards \(views \['prev_rewards'\]\).*reward="):
        p.compute_single_action(np.zeros(2, np.float32))
    p.compute_single_action(np.ones(2, np.float32), prev_reward=2.5)  # the episode goes on where it was
    assert p.seen[-1]["t"][0] == 1 and p.seen[-1]["prev_rewards"][0] == 2.5
    with pytest.raises(ValueError, match="episode_start is for the implicit episode"):
        p.compute_single_action(np.ones(2, np.float32), [INIT], episode_start=True)
    with pytest.raises(ValueError, match=r"\['info'\] are only passed on"):
        p.compute_single_action(np.ones(2, np.float32), info={})


# -- errors leave the runner as it was ------------------------------------------------------------------------------


def echo_runner(max_episodes=2, cls=None):
    p = (cls or Echo)(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4))
    return p, tv.PolicyRunner(p, max_episodes=max_episodes)


def test_bad_calls_change_nothing():
    p, runner = echo_runner()
    runner.act(np.zeros(2, np.float32), "a")
    runner.act(np.zeros(2, np.float32), "b")
    with pytest.raises(ValueError, match="only 0 of max_episodes=2 slots are free; reset"):
        runner.act(np.zeros(2, np.float32), "c")
    with pytest.raises(ValueError, match="repeated: 'a'"):
        runner.act_many(np.zeros((2, 2), np.float32), ["a", "a"], rewards=[0, 0])
    with pytest.raises(ValueError, match=r"column 'obs': expected one observation of shape \(2,\) .* got shape \(3,\)"):
        runner.act(np.zeros(3, np.float32), "a", reward=1.0)
    with pytest.raises(ValueError, match="expected dtype float32, got float64"):
        runner.act(np.zeros(2), "a", reward=1.0)
    with pytest.raises(ValueError, match=r"rewards must have shape \(2,\)"):
        runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], rewards=[1.0])
    with pytest.raises(ValueError, match="leading dim 2"):
        runner.act_many(np.zeros((3, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"episode_start must be one value or 2 values .* got shape \(3,\)"):
        runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0], episode_start=[0, 0, 1])
    with pytest.raises(ValueError, match=r"agent_index must be a non-negative int or 2 of them"):
        runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0], agent_index=[[0, 1]])
    with pytest.raises(ValueError, match="episodes is empty"):
        runner.act_many(np.zeros((0, 2), np.float32), [])
    with pytest.raises(TypeError, match=r"episode key must be hashable, got list \['x'\]"):
        runner.act(np.zeros(2, np.float32), ["x"])
    assert runner.episodes == ["a", "b"]
    runner.act(np.ones(2, np.float32), "a", reward=1.0)  # step 1 of "a": the refused calls stored nothing
    assert p.seen[-1]["t"][0] == 1 and p.seen[-1]["stack"][0, 1:].tolist() == [[0, 0], [1, 1]]
    runner.reset("b")
    runner.act(np.zeros(2, np.float32), "c")  # its slot is free again
    with pytest.raises(KeyError, match=r"no running episode 'b'; running: \['a', 'c'\]"):
        runner.reset("b")
    runner.reset()
    assert len(runner) == 0


@pytest.mark.parametrize("bad", ["no", "False", 0.0, 2, -1, np.float32(1), None, [True]])
def test_episode_start_is_a_bool_or_an_int_0_or_1_nothing_read_as_one(bad):
    """``episode_start`` is read as a bool only when it is one (numpy's too) or an int 0 / 1: ``"no"`` (which
    ``bool()`` reads as True) is a ValueError naming it, in act, act_many and compute_single_action alike, and the
    refused call changes nothing."""
    p, runner = echo_runner(2)
    runner.act(np.zeros(2, np.float32), "a")
    runner.act(np.ones(2, np.float32), "a", reward=1.0)
    if bad is None:  # (None means False in act_many; in act it is not a bool)
        with pytest.raises(ValueError, match=r"PolicyRunner.act: episode_start must be a bool \(or an int 0 / 1\)"):
            runner.act(np.ones(2, np.float32), "a", reward=1.0, episode_start=bad)
    elif isinstance(bad, list):
        with pytest.raises(ValueError, match=r"episode_start must be one value or 2 values"):
            runner.act_many(np.ones((2, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0], episode_start=bad)
    else:
        with pytest.raises(ValueError, match=r"PolicyRunner.act: episode_start must be a bool \(or an int 0 / 1\), "
                                             rf"got {type(bad).__name__}"):
            runner.act(np.ones(2, np.float32), "a", reward=1.0, episode_start=bad)
        with pytest.raises(ValueError, match=r"PolicyRunner.act_many: episode_start must be a bool or one per "
                                             r"episode"):
            runner.act_many(np.ones((2, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0], episode_start=[bad, bad])
        q = Echo(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4))
        q.compute_single_action(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match=r"compute_single_action: episode_start must be a bool"):
            q.compute_single_action(np.zeros(2, np.float32), prev_reward=1.0, episode_start=bad)
        q.compute_single_action(np.ones(2, np.float32), prev_reward=1.0)
        assert q.seen[-1]["t"][0] == 1, "the refused call neither restarted nor stepped the episode"
    assert runner.episodes == ["a"]
    runner.act(np.full(2, 2, np.float32), "a", reward=1.0)
    assert p.seen[-1]["t"][0] == 2 and p.seen[-1]["stack"][0, :, 0].tolist() == [0, 1, 2]
    # What is accepted: bools (numpy's too) and ints 0 / 1, one or one per episode.
    runner.act(np.zeros(2, np.float32), "a", episode_start=np.bool_(True))
    assert p.seen[-1]["t"][0] == 0
    runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], rewards=[1.0, 1.0], episode_start=np.array([0, 1]))
    assert p.seen[-1]["t"].tolist() == [1, 0]
    runner.act(np.zeros(2, np.float32), "b", reward=1.0, episode_start=1)
    assert p.seen[-1]["t"][0] == 0


def test_timestep_is_none_or_a_non_negative_int():
    p, runner = echo_runner(1)
    for bad in ("x", 1.5, -1, True):
        with pytest.raises(ValueError, match=rf"PolicyRunner: timestep \(None or an int\) must be an int >= 0, got "
                                             rf"{re.escape(repr(bad))}$"):
            runner.act(np.zeros(2, np.float32), "a", timestep=bad)
    assert len(runner) == 0
    runner.act(np.zeros(2, np.float32), "a", timestep=np.int64(5))
    with pytest.raises(ValueError, match=r"compute_single_action: timestep \(None or an int\) must be an int >= 0"):
        p.compute_single_action(np.zeros(2, np.float32), timestep="x")


def test_compute_single_action_errors_name_it_and_its_arguments():
    """The implicit episode's errors name compute_single_action and its prev_reward, not the runner it acts
    through."""
    p = Echo(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4))
    p.compute_single_action(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"^compute_single_action: the policy reads rewards .*\(compute_single_action"
                                         r"\(obs, prev_reward=r\)\)$"):
        p.compute_single_action(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"^compute_single_action: column 'obs': expected one observation of shape "
                                         r"\(2,\) \(no batch axis\), got shape \(1, 2\)$"):
        p.compute_single_action(np.zeros((1, 2), np.float32), prev_reward=1.0)
    with pytest.raises(ValueError, match=r"^column 'rewards': compute_single_action got rewards of dtype <U1"):
        p.compute_single_action(np.zeros(2, np.float32), prev_reward="x")
    with pytest.raises(ValueError, match=r"^compute_single_action: explore must be a bool or None, got str"):
        p.compute_single_action(np.zeros(2, np.float32), prev_reward=1.0, explore="yes")

    def boom(d, **kw):
        raise RuntimeError("injected")

    p.compute_actions_from_input_dict = boom
    with pytest.raises(RuntimeError, match="injected") as info:
        p.compute_single_action(np.zeros(2, np.float32), prev_reward=1.0)
    assert info.value.__notes__ == ["compute_single_action: its episode was reset (the next call begins a new one)"]
    del p.compute_actions_from_input_dict
    p.compute_single_action(np.ones(2, np.float32))
    assert p.seen[-1]["t"][0] == 0


def test_a_call_whose_policy_raised_leaves_the_rewards_dtype_as_it_was():
    """The rewards' dtype a runner hands the policy follows the rewards it was given (float32 only: float32, as a
    worker): a call that raised in the policy, given float64 rewards, does not change it for the other episodes."""
    p, runner = echo_runner(2)
    obs = np.zeros((2, 2), np.float32)
    runner.act_many(obs, ["a", "b"])
    runner.act_many(obs, ["a", "b"], rewards=np.float32([1, 2]))
    assert p.seen[-1]["prev_rewards"].dtype == np.float32

    def boom(d, **kw):
        raise RuntimeError("injected")

    p.compute_actions_from_input_dict = boom
    with pytest.raises(RuntimeError, match="injected"):
        runner.act(obs[0], "a", reward=1.5)  # (a Python float: float64)
    del p.compute_actions_from_input_dict
    runner.act(obs[0], "b", reward=np.float32(3))
    assert runner.episodes == ["b"] and p.seen[-1]["prev_rewards"].dtype == np.float32


def test_episode_keys_are_checked_wherever_they_stand():
    """An unhashable key (a list, an array, a tuple holding one) is the runner's TypeError naming it, in any
    position, with or without episode_start; None is refused (reset(None) means every episode)."""
    obs2 = np.zeros((2, 2), np.float32)
    for keys, start in [([["x"], "a"], None), (["a", ["x"]], None), ([["x"], "a"], [True, True]),
                        (["a", np.array([1, 2])], None), ([("g", np.array([1])), "a"], None),
                        ([("g", ["p"]), "a"], None)]:
        p, runner = echo_runner(4)
        runner.act_many(obs2, ["a", "b"])
        with pytest.raises(TypeError, match=r"PolicyRunner: an episode key must be hashable, got (list|ndarray|tuple)"):
            runner.act_many(obs2, keys, rewards=[1.0, 1.0], episode_start=start)
        assert runner.episodes == ["a", "b"] if start is None else runner.episodes == ["b"]
    with pytest.raises(TypeError, match=r"PolicyRunner.reset: an episode key must be hashable, got list \['x'\]"):
        runner.reset(["x"])
    with pytest.raises(ValueError, match="None cannot be an episode key"):
        runner.act_many(obs2, [None, "c"])
    with pytest.raises(TypeError, match="episodes must be a sequence of episode keys .* got int 5"):
        runner.act_many(obs2, 5)
    assert runner.episodes == ["a", "b"]


def test_rewards_follow_the_workers_rule():
    """NaN, bools and strings are refused as rewards (the rule for what an env returns), before anything is
    stored: the episode goes on as if the call had not been made."""
    p, runner = echo_runner(2)
    runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"])
    for bad in (float("nan"), True, np.float32("nan"), "1.0", np.array([1.0])):
        with pytest.raises(ValueError, match=r"column 'rewards': PolicyRunner.act got"):
            runner.act(np.ones(2, np.float32), "a", reward=bad)
    for bad in ([np.nan, 1.0], [True, False], [2**60, 1]):
        with pytest.raises(ValueError, match=r"column 'rewards': PolicyRunner.act_many got"):
            runner.act_many(np.ones((2, 2), np.float32), ["a", "b"], rewards=bad)
    assert runner.episodes == ["a", "b"]
    runner.act(np.ones(2, np.float32), "a", reward=np.int32(3))
    assert p.seen[-1]["t"][0] == 1 and p.seen[-1]["prev_rewards"][0] == 3.0


def test_act_names_the_shapes_it_was_given():
    p, runner = echo_runner(1)
    runner.act(np.zeros(2, np.float32), "e")
    with pytest.raises(ValueError, match=r"expected one observation of shape \(2,\) .* got shape \(1, 2\)"):
        runner.act(np.zeros((1, 2), np.float32), "e", reward=1.0)
    with pytest.raises(ValueError, match=r"PolicyRunner.act got rewards of dtype float64 and shape \(1,\), expected .* "
                                         r"shape \(\)"):
        runner.act(np.zeros(2, np.float32), "e", reward=np.array([1.0]))
    runner.act(np.ones(2, np.float32), "e", reward=1.0)
    assert p.seen[-1]["t"][0] == 1


def test_agent_index_is_checked():
    class Indexed(Echo):
        def __init__(self, o, a, config=None):
            super().__init__(o, a, config)
            self.view_requirements["agent_index"] = tv.ViewRequirement()

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            self.indices = np.array(d["agent_index"])
            return super().compute_actions_from_input_dict(d)

    p = Indexed(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4))
    runner = tv.PolicyRunner(p, max_episodes=4)
    for bad in (1.9, True, -3, "1", None):
        with pytest.raises(ValueError, match=r"PolicyRunner.act: agent_index must be a non-negative int, got"):
            runner.act(np.zeros(2, np.float32), "e", agent_index=bad)
    for bad in ([0.5, 1.7], "x", [None, 1], [0, -1]):
        with pytest.raises(ValueError, match=r"PolicyRunner.act_many: agent_index must be a non-negative int or 2"):
            runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], agent_index=bad)
    assert len(runner) == 0
    runner.act_many(np.zeros((2, 2), np.float32), ["a", "b"], agent_index=np.uint8(3))
    assert p.indices.tolist() == [3, 3] and p.indices.dtype == np.int64
    runner.act(np.zeros(2, np.float32), "c", agent_index=np.int32(2))
    assert p.indices.tolist() == [2]


@pytest.mark.parametrize("refusal", ["store", "full", "no rewards", "duplicate", "explore", "bad rewards"])
def test_a_refused_restart_is_forgotten_whatever_refused_it(refusal):
    """The class doc: a call refused before the policy runs forgets the episodes it was asked to restart, and
    nothing else; the next call with the key begins a new episode without episode_start."""
    p = Echo(S.Box(-9.0, 9.0, (2,), np.float32), S.Discrete(4))
    runner = tv.PolicyRunner(p, max_episodes=2)
    o = np.zeros((2, 2), np.float32)
    runner.act_many(o, ["a", "b"])
    runner.act_many(o + 1, ["a", "b"], rewards=[1.0, 1.0])  # both at t=1
    call = dict(obs=o, episodes=["a", "b"], rewards=[1.0, 1.0], episode_start=[True, False])
    call.update({"store": dict(obs=np.zeros((2, 2))), "full": dict(episodes=["a", "c"]),
                 "no rewards": dict(rewards=None), "explore": dict(explore="False"),
                 "duplicate": dict(obs=np.zeros((3, 2), np.float32), episodes=["a", "b", "b"],
                                   rewards=[1.0] * 3, episode_start=[True, False, False]),
                 "bad rewards": dict(rewards=[1.0, float("nan")])}[refusal])
    with pytest.raises(ValueError):
        runner.act_many(call.pop("obs"), call.pop("episodes"), **call)
    assert runner.episodes == ["b"]
    runner.act(np.full(2, 5, np.float32), "a", reward=2.0)
    assert p.seen[-1]["t"][0] == 0 and p.seen[-1]["stack"][0].tolist() == [[0, 0], [0, 0], [5, 5]]
    runner.act(np.full(2, 2, np.float32), "b", reward=2.0)
    assert p.seen[-1]["t"][0] == 2


def test_explore_is_checked_on_every_call():
    p, runner = echo_runner(1)
    for call in (lambda: runner.act(np.zeros(2, np.float32), "e", explore="False"),
                 lambda: runner.act_many(np.zeros((1, 2), np.float32), ["e"], explore=1),
                 lambda: p.compute_single_action(np.zeros(2, np.float32), explore="no")):
        with pytest.raises(ValueError, match="explore must be a bool or None, got"):
            call()
    assert len(runner) == 0


def test_a_policy_that_raises_forgets_the_calls_episodes():
    p, runner = echo_runner()
    runner.act(np.zeros(2, np.float32), "a")
    runner.act(np.zeros(2, np.float32), "b")

    def boom(d, **kw):
        raise RuntimeError("model failed")

    p.compute_actions_from_input_dict = boom
    with pytest.raises(RuntimeError, match="model failed") as info:
        runner.act(np.ones(2, np.float32), "a", reward=0.0)
    assert "episodes of this call were reset: ['a']" in "".join(getattr(info.value, "__notes__", []))
    assert runner.episodes == ["b"]
    del p.compute_actions_from_input_dict
    runner.act(np.ones(2, np.float32), "a")  # a new episode
    assert p.seen[-1]["t"][0] == 0


def test_bad_policy_outputs_are_refused_as_in_a_worker():
    class Bad(Echo):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            a, s, e = super().compute_actions_from_input_dict(d)
            return a + 10, s, e

    runner = tv.PolicyRunner(Bad(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4)))
    with pytest.raises(ValueError, match="actions outside the action space"):
        runner.act(np.zeros(2, np.float32))
    assert len(runner) == 0


def test_settings_are_checked():
    p = Echo(S.Box(-1.0, 1.0, (2,), np.float32), S.Discrete(4))
    with pytest.raises(ValueError, match="max_episodes must be a positive int, got 0"):
        tv.PolicyRunner(p, max_episodes=0)
    with pytest.raises(ValueError, match="nan_outputs must be one of"):
        tv.PolicyRunner(p, nan_outputs="maybe")
    with pytest.raises(TypeError, match="policy must be a trajview Policy, got str"):
        tv.PolicyRunner("policy")  # type: ignore[arg-type]


def test_a_long_episode_keeps_only_the_rows_its_views_read():
    """The runner frees emitted steps every 32 calls: a long episode holds a bounded store, its views intact."""
    p, runner = echo_runner(1)
    sizes = []
    for t in range(300):
        runner.act(np.full(2, t, np.float32), reward=float(t))
        assert runner._collector.num_steps() <= 32
        sizes.append(runner._collector.nbytes())
    assert max(sizes[100:]) <= max(sizes[:100]), "the store keeps growing"
    assert p.seen[-1]["t"][0] == 299 and p.seen[-1]["stack"][0, :, 0].tolist() == [297, 298, 299]
    assert p.seen[-1]["prev_rewards"][0] == 299.0


def test_the_guides_vector_env_loop():
    """docs/guides/porting.md, serving a trained policy: a SAME_STEP-autoreset VectorEnv driven by act_many with
    episode_start; every episode's first frame stack holds only its first observation."""
    pytest.importorskip("torch")
    vec_env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync",
                           vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    policy = ppo("framestack", vec_env.single_observation_space, vec_env.single_action_space, **MODELS["framestack"])
    runner = tv.PolicyRunner(policy, max_episodes=8, explore=False)
    seen = record(policy)
    obs, infos = vec_env.reset(seed=0)
    start, rewards = np.ones(8, dtype=bool), None
    ends = 0
    for _ in range(60):
        actions = runner.act_many(obs, episodes=range(8), rewards=rewards, episode_start=start)
        stacks = seen[-1][0]["prev_n_obs"]
        np.testing.assert_array_equal(stacks[:, -1], obs)
        assert not stacks[start, :-1].any()
        obs, rewards, terminated, truncated, infos = vec_env.step(actions)
        start = terminated | truncated
        ends += int(start.sum())
    assert ends > 0 and len(runner) == 8


def test_a_policy_that_acted_alone_still_pickles_and_copies():
    """WorkerSet ships policies by pickle: the implicit episode (a C++ store) stays behind, a copy begins its own."""
    import copy
    import pickle

    p = Echo(S.Box(-100.0, 100.0, (2,), np.float32), S.Discrete(4))
    p.compute_single_action(np.zeros(2, np.float32))
    p.compute_single_action(np.ones(2, np.float32), prev_reward=1.0)
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        q.compute_single_action(np.full(2, 5, np.float32))
        assert q.seen[-1]["t"][0] == 0 and q.seen[-1]["stack"][0].tolist() == [[0, 0], [0, 0], [5, 5]]
    p.compute_single_action(np.full(2, 2, np.float32), prev_reward=1.0)
    assert p.seen[-1]["t"][0] == 2


def test_episodes_that_sit_out_a_call_keep_their_last_outputs():
    """The last call's outputs are stored with each episode's next step, also after calls without it."""
    p, runner = echo_runner(3)
    o = np.array([[1, 1], [2, 2]], np.float32)
    acts, states, _ = runner.act_many(o, ["a", "b"], rewards=[0.0, 0.0], full_fetch=True)
    runner.act_many(o[:1] + 10, ["a"], rewards=[1.0])  # "b" sits out
    runner.act_many(o[:1] + 20, ["c"], rewards=[1.0])  # a new one
    runner.act_many(o + 30, ["a", "b"], rewards=[2.0, 3.0])
    seen = p.seen[-1]
    assert seen["t"].tolist() == [2, 1]
    assert seen["prev_actions"][1] == acts[1] and seen["prev_rewards"][1] == 3.0
    np.testing.assert_array_equal(seen["state_in_0"][1], states[0][1])
    assert seen["stack"][1].tolist() == [[0, 0], [2, 2], [32, 32]]


@pytest.mark.parametrize("model, says", [
    ("lstm", "(state=: a list of 4 arrays, as get_initial_state() gives)"),
    ("attention", "(state=: a list of 2 arrays, each the last 6 state_out rows of its index stacked, zeros before "
                  "the episode's first step: [steps, ...], not get_initial_state()'s single rows)"),
])
def test_a_call_that_carries_the_history_is_told_what_state_holds(model, says):
    """RLlib's stateless call (the caller passes the views): a missing one is named, with what ``state=`` holds: a
    row per state for the LSTM, a window of the last state_outs per state for the attention model's memory."""
    p = ppo(model, BOX, S.Discrete(3), **MODELS[model])
    steps = len(p.view_requirements["state_in_0"].shift_arr)
    state = [np.zeros((steps, *s.shape), s.dtype) if steps > 1 else s for s in p.get_initial_state()]
    with pytest.raises(ValueError, match="the policy reads .* which this call did not pass") as e:
        p.compute_single_action(np.zeros(3, np.float32), state=state)
    assert says in str(e.value)


@pytest.mark.parametrize("model", ["lstm", "attention"])
def test_a_state_of_the_wrong_shape_or_count_is_named(model):
    """``state=`` on the call that carries its history: as many arrays as the policy's state, each one step's state
    (LSTM) or the window of them its view reads (attention memory): anything else is named, with the shape wanted."""
    p = ppo(model, BOX, S.Discrete(3), **MODELS[model])
    init = p.get_initial_state()
    steps = len(p.view_requirements["state_in_0"].shift_arr)
    good = [np.zeros((steps, *s.shape), s.dtype) if steps > 1 else s for s in init]
    want = good[0].shape
    with pytest.raises(ValueError, match=rf"state= holds {len(init) + 1} arrays, this policy's state has {len(init)}"):
        p.compute_single_action(np.zeros(3, np.float32), state=[*good, good[0]], prev_action=0, prev_reward=0.0)
    with pytest.raises(ValueError, match=rf"state\[0\] \(state_in_0\) must have shape {re.escape(str(want))} .* got "
                                         rf"{re.escape(str((1, *want)))}"):
        p.compute_single_action(np.zeros(3, np.float32), state=[g[None] for g in good], prev_action=0, prev_reward=0.0)


@pytest.mark.parametrize("model", ["framestack", "mlp"])
def test_a_state_given_to_a_policy_without_state_is_refused(model):
    """Found by a new-user trial: ``state=`` on a policy that keeps none was ignored without a word. ``[]`` (RLlib's
    state of such a policy) is taken; anything else is named."""
    p = ppo(model, BOX, S.Discrete(3), **MODELS[model])
    assert p.get_initial_state() == []
    obs = np.zeros(3, np.float32)
    for bad, got in (([np.zeros(4, np.float32)], "1 arrays"), (np.zeros(4), "ndarray")):
        with pytest.raises(ValueError, match=re.escape(
                "compute_single_action: this policy keeps no state (get_initial_state() is [], it reads no "
                f"state_in_i view): state= must be None or [], got {got}")):
            p.compute_single_action(obs, state=bad, prev_action=0, prev_reward=0.0)
    if model == "mlp":  # (the frame stack reads views a stateless call must pass: prev_n_obs)
        action, state_outs, _ = p.compute_single_action(obs, state=[])
        assert state_outs == [] and 0 <= int(action) < 3


def test_bad_observations_and_keys_are_refused_naming_the_call_the_shape_passed_and_the_fix():
    """Found by a new-user trial: a wrong obs shape in ``act_many`` (some episodes running, some new) named a one-row
    slice of it and not the call; a float64 array for a float32 space named no call and no fix; a repeated key
    without rewards was refused for the rewards. Each refusal changes nothing: the next good call acts."""
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    policy = Echo(space, gym.spaces.Discrete(4))
    runner = tv.PolicyRunner(policy, max_episodes=2)
    runner.act(np.zeros(2, np.float32), "a", reward=0.0)
    with pytest.raises(ValueError, match=re.escape(
            "PolicyRunner.act_many: obs column 'obs': expected 2 observations of shape (2,) (shape (2, 2)), got "
            "shape (2, 5)")):
        runner.act_many(np.zeros((2, 5), np.float32), ["a", "c"], rewards=[1.0, 1.0])
    fix = "the observation space's dtype is float32: pass np.asarray(obs, np.float32)"
    with pytest.raises(ValueError, match=re.escape("PolicyRunner.act_many: column 'obs': expected dtype float32, got "
                                                   "float64 (casting would lose data); " + fix)):
        runner.act_many(np.zeros((2, 2)), ["a", "c"], rewards=[1.0, 1.0])
    with pytest.raises(ValueError, match=re.escape("PolicyRunner.act: column 'obs': expected dtype float32, got "
                                                   "float64 (casting would lose data); " + fix)):
        runner.act(np.zeros(2), "a", reward=1.0)
    with pytest.raises(ValueError, match=re.escape("compute_single_action: column 'obs': expected dtype float32, "
                                                   "got float64 (casting would lose data); " + fix)):
        policy.compute_single_action(np.zeros(2))
    with pytest.raises(ValueError, match=re.escape("each episode may act once per call; repeated: 'a'")):
        runner.act_many(np.zeros((2, 2), np.float32), ["a", "a"])
    with pytest.raises(ValueError, match=re.escape("2 new episode(s), but only 1 of max_episodes=2 slots are free")):
        runner.act_many(np.zeros((2, 2), np.float32), ["b", "c"], rewards=[1.0, 1.0])
    assert runner.episodes == ["a"]
    # What is refused is nothing the store took: "a" goes on from its first step, an int16 obs casts exactly.
    actions = runner.act_many(np.ones((2, 2), np.int16), ["a", "b"], rewards=[1.0, 1.0])
    assert actions.shape == (2,)
    np.testing.assert_array_equal(policy.seen[-1]["stack"][0], [[0, 0], [0, 0], [1, 1]])
