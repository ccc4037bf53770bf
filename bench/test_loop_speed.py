"""A smoke of `bench/loop_speed.py` for ``pytest bench/``: two short runs (the figures are not checked)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("tqdm")

import loop_speed  # noqa: E402


def test_a_short_run_with_and_without_checkpoints(capsys):
    for flags in (["--checkpoint-interval", "0"], ["--no-checkpoints"]):
        runs = loop_speed.main(["--setting", "framestack-zoo", "--iterations", "2", *flags])
        assert len(runs) == 1 and runs[0]["env_steps"] == 2 * 256 and runs[0]["steps_per_s"] > 0
    assert "median" in capsys.readouterr().out


def test_dqn_has_no_interval():
    with pytest.raises(SystemExit, match="DQN writes after every iteration"):
        loop_speed.main(["--setting", "dqn", "--iterations", "1", "--checkpoint-interval", "1"])
