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
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gymnasium as gym  # noqa: E402

import trajview as tv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_forked_workers_sample_after_the_driver_ran_a_multithreaded_op():
    code = textwrap.dedent("""
        import torch, trajview as tv
        torch.set_num_threads(2)
        torch.ones(256, 256) @ torch.ones(256, 256)   # OpenMP's thread pool, in the driver
        ws = tv.WorkerSet("CartPole-v1", tv.PPOPolicy, num_workers=2, rollout_fragment_length=20)
        print(len(ws.sample()))
        ws.stop()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "python")})
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
