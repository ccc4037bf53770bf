"""`tv.WorkerSet(backend="ray")`: rollout workers as Ray actors.

Ray is optional (``pip install ray``); without it this module is skipped. The
process backend (test_worker_set.py) covers the same protocol everywhere.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

import rollout_helpers  # noqa: E402
import trajview as tv  # noqa: E402
from rollout_helpers import (  # noqa: E402
    FailingEnv,
    ObsActionPolicy,
    ScriptedEnv,
    assert_failure_reported_then_stopped,
    expected_action,
)
from trajview.errors import WorkerError  # noqa: E402


@pytest.fixture(scope="module")
def ray_session():
    # The actors unpickle this module's and rollout_helpers' classes by value: their files are not on the
    # workers' import path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(rollout_helpers)
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never an existing cluster
        yield
    finally:
        ray.shutdown()


def test_ray_workers_sample_sync_and_report_errors(ray_session):
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((4, 6), env_index=next(counter)), ObsActionPolicy,
                      num_workers=2, backend="ray", num_envs=2, rollout_fragment_length=5) as ws:
        each = ws.sample_each()
        for worker, b in enumerate(each, start=1):
            assert len(b) == 10
            assert (np.asarray(b["eps_id"]) >> 40 == worker).all()
            uid, t = b["obs"][:, 0].astype(int), b["obs"][:, 1].astype(int)
            np.testing.assert_array_equal(b["actions"], [expected_action(u, s) for u, s in zip(uid, t)])
        assert len(ws.sample()) == 20
        assert ws.get_weights() == [{"default_policy": {}}, {"default_policy": {}}]
        ws.set_weights({})
    assert_failure_reported_then_stopped(
        tv.WorkerSet(lambda cfg: FailingEnv(), ObsActionPolicy, num_workers=2, backend="ray",
                     rollout_fragment_length=5)
    )
    with pytest.raises(RuntimeError, match=r"rollout worker 1 failed:(.|\n)*rollout_fragment_length"):
        tv.WorkerSet(lambda cfg: ScriptedEnv(), ObsActionPolicy, num_workers=1, backend="ray",
                     rollout_fragment_length=0)


def test_ray_workers_sample_asynchronously(ray_session):
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((4, 6), env_index=next(counter)), rollout_helpers.CounterPolicy,
                      num_workers=2, backend="ray", num_envs=1, rollout_fragment_length=4) as ws:
        seen = set()
        for k in range(8):
            got = ws.sample_async(timeout=120)
            assert (got.batch["actions"] == got.policy_version % 5).all()  # sampled with that version's weights
            rows = {(got.worker_index, *r) for r in got.batch["obs"].astype(int).tolist()}
            assert not rows & seen
            seen |= rows
            if k % 2:
                ws.set_weights({"count": np.array([ws.policy_version + 1], np.int64)})
        assert ws.sample_each()[0]["actions"][0] == ws.policy_version % 5  # drained, then caught up


class _ImageEnv(gym.Env):
    """64x64 uint8 frames: frame t of an episode is all ``t`` (so rows can be checked); 50-step episodes."""

    observation_space = gym.spaces.Box(0, 255, (64, 64), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros((64, 64), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((64, 64), self.t, np.uint8), 1.0, self.t >= 50, False, {}


class _ZeroPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {}

    def loss(self, batch):
        return batch["obs"], batch["new_obs"], batch["actions"], batch["rewards"]


def test_ray_batches_carry_frames_once_and_reach_the_driver_without_a_copy(ray_session):
    """Item 5 of issue 16: each frame crosses once (obs and new_obs are views of one frame array, pickled as
    frames + indices), and the other columns are read from Ray's object store in place (read-only views of
    the object's memory, no copy); obs / new_obs are gathered from the frames on first read (one copy)."""
    with tv.WorkerSet(lambda cfg: _ImageEnv(), _ZeroPolicy, num_workers=2, backend="ray", num_envs=2,
                      rollout_fragment_length=100) as ws:
        for b in (ws.sample_each()[0], ws.sample_async(timeout=120).batch):
            assert len(b) == 200
            # obs and new_obs arrive as views of one frame array in the object store: 200 obs rows + the new_obs
            # after each of the 4 segments' last rows (2 envs, each an episode boundary at t 50 / 100),
            # not 400 frames.
            assert set(b.lazy_keys) == {"obs", "new_obs"}
            lazy_obs, lazy_new = dict.__getitem__(b, "obs"), dict.__getitem__(b, "new_obs")
            assert lazy_obs.base is lazy_new.base
            assert len(lazy_obs.base) <= 200 + 8
            assert not lazy_obs.base.flags.writeable and not lazy_obs.base.flags.owndata  # in place, no copy
            for col in ("actions", "rewards", "t", "eps_id"):
                arr = np.asarray(b[col])
                assert not arr.flags.writeable and not arr.flags.owndata, col  # a view of the object store
            obs, new_obs, t = b["obs"], b["new_obs"], np.asarray(b["t"])
            assert (obs == t[:, None, None].astype(np.uint8)).all()  # frame t of its episode: all t
            assert (new_obs == (t + 1)[:, None, None].astype(np.uint8)).all()


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while not rollout_helpers.pid_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rollout_helpers.pid_gone(pid)


def ray_kill(ws, i: int) -> None:
    """ray.kill of worker i's actor (0-based), and waits for its process to end (ray.kill is asynchronous)."""
    pid = ws.worker_pids()[i]
    ray.kill(ws._workers[i].actor)
    wait_gone(pid)


def test_ray_worker_killed_or_hung_is_replaced_or_named(ray_session):
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((4, 6), env_index=next(counter)), ObsActionPolicy, num_workers=2,
                      backend="ray", rollout_fragment_length=5, recreate_failed_workers=True,
                      sample_timeout_s=1.5) as ws:
        p1, p2 = ws.worker_pids()
        ray_kill(ws, 1)
        b = ws.sample()
        assert len(b) == 5 and set((np.asarray(b["eps_id"]) >> 40).tolist()) == {1}
        b = ws.sample()
        assert len(b) == 10 and set((np.asarray(b["eps_id"]) >> 40).tolist()) == {1, 2}
        q1, q2 = ws.worker_pids()
        assert q1 == p1 and q2 != p2 and ws.num_worker_restarts == 1
        os.kill(q1, signal.SIGSTOP)  # hung: no answer within sample_timeout_s, ray.kill'ed and replaced
        each = ws.sample_each()
        assert each[0] is None and len(each[1]) == 5 and ws.num_worker_restarts == 2
        assert len(ws.sample()) == 10
    ws = tv.WorkerSet(lambda cfg: ScriptedEnv(), ObsActionPolicy, num_workers=2, backend="ray",
                      rollout_fragment_length=5)
    try:
        ray_kill(ws, 1)
        with pytest.raises(WorkerError, match=r"rollout worker 2 died:(.|\n)*recreate_failed_workers=True") as e:
            ws.sample()
        assert (e.value.worker_index, e.value.reason) == (2, "died")
    finally:
        ws.stop()


class _ZeroBox(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros((len(d["obs"]), 1), np.float32), [], {}


def test_ray_replaced_worker_gets_the_driver_filters(ray_session):
    with tv.WorkerSet(lambda cfg: gym.make("Pendulum-v1"), _ZeroBox, num_workers=2, backend="ray",
                      rollout_fragment_length=5, observation_filter="MeanStdFilter",
                      recreate_failed_workers=True) as ws:
        ws.sample()
        driver = ws.sync_filters()["default_policy"].copy()
        assert driver.running_stats.n == 2 * 6
        ray_kill(ws, 1)
        assert ws.sample_each()[1] is None and ws.num_worker_restarts == 1
        f2 = ws._run("get_filters", False)[1]["default_policy"]
        assert f2.running_stats.n == driver.running_stats.n and f2.buffer.n == 0
        np.testing.assert_array_equal(f2.running_stats.mean_array, driver.running_stats.mean_array)
        np.testing.assert_array_equal(f2.running_stats.std_array, driver.running_stats.std_array)
