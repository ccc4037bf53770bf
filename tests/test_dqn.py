"""``trajview train --algo dqn``: double DQN from replay whose frame stack is a view built at sample time."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

import torch  # noqa: E402

from trajview.train.cli import main  # noqa: E402
from trajview.train.dqn_trainer import DQNConfig, DQNTrainer  # noqa: E402


def test_dqn_train_writes_metrics_plot_checkpoint_and_resumes(tmp_path, capsys):
    out = tmp_path / "dqn"
    args = ["train", "--algo", "dqn", "--timesteps", "1000", "--out", str(out), "--seed", "1", "--no-progress"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["env_steps"] >= 1000
    for name in ("metrics.csv", "learning_curve.png", "checkpoint.pt", "config.json"):
        assert (out / name).exists()
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    buf = state["buffer"]
    # The buffer stores each observation once: no frame stack column, the stack is a view.
    stored = [name for name, _, _ in buf["state"]["columns"]]
    assert "stack" not in stored and "obs" in stored
    assert set(buf["state"]["views"]) == {"stack", "next_stack"}
    # --resume finds the DQN run without --algo dqn.
    assert main(["train", "--timesteps", "3000", "--out", str(out), "--no-progress", "--resume"]) == 0
    state2 = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state2["env_steps"] > state["env_steps"] and state2["resumes"] == 1
    # The restored buffer kept the earlier steps and took the new ones.
    assert state2["buffer"]["state"]["store"]["head"] > buf["state"]["store"]["head"]


def test_dqn_learns_from_stack_views(tmp_path):
    """A few thousand steps with frequent updates: TD loss finite, Q values move, the sample's stacks are views."""
    c = DQNConfig(timesteps=3000, iteration_steps=1000, learning_starts=500, gradient_steps=4, out_dir=str(tmp_path),
                  stop_reward=None, prioritized=True)
    tr = DQNTrainer(c)
    summary = tr.train(progress=False)
    assert summary["env_steps"] >= 3000 and np.isfinite(summary["episode_return_mean"])
    s = tr.buffer.sample(8)
    assert s["stack"].shape == (8, 4, 2) and s["next_stack"].shape == (8, 4, 2)
    np.testing.assert_array_equal(s["stack"][:, 1:], s["next_stack"][:, :-1])
    np.testing.assert_array_equal(s["stack"][:, -1], s["obs"])
