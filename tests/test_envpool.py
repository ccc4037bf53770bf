"""envpool's gymnasium vector envs as `env_creator` (a `GymVectorEnv`: one ``step`` call per vector step).

Skipped, with the reason shown, where envpool cannot be installed (it ships wheels for some Pythons and
platforms only; scripts/test.sh tries to install it and says so when it cannot).
"""

from __future__ import annotations

import numpy as np
import pytest

envpool = pytest.importorskip("envpool", reason="envpool is not installed (no wheel for this Python/platform)")

import trajview as tv  # noqa: E402

# envpool builds its Box spaces from float64 bounds: gymnasium warns on every make.
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")


class FlipPolicy(tv.Policy):
    """Pushes the cart toward the pole's lean; reads only obs."""

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return (np.asarray(input_dict["obs"])[:, 2] > 0).astype(np.int64), [], {}

    def loss(self, batch):
        return [batch[k] for k in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "env_id")]


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_envpool_cartpole_rows_are_consistent(batch_mode):
    num_envs, frag = 4, 60
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, seed=3, max_episode_steps=40)
    w = tv.RolloutWorker(lambda cfg: env, FlipPolicy, rollout_fragment_length=frag, batch_mode=batch_mode)
    seen = 0
    for _ in range(3):
        b = w.sample()
        if batch_mode == "truncate_episodes":
            assert len(b) == frag * num_envs
        for seg in b.split_by_episode():
            obs, new_obs, t = seg["obs"], seg["new_obs"], seg["t"]
            np.testing.assert_array_equal(new_obs[:-1], obs[1:])  # each observation is the next step's
            assert (np.diff(t) == 1).all() and len(set(seg["env_id"].tolist())) == 1
            if t[0] == 0:
                assert (np.abs(obs[0]) <= 0.05).all()  # CartPole's reset state: a real first observation
            term, trunc = seg["terminateds"], seg["truncateds"]
            assert not term[:-1].any() and not trunc[:-1].any()  # end flags only at an episode's last step
            if term[-1]:
                x, theta = new_obs[-1][0], new_obs[-1][2]
                assert abs(x) > 2.4 or abs(theta) > 0.2095  # terminated by CartPole's own rule
            if trunc[-1]:
                assert t[-1] + 1 == 40
            np.testing.assert_array_equal(seg["actions"], (obs[:, 2] > 0).astype(np.int64))
            seen += int(term[-1] or trunc[-1])
    assert seen > 0
    m = w.get_metrics()
    assert m["episode_lengths"] and max(m["episode_lengths"]) <= 40
    w.stop()
