"""RLlib conventions ported code relies on: recurrent views from get_initial_state, dones/unroll_id/agent_index
views, reward dtypes, explore, compute_single_action, custom metrics, Episode.last_*_for, pruned-column errors."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import trajview as tv

VR = tv.ViewRequirement


def cartpole(cfg=None):
    return gym.make("CartPole-v1")


class Zero(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        self.last_explore = explore
        return np.zeros(len(d["obs"]), np.int64), [], {}


class Recurrent(tv.Policy):
    """Defines only get_initial_state; reads state_in_0 at action time (RLlib builds the view before pruning)."""

    def get_initial_state(self):
        return [np.zeros(3, np.float32)]

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        h = np.asarray(d["state_in_0"])
        return np.zeros(len(h), np.int64), [h + 1], {}


def test_state_in_views_exist_before_pruning():
    w = tv.RolloutWorker(cartpole, Recurrent, rollout_fragment_length=5)
    b = w.sample()
    np.testing.assert_array_equal(b["state_in_0"][:, 0], b["t"].astype(np.float32))
    np.testing.assert_array_equal(b["state_out_0"][:, 0], b["t"].astype(np.float32) + 1)


class ReadsComputed(Zero):
    def loss(self, b):
        return b["dones"], b["unroll_id"], b["agent_index"], b["obs"]


def test_dones_unroll_id_agent_index_views_single_agent():
    w = tv.RolloutWorker(cartpole, ReadsComputed, num_envs=3, rollout_fragment_length=30)
    for k in range(2):
        b = w.sample()
        np.testing.assert_array_equal(b["dones"], b["terminateds"] | b["truncateds"])
        assert (b["unroll_id"] == k).all() and (b["agent_index"] == 0).all()
        assert b["dones"].any()


def test_computed_views_are_pruned_when_unread():
    w = tv.RolloutWorker(cartpole, ReadsObsOnly, rollout_fragment_length=5)
    b = w.sample()
    for k in ("dones", "unroll_id", "agent_index", "infos"):
        assert k not in b
        with pytest.raises(KeyError, match="pruned"):
            b[k]


class ReadsObsOnly(Zero):
    def loss(self, b):
        return b["obs"]


def test_pruned_key_error_says_how_to_keep_it():
    w = tv.RolloutWorker(cartpole, ReadsObsOnly, rollout_fragment_length=5)
    b = w.sample()
    with pytest.raises(KeyError, match=r"'new_obs': this view was pruned.*read it in the loss.*used_for_training = True"):
        b["new_obs"]
    with pytest.raises(KeyError) as e:
        b["no_such_column"]
    assert "pruned" not in str(e.value)
    # The way the message gives keeps it: the next batch holds it.
    w.policy.view_requirements["new_obs"].used_for_training = True
    b = w.sample()
    assert b["new_obs"].shape == (5, 4)


class F32Rewards(gym.Wrapper):
    def step(self, a):
        o, r, te, tr, i = self.env.step(a)
        return o, np.float32(r), te, tr, i


class ReadsRewards(Zero):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        self.input_dtype = np.asarray(d["prev_rewards"]).dtype
        return np.zeros(len(d["obs"]), np.int64), [], {}


@pytest.mark.parametrize("f32", [True, False])
def test_rewards_dtype_follows_the_env(f32):
    mk = (lambda c: F32Rewards(cartpole())) if f32 else cartpole
    w = tv.RolloutWorker(mk, ReadsRewards, num_envs=2, rollout_fragment_length=5)
    w.sample()
    b = w.sample()
    want = np.float32 if f32 else np.float64
    assert b["rewards"].dtype == want and b["prev_rewards"].dtype == want and w.policy.input_dtype == want


def test_vector_env_float32_rewards():
    class V(gym.vector.SyncVectorEnv):
        def step(self, a):
            o, r, te, tr, i = super().step(a)
            return o, r.astype(np.float32), te, tr, i

    w = tv.RolloutWorker(lambda c: V([cartpole, cartpole]), ReadsRewards, rollout_fragment_length=5)
    assert w.sample()["rewards"].dtype == np.float32


def test_explore_flag_reaches_the_policy():
    w = tv.RolloutWorker(cartpole, Zero, rollout_fragment_length=2)
    w.sample()
    assert w.policy.last_explore is True
    w.sample(explore=False)
    assert w.policy.last_explore is False
    w = tv.RolloutWorker(cartpole, Zero, rollout_fragment_length=2, explore=False)
    w.sample()
    assert w.policy.last_explore is False


def test_compute_single_action():
    class P(tv.Policy):
        def get_initial_state(self):
            return [np.zeros(2, np.float32)]

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            self.explore = explore
            obs = np.asarray(d["obs"])
            return (obs[:, 0] > 0).astype(np.int64), [np.asarray(d["state_in_0"]) + 1], {"v": obs[:, 1]}

    env = cartpole()
    p = P(env.observation_space, env.action_space)
    a, s, extra = p.compute_single_action(np.array([1, 2, 3, 4], np.float32), [np.zeros(2, np.float32)], explore=False)
    assert a == 1 and p.explore is False
    np.testing.assert_array_equal(s[0], [1, 1])
    assert extra["v"] == 2.0


class Metrics(tv.Callbacks):
    def on_episode_end(self, *, episode, **kw):
        episode.custom_metrics["len2"] = episode.length * 2
        episode.custom_metrics["maybe"] = math.nan if episode.length % 2 else 1.0
        episode.hist_data["lens"] = [episode.length]
        episode.media["note"] = f"ep{episode.episode_id}"


def test_custom_metrics_reach_get_metrics():
    w = tv.RolloutWorker(cartpole, Zero, num_envs=2, rollout_fragment_length=100, callbacks=Metrics())
    w.sample()
    m = w.get_metrics()
    lens = m["episode_lengths"]
    assert lens
    cm = m["custom_metrics"]
    assert cm["len2_mean"] == pytest.approx(2 * np.mean(lens))
    assert cm["len2_min"] == 2 * min(lens) and cm["len2_max"] == 2 * max(lens)
    assert m["hist_stats"]["lens"] == lens and m["hist_stats"]["episode_lengths"] == lens
    assert len(m["episode_media"]["note"]) == len(lens)


def test_custom_metrics_through_worker_set():
    with tv.WorkerSet(cartpole, Zero, num_workers=2, rollout_fragment_length=100, callbacks=Metrics()) as ws:
        ws.sample()
        m = ws.get_metrics()
    lens = m["episode_lengths"]
    assert m["custom_metrics"]["len2_mean"] == pytest.approx(2 * np.mean(lens))
    assert m["custom_metrics"]["len2_max"] == 2 * max(lens)
    assert sorted(m["hist_stats"]["lens"]) == sorted(lens)


class LastInfoEnv(gym.Wrapper):
    def reset(self, **kw):
        self.k = 0
        o, _ = self.env.reset(**kw)
        return o, {"k": 0}

    def step(self, a):
        self.k += 1
        o, r, te, tr, _ = self.env.step(a)
        return o, r, te, tr, {"k": self.k}


def test_single_agent_last_values_are_fresh_without_infos_in_training():
    """postprocess_trajectory reads the episode's last info, reward, action and observation; infos are pruned."""
    seen = []

    class P(ReadsObsOnly):
        def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
            if episode is not None and len(batch):
                seen.append((episode.length, episode.last_info_for(), episode.last_reward_for(),
                             episode.last_action_for(), np.asarray(episode.last_observation_for()).shape))
            return batch

    w = tv.RolloutWorker(lambda c: LastInfoEnv(cartpole()), P, rollout_fragment_length=3)
    w.sample()
    w.sample()
    assert seen[-1][0] == 6 and seen[-1][1] == {"k": 6} and seen[-1][2] == 1.0 and seen[-1][3] == 0
    assert seen[-1][4] == (4,)


@pytest.mark.parametrize("with_hooks", [False, True])
def test_episode_seen_in_postprocessing_is_current_at_every_segment(with_hooks):
    """Each segment's episode: length, last info, action and observation are those of the segment's last row."""
    seen = []

    class P(ReadsObsOnly):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            return np.ones(len(d["obs"]), np.int64), [], {}

        def postprocess_trajectory(self, b, other_agent_batches=None, episode=None):
            if episode is not None:
                seen.append((int(b["t"][-1]) + 1, episode.length, episode.last_info_for()["k"],
                             episode.last_action_for(), np.allclose(episode.last_observation_for(), b["new_obs"][-1])))
            return b

        def loss(self, b):
            return b["obs"], b["new_obs"], b["actions"]

    class CB(tv.Callbacks):
        def on_episode_step(self, **kw):
            pass

    w = tv.RolloutWorker(lambda c: LastInfoEnv(cartpole()), P, num_envs=3, rollout_fragment_length=7,
                         callbacks=CB() if with_hooks else None)
    for _ in range(4):
        w.sample()
    assert len(seen) > 12
    assert all(s[0] == s[1] == s[2] and s[3] == 1 and s[4] for s in seen), seen


def test_pruned_message_survives_worker_processes():
    with tv.WorkerSet(cartpole, ReadsObsOnly, num_workers=2, rollout_fragment_length=5) as ws:
        b = ws.sample()
    with pytest.raises(KeyError, match="this view was pruned"):
        b["new_obs"]
