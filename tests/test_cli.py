"""`trajview train` end to end on a few hundred steps: metrics, plot, checkpoint, --resume; `trajview report`."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from trajview.train.cli import main  # noqa: E402
from trajview.train.metrics import METRIC_FIELDS  # noqa: E402

SMALL = ["--env", "trajview/RepeatPrevious-v0", "--envs-per-worker", "4", "--train-batch-size", "200",
         "--minibatch-size", "50", "--num-sgd-iter", "2", "--no-progress"]


def _ckpt(out):
    """The run's checkpoint as one dict: its counters, settings (``config``) and tensors (read as trajview does)."""
    from trajview.train.checkpoint import read_checkpoint

    ck = read_checkpoint(out / "checkpoint")
    return {**ck.counters, "config": ck.config, "algo": ck.algo, "extra": ck.extra, **ck.weights}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_train_writes_metrics_plot_checkpoint_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--model", "lstm", "--timesteps", "400", "--out", str(out), "--seed", "3",
                 "--model-config", '{"max_seq_len": 8, "cell_size": 8, "hidden": 8}', *SMALL]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["env_steps"] == 400 and summary["iterations"] == 2
    rows = _rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == [1, 2]
    assert [int(r["env_steps"]) for r in rows] == [200, 400]
    assert all(float(r["steps_per_s"]) > 0 for r in rows) and float(rows[-1]["episode_return_mean"]) >= 0
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ckpt = _ckpt(out)
    assert ckpt["iteration"] == 2 and ckpt["env_steps"] == 400 and ckpt["config"]["model"] == "lstm"
    weights = {k: v.clone() for k, v in ckpt["policy"]["model"].items()}
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["seed"] == 3 and cfg["model_config"]["cell_size"] == 8

    # Resume: the run's own settings, more steps; iterations and steps go on, the weights are the checkpoint's.
    from trajview.train import PPOTrainer, TrainConfig

    t = PPOTrainer(TrainConfig(**{**ckpt["config"], "timesteps": 800}), resume=True)
    for k, v in t.policy.model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert main(["train", "--resume", "--timesteps", "800", "--out", str(out), "--no-progress"]) == 0
    rows = _rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4]
    assert [int(r["env_steps"]) for r in rows] == [200, 400, 600, 800]
    assert float(rows[2]["time_s"]) > float(rows[1]["time_s"])
    assert _ckpt(out)["iteration"] == 4

    capsys.readouterr()
    assert main(["report", str(out), "--target", "1"]) == 0
    table = capsys.readouterr().out
    assert "| run | model | seed |" in table and "| run | lstm | 3 |" in table


def test_resume_drops_metric_rows_written_after_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", "mlp", "--timesteps", "400", "--out", str(out), *SMALL]) == 0
    with open(out / "metrics.csv", "a") as f:  # a row from an iteration whose checkpoint was never written
        f.write("3,600,0,1.0,1.0,1.0,1.0" + ",0" * (len(METRIC_FIELDS) - 7) + "\n")
    assert main(["train", "--resume", "--timesteps", "600", "--out", str(out), "--no-progress"]) == 0
    rows = _rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    assert float(rows[2]["episode_return_mean"]) != 1.0 or float(rows[2]["time_s"]) != 1.0


def test_jsonl_metrics_stop_reward_and_two_workers(tmp_path):
    out = tmp_path / "run"
    # The stop reward is reached at once (mean return >= 0): one iteration, 100 steps from each worker.
    assert main(["train", "--model", "framestack", "--timesteps", "10000", "--stop-reward", "0", "--out", str(out),
                 "--workers", "2",
                 "--metrics-format", "jsonl", "--model-config", '{"num_frames": 2}', *SMALL]) == 0
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["env_steps"] == 200
    assert (out / "learning_curve.png").exists()


def test_resume_without_checkpoint_fails(tmp_path):
    assert main(["train", "--resume", "--out", str(tmp_path / "none"), "--no-progress"]) == 2


@pytest.mark.parametrize("module", ["torch", "tqdm", "matplotlib"])
def test_train_without_the_train_extra_says_what_to_install(tmp_path, capsys, monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    assert main(["train", "--timesteps", "200", "--out", str(tmp_path / "run"), *SMALL]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and module in err and "pip install 'trajview[train]'" in err
    assert not (tmp_path / "run").exists()


def test_report_needs_no_torch(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("iteration,env_steps,episode_return_mean,time_s\n1,200,9.5,1.0\n")
    for module in ("torch", "tqdm", "matplotlib"):
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["report", str(run), "--target", "5"]) == 0
    assert "| run | ? | ? | 200 | 1 | 9.5 | 9.5 | 200 | 1 |" in capsys.readouterr().out


def test_console_script(tmp_path):
    # The script installed beside the interpreter running the tests (a venv that is not activated), else on PATH.
    exe = shutil.which("trajview", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if exe is None:
        pytest.fail("the trajview console script is not installed (pip install .)")
    out = tmp_path / "run"
    r = subprocess.run([exe, "train", "--model", "framestack", "--timesteps", "200", "--out", str(out), *SMALL],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["env_steps"] == 200
    assert (out / "metrics.csv").exists() and (out / "checkpoint").exists()
    r = subprocess.run([exe, "train", "--help"], capture_output=True, text=True, timeout=60)
    for flag in ("--env", "--model", "--seed", "--timesteps", "--workers", "--resume"):
        assert flag in r.stdout


def test_tensorboard_logger_writes_the_metrics_as_scalars(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trajview.train.trainer import TENSORBOARD_SCALARS

    out = tmp_path / "run"
    assert main(["train", "--model", "mlp", "--timesteps", "400", "--out", str(out), "--logger", "tensorboard",
                 *SMALL]) == 0
    rows = _rows(out / "metrics.csv")  # the CSV is still written (the default format)
    assert len(rows) == 2
    assert json.loads((out / "config.json").read_text())["tensorboard"] is True
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {f"trajview/{k}" for k in ("episode_return_mean", "policy_loss", "vf_loss", "steps_per_s")} <= tags
    assert tags <= {f"trajview/{k}" for k in TENSORBOARD_SCALARS}
    for key in ("policy_loss", "vf_loss", "entropy", "time_s"):
        events = acc.Scalars(f"trajview/{key}")
        assert [e.step for e in events] == [200, 400]
        assert [e.value for e in events] == pytest.approx([float(r[key]) for r in rows], rel=1e-5)


def test_logger_jsonl_and_the_old_metrics_format_name(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--model", "mlp", "--timesteps", "200", "--out", str(out), "--logger", "jsonl", *SMALL]) == 0
    assert (out / "metrics.jsonl").exists() and not (out / "tensorboard").exists()
    assert main(["train", "--out", str(tmp_path / "x"), "--logger", "csv", "--metrics-format", "jsonl", *SMALL]) == 2
    assert not (tmp_path / "x").exists()


# -- any gymnasium env: errors are one line with exit code 2 and no run folder ----------------------------------

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402


class _TextObsEnv(gym.Env):
    """A Dict observation with a Text leaf (like MiniGrid's ``mission``), which no model reads."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                                         "mission": gym.spaces.Text(12)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"pos": np.zeros(2, np.float32), "mission": "reachgoal"}, {}

    def step(self, action):
        self.t += 1
        return {"pos": np.full(2, self.t / 10, np.float32), "mission": "reachgoal"}, float(action), self.t >= 10, False, {}


if "tvtest/TextObs-v0" not in gym.registry:
    gym.register("tvtest/TextObs-v0", entry_point=_TextObsEnv)

TINY = ["--envs-per-worker", "2", "--train-batch-size", "100", "--minibatch-size", "50", "--num-sgd-iter", "1",
        "--no-progress"]


@pytest.mark.parametrize("args,says", [
    (["--env", "NoSuchEnv-v0"], ["--env NoSuchEnv-v0", "doesn't exist", "--env-module"]),
    (["--env", "Pendulum-v1", "--env-module", "no_such_module_for_trajview"],
     ["--env-module no_such_module_for_trajview", "No module named"]),
    (["--env", "tvtest/TextObs-v0"], ["observation_space leaf 'mission'", "Text", "--drop-obs-keys mission"]),
    (["--env", "tvtest/TextObs-v0", "--drop-obs-keys", "goal"], ["--drop-obs-keys goal", "not in the observation"]),
    (["--env", "Pendulum-v1", "--drop-obs-keys", "x"], ["--drop-obs-keys needs a Dict observation"]),
    (["--env", "Pendulum-v1", "--model-config", '{"no_such_option": 1}'], ["no_such_option"]),
])
def test_setup_errors_are_one_line_exit_2_and_leave_no_run_folder(tmp_path, capsys, args, says):
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("trajview train: error: "), err
    for s in says:
        assert s in err, (s, err)
    assert not out.exists()


def test_a_run_that_fails_in_its_first_iteration_leaves_no_folder_even_with_tensorboard(tmp_path, capsys,
                                                                                         monkeypatch):
    pytest.importorskip("tensorboard")
    from trajview.train.trainer import PPOTrainer

    out = tmp_path / "run"
    assert main(["train", "--env", "Pendulum-v1", "--model", "mlp", "--logger", "tensorboard", "--out", str(out),
                 *TINY, "--timesteps", "100"]) == 0
    assert (out / "tensorboard").is_dir() and (out / "config.json").exists()

    def first_sample_fails(self):
        raise ValueError("the first sample failed")

    monkeypatch.setattr(PPOTrainer, "train_iteration", first_sample_fails)
    out2 = tmp_path / "run2"
    assert main(["train", "--env", "Pendulum-v1", "--model", "mlp", "--logger", "tensorboard", "--out", str(out2),
                 *TINY]) == 2
    assert capsys.readouterr().err.strip().endswith("trajview train: error: the first sample failed")
    assert not out2.exists()  # neither the run folder nor the TensorBoard writer's


def test_traceback_flag_raises_the_setup_error(tmp_path):
    with pytest.raises(Exception, match="doesn't exist"):
        main(["train", "--env", "NoSuchEnv-v0", "--traceback", "--out", str(tmp_path / "run"), *TINY])
    assert not (tmp_path / "run").exists()


def test_dropping_the_text_key_trains_on_the_rest(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "tvtest/TextObs-v0", "--drop-obs-keys", "mission", "--model", "lstm",
                 "--model-config", '{"max_seq_len": 5, "cell_size": 4, "hidden": 4}', "--timesteps", "200",
                 "--out", str(out), *TINY]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 200
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["drop_obs_keys"] == ["mission"] and cfg["env"] == "tvtest/TextObs-v0"
    # --resume keeps the dropped key (the run's own settings).
    assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 0
    assert [int(r["env_steps"]) for r in _rows(out / "metrics.csv")] == [100, 200, 300]


def test_box_actions_on_pendulum_and_a_negative_stop_reward(tmp_path, capsys):
    out = tmp_path / "run"
    # Pendulum's returns are negative: a stop reward of -2000 is reached at once (one iteration).
    assert main(["train", "--env", "Pendulum-v1", "--model", "framestack", "--model-config", '{"num_frames": 2}',
                 "--timesteps", "1000", "--stop-reward", "-2000", "--gamma", "0.9", "--lambda", "0.9",
                 "--clip-param", "0.3", "--vf-loss-coeff", "1.0", "--grad-clip", "0", "--out", str(out),
                 "--envs-per-worker", "2", "--train-batch-size", "400", "--minibatch-size", "100",
                 "--num-sgd-iter", "1", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["reached_stop_reward"] and summary["env_steps"] == 400
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["gamma"], cfg["lambda_"], cfg["clip_param"], cfg["vf_loss_coeff"], cfg["grad_clip"]) == (
        0.9, 0.9, 0.3, 1.0, None)
    ckpt = _ckpt(out)
    assert "action_dist.log_std" in ckpt["policy"]["model"]
    # 'none': never stop early.
    out2 = tmp_path / "run2"
    assert main(["train", "--env", "Pendulum-v1", "--model", "mlp", "--timesteps", "800", "--stop-reward", "none",
                 "--out", str(out2), "--envs-per-worker", "2", "--train-batch-size", "400", "--minibatch-size",
                 "200", "--num-sgd-iter", "1", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 800


def test_image_observations_get_a_four_frame_stack_preset(tmp_path):
    from trajview.train import TrainConfig, PPOTrainer

    class _Img(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (6, 6, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

    if "tvtest/Img-v0" not in gym.registry:
        gym.register("tvtest/Img-v0", entry_point=_Img)
    t = PPOTrainer(TrainConfig(env="tvtest/Img-v0", model="framestack", out_dir=str(tmp_path / "a")))
    assert t.policy.model.num_frames == 4 and t.config.model_config["num_frames"] == 4
    t = PPOTrainer(TrainConfig(env="tvtest/Img-v0", model="framestack", model_config={"num_frames": 6},
                            out_dir=str(tmp_path / "b")))
    assert t.policy.model.num_frames == 6  # a model_config given by the user is kept
    t = PPOTrainer(TrainConfig(env="Pendulum-v1", model="framestack", out_dir=str(tmp_path / "c")))
    assert t.policy.model.num_frames == 16  # no image: the preset's 16
    assert not any((tmp_path / d).exists() for d in "abc")  # no iteration ran: no run folders


def test_model_presets_carry_ppo_settings_under_what_is_given(tmp_path, capsys):
    from trajview.train import TrainConfig
    from trajview.train.config import MODEL_PRESETS

    lstm = TrainConfig.with_model_presets(model="lstm", lr=None, grad_clip=None)  # None: not given
    for k, v in MODEL_PRESETS["lstm"]["ppo"].items():
        assert getattr(lstm, k) == v, k
    assert TrainConfig.with_model_presets(model="lstm", lr=5e-4, grad_clip=0.5).ppo_config()["lr"] == 5e-4
    assert TrainConfig.with_model_presets(model="lstm", grad_clip=-1).grad_clip is None  # <= 0: no clip
    # The frame stack's preset: 16 envs, 512-step batches, minibatches of 256, 10 epochs, Adam 1e-3 fused,
    # gamma 0.98, lambda 0.8; the MLP's, the defaults; a plain TrainConfig(...) applies no preset PPO settings.
    assert TrainConfig.with_model_presets(model="framestack") == TrainConfig(
        model="framestack", envs_per_worker=16, train_batch_size=512, sgd_minibatch_size=256, num_sgd_iter=10,
        lr=1e-3, gamma=0.98, lambda_=0.8, adam_fused=True)
    # gamma and lambda given (not None) win over the preset; None is "not given"
    fs = TrainConfig.with_model_presets(model="framestack", gamma=0.99, lambda_=None)
    assert (fs.gamma, fs.lambda_) == (0.99, 0.8)
    assert TrainConfig.with_model_presets(model="mlp") == TrainConfig(model="mlp")
    assert TrainConfig(model="framestack").adam_fused is False
    assert TrainConfig(model="lstm").lr == 3e-4
    # trajview train: the preset unless an option says otherwise.
    out = tmp_path / "run"
    assert main(["train", "--model", "lstm", "--timesteps", "1000", "--model-config",
                 '{"max_seq_len": 8, "cell_size": 8, "hidden": 8}', "--minibatch-size", "500", "--num-sgd-iter", "1",
                 "--lr", "2e-3", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["train_batch_size"], cfg["envs_per_worker"], cfg["grad_clip"], cfg["adam_fused"], cfg["lr"]) == (
        1000, 20, None, True, 2e-3)
    assert (cfg["gamma"], cfg["lambda_"]) == (0.99, 0.95)  # the LSTM's preset holds neither: the defaults


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_resume_with_timesteps_at_or_below_the_runs_count_says_so(tmp_path, capsys, algo):
    out = tmp_path / "run"
    args = (["--model", "mlp", *SMALL] if algo == "ppo" else ["--algo", "dqn", "--no-progress"])
    first = "400" if algo == "ppo" else "300"
    assert main(["train", "--timesteps", first, "--out", str(out), *args]) == 0
    steps = _ckpt(out)["env_steps"]
    it = _ckpt(out)["iteration"]
    before = (out / "metrics.csv").read_bytes()
    capsys.readouterr()
    for t in (steps - 1, steps):
        assert main(["train", "--resume", "--timesteps", str(t), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"trajview train: error: --resume --timesteps {t}: the run in {out} already has {steps} env "
                       f"steps (its checkpoint holds iteration {it}); give --timesteps above {steps} to continue it")
    assert (out / "metrics.csv").read_bytes() == before and _ckpt(out)["env_steps"] == steps


@pytest.mark.parametrize("argv, says", [
    (["train", "--checkpoint-interval", "abc"], "trajview train: error: argument --checkpoint-interval: invalid float "
                                                "value: 'abc' (see trajview train --help)"),
    (["train", "--lr", "1e-3x"], "trajview train: error: argument --lr: invalid float value: '1e-3x' (see trajview "
                                 "train --help)"),
    (["evaluate"], "trajview evaluate: error: the following arguments are required: RUN_OR_CHECKPOINT (see trajview "
                   "evaluate --help)"),
    (["bogus"], "trajview: error: argument command: invalid choice: 'bogus' (choose from 'train', 'evaluate', "
                "'export', 'report') (see trajview --help)"),
])
def test_a_bad_option_is_one_line_naming_it(argv, says, capsys):
    """argparse's own refusals (a value its type cannot read, a missing argument, an unknown command) are one line
    with exit 2, as trajview's own errors are, not the usage text first (found by a red team)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == says + "\n" and captured.out == ""
