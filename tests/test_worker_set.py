"""`tv.WorkerSet`: rollout workers in processes of their own, sampled in parallel."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import trajview as tv
from rollout_helpers import (
    UID_STRIDE,
    FailingEnv,
    ObsActionPolicy,
    ScriptedEnv,
    assert_failure_reported_then_stopped,
    expected_action,
)

VR = tv.ViewRequirement


class StackPolicy(ObsActionPolicy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = VR("obs", shift="-2:0")


_ENV_INDEX = itertools.count()  # per process: each worker numbers its own envs 0, 1, ...


def env_creator(cfg):
    """A worker's k-th env: env index k (uids k * UID_STRIDE + episode), episodes of 4 and 6 steps."""
    return ScriptedEnv(lengths=(4, 6), env_index=next(_ENV_INDEX))


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_workers_sample_in_parallel_and_every_step_appears_once(batch_mode):
    with tv.WorkerSet(env_creator, StackPolicy, num_workers=2, num_envs=2, rollout_fragment_length=5,
                      batch_mode=batch_mode) as ws:
        seen = set()
        for _ in range(3):
            each = ws.sample_each()
            assert len(each) == 2
            for worker, b in enumerate(each, start=1):
                if batch_mode == "truncate_episodes":
                    assert len(b) == 2 * 5
                # eps_ids carry the worker index: no collision between workers.
                assert (np.asarray(b["eps_id"]) >> 40 == worker).all()
                for ep in b.split_by_episode():
                    uid, t = ep["obs"][:, 0].astype(int), ep["obs"][:, 1].astype(int)
                    np.testing.assert_array_equal(ep["actions"], [expected_action(u, s) for u, s in zip(uid, t)])
                    for r in range(len(ep)):
                        want = [[uid[r], t[r] + s] if t[r] + s >= 0 else [0, 0] for s in (-2, -1, 0)]
                        assert ep["stack"][r].tolist() == want
                    for row in zip(b["eps_id"] >> 40, uid, t):
                        assert row not in seen
                        seen.add(row)
        merged = ws.sample()
        assert isinstance(merged, tv.SampleBatch)
        if batch_mode == "truncate_episodes":
            assert len(merged) == 2 * 2 * 5
        assert set((np.asarray(merged["eps_id"]) >> 40).tolist()) == {1, 2}
        metrics = ws.get_metrics()
        assert metrics["episode_lengths"] and set(metrics["episode_lengths"]) <= {4, 6}
        assert all(u < 2 * UID_STRIDE for u in merged["obs"][:, 0].astype(int))  # env indices 0 and 1


class LinearPolicy(tv.TorchPolicy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config, model=torch.nn.Linear(2, 5))

    def action_sampler(self, input_dict, explore):
        return torch.argmax(self.model(input_dict["obs"]), dim=-1), [], {}

    def loss(self, train_batch):
        return self.model(train_batch["obs"]).sum() + 0 * train_batch["actions"].sum()


def test_weights_reach_every_worker():
    learner = LinearPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space)
    with torch.no_grad():
        learner.model.weight.fill_(0.0)
        learner.model.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0]))  # always action 3
    with tv.WorkerSet(env_creator, LinearPolicy, num_workers=2, rollout_fragment_length=6) as ws:
        ws.sync_weights(learner)
        for w in ws.get_weights():
            for k, v in learner.get_weights().items():
                np.testing.assert_array_equal(w["default_policy"][k], v)
        assert (np.asarray(ws.sample()["actions"]) == 3).all()


def failing_creator(cfg):
    return FailingEnv()


def test_worker_errors_name_the_worker_and_carry_its_traceback():
    assert_failure_reported_then_stopped(
        tv.WorkerSet(failing_creator, ObsActionPolicy, num_workers=2, rollout_fragment_length=5)
    )


def test_construction_errors():
    with pytest.raises(RuntimeError, match=r"rollout worker 1 failed:(.|\n)*rollout_fragment_length"):
        tv.WorkerSet(env_creator, ObsActionPolicy, num_workers=1, rollout_fragment_length=0)
    with pytest.raises(ValueError, match="num_workers must be an int >= 1"):
        tv.WorkerSet(env_creator, ObsActionPolicy, num_workers=0)
    with pytest.raises(ValueError, match="worker_index"):
        tv.WorkerSet(env_creator, ObsActionPolicy, worker_index=3)
    with pytest.raises(ValueError, match="start_method must be one of"):
        tv.WorkerSet(env_creator, ObsActionPolicy, start_method="teleport")


def test_base_policy_has_no_weights():
    p = ObsActionPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space)
    assert p.get_weights() == {}
    p.set_weights({})
    with pytest.raises(NotImplementedError, match="has no weights to set"):
        p.set_weights({"w": np.zeros(2)})


def test_backend_is_checked():
    with pytest.raises(ValueError, match="backend must be 'process' or 'ray'"):
        tv.WorkerSet(env_creator, ObsActionPolicy, backend="mpi")


class RandomPolicy(ObsActionPolicy):
    """Draws actions from torch's and numpy's global RNGs, as exploration does."""

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        n = len(input_dict["obs"])
        return (torch.randint(0, 5, (n,)).numpy() + np.random.randint(0, 5, n)) % 5, [], {}


def test_workers_draw_different_random_numbers_reproducibly_with_a_seed():
    def actions(seed):
        torch.manual_seed(0)  # the driver's state, which forked workers would otherwise inherit
        np.random.seed(0)
        with tv.WorkerSet(env_creator, RandomPolicy, num_workers=2, rollout_fragment_length=40, seed=seed) as ws:
            return [np.asarray(b["actions"]) for b in ws.sample_each()]

    a1, a2 = actions(seed=7)
    assert not np.array_equal(a1, a2)  # the two workers explore differently
    b1, b2 = actions(seed=7)
    np.testing.assert_array_equal(a1, b1)  # and the same way again with the same seed
    np.testing.assert_array_equal(a2, b2)
    c1, c2 = actions(seed=None)
    assert not np.array_equal(c1, c2)


def test_metrics_are_gathered_from_every_worker():
    kwargs = dict(rollout_fragment_length=12, restart_failed_sub_environments=True, metrics_window=2)

    def creator(cfg):
        return FailingEnv(lengths=(1, 2, 4))  # episodes of 1 and 2 steps end; one of 4 fails at t=2

    w = tv.RolloutWorker(creator, ObsActionPolicy, **kwargs)
    w.sample()
    one = w.get_metrics()
    assert one["episodes_dropped"] > 0 and one["num_faulty_episodes"] > 0 and one["num_env_restarts"] > 0
    with tv.WorkerSet(creator, ObsActionPolicy, num_workers=2, **kwargs) as ws:
        ws.sample()
        m = ws.get_metrics()
    for k in ("episode_returns", "episode_lengths"):
        assert m[k] == one[k] + one[k]  # worker 1's, then worker 2's
    for k in ("episodes_dropped", "num_faulty_episodes", "num_env_restarts"):
        assert m[k] == 2 * one[k]
    assert (m["num_worker_restarts"], m["num_healthy_workers"]) == (0, 2)
