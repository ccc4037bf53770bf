"""RLlib's batch utilities (shuffle, timeslices, right_zero_pad, env/agent steps), ViewRequirement.to_dict /
from_dict, and MeanStdFilter (running statistics, RLlib's sync through a WorkerSet) against plain numpy."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.rollout.filter import MeanStdFilter, RunningStat

VR = tv.ViewRequirement


def batch(n=10):
    return tv.SampleBatch(obs=np.arange(n * 2, dtype=np.float32).reshape(n, 2), actions=np.arange(n),
                          eps_id=np.repeat([7, 8], [n // 2, n - n // 2]))


def test_shuffle_permutes_rows_together():
    b = batch(20)
    out = b.shuffle(seed=0)
    assert out is b
    np.testing.assert_array_equal(b["obs"][:, 0] / 2, b["actions"])
    assert sorted(b["actions"].tolist()) == list(range(20)) and b["actions"].tolist() != list(range(20))
    with pytest.raises(ValueError, match="seq_lens"):
        tv.SampleBatch(a=np.arange(4), seq_lens=np.array([2, 2], np.int32)).shuffle()


@given(st.integers(1, 30), st.integers(1, 12))
def test_timeslices(n, k):
    b = batch(n)
    slices = b.timeslices(k)
    assert [len(s) for s in slices] == [min(k, n - i) for i in range(0, n, k)]
    np.testing.assert_array_equal(np.concatenate([s["actions"] for s in slices]), b["actions"])
    assert [len(s) for s in b.timeslices(size=k)] == [len(s) for s in slices]
    parts = b.timeslices(num_slices=k)
    assert len(parts) == k and sum(map(len, parts)) == n and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_right_zero_pad():
    b = tv.SampleBatch(obs=np.arange(5, dtype=np.float32), seq_lens=np.array([3, 2], np.int32),
                       state_in_0=np.array([[1.0], [2.0]]), infos=np.array([{}] * 5, dtype=object),
                       seq_keys=["state_in_0"])
    out = b.right_zero_pad(4)
    assert out is b and len(b) == 8
    np.testing.assert_array_equal(b["obs"], [0, 1, 2, 0, 3, 4, 0, 0])
    np.testing.assert_array_equal(b["state_in_0"], [[1.0], [2.0]])
    assert b["infos"][3] is None
    with pytest.raises(ValueError, match="seq_lens"):
        batch().right_zero_pad(4)


def test_env_and_agent_steps_of_a_sample_batch():
    b = batch(6)
    assert b.env_steps() == b.agent_steps() == 6


@pytest.mark.parametrize("vr", [
    VR("obs", shift="-3:0"), VR("actions", shift=-1, space=gym.spaces.Discrete(4)),
    VR(space=gym.spaces.Box(-1, 1, (2, 3), np.float32), shift=[-2, 0], padding="reset"),
    VR("state_out_0", shift=-1, batch_repeat_value=20, used_for_compute_actions=False),
    VR(space=gym.spaces.Dict(a=gym.spaces.MultiDiscrete([2, 3]), b=gym.spaces.Tuple([gym.spaces.MultiBinary(3)]))),
])
def test_view_requirement_dict_round_trip(vr):
    d = vr.to_dict()
    back = tv.ViewRequirement.from_dict(json.loads(json.dumps(d)))
    assert back == vr and back.shift == vr.shift


def ref_filter(rows):
    """RLlib's (2.60) MeanStdFilter output of each row, from numpy over every row up to it: the unbiased std
    (0 before the second row, float32), 1e-6 added, clipped at 10."""
    out = []
    for j in range(len(rows)):
        seen = np.asarray(rows[: j + 1], np.float64)
        mean = seen.mean(axis=0)
        std = np.sqrt(seen.var(axis=0, ddof=1).astype(np.float32)) if j else np.zeros(mean.shape, np.float32)
        out.append(np.clip((rows[j] - mean) / (std + 1e-6), -10, 10))
    return np.array(out)


@settings(max_examples=30)
@given(st.lists(st.lists(st.floats(-100, 100), min_size=3, max_size=3), min_size=1, max_size=30),
       st.integers(1, 5))
def test_running_stat_merge_matches_numpy(rows, cut):
    rows = np.array(rows)
    f = MeanStdFilter((3,))
    got = np.array([f(r) for r in rows])
    np.testing.assert_allclose(got, ref_filter(rows), rtol=1e-4, atol=1e-4)
    a, b = RunningStat((3,)), RunningStat((3,))
    for r in rows[:cut]:
        a.push(r)
    for r in rows[cut:]:
        b.push(r)
    a.update(b)
    assert a.n == len(rows)
    np.testing.assert_allclose(a.mean, rows.mean(axis=0), atol=1e-7)
    if len(rows) > 1:
        np.testing.assert_allclose(a.std, rows.std(axis=0, ddof=1), rtol=1e-6, atol=1e-6)


class Zero(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros(len(d["obs"]), np.int64), [], {}


def test_worker_filters_observations_as_rllib():
    w = tv.RolloutWorker(lambda c: gym.make("CartPole-v1"), Zero, rollout_fragment_length=8, seed=3,
                         observation_filter="MeanStdFilter")
    b = w.sample()
    env = gym.make("CartPole-v1")
    raw = [env.reset(seed=3)[0]]
    for _ in range(8):
        raw.append(env.step(0)[0])
    want = ref_filter(np.array(raw, np.float64)).astype(np.float32)
    np.testing.assert_allclose(b["obs"], want[:8], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b["new_obs"], want[1:9], rtol=1e-5, atol=1e-5)
    f = w.filters["default_policy"]
    assert f.running_stats.n == 9 and f.buffer.n == 9


class ZeroBox(tv.Policy):
    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        return np.zeros((len(d["obs"]), 1), np.float32), [], {}


def test_worker_set_syncs_filters_as_rllib():
    with tv.WorkerSet(lambda c: gym.make("Pendulum-v1"), ZeroBox, num_workers=2, rollout_fragment_length=10,
                      observation_filter="MeanStdFilter") as ws:
        ws.sample()
        local = ws.sync_filters()["default_policy"]
        assert local.running_stats.n == 2 * 11  # each worker: reset obs + 10 steps (Pendulum's episodes: 200)
        for fs in ws._run("get_filters", False):
            f = fs["default_policy"]
            assert f.running_stats.n == 22 and f.buffer.n == 0
            np.testing.assert_allclose(f.running_stats.mean, local.running_stats.mean)
        ws.sample()
        local = ws.sync_filters()["default_policy"]
        assert local.running_stats.n == 22 + 2 * 10  # only what each saw since the last sync, no double count


def test_filter_needs_a_box_space():
    with pytest.raises(ValueError, match="Box part"):
        tv.RolloutWorker(lambda c: gym.make("FrozenLake-v1"), Zero, observation_filter="MeanStdFilter")
