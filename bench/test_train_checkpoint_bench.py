"""A smoke of `bench/train_checkpoint.py` for ``pytest bench/``: both runs measured on a few small iterations."""

from __future__ import annotations

import train_checkpoint


def test_both_runs_are_measured(tmp_path):
    rows = [train_checkpoint.measure("ppo", 2, tmp_path, {"train_batch_size": 200, "envs_per_worker": 4}),
            train_checkpoint.measure("ppo", 2, tmp_path, {"train_batch_size": 200, "envs_per_worker": 4},
                                     background=True),
            train_checkpoint.measure("dqn", 2, tmp_path, {"iteration_steps": 200, "learning_starts": 100})]
    for r in rows:
        assert r["iterations"] == 1 and r["checkpoint_bytes"] > 0 and (r["earlier_bytes"] > 0) != r["background"]
        assert all(0 < s < 1 for s in r["share"]) and all(x > 0 for x in r["checkpoint_s"] + r["read_s"])
        assert len(r["read_s"]) == (0 if r["background"] else 1)
    assert "| dqn default" in train_checkpoint.table(rows)
