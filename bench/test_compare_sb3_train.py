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


def test_trajviews_linear_schedules_give_each_update_the_values_sb3s_updates_use(tmp_path):
    """SB3 itself as the reference of ``--lr-schedule linear --clip-schedule linear``: the learning rate SB3's
    optimizer stepped with in each update and the clip range of that update, against the values of a trajview
    run of the same batch and total."""
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from trajview.train import PPOTrainer, TrainConfig
    from trajview.train.metrics import read_metrics

    total, n_envs, n_steps = 160, 2, 16  # 5 updates of 32 env steps
    seen: list[tuple[float, float]] = []

    class Spy(BaseCallback):
        def _note(self) -> None:  # the last train()'s lr (set at its start) and clip range
            m = self.model
            seen.append((m.policy.optimizer.param_groups[0]["lr"], m.clip_range(m._current_progress_remaining)))

        def _on_rollout_start(self) -> None:
            if self.model.num_timesteps > 0:
                self._note()

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            self._note()

    env = make_vec_env("trajview/StatelessCartPole-v1", n_envs=n_envs, seed=0)
    PPO("MlpPolicy", env, n_steps=n_steps, batch_size=32, n_epochs=1, learning_rate=bench.linear(1e-3),
        clip_range=bench.linear(0.2), seed=0, device="cpu").learn(total, callback=Spy())
    out = tmp_path / "run"
    PPOTrainer(TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=n_envs,
                           train_batch_size=n_envs * n_steps, sgd_minibatch_size=32, num_sgd_iter=1, lr=1e-3,
                           lr_schedule="linear", clip_param=0.2, clip_schedule="linear", timesteps=total,
                           stop_reward=None, out_dir=str(out))).train(progress=False)
    rows = read_metrics(out / "metrics.csv")
    assert len(seen) == len(rows) == 5
    assert [r["lr"] for r in rows] == pytest.approx([s[0] for s in seen], rel=1e-9, abs=1e-15)
    assert [r["clip_param"] for r in rows] == pytest.approx([s[1] for s in seen], rel=1e-9, abs=1e-15)
