"""RolloutWorker: the semantics of docs/contract.md, Rollouts, as executable examples."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import trajview as tv
from rollout_helpers import ObsActionPolicy, ScriptedEnv, creator_from, expected_action, make_envs

VR = tv.ViewRequirement
SB = tv.SampleBatch


def worker(num_envs=1, lengths=(10,), truncate=False, policy=ObsActionPolicy, **kw):
    envs = make_envs(num_envs, lengths, truncate)
    return tv.RolloutWorker(creator_from(envs), policy, num_envs=num_envs, **kw), envs


def uid_t(batch):
    return batch["obs"][:, 0].astype(int), batch["obs"][:, 1].astype(int)


# -- batch sizes -------------------------------------------------------------------------


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("length", [7, 10, 25])
def test_truncate_episodes_returns_exactly_fragment_times_envs(num_envs, length):
    w, _ = worker(num_envs, lengths=(length,), rollout_fragment_length=10)
    for _ in range(3):
        b = w.sample()
        assert len(b) == b.count == 10 * num_envs


def test_complete_episodes_98_plus_98_is_196():
    w, _ = worker(1, lengths=(98,), batch_mode="complete_episodes", rollout_fragment_length=100)
    b = w.sample()
    assert len(b) == 196
    assert b["terminateds"].sum() == 2
    uid, t = uid_t(b)
    assert list(np.unique(uid)) == [0, 1]
    np.testing.assert_array_equal(t, np.concatenate([np.arange(98), np.arange(98)]))


def test_complete_episodes_never_cuts_an_episode():
    w, _ = worker(2, lengths=(3, 11, 5), batch_mode="complete_episodes", rollout_fragment_length=4)
    for _ in range(4):
        b = w.sample()
        assert len(b) >= 8
        for ep in b.split_by_episode():
            _, t = uid_t(ep)
            np.testing.assert_array_equal(t, np.arange(len(ep)))  # starts at 0, no gaps
            assert ep["terminateds"][-1] and not ep["terminateds"][:-1].any()


# -- views across fragment cuts ---------------------------------------------------------------


class StackPolicy(ObsActionPolicy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["prev_n_obs"] = VR("obs", shift="-3:0")
        self.view_requirements["prev_actions"] = VR("actions", shift=-1)
        self.seen_inputs = []

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        self.seen_inputs.append({k: np.array(v) for k, v in input_dict.items()})
        _ = input_dict["prev_n_obs"], input_dict["prev_actions"]
        return super().compute_actions_from_input_dict(input_dict)

    def loss(self, train_batch):
        return [train_batch[k] for k in ("obs", "prev_n_obs", "prev_actions", "new_obs", "actions")]


def test_frame_stack_and_prev_actions_look_back_across_fragment_cuts_but_not_into_other_episodes():
    w, _ = worker(2, lengths=(7, 4), policy=StackPolicy, rollout_fragment_length=3)
    for _ in range(6):
        b = w.sample()
        uid, t = uid_t(b)
        for r in range(len(b)):
            for j, s in enumerate(range(-3, 1)):
                frame = b["prev_n_obs"][r, j]
                if t[r] + s >= 0:
                    np.testing.assert_array_equal(frame, [uid[r], t[r] + s])  # same episode, even before the cut
                else:
                    np.testing.assert_array_equal(frame, [0, 0])  # zeros before the episode's start
            want = expected_action(uid[r], t[r] - 1) if t[r] >= 1 else 0
            assert b["prev_actions"][r] == want
            assert b["actions"][r] == expected_action(uid[r], t[r])
    # The action computation saw the same views.
    for inp in w.policy.seen_inputs:
        for row in range(2):
            u, tt = inp["obs"][row]
            assert inp["prev_n_obs"][row, -1].tolist() == [u, tt]
            if tt >= 1:
                assert inp["prev_actions"][row] == expected_action(u, tt - 1)


def test_new_obs_at_episode_end_is_the_final_observation_not_the_reset_one():
    w, _ = worker(1, lengths=(4,), rollout_fragment_length=12)
    b = w.sample()
    uid, t = uid_t(b)
    np.testing.assert_array_equal(b["new_obs"][:, 1], t + 1)
    np.testing.assert_array_equal(b["new_obs"][:, 0], uid)  # the last new_obs is (uid, 4), not the next reset
    assert b["terminateds"].tolist() == [False, False, False, True] * 3


@pytest.mark.parametrize(
    "mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.DISABLED]
)
def test_vector_env_any_autoreset_mode(mode):
    n = 3

    def creator(cfg):
        return gym.vector.SyncVectorEnv(
            [lambda i=i: ScriptedEnv((3 + i, 5), i) for i in range(n)], autoreset_mode=mode
        )

    w = tv.RolloutWorker(creator, ObsActionPolicy, rollout_fragment_length=8)
    seen = set()
    for _ in range(3):
        b = w.sample()
        assert len(b) == 8 * n
        uid, t = uid_t(b)
        np.testing.assert_array_equal(b["new_obs"][:, 0], uid)  # final obs of its own episode
        np.testing.assert_array_equal(b["new_obs"][:, 1], t + 1)
        np.testing.assert_array_equal(b["actions"], (uid + t) % 5)
        for ep in b.split_by_episode():
            u = int(ep["obs"][0, 0])
            length = (3 + u // 10_000, 5)[(u % 10_000) % 2]
            if ep["terminateds"][-1]:
                assert int(ep["obs"][-1, 1]) == length - 1
        pairs = set(zip(uid.tolist(), t.tolist()))
        assert len(pairs) == len(b) and not pairs & seen
        seen |= pairs


# -- horizon ---------------------------------------------------------------------------


def test_horizon_cuts_with_truncated_and_resets():
    w, envs = worker(1, lengths=(100,), horizon=4, rollout_fragment_length=10)
    b = w.sample()
    uid, t = uid_t(b)
    assert t.max() == 3
    assert b["truncateds"].tolist() == [False, False, False, True] * 2 + [False, False]
    assert not b["terminateds"].any()
    assert envs[0].k == 2  # reset at each horizon


def test_soft_horizon_starts_a_new_episode_without_reset_or_flags():
    w, envs = worker(1, lengths=(100,), horizon=4, soft_horizon=True, rollout_fragment_length=10)
    b = w.sample()
    eps = b["eps_id"]
    assert len(np.unique(eps)) == 3
    np.testing.assert_array_equal(b["t"], [0, 1, 2, 3] * 2 + [0, 1])
    assert not b["truncateds"].any() and not b["terminateds"].any()
    assert envs[0].k == 0  # never reset
    _, env_t = uid_t(b)
    np.testing.assert_array_equal(env_t, np.arange(10))  # the env's own clock runs on


def test_no_done_at_end_never_sets_flags():
    w, _ = worker(2, lengths=(3,), no_done_at_end=True, rollout_fragment_length=6)
    b = w.sample()
    assert not b["terminateds"].any() and not b["truncateds"].any()
    assert len(np.unique(b["eps_id"])) == 4  # episodes still end and restart


# -- pruning -------------------------------------------------------------------------------


class PruningPolicy(tv.Policy):
    """Acts on obs only; postprocessing adds 'advantages'; the loss reads obs, actions, advantages."""

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {"vf_preds": np.ones(len(input_dict["obs"]), np.float32)}

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        sample_batch["advantages"] = sample_batch["rewards"] - sample_batch["vf_preds"]
        return sample_batch

    def loss(self, train_batch):
        return [train_batch[k] for k in ("obs", "actions", "advantages")]


def test_pruning_pass_marks_unread_views_and_keeps_never_pruned_ones():
    w, _ = worker(1, policy=PruningPolicy, rollout_fragment_length=5)
    b = w.sample()
    vrs = w.policy.view_requirements
    assert vrs["obs"].used_for_compute_actions
    for k in ("prev_actions", "prev_rewards", "t", "eps_id", "env_id"):
        assert not vrs[k].used_for_compute_actions, k
    for k in ("prev_actions", "prev_rewards", "infos", "env_id", "new_obs"):
        assert not vrs[k].used_for_training, k
        assert k not in b, k
    for k in ("obs", "actions", "rewards", "vf_preds", "terminateds", "truncateds", "eps_id", "t", "advantages"):
        assert k in b, k
    assert "advantages" in vrs and not vrs["advantages"].used_for_compute_actions
    np.testing.assert_array_equal(b["advantages"], b["rewards"] - 1)


def test_policy_without_loss_keeps_its_training_views():
    w, _ = worker(1, rollout_fragment_length=5)
    b = w.sample()
    for k in ("prev_actions", "prev_rewards", "new_obs", "infos", "env_id"):
        assert k in b, k
    assert b["infos"][0] == {"uid": 0, "t": 1}


def test_next_actions_added_after_construction_reaches_training_but_not_action_computation():
    class Recording(ObsActionPolicy):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.keys = []

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            self.keys.append(set(input_dict))
            return super().compute_actions_from_input_dict(input_dict)

    w, _ = worker(1, lengths=(4,), policy=Recording, rollout_fragment_length=4)
    w.sample()
    w.policy.view_requirements["next_actions"] = VR("actions", shift=1)
    b = w.sample()
    uid, t = uid_t(b)
    want = [expected_action(u, tt + 1) if tt + 1 < 4 else 0 for u, tt in zip(uid, t)]
    np.testing.assert_array_equal(b["next_actions"], want)
    assert all("next_actions" not in k for k in w.policy.keys)


# -- callbacks -------------------------------------------------------------------------------


class Recorder(tv.Callbacks):
    def __init__(self):
        self.events = []

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kw):
        assert isinstance(worker, tv.RolloutWorker) and "default_policy" in policies
        self.events.append(("start", episode.episode_id, env_index, episode.length))

    def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kw):
        self.events.append(("step", episode.episode_id, env_index, episode.length))

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kw):
        self.events.append(("end", episode.episode_id, env_index, episode.length, episode.total_reward))

    def on_postprocess_trajectory(
        self, *, worker, episode, agent_id, policy_id, policies, postprocessed_batch, original_batches, **kw
    ):
        assert policy_id == "default_policy" and set(postprocessed_batch["eps_id"]) == {episode.episode_id}
        self.events.append(("post", episode.episode_id, len(postprocessed_batch)))

    def on_sample_end(self, *, worker, samples, **kw):
        self.events.append(("sample_end", len(samples)))


def test_callbacks_order_and_arguments():
    cb = Recorder()
    w, _ = worker(1, lengths=(2,), callbacks=cb, rollout_fragment_length=3)
    w.sample()
    e0, e1 = cb.events[0][1], cb.events[4][1]
    assert cb.events == [
        ("start", e0, 0, 0),
        ("step", e0, 0, 1),
        ("step", e0, 0, 2),
        ("end", e0, 0, 2, 3.0),  # rewards 1 + 2
        ("start", e1, 0, 0),
        ("step", e1, 0, 1),
        ("post", e0, 2),
        ("post", e1, 1),
        ("sample_end", 3),
    ]


# -- bad input -------------------------------------------------------------------------------


class BadObsEnv(ScriptedEnv):
    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        return obs.astype(np.float64), r, te, tr, info


def test_env_observation_of_wrong_dtype_is_a_clear_error():
    w = tv.RolloutWorker(lambda cfg: BadObsEnv(), ObsActionPolicy, rollout_fragment_length=3)
    with pytest.raises(ValueError, match=r"column 'obs'.*float64.*float32"):
        w.sample()


def test_policy_returning_wrong_number_of_actions_is_a_clear_error():
    class Bad(tv.Policy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            return np.zeros(1, np.int64), [], {}

    w, _ = worker(3, policy=Bad)
    with pytest.raises(ValueError, match=r"'actions'.*leading dim 3.*\(1,\)"):
        w.sample()


def test_policy_returning_lossy_action_dtype_is_a_clear_error():
    class Bad(tv.Policy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            return np.full(len(input_dict["obs"]), 1.5), [], {}

    w, _ = worker(2, policy=Bad)
    with pytest.raises(ValueError, match=r"column 'actions': expected dtype int64, got float64"):
        w.sample()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"batch_mode": "episodes"}, "batch_mode must be one of"),
        ({"rollout_fragment_length": 0}, "rollout_fragment_length must be an int >= 1, got 0"),
        ({"count_steps_by": "steps"}, "count_steps_by must be one of"),
        ({"horizon": -1}, "horizon must be an int >= 1, got -1"),
        ({"soft_horizon": True}, "soft_horizon=True needs a horizon"),
        ({"num_envs": 0}, "num_envs must be an int >= 1, got 0"),
    ],
)
def test_bad_config_values_name_the_setting(kw, match):
    with pytest.raises(ValueError, match=match):
        tv.RolloutWorker(lambda cfg: ScriptedEnv(), ObsActionPolicy, **kw)


def test_view_of_a_column_no_one_produces_is_a_clear_error():
    class Bad(ObsActionPolicy):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.view_requirements["ghost"] = VR("nope", shift=-1)

    w, _ = worker(1, policy=Bad)
    with pytest.raises(ValueError, match="'nope', which nothing produces before the first action.*give the view space="):
        w.sample()


class SignPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return (np.asarray(input_dict["obs"])[:, 2] > 0).astype(np.int64), [], {}


def test_seed_makes_sampling_reproducible():
    def run(seed):
        w = tv.RolloutWorker(lambda cfg: gym.make("CartPole-v1"), SignPolicy, num_envs=3, seed=seed,
                             rollout_fragment_length=30)
        return w.sample()

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a["obs"], b["obs"])
    np.testing.assert_array_equal(a["actions"], b["actions"])
    assert not np.array_equal(a["obs"], c["obs"])
