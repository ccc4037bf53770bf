"""What a resumed, evaluated or exported run takes from its files and what from this session (a red team's
findings): no module a file names is imported; ``--resume`` keeps the run's settings and refuses others given,
continues with a raised ``--timesteps`` even at the default's value and with another ``--stop-reward``, and says
so when nothing is left to train; the summary line is strict JSON."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trajview
from trajview import _io

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

from trajview.train.saved import load_trained  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.envs import EnvSetupError, check_saved_modules  # noqa: E402
from train_runs import SMALL  # noqa: E402
from train_runs import copy_run as _copy  # noqa: E402


def _edit_config(run: Path, **changes) -> None:
    """Edits the run's checkpoint settings as someone with write access to the folder could (the manifest's JSON)."""
    path = run / "checkpoint" / "manifest.json"
    man = json.loads(path.read_text())
    man["meta"]["config"].update(changes)
    path.write_bytes(_io.manifest_bytes(man))


def _counters(run: Path) -> dict:
    return json.loads((run / "checkpoint" / "manifest.json").read_text())["meta"]["counters"]


# -- nothing read from a file imports a module ------------------------------------------------------------------------


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A module on sys.path whose import writes a file (what a hostile manifest would have imported)."""
    name = f"tv_planted_{os.getpid()}"
    (tmp_path / "mods").mkdir()
    marker = tmp_path / "RAN"
    (tmp_path / "mods" / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    yield name, marker
    sys.modules.pop(name, None)


@pytest.mark.parametrize("where", ["env_modules", "env id"])
def test_evaluate_export_and_resume_import_no_module_the_manifest_names(small_ppo_run, tmp_path, planted, capsys, where):
    name, marker = planted
    run = _copy(small_ppo_run, tmp_path)
    if where == "env_modules":
        _edit_config(run, env_modules=[name])
    else:
        _edit_config(run, env=f"{name}:Nothing-v0")
    capsys.readouterr()
    for argv in (["evaluate", str(run), "--episodes", "1"], ["export", str(run)],
                 ["train", "--resume", "--out", str(run), "--timesteps", "400", "--no-progress"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"manifest.json names module(s) ['{name}']" in err and f"--env-module {name}" in err, err
        assert err.count("\n") == 0 and "Traceback" not in err
    with pytest.raises(EnvSetupError, match="trajview imports no module a file names"):
        load_trained(run)
    assert not marker.exists()
    assert name not in sys.modules


def test_a_module_given_in_this_session_is_imported_and_the_run_goes_on(small_ppo_run, tmp_path, planted, capsys):
    name, marker = planted
    run = _copy(small_ppo_run, tmp_path)
    _edit_config(run, env_modules=[name])
    assert main(["evaluate", str(run), "--episodes", "1", "--env-module", name]) == 0
    assert marker.read_text() == "ran"  # imported because this session asked for it
    assert main(["train", "--resume", "--out", str(run), "--timesteps", "300", "--no-progress"]) == 0  # imported now
    assert _counters(run)["env_steps"] == 300


def test_check_saved_modules_passes_what_is_imported_already():
    check_saved_modules("trajview/StatelessCartPole-v1", ["json", "math"], "here")
    check_saved_modules("gymnasium.envs.classic_control:CartPole-v1", [], "here")
    with pytest.raises(EnvSetupError, match=r"here names module\(s\) \['tv_not_a_module_x'\]"):
        check_saved_modules("tv_not_a_module_x:Env-v0", ["json"], "here")


# -- --resume keeps the run's settings ----------------------------------------------------------------------------------


def test_resume_refuses_settings_other_than_the_runs_and_takes_the_same_ones(small_ppo_run, tmp_path, capsys):
    run = _copy(small_ppo_run, tmp_path)
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(run), "--model", "lstm", "--lr", "0.5", "--workers", "2",
                 "--model-config", '{"hidden": [8]}', "--logger", "jsonl", "--timesteps", "400"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trajview train: error: --resume continues the run in {run} with its own settings; "
                          f"--model lstm (the run's: mlp), --workers 2 (the run's: 1), --lr 0.5 (the run's: 0.0003), ")
    assert '--model-config {"hidden": [8]}' in err and "--logger jsonl (the run's: csv)" in err
    assert err.endswith("differ: leave them out, or start a new run in another --out")
    assert _counters(run)["env_steps"] == 200
    # The same settings again (a command line repeated with --resume added) are the run's own: it goes on.
    assert main(["train", "--resume", "--out", str(run), "--timesteps", "300", "--logger", "csv", *SMALL]) == 0
    assert _counters(run)["env_steps"] == 300


def test_a_run_at_its_timesteps_says_what_continues_it(small_ppo_run, tmp_path, capsys):
    run = _copy(small_ppo_run, tmp_path)
    _edit_config(run, timesteps=150)  # (as a run that ended at its timesteps)
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 2
    assert "already has 200 env steps, its timesteps (150): --resume --timesteps N (N above 200)" in (
        capsys.readouterr().err)
    assert _counters(run)["env_steps"] == 200


def test_the_default_timesteps_value_given_on_resume_is_taken(small_ppo_run, tmp_path, capsys, monkeypatch):
    from trajview.train import TrainConfig

    run = _copy(small_ppo_run, tmp_path)
    monkeypatch.setattr(TrainConfig, "timesteps", 300)  # the default for a new run, made small here
    assert main(["train", "--resume", "--out", str(run), "--timesteps", "300", "--no-progress"]) == 0
    assert _counters(run)["env_steps"] == 300


def test_a_run_that_reached_its_stop_reward_says_so_and_another_stop_reward_continues_it(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--timesteps", "2000", "--stop-reward", "-1000", "--out", str(run), *SMALL]) == 0
    steps = _counters(run)["env_steps"]
    assert steps == 100  # stopped after its first iteration
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(run), "--timesteps", "3000", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trajview train: error: the run in {run} already reached its stop reward -1000 (mean "
                          f"return ") and err.endswith("--resume --stop-reward none (or a higher one) continues it")
    assert _counters(run)["env_steps"] == steps
    assert main(["train", "--resume", "--out", str(run), "--timesteps", "300", "--stop-reward", "none",
                 "--no-progress"]) == 0
    assert _counters(run)["env_steps"] == 300


def test_dqn_resume_takes_another_stop_reward(tmp_path, capsys):
    run = tmp_path / "dqn"
    assert main(["train", "--algo", "dqn", "--timesteps", "256", "--stop-reward", "-1000", "--out", str(run),
                 "--no-progress"]) == 0
    steps = _counters(run)["env_steps"]
    assert _counters(run)["returns"]  # episodes ended: their mean return is above -1000
    more = str(steps + 256)
    assert main(["train", "--resume", "--out", str(run), "--timesteps", more, "--no-progress"]) == 2
    assert "already reached its stop reward -1000" in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(run), "--timesteps", more, "--stop-reward", "none",
                 "--no-progress"]) == 0
    assert _counters(run)["env_steps"] > steps


# -- output and messages ---------------------------------------------------------------------------------------------


def test_the_summary_line_is_strict_json_when_no_episode_ended(tmp_path, capsys):
    assert main(["train", "--algo", "dqn", "--timesteps", "1", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(line, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert summary["episode_return_mean"] is None and summary["env_steps"] == 32
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in summary.values())


def test_two_metrics_formats_are_a_one_line_error(tmp_path, capsys):
    assert main(["train", "--logger", "csv", "--logger", "jsonl", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == ("trajview train: error: --logger takes one metrics file format (csv "
                                               "or jsonl), got ['csv', 'jsonl']")


def test_evaluate_refuses_a_negative_seed_naming_it(small_ppo_run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(small_ppo_run), "--seed", "-1"])
    assert e.value.code == 2
    assert "argument --seed: expected an int in [0, 4294967295], got '-1'" in capsys.readouterr().err


def test_python_dash_m_trajview_is_the_command():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(trajview.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-m", "trajview", "train", "--help"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0 and "usage: trajview train" in r.stdout


@pytest.mark.parametrize(("model_config", "message"), [
    ('{"bogus": 1}', "model_config: ['bogus'] is not a setting of model 'mlp' (MLPModel); its settings: "),
    ('{"hidden": "x"}', "model_config {'hidden': 'x'} of model 'mlp' (MLPModel): "),
])
def test_a_bad_model_config_is_one_line_naming_it(tmp_path, capsys, model_config, message):
    argv = ["train", "--model-config", model_config, "--out", str(tmp_path / "r"), *SMALL]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trajview train: error: {message}") and err.count("\n") == 0, err
    assert not (tmp_path / "r").exists()
