"""A smoke of `bench/train_parallel.py` part (b), and part (a)'s costly env, for ``pytest bench/`` (the training
parts, (a) and (c), run only from the script: their training loops are covered by tests/test_train_parallel.py)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import train_parallel


def test_sampling_rows_are_computed(capsys):
    rows = train_parallel.part_b(["busy"], [1, 2], ["process"], step_us=20, rounds=1)
    assert [(r["backend"], r["workers"]) for r in rows] == [("in-process", 1), ("process", 1), ("process", 2)]
    assert all(r["per_worker"] > 0 and r["ratio"] > 0 for r in rows)
    assert "| busy | process | 2 |" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["busy", "sleep"])
def test_costly_env_spends_its_time_per_step_and_steps_as_the_plain_env(kind):
    """Part (a)'s ``--env-step-us``: each step of the costly env takes at least that long, and its transitions are
    Stateless CartPole's own."""
    costly = train_parallel.make_costly_stateless_cartpole(step_us=2000, kind=kind)
    plain = gym.make("trajview/StatelessCartPole-v1")
    a, _ = costly.reset(seed=3)
    b, _ = plain.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    t0 = time.perf_counter()
    for action in [0, 1, 1, 0, 1]:
        got, want = costly.step(action), plain.step(action)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:4] == want[1:4]
    assert time.perf_counter() - t0 >= 5 * 2000e-6
