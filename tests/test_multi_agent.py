"""Multi-agent rollouts: PettingZoo ParallelEnv, policy mapping, MultiAgentBatch, step counting."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")

import trajview as tv  # noqa: E402

VR = tv.ViewRequirement


class TwoAgentEnv(pettingzoo.ParallelEnv):
    """Agents 'a' and 'b'; obs = (uid, t) with uid = env*10000 + episode*10 + agent; 'b' ends first."""

    metadata = {"name": "two_agent_v0"}

    def __init__(self, env_index=0, len_a=5, len_b=3):
        self.possible_agents = ["a", "b"]
        self.lengths = {"a": len_a, "b": len_b}
        self.env_index = env_index
        self.k = -1
        self.t = 0
        self.agents = []

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(5)

    def uid(self, agent):
        return self.env_index * 10_000 + self.k * 10 + self.possible_agents.index(agent)

    def _obs(self, agent):
        return np.array([self.uid(agent), self.t], np.float32)

    def reset(self, seed=None, options=None):
        self.k += 1
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for a in self.agents:
            obs[a] = self._obs(a)
            rew[a] = float(self.t)
            term[a] = self.t >= self.lengths[a]
            trunc[a] = False
            info[a] = {}
        self.agents = [a for a in self.agents if not term[a]]
        return obs, rew, term, trunc, info


class UidPolicy(tv.Policy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["prev_n_obs"] = VR("obs", shift="-1:0")

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        obs = np.asarray(input_dict["obs"])
        return (obs[:, 0].astype(np.int64) + obs[:, 1].astype(np.int64)) % 5, [], {}


def make(num_envs=2, **kw):
    it = iter(range(100))
    return tv.RolloutWorker(lambda cfg: TwoAgentEnv(next(it)), kw.pop("policy", UidPolicy), num_envs=num_envs, **kw)


def rows(batch):
    return list(zip(batch["obs"][:, 0].astype(int).tolist(), batch["obs"][:, 1].astype(int).tolist()))


def test_env_steps_fragment_and_every_agent_step_once():
    w = make(2, rollout_fragment_length=4)
    seen = set()
    for _ in range(5):
        b = w.sample()
        assert isinstance(b, tv.MultiAgentBatch)
        assert b.env_steps() == 8
        pb = b.policy_batches["default_policy"]
        assert b.agent_steps() == len(pb)
        for r in rows(pb):
            assert r not in seen
            seen.add(r)
        np.testing.assert_array_equal(pb["actions"], (pb["obs"][:, 0].astype(int) + pb["obs"][:, 1].astype(int)) % 5)
        np.testing.assert_array_equal(pb["agent_index"], pb["obs"][:, 0].astype(int) % 10)
        np.testing.assert_array_equal(pb["env_id"], pb["obs"][:, 0].astype(int) // 10_000)
        for ep in pb.split_by_episode():  # one agent's trajectory: the views never mix agents
            assert len(set(ep["obs"][:, 0])) == 1
            prev = ep["prev_n_obs"][:, 0]
            has_prev = ep["t"] >= 1
            np.testing.assert_array_equal(prev[has_prev, 0], ep["obs"][has_prev, 0])
            np.testing.assert_array_equal(prev[~has_prev], 0)
    # Per env episode: 'a' acts 5 steps, 'b' 3; every step of every finished episode was seen.
    for env in range(2):
        for k in range(3):
            for agent, length in ((0, 5), (1, 3)):
                uid = env * 10_000 + k * 10 + agent
                assert all((uid, t) in seen for t in range(length))


def test_agent_steps_are_counted_exactly():
    w = make(2, rollout_fragment_length=5, count_steps_by="agent_steps")
    seen = set()
    for _ in range(6):
        b = w.sample()
        assert b.agent_steps() == 10
        for r in rows(b.policy_batches["default_policy"]):
            assert r not in seen
            seen.add(r)


def test_two_policies_each_get_their_agents():
    w = make(
        1,
        policy={"pa": UidPolicy, "pb": UidPolicy},
        policy_mapping_fn=lambda agent_id, episode, **kw: "p" + agent_id,
        rollout_fragment_length=6,
    )
    b = w.sample()
    assert set(b.policy_batches) == {"pa", "pb"}
    assert set(b.policy_batches["pa"]["agent_index"]) == {0}
    assert set(b.policy_batches["pb"]["agent_index"]) == {1}
    assert len(b.policy_batches["pa"]) == 6  # 'a' acts every env step (episodes of 5)
    assert len(b.policy_batches["pb"]) == 3 + 1  # 'b': 3 steps in episode 0, 1 in episode 1


def test_complete_episodes_returns_whole_agent_trajectories():
    w = make(1, rollout_fragment_length=4, batch_mode="complete_episodes")
    b = w.sample().policy_batches["default_policy"]
    for ep in b.split_by_episode():
        assert ep["t"][0] == 0 and ep["terminateds"][-1]


def test_missing_policy_mapping_is_a_clear_error():
    with pytest.raises(ValueError, match="policy_mapping_fn is required with 2 policies"):
        make(1, policy={"x": UidPolicy, "y": UidPolicy})


class InfoEnv(TwoAgentEnv):
    """TwoAgentEnv whose info for each agent says which step (uid, t after the step) it belongs to."""

    def step(self, actions):
        obs, rew, term, trunc, info = super().step(actions)
        return obs, rew, term, trunc, {a: {"uid": self.uid(a), "t": self.t} for a in obs}


class InfoPolicy(UidPolicy):
    """Trains on infos, so the pruning pass keeps them."""

    def loss(self, train_batch):
        return train_batch["infos"], train_batch["obs"]


@pytest.mark.parametrize("count_steps_by", ["env_steps", "agent_steps"])
@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_infos_reach_each_agents_rows(count_steps_by, batch_mode):
    it = iter(range(100))
    w = tv.RolloutWorker(lambda cfg: InfoEnv(next(it)), InfoPolicy, num_envs=2, rollout_fragment_length=4,
                         count_steps_by=count_steps_by, batch_mode=batch_mode)
    seen = 0
    for _ in range(5):
        batch = w.sample().policy_batches["default_policy"]
        assert batch["infos"].dtype == object and len(batch["infos"]) == len(batch)
        for (uid, t), info in zip(rows(batch), batch["infos"]):
            assert info == {"uid": uid, "t": t + 1}  # the info the env returned after this row's step
            seen += 1
    assert seen >= 5 * 4


class LateRewardEnv(TwoAgentEnv):
    """TwoAgentEnv that rewards 'b' once more, one step after 'b' terminated (in env 0's first episode only)."""

    def step(self, actions):
        obs, rew, term, trunc, info = super().step(actions)
        if self.env_index == 0 and self.k == 0 and self.t == self.lengths["b"] + 1:
            rew["b"] = 7.0
        return obs, rew, term, trunc, info


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_a_reward_after_an_agent_finished_is_an_error_naming_it(batch_mode):
    # RLlib raises too: the reward belongs to no step (dropping it would change the agent's return silently).
    it = iter(range(100))
    w = tv.RolloutWorker(lambda cfg: LateRewardEnv(next(it)), UidPolicy, num_envs=2, rollout_fragment_length=6,
                         batch_mode=batch_mode)
    with pytest.raises(ValueError, match=r"env 0: reward 7\.0 for agent 'b', which already finished"):
        w.sample()
    # The step was stored for no env (every env is cut where it was, as for any fault), and the next batches hold
    # every stored step once, the late reward in none of them.
    seen: dict = {}
    for _ in range(3):
        pb = w.sample().policy_batches["default_policy"]
        for (uid, t), r, te, tr in zip(rows(pb), pb["rewards"], pb["terminateds"], pb["truncateds"]):
            assert (uid, t) not in seen
            seen[(uid, t)] = (float(r), bool(te), bool(tr))
    assert 7.0 not in {r for r, _, _ in seen.values()}
    for env in range(2):  # episode 0 of each env: 'b' finished at its 3rd step; 'a' was cut after its 3rd
        assert [seen[(env * 10_000 + 1, t)] for t in range(3)] == [(1.0, False, False), (2.0, False, False),
                                                                   (3.0, True, False)]
        assert [seen[(env * 10_000, t)] for t in range(3)] == [(1.0, False, False), (2.0, False, False),
                                                               (3.0, False, True)]
        assert (env * 10_000, 3) not in seen
