"""RLlib's worker API on `RolloutWorker`: a registered env id wherever an env creator goes (RolloutWorker,
WorkerSet), ``sub_environments`` / ``foreach_env`` / ``foreach_policy``, ``get_weights`` / ``set_weights``."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from ma_envs import Script, ScriptedEnv
from rollout_helpers import ObsActionPolicy

import trajview as tv
from trajview.envs.make import GymMake, as_env_creator


class FirstAction(tv.Policy):
    """Action 0 always; weights: one number, kept."""

    def __init__(self, o, a, c=None):
        super().__init__(o, a, c)
        self.w = {"x": np.zeros(1)}

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["obs"]), np.int64), [], {}

    def get_weights(self):
        return {k: v.copy() for k, v in self.w.items()}

    def set_weights(self, weights):
        if set(weights) != {"x"}:
            raise ValueError(f"expected weights {{'x'}}, got {sorted(weights)}")
        self.w = {"x": np.asarray(weights["x"]).copy()}


def test_a_registered_env_id_makes_the_same_batches_as_its_gym_make_creator():
    a = tv.RolloutWorker("CartPole-v1", FirstAction, num_envs=2, rollout_fragment_length=30, seed=3)
    b = tv.RolloutWorker(lambda cfg: gym.make("CartPole-v1"), FirstAction, num_envs=2, rollout_fragment_length=30,
                         seed=3)
    ba, bb = a.sample(), b.sample()
    for k in ("obs", "actions", "rewards", "terminateds", "eps_id", "t"):
        np.testing.assert_array_equal(ba[k], bb[k])
    assert [e.spec.id for e in a.sub_environments()] == ["CartPole-v1", "CartPole-v1"]


def test_env_config_goes_to_gym_make_as_keyword_arguments():
    w = tv.RolloutWorker("CartPole-v1", FirstAction, env_config={"max_episode_steps": 4}, rollout_fragment_length=12,
                         batch_mode="complete_episodes", seed=0)
    w.sample()
    lengths = w.get_metrics()["episode_lengths"]
    assert lengths and all(n <= 4 for n in lengths)
    assert w.foreach_env(lambda e: e.spec.max_episode_steps) == [4]


def test_the_env_id_creator_pickles_and_bad_creators_are_refused():
    c = as_env_creator("CartPole-v1")
    assert isinstance(c, GymMake) and pickle.loads(pickle.dumps(c)) == c
    f = lambda cfg: None  # noqa: E731
    assert as_env_creator(f) is f
    with pytest.raises(TypeError, match="env_creator must be a callable env_creator.*or a registered gymnasium env "
                                        "id.*got int 3"):
        tv.RolloutWorker(3, FirstAction)
    with pytest.raises(ValueError, match="an empty env id"):
        tv.RolloutWorker("", FirstAction)
    with pytest.raises(gym.error.Error, match="NoSuchEnv"):
        tv.RolloutWorker("NoSuchEnv-v0", FirstAction)


def test_worker_set_takes_an_env_id():
    with tv.WorkerSet("CartPole-v1", FirstAction, num_workers=2, num_envs=2, rollout_fragment_length=5) as ws:
        b = ws.sample()
    assert len(b) == 2 * 2 * 5
    assert b["obs"].shape[1:] == (4,)
    with pytest.raises(TypeError, match="env_creator must be a callable"):
        tv.WorkerSet(None, FirstAction, num_workers=1)


def test_foreach_env_reaches_each_sub_environment():
    w = tv.RolloutWorker(lambda cfg: gym.make("CartPole-v1"), FirstAction, num_envs=3)
    envs = w.sub_environments()
    assert len(envs) == 3 and all(isinstance(e, gym.Env) for e in envs) and len({id(e) for e in envs}) == 3
    assert w.foreach_env(lambda e: e) == envs
    v = tv.RolloutWorker(lambda cfg: gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), FirstAction)
    assert v.foreach_env(lambda e: e.spec.id) == ["CartPole-v1", "CartPole-v1"]
    a = tv.RolloutWorker(lambda cfg: gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async"), FirstAction)
    try:
        assert a.sub_environments() == [a.base_env]  # an async vector env: its envs live in other processes
    finally:
        a.stop()


def _ma_worker():
    scripts = [Script(5, [0, 0], [None, None], [True, True], [3])]
    return tv.RolloutWorker(lambda cfg: ScriptedEnv(scripts, 2), {"p0": FirstAction, "p1": FirstAction},
                            policy_mapping_fn=lambda agent_id, episode: "p" + agent_id[1], num_envs=2)


def test_foreach_policy_calls_each_policy_with_its_id_and_kwargs():
    w = _ma_worker()
    assert w.foreach_policy(lambda p, pid, k: (pid, type(p).__name__, k), k=1) == [("p0", "FirstAction", 1),
                                                                                  ("p1", "FirstAction", 1)]
    assert len(w.foreach_env(lambda e: e.n)) == 2


def test_get_and_set_weights_by_policy_id_and_a_refused_set_changes_nothing():
    w = _ma_worker()
    assert {k: v["x"].tolist() for k, v in w.get_weights().items()} == {"p0": [0.0], "p1": [0.0]}
    w.set_weights({"p1": {"x": np.array([2.0])}})
    assert w.get_weights(["p1"])["p1"]["x"].tolist() == [2.0]
    assert w.get_weights(["p0"])["p0"]["x"].tolist() == [0.0]
    with pytest.raises(KeyError, match=r"set_weights: no policy \['p9'\] in this worker \(its policies: \['p0', "
                                       r"'p1'\]\)"):
        w.set_weights({"p0": {"x": np.array([5.0])}, "p9": {}})
    assert w.get_weights()["p0"]["x"].tolist() == [0.0]  # checked before any was set
    with pytest.raises(ValueError, match="expected weights"):
        w.set_weights({"p0": {"x": np.array([5.0])}, "p1": {"y": 1}})
    assert {k: v["x"].tolist() for k, v in w.get_weights().items()} == {"p0": [0.0], "p1": [2.0]}  # p0 put back
    with pytest.raises(TypeError, match=r"set_weights takes \{policy_id: weights\}"):
        w.set_weights([1])


def test_weights_move_a_torch_policy_between_workers():
    torch = pytest.importorskip("torch")
    env = gym.make("CartPole-v1")
    cfg = {"model": "mlp"}
    torch.manual_seed(1)
    learner = tv.PPOPolicy(env.observation_space, env.action_space, cfg)
    torch.manual_seed(2)
    w = tv.RolloutWorker("CartPole-v1", tv.PPOPolicy(env.observation_space, env.action_space, cfg), seed=0,
                         explore=False, rollout_fragment_length=20)
    w.set_weights({"default_policy": learner.get_weights()})
    for k, v in learner.get_weights().items():
        np.testing.assert_array_equal(w.get_weights()["default_policy"][k], v)
    b = w.sample()
    want = learner.compute_actions_from_input_dict({"obs": b["obs"]}, explore=False)[0]
    np.testing.assert_array_equal(b["actions"], want)


def test_obs_action_policy_worker_unchanged_by_the_api():
    w = tv.RolloutWorker("CartPole-v1", ObsActionPolicy, rollout_fragment_length=3)
    assert w.get_weights() == {"default_policy": {}}
    w.set_weights({"default_policy": {}})
    assert len(w.sample()) == 3
