"""`SampleBatch.to_padded()` and `SampleBatch.to_tensordict()` (TorchRL's layout)."""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv


def flat_batch():
    return tv.SampleBatch({
        "obs": np.arange(5, dtype=np.float32)[:, None],
        "new_obs": np.arange(1, 6, dtype=np.float32)[:, None],
        "actions": np.array([0, 1, 0, 1, 1]),
        "rewards": np.array([1, 2, 3, 4, 5], np.float32),
        "terminateds": np.array([0, 1, 0, 0, 0], bool),
        "truncateds": np.array([0, 0, 0, 0, 1], bool),
        "eps_id": np.array([7, 7, 9, 9, 9]),
        "t": np.array([0, 1, 0, 1, 2]),
    })


def test_to_padded():
    p = flat_batch().to_padded()
    assert p["mask"].tolist() == [[True, True, False], [True, True, True]]
    assert p["obs"][:, :, 0].tolist() == [[0, 1, 0], [2, 3, 4]]
    assert p["eps_id"].tolist() == [[7, 7, 0], [9, 9, 9]]
    assert p["obs"].dtype == np.float32 and p["actions"].shape == (2, 3)
    # Reference: each masked row is the flat row, in order.
    b = flat_batch()
    for k in b:
        np.testing.assert_array_equal(p[k][p["mask"]], b[k])
    with pytest.raises(ValueError, match="per-sequence columns"):
        tv.SampleBatch(state_in_0=np.zeros((1, 2)), seq_lens=np.array([2]), obs=np.zeros(2)).to_padded()


def test_to_tensordict():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensordict")
    b = flat_batch()
    td = b.to_tensordict()
    assert td.batch_size == torch.Size([5])
    assert td["next", "obs"].data_ptr() == b["new_obs"].__array_interface__["data"][0]  # zero copy
    assert td["obs"].data_ptr() == b["obs"].__array_interface__["data"][0]
    assert td["next", "terminated"].squeeze(-1).tolist() == [False, True, False, False, False]
    assert td["next", "truncated"].squeeze(-1).tolist() == [False, False, False, False, True]
    assert td["next", "done"].squeeze(-1).tolist() == [False, True, False, False, True]
    assert td["next", "reward"].shape == (5, 1)
    assert not td["done"].any()
    assert td["is_init"].squeeze(-1).tolist() == [True, False, True, False, False]
    assert td["collector", "traj_ids"].tolist() == [7, 7, 9, 9, 9]
    assert td["action"].tolist() == [0, 1, 0, 1, 1]


def test_replay_sample_to_tensordict():
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensordict")
    rb = tv.ReplayBuffer(64, sampler=tv.SliceSampler(num_slices=2, seed=0))
    rb.add(flat_batch())
    out = rb.sample(4)
    td = out.to_tensordict()
    assert td["is_init"].squeeze(-1).tolist() == out["is_init"].tolist()
    assert td["next", "truncated"].view(2, 2)[:, -1].all()  # each slice's end is marked
    assert torch.equal(td["next", "obs"], torch.from_numpy(out["new_obs"]))


def test_is_init_marks_every_segment_start_in_a_rollout_batch():
    """A rollout batch where env 1's mid-episode segment follows env 0's: is_init is True at the seam, so a
    TorchRL recurrent module never carries state from one env's segment into another's."""
    pytest.importorskip("tensordict")
    import gymnasium as gym

    class Env(gym.Env):
        observation_space = gym.spaces.Box(-1e9, 1e9, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.full(1, self.t, np.float32), 1.0, self.t >= 100, False, {}

    class P(tv.Policy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            return np.zeros(len(input_dict["obs"]), np.int64), [], {}

    w = tv.RolloutWorker(lambda cfg: Env(), P, num_envs=2, rollout_fragment_length=5)
    w.sample()
    b = w.sample()  # both envs mid-episode: t = 5..9 for env 0, then t = 5..9 for env 1
    assert b["t"].tolist() == list(range(5, 10)) * 2
    assert not b["is_init"].any()  # the batch's own is_init: no episode starts here (docs/contract.md)
    init = b.to_tensordict()["is_init"].squeeze(-1).tolist()
    assert init == [True] + [False] * 4 + [True] + [False] * 4
    w.stop()
