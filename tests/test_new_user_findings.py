"""A new user's trial (2026-11-26), its findings each against its plain rule:

- a `WorkerSet` of forked processes samples after the driver ran a multi-threaded torch op (it hung: OpenMP's
  threads do not survive fork);
- `get_weights` is a snapshot: training after it does not change it, so ``set_weights(snapshot)`` restores it, and
  a `RolloutWorker.set_weights` that one policy refuses leaves every policy as it was.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import gymnasium as gym  # noqa: E402

import trajview as tv  # noqa: E402



def test_forked_workers_sample_after_the_driver_ran_a_multithreaded_op():
    code = textwrap.dedent("""
        import torch, trajview as tv
        torch.set_num_threads(2)
        torch.ones(256, 256) @ torch.ones(256, 256)   # OpenMP's thread pool, in the driver
        ws = tv.WorkerSet("CartPole-v1", tv.PPOPolicy, num_workers=2, rollout_fragment_length=20)
        print(len(ws.sample()))
        ws.stop()
    """)
    from train_runs import cli_env

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=cli_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["40"]


def _policy() -> tv.PPOPolicy:
    return tv.PPOPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))


@pytest.mark.parametrize("make", [_policy, lambda: tv.DQNPolicy(gym.spaces.Box(-1, 1, (4,), np.float32),
                                                                gym.spaces.Discrete(2))])
def test_get_weights_is_a_snapshot_that_set_weights_restores(make):
    policy = make()
    snap = policy.get_weights()
    kept = {k: v.copy() for k, v in snap.items()}
    module = policy.model if hasattr(policy, "model") else policy.q
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)  # (what an update does, in place)
    assert all(np.array_equal(snap[k], kept[k]) for k in kept)
    policy.set_weights(snap)
    assert all(np.array_equal(v, kept[k]) for k, v in policy.get_weights().items())


def test_a_refused_set_weights_leaves_every_policy_as_it_was():
    pytest.importorskip("pettingzoo")
    from test_multi_agent import TwoAgentEnv

    space, acts = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), gym.spaces.Discrete(5)
    worker = tv.RolloutWorker(lambda cfg: TwoAgentEnv(), {"a": tv.PPOPolicy(space, acts), "b": tv.PPOPolicy(space, acts)},
                              policy_mapping_fn=lambda agent_id, *a, **k: agent_id)
    before = {pid: {k: v.copy() for k, v in w.items()} for pid, w in worker.get_weights().items()}
    sevens = {k: np.full_like(v, 7.0) for k, v in before["a"].items()}
    with pytest.raises((ValueError, RuntimeError, KeyError)):
        worker.set_weights({"a": sevens, "b": {"garbage": np.zeros(3)}})
    after = worker.get_weights()
    for pid in before:
        assert all(np.array_equal(after[pid][k], before[pid][k]) for k in before[pid])


_BAD = {
    "gamma": [2.0, -0.1, float("nan"), "0.99", True],
    "lambda": [-1, 1.5, None],
    "clip_param": [-0.2, 0, float("inf")],
    "lr": ["1e-3", 0, -1e-3],
    "entropy_coeff": [float("nan"), -0.01],
    "vf_loss_coeff": [-1],
    "grad_clip": [0, -1, "0.5"],
    "num_sgd_iter": [0, 1.5, True],
    "sgd_minibatch_size": [0, -4],
    "explore": ["no", 0],
    "adam_fused": [1],
    "decoupled_clip": ["yes"],
    "learner": ["jax", None, 1],
}


@pytest.mark.parametrize("key, value", [(k, v) for k, vs in _BAD.items() for v in vs])
def test_ppo_policy_refuses_a_setting_outside_its_rule_naming_it(key, value):
    """`PPOPolicy(config=...)` checks what `trajview train` checks (before: gamma=2 trained on, with advantages of
    1e5; num_sgd_iter=0 returned {} and never trained; explore="no" explored)."""
    with pytest.raises(ValueError, match=f"PPOPolicy config '{key}' must be") as e:
        tv.PPOPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), {key: value})
    assert repr(value) in str(e.value)


def test_ppo_policy_takes_settings_inside_their_rules():
    from trajview.algorithms.settings import PPO_RULES

    ok = {"gamma": 1.0, "lambda": 0.0, "clip_param": 0.1, "lr": 1e-5, "entropy_coeff": 0.0, "vf_loss_coeff": 0.0,
          "grad_clip": None, "num_sgd_iter": 1, "sgd_minibatch_size": 1, "explore": False, "adam_fused": False,
          "decoupled_clip": True, "learner": "torch"}
    assert set(ok) == set(PPO_RULES)
    policy = tv.PPOPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), ok)
    assert policy.config["grad_clip"] is None


def _steps(rewards, t, eps_id=None):
    n = len(rewards)
    return tv.SampleBatch({"obs": np.arange(n, dtype=np.float32)[:, None], "rewards": np.asarray(rewards),
                           "t": np.asarray(t, np.int64), "eps_id": np.zeros(n, np.int64) if eps_id is None else
                           np.asarray(eps_id, np.int64), "terminateds": np.zeros(n, bool),
                           "truncateds": np.zeros(n, bool)})


def test_replay_refuses_nan_rewards_as_the_worker_does():
    rb = tv.ReplayBuffer(16)
    with pytest.raises(ValueError, match=r"column 'rewards': add got NaN rewards for rows \[1\]"):
        rb.add(_steps([1.0, np.nan, 1.0], [0, 1, 2]))
    assert len(rb) == 0
    rb.add(_steps([1.0, 0.5, 1.0], [0, 1, 2]))
    assert len(rb) == 3


@given(t=st.lists(st.integers(0, 6), min_size=2, max_size=8))
@hyp_settings(max_examples=80, deadline=None)
def test_replay_refuses_steps_of_one_trajectory_out_of_order(t):
    """``t`` within one trajectory id (no end between) must go up by one; the reference: the plain statement."""
    rb = tv.ReplayBuffer(16)
    consecutive = all(b - a == 1 for a, b in zip(t, t[1:]))
    if consecutive:
        rb.add(_steps([0.0] * len(t), t))
        assert len(rb) == len(t)
    else:
        with pytest.raises(ValueError, match="add: column 't' goes from"):
            rb.add(_steps([0.0] * len(t), t))
        assert len(rb) == 0


@pytest.mark.parametrize("given, missing", [({"state": "half", "prev_action": 0}, "state_in_2"),
                                            ({"state": "all"}, "prev_actions"),
                                            ({"prev_action": 1}, "state_in_0")])
def test_a_stateless_call_missing_a_view_says_which_and_how_to_pass_it(given, missing):
    policy = tv.PPOPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), {"model": "lstm"})
    init = policy.get_initial_state()
    kw = dict(given)
    if "state" in kw:
        kw["state"] = init[:2] if kw["state"] == "half" else init
    with pytest.raises(ValueError, match=f"the policy reads '{missing}', which this call did not pass") as e:
        policy.compute_single_action(np.zeros(4, np.float32), **kw)
    assert f"a list of {len(init)} arrays" in str(e.value) and "'prev_actions'" in str(e.value)
    assert "'rewards'" not in str(e.value)  # (what it reads to act, not every view it declares)
    assert not policy._views_initialized  # (found on a copy: the policy is as it was)
    state = [np.asarray(s) for s in init]
    action, outs, _ = policy.compute_single_action(np.zeros(4, np.float32), state, prev_action=0)
    assert len(outs) == len(init)


def test_to_tensordict_names_a_column_above_another():
    """Plain ``"obs"`` beside plain ``"obs.x"`` (allowed in a SampleBatch: plain names may hold dots): `to_tensordict`
    names both (before: tensordict's 2 KB KeyError)."""
    pytest.importorskip("tensordict")
    b = tv.SampleBatch({"obs": np.zeros((3, 2)), "obs.x": np.zeros(3)})
    with pytest.raises(ValueError, match="to_tensordict: columns 'obs' and 'obs.x'"):
        b.to_tensordict()


@pytest.mark.parametrize("explore", [True, False])
def test_a_nan_observation_is_named_where_the_policy_fails_on_it(explore):
    """NaN in ``obs``: the NaN-output check's error says first that the input column and row hold NaN (before: only
    the output column, or torch's sampling error, with the cause in a note); a policy's own error gets the cause as
    a note."""
    policy = tv.PPOPolicy(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(ValueError) as e:
        policy.compute_single_action(np.array([np.nan, 0], np.float32), explore=explore, episode_start=True)
    assert str(e.value).startswith("the policy's inputs hold NaN: 'obs' (rows [0]) (an env's observation or reward?), "
                                   "and NaN in gives NaN out: column "), str(e.value)

    class Raises(tv.Policy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            if np.isnan(d["obs"]).any():
                raise RuntimeError("the model refused NaN")
            return np.zeros(len(d["obs"]), np.int64), [], {}

    raising = Raises(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(RuntimeError, match="the model refused NaN") as e2:
        raising.compute_single_action(np.array([np.nan, 0], np.float32), episode_start=True)
    assert any("The policy's inputs hold NaN: 'obs' (rows [0])" in n for n in getattr(e2.value, "__notes__", []))


def test_a_list_observation_is_refused_saying_what_numpy_made_of_it():
    policy = tv.PPOPolicy(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"got a list, which numpy reads as float64; .* np.asarray\(obs, np.float32\)"):
        policy.compute_single_action([0.0, 0.0])
    policy.compute_single_action(np.zeros(2, np.float32))


class _WrongShapeEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def test_an_observation_of_another_shape_says_so_not_casting():
    with pytest.raises(ValueError, match=r"shape \(3,\), expected dtype float32 and shape \(2,\) \(another shape than "
                                         r"the observation space's\)"):
        tv.RolloutWorker(lambda cfg: _WrongShapeEnv(), tv.PPOPolicy, num_envs=1, rollout_fragment_length=4).sample()


def test_a_refused_first_add_leaves_the_buffer_without_columns():
    """The first add fixes the columns; refused (NaN rewards), it fixes nothing: a good batch of other shapes is
    taken next (before: refused for the columns of the batch that was refused)."""
    rb = tv.ReplayBuffer(16)
    with pytest.raises(ValueError, match="NaN rewards"):
        rb.add(_steps([1.0, np.nan, 1.0], [0, 1, 2]))
    good = _steps([1.0, 2.0], [0, 1])
    good["obs"] = np.zeros((2, 5), np.float32)
    assert rb.add(good) == 2
    assert rb.sample(2)["obs"].shape == (2, 5)


def test_the_learning_curve_takes_the_format_of_its_suffix(tmp_path):
    pytest.importorskip("matplotlib")
    from trajview.train.metrics import plot_learning_curve

    rows = [{"env_steps": 100 * i, "episode_return_mean": float(i)} for i in range(1, 4)]
    plot_learning_curve(rows, tmp_path / "curve.pdf", "t")
    assert (tmp_path / "curve.pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize("key, value", [("num_frames", 1), ("hidden", 0), ("lr", -1.0), ("gamma", 1.5),
                                        ("grad_clip", 0), ("target_update_interval", 0), ("seed", -1),
                                        ("adam_fused", "yes"), ("dueling", 1)])
def test_dqn_policy_refuses_a_setting_outside_its_rule_naming_it(key, value):
    with pytest.raises(ValueError, match=f"^{key} must be"):
        tv.DQNPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), {key: value})


def test_dqn_policy_refuses_an_unknown_setting():
    with pytest.raises(ValueError, match=r"DQNPolicy: unknown config keys \['gama'\]"):
        tv.DQNPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), {"gama": 0.9})
