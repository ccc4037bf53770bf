"""A smoke of `bench/train_parallel.py` part (b) for ``pytest bench/`` (the training parts, (a) and (c), run
only from the script: their training loops are covered by tests/test_train_parallel.py)."""

from __future__ import annotations

import train_parallel


def test_sampling_rows_are_computed(capsys):
    rows = train_parallel.part_b(["busy"], [1, 2], ["process"], step_us=20, rounds=1)
    assert [(r["backend"], r["workers"]) for r in rows] == [("in-process", 1), ("process", 1), ("process", 2)]
    assert all(r["per_worker"] > 0 and r["ratio"] > 0 for r in rows)
    assert "| busy | process | 2 |" in capsys.readouterr().out
