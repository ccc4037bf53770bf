"""A smoke of `bench/lstm_floor.py`: the captured runs are the zoo batches' runs (each pass 8 envs x 32 steps, runs
of 1..32 rows), and the quick mode times the three variants (the figures are not checked)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import lstm_floor  # noqa: E402


def test_quick_mode_captures_the_runs_and_times_each_variant(capsys):
    out = lstm_floor.main(["--quick"])
    runs = out["runs"]
    assert runs and all(int(r.sum()) == 8 * 32 and 1 <= r.min() and r.max() <= 32 for r in runs)
    assert set(out["times"]) == {"trajview", "no padding", "matmul floor"}
    assert all(len(v) == len(runs) and min(v) > 0 for v in out["times"].values())
    assert "no implementation below" in capsys.readouterr().out
