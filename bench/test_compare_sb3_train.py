"""A smoke of `bench/compare_sb3_train.py` (SB3 and sb3-contrib next to ``trajview train``): every system's loop
runs a tiny budget in its own subprocess and reports sane numbers; without the compare extra it says what is
missing. The systems' tests skip where the compare extra is not installed."""

from __future__ import annotations

import json

import pytest
import compare_sb3_train as bench


def test_the_trajview_side_has_the_zoos_settings(tmp_path):
    pytest.importorskip("torch")
    z = bench.ZOO
    for system in ("trajview-framestack", "trajview-lstm"):
        c = bench.trajview_config(system, 3, 10_000, False, 256, 1, str(tmp_path / system))
        assert (c.envs_per_worker, c.train_batch_size, c.sgd_minibatch_size, c.num_sgd_iter) == (
            z["n_envs"], z["n_envs"] * z["n_steps"], z["batch_size"], z["n_epochs"])
        assert (c.lr, c.clip_param, c.entropy_coeff, c.gamma, c.lambda_, c.vf_loss_coeff, c.grad_clip) == (
            z["learning_rate"], z["clip_range"], z["ent_coef"], z["gamma"], z["gae_lambda"], z["vf_coef"],
            z["max_grad_norm"])
        assert (c.lr_schedule, c.clip_schedule, c.entropy_schedule) == ("linear", "linear", "constant")
        assert (c.seed, c.timesteps, c.stop_reward, c.smoothing_episodes) == (3, 10_000, 150.0, 100)
        assert c.env == "trajview/StatelessCartPole-v1"
    assert bench.trajview_config("trajview-lstm", 0, 1, True, 64, 1, str(tmp_path / "x")).model_config == {
        "max_seq_len": 32, "cell_size": 64, "hidden": 64, "prev_action": False, "prev_reward": False}
    assert bench.linear(0.2)(0.25) == pytest.approx(0.05)


def test_without_the_compare_extra_it_says_what_is_missing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(bench.NEEDS, "sb3-lstm", [("no_such_module_xyz", "sb3-contrib")])
    assert bench.main(["--systems", "sb3-lstm", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "missing sb3-contrib (import no_such_module_xyz" in err and "requirements-compare.txt" in err


def test_every_system_runs_a_tiny_budget(tmp_path, capsys):
    for module in ("torch", "stable_baselines3", "sb3_contrib"):
        pytest.importorskip(module)
    assert bench.main(["--seeds", "0", "--budget", "512", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["system"] for r in results] == list(bench.SYSTEMS)
    for r in results:
        assert r["steps_run"] == 512 and [c[0] for c in r["curve"]] == [256, 512]  # two 256-step iterations
        assert r["wall_s"] > 0 and r["steps_per_s"] == pytest.approx(512 / r["wall_s"], rel=0.01)
        assert all(v >= 0 for v in r["split_s"].values())
        assert 5 < r["final_return"] < 150 and r["steps_to_150"] is None  # random policies on CartPole
        if r["system"].startswith("trajview"):
            assert set(r["split_s"]) == {"sampling", "postprocessing", "sgd", "other"}
            assert sum(r["split_s"].values()) == pytest.approx(r["wall_s"], abs=0.01)
            assert "--lr-schedule linear --clip-param 0.2 --clip-schedule linear" in r["command"]
        else:
            assert set(r["split_s"]) == {"sampling", "sgd"}
            assert sum(r["split_s"].values()) <= r["wall_s"] + 0.005  # each rounded to ms
    out = capsys.readouterr().out
    assert all(f"| {s} | 0 | 0/1 |" in out for s in bench.SYSTEMS)
    assert bench.main(["--table-from", str(tmp_path / "results.json")]) == 0
    assert "| sb3-lstm | 0 | 0/1 |" in capsys.readouterr().out
