"""Multi-agent batch sizes (SPEC section 6), turn-based agents, deaths and late joins, against a pure-Python
reference of RLlib's semantics (tests/ma_reference.py); the AEC and dict-API adapters; RLlib's conventions
(other_agent_batches, the mapping-function signature, Episode.last_*_for per agent)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pettingzoo")

import trajview as tv  # noqa: E402
from ma_envs import CountingGame, Script, ScriptedEnv  # noqa: E402
from ma_reference import expected_complete, reference_log  # noqa: E402

VR = tv.ViewRequirement


class RefPolicy(tv.Policy):
    """Acts (uid + s) % 7 and checks that the input's env_id and agent_index match the observation's uid."""

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
        obs = np.asarray(input_dict["obs"])
        uid = obs[:, 0].astype(np.int64)
        env_id, agent_index = input_dict["env_id"], input_dict["agent_index"]
        if self._views_initialized:  # not the pruning pass (its dummy input holds samples of the spaces)
            np.testing.assert_array_equal(env_id, uid // 100_000)
            np.testing.assert_array_equal(agent_index, uid % 10)
        return (obs[:, 0] + obs[:, 1]).astype(np.int64) % 7, [], {}

    def loss(self, b):
        return [b[k] for k in ("obs", "new_obs", "actions", "rewards", "prev_actions", "prev_rewards",
                               "agent_index", "env_id", "dones", "unroll_id")]


def rllib_mapping(agent_id, episode, worker, **kwargs):
    assert isinstance(worker, tv.RolloutWorker)
    return "even" if int(agent_id[1:]) % 2 == 0 else "odd"


def make_worker(scripts, n_agents, num_envs, **kw):
    it = iter(range(1000))
    return tv.RolloutWorker(lambda cfg: ScriptedEnv(scripts, n_agents, next(it)),
                            {"even": RefPolicy, "odd": RefPolicy}, num_envs=num_envs,
                            policy_mapping_fn=rllib_mapping, **kw)


def batch_rows(batch):
    """{(uid, t): (obs_s, action, reward, term, trunc, new_obs_s, prev_action, prev_reward)} of every row."""
    out = {}
    for pid, pb in batch.policy_batches.items():
        uid = pb["obs"][:, 0].astype(np.int64)
        assert ((uid % 10) % 2 == (0 if pid == "even" else 1)).all()
        np.testing.assert_array_equal(pb["agent_index"], uid % 10)
        np.testing.assert_array_equal(pb["env_id"], uid // 100_000)
        np.testing.assert_array_equal(pb["new_obs"][:, 0].astype(np.int64), uid)
        np.testing.assert_array_equal(pb["dones"], pb["terminateds"] | pb["truncateds"])
        for j in range(len(pb)):
            key = (int(uid[j]), int(pb["t"][j]))
            assert key not in out, f"row {key} twice"
            out[key] = (float(pb["obs"][j, 1]), int(pb["actions"][j]), float(pb["rewards"][j]),
                        bool(pb["terminateds"][j]), bool(pb["truncateds"][j]), float(pb["new_obs"][j, 1]),
                        int(pb["prev_actions"][j]), float(pb["prev_rewards"][j]))
    return out


def ref_rows(rows):
    return {(r.uid, r.t): (r.obs_s, r.action, r.reward, r.term, r.trunc, r.new_obs_s, r.prev_action, r.prev_reward)
            for r in rows}


@st.composite
def scripts(draw, n_agents):
    out = []
    for _ in range(draw(st.integers(1, 3))):
        length = draw(st.integers(2, 8))
        join, leave, final = [0], [None], [True]
        for _a in range(1, n_agents):
            j = draw(st.integers(0, length - 1))
            lv = draw(st.one_of(st.none(), st.integers(j + 1, length)))
            join.append(j)
            leave.append(None if lv is None or lv >= length else lv)
            final.append(draw(st.booleans()))
        turns = draw(st.lists(st.integers(0, 2**n_agents - 1), min_size=1, max_size=3))
        out.append(Script(length, join, leave, final, turns, end_obs=draw(st.booleans())))
    return out


@st.composite
def setups(draw):
    n_agents = draw(st.integers(1, 4))
    return dict(
        scripts=draw(scripts(n_agents)),
        n_agents=n_agents,
        num_envs=draw(st.integers(1, 3)),
        fragment=draw(st.integers(1, 6)),
        horizon=draw(st.one_of(st.none(), st.integers(2, 6))),
        batch_mode=draw(st.sampled_from(["truncate_episodes", "complete_episodes"])),
        count=draw(st.sampled_from(["env_steps", "agent_steps"])),
    )


@settings(max_examples=60)
@given(setups())
def test_multi_agent_batches_match_the_reference(s):
    n_batches = 3
    w = make_worker(s["scripts"], s["n_agents"], s["num_envs"], rollout_fragment_length=s["fragment"],
                    batch_mode=s["batch_mode"], count_steps_by=s["count"], horizon=s["horizon"])
    batches = [w.sample() for _ in range(n_batches)]
    steps_taken = w.sampler._timestep // s["num_envs"]
    log = reference_log(lambda i: ScriptedEnv(s["scripts"], s["n_agents"], i), s["num_envs"], steps_taken + 1,
                        s["horizon"])
    target = s["fragment"] * s["num_envs"]
    by_agent = s["count"] == "agent_steps"
    all_ref = ref_rows([r for step in log for r in step.rows])
    got_all = {}
    for k, b in enumerate(batches):
        for pb in b.policy_batches.values():
            assert (pb["unroll_id"] == k).all()  # the k-th sample() (held-back rows: the batch they are in)
        rows = batch_rows(b)
        assert b.agent_steps() == len(rows)
        for k, v in rows.items():
            assert k not in got_all, f"row {k} in two batches"
            assert k in all_ref, f"row {k} not in the reference"
            assert v == pytest.approx(all_ref[k]), k
            got_all[k] = v
    if s["batch_mode"] == "complete_episodes":
        expected = expected_complete(log[:steps_taken], target, by_agent)
        assert len(expected) == n_batches
        for b, (keys, env_steps, agent_steps) in zip(batches, expected):
            assert b.env_steps() == env_steps
            assert b.agent_steps() == agent_steps
            assert (agent_steps if by_agent else env_steps) >= target
            want = {k for k in all_ref if k[0] // 10 in keys}
            assert set(batch_rows(b)) == want
    elif not by_agent:
        f = s["fragment"]
        assert steps_taken == n_batches * f
        for k, b in enumerate(batches):
            assert b.env_steps() == target
            want = ref_rows([r for step in log[k * f:(k + 1) * f] for r in step.rows])
            assert set(batch_rows(b)) == set(want)
    else:
        for b in batches:
            assert b.agent_steps() == target
        # Everything completed before the last step is in; rows of the last step may be held back.
        before_last = ref_rows([r for step in log[:steps_taken - 1] for r in step.rows])
        assert set(before_last) <= set(got_all)
        # Held-back rows are each trajectory's newest: what was emitted is a prefix of every trajectory.
        for uid, t in got_all:
            assert t == 0 or (uid, t - 1) in got_all


def test_complete_episodes_env_steps_count_whole_episodes():
    """Two agents, 10-step episodes, fragment 15 (SPEC 6): two episodes, 20 env steps (RLlib's figure)."""
    sc = Script(10, [0, 0], [None, None], [True, True], [0b11])
    w = make_worker([sc], 2, 1, rollout_fragment_length=15, batch_mode="complete_episodes")
    b = w.sample()
    assert b.env_steps() == 20 and b.agent_steps() == 40
    w = make_worker([Script(100, [0, 0], [None, None], [True, True], [0b11])], 2, 1, rollout_fragment_length=10,
                    batch_mode="complete_episodes", horizon=4)
    b = w.sample()
    assert b.env_steps() == 12 and b.agent_steps() == 24
    for pb in b.policy_batches.values():
        for ep in pb.split_by_episode():
            assert len(ep) == 4 and ep["truncateds"][-1] and ep["t"][0] == 0


def test_agent_done_early_waits_for_its_env_episode_in_complete_mode():
    sc = Script(6, [0, 0], [None, 2], [True, True], [0b11])
    w = make_worker([sc], 2, 1, rollout_fragment_length=3, batch_mode="complete_episodes")
    b = w.sample()
    assert b.env_steps() == 6
    assert len(b.policy_batches["odd"]) == 2 and len(b.policy_batches["even"]) == 6


def test_rewards_accumulate_while_an_agent_waits_and_last_values_per_agent():
    seen = {}

    class CB(tv.Callbacks):
        def on_episode_step(self, *, episode, **kw):
            seen[episode.length] = {a: (episode.last_observation_for(a)[1], episode.last_reward_for(a),
                                        episode.last_action_for(a), episode.last_info_for(a))
                                    for a in episode.get_agents()}

    # a0 is observed every step, a1 every other step: a1's rewards of two steps land on one of its steps.
    sc = Script(4, [0, 0], [None, None], [True, True], [0b11, 0b01])
    w = make_worker([sc], 2, 1, rollout_fragment_length=4, callbacks=CB())
    b = w.sample()
    odd = b.policy_batches["odd"]
    # a1 acts at steps 1 (obs s=0) and 3 (obs s=2); step 1's reward: (2 + 0.5) + (2 + 1.0) (s=1 and s=2)
    np.testing.assert_array_equal(odd["obs"][:, 1], [0, 2])
    np.testing.assert_allclose(odd["rewards"], [2.5 + 3.0, 3.5 + 4.0])
    np.testing.assert_array_equal(odd["prev_actions"], [0, odd["actions"][0]])
    # after env step 1: a1 is waiting, its last values are from its previous step (here: none yet)
    assert seen[1]["a1"][1] is None and seen[1]["a0"][1] == pytest.approx(1.5)
    assert seen[2]["a1"][1] == pytest.approx(5.5) and seen[2]["a1"][3] == {"s": 2}
    assert seen[2]["a0"][0] == 2 and seen[2]["a0"][2] == int(b.policy_batches["even"]["actions"][1])


def test_other_agent_batches_as_rllib_passes_them():
    got = []

    class P(RefPolicy):
        def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
            if other_agent_batches is not None and len(batch) and batch["obs"][0, 0] > 0:
                got.append((int(batch["agent_index"][0]), {
                    a: (pid, type(pol).__name__, int(ob["agent_index"][0])) for a, (pid, pol, ob) in
                    other_agent_batches.items()}))
            return batch

    sc = Script(3, [0, 0, 0], [None, None, None], [True] * 3, [0b111])
    it = iter(range(10))
    w = tv.RolloutWorker(lambda cfg: ScriptedEnv([sc], 3, next(it)), {"even": P, "odd": P},
                         policy_mapping_fn=rllib_mapping, rollout_fragment_length=3)
    w.sample()
    assert got
    for me, others in got:
        assert set(others) == {f"a{k}" for k in range(3)} - {f"a{me}"}
        for a, (pid, name, idx) in others.items():
            assert pid == ("even" if idx % 2 == 0 else "odd") and name == "P" and f"a{idx}" == a


def test_pettingzoo_aec_turns():
    class P(tv.Policy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
            o = np.asarray(input_dict["obs"])
            return o[:, 1].astype(np.int64) % 3, [], {}

        def loss(self, b):
            return b["obs"], b["actions"], b["rewards"], b["prev_actions"], b["new_obs"]

    w = tv.RolloutWorker(lambda c: CountingGame(n_players=2, moves=5), P, num_envs=2, rollout_fragment_length=5,
                         batch_mode="complete_episodes")
    assert type(w.adapter).__name__ == "PettingZooAECEnv"
    b = w.sample()
    assert b.env_steps() == 10 and b.agent_steps() == 10
    pb = b.policy_batches["default_policy"]
    for ep in pb.split_by_episode():
        player = int(ep["obs"][0, 0])
        moves = ep["obs"][:, 2].astype(int)
        np.testing.assert_array_equal(moves, np.arange(player, 5, 2))  # its own turns only
        np.testing.assert_array_equal(ep["prev_actions"][1:], ep["actions"][:-1])  # its own previous action
        np.testing.assert_array_equal(ep["new_obs"][:-1], ep["obs"][1:])
        assert ep["terminateds"][-1] and not ep["terminateds"][:-1].any()
        want = 0.1 * ep["actions"].astype(float)
        want[-1] += 1.0 if player == 0 else -1.0  # player 0 makes the 5th move and wins
        np.testing.assert_allclose(ep["rewards"], want)


def test_mapping_fn_signatures():
    for fn in (lambda agent_id, episode, **kw: "even" if agent_id in ("a0", "a2") else "odd",
               lambda agent_id, episode: "even" if agent_id in ("a0", "a2") else "odd",
               rllib_mapping):
        sc = Script(3, [0, 0], [None, None], [True, True], [0b11])
        w = tv.RolloutWorker(lambda c: ScriptedEnv([sc], 2), {"even": RefPolicy, "odd": RefPolicy},
                             policy_mapping_fn=fn, rollout_fragment_length=3)
        b = w.sample()
        assert set(b.policy_batches) == {"even", "odd"}


def test_multi_agent_observation_filter_and_float32_rewards():
    class F32(ScriptedEnv):
        def step(self, actions):
            obs, rew, te, tr, info = super().step(actions)
            return obs, {a: np.float32(r) for a, r in rew.items()}, te, tr, info

    class Zero(tv.Policy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            return np.zeros(len(d["obs"]), np.int64), [], {}

        def loss(self, b):
            return b["obs"], b["rewards"]

    sc = Script(5, [0, 0], [None, 3], [True, True], [0b11, 0b01])
    w = tv.RolloutWorker(lambda c: F32([sc], 2), {"even": Zero, "odd": Zero},
                         policy_mapping_fn=rllib_mapping, rollout_fragment_length=5,
                         observation_filter="MeanStdFilter")
    b = w.sample()
    for pid, pb in b.policy_batches.items():
        assert pb["rewards"].dtype == np.float32
        assert np.abs(pb["obs"]).max() <= 10.0  # filtered (raw uids are up to 100_000)
        f = w.filters[pid]
        assert f.running_stats.n > len(pb)  # every observation received, not only stored rows' obs


def test_multi_agent_soft_horizon_continues_without_reset_or_flags():
    sc = Script(100, [0, 0], [None, None], [True, True], [0b11, 0b01])
    w = make_worker([sc], 2, 1, rollout_fragment_length=6, horizon=3, soft_horizon=True)
    b = w.sample()
    for pid, pb in b.policy_batches.items():
        eps = pb.split_by_episode()
        assert len(eps) >= 2
        for ep in eps:
            assert not ep["terminateds"].any() and not ep["truncateds"].any()
            assert ep["t"][0] == 0
        for e1, e2 in zip(eps, eps[1:]):  # the env was not reset: the next piece goes on from the last obs
            assert e2["obs"][0, 1] >= e1["obs"][-1, 1]
        assert len({int(x) for x in pb["obs"][:, 0]}) == 1  # one env episode (uid) all along


def test_make_adapter_tells_the_multi_agent_kinds_apart():
    from test_multi_agent import TwoAgentEnv

    class WithSpacesDict(TwoAgentEnv):  # a ParallelEnv that also has an observation_spaces dict
        def __init__(self):
            super().__init__()
            self.observation_spaces = {a: self.observation_space(a) for a in self.possible_agents}

    kinds = {
        "PettingZooParallelEnv": lambda c: WithSpacesDict(),
        "PettingZooAECEnv": lambda c: CountingGame(),
        "MultiAgentDictEnv": lambda c: ScriptedEnv([Script(3, [0], [None], [True], [1])], 1),
    }
    for name, mk in kinds.items():
        assert type(tv.envs.make_adapter(mk, {}, 2)).__name__ == name
