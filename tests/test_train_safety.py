"""`trajview train` at rest and across processes (issue 23): checkpoints that run no code and survive a kill at any
byte, crash-safe metrics, one run per ``--out``, damaged files and bad settings as one-line errors (exit code 2),
``--resume`` across algorithms, SIGTERM like Ctrl-C."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

from trajview import _io  # noqa: E402
from trajview.errors import FileIntegrityError  # noqa: E402
from trajview.train import PPOTrainer, TrainConfig  # noqa: E402
from trajview.train.checkpoint import (FOLDER, FORMAT, VERSION, WEIGHTS, read_checkpoint,  # noqa: E402
                                       write_checkpoint)
from trajview.train.cli import main  # noqa: E402
from trajview.train.dqn_trainer import DQNConfig  # noqa: E402
from trajview.train.metrics import (METRIC_FIELDS, append_metrics, read_metrics,  # noqa: E402
                                    truncate_metrics)
from train_runs import SMALL  # noqa: E402
from train_runs import cli_env as _env  # noqa: E402
from train_runs import copy_run as _copy  # noqa: E402

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trajview.train.cli", "train", *args], capture_output=True,
                          text=True, timeout=timeout, env=_env())


def _one_line_error(err: str) -> str:
    err = err.strip()
    assert err.count("\n") == 0 and err.startswith("trajview train: error: "), err
    assert "Traceback" not in err
    return err


# -- the checkpoint: what it holds, and nothing in it runs ------------------------------------------------------


def test_a_checkpoint_is_a_committed_folder_read_with_weights_only(small_ppo_run):
    man = _io.read_manifest(small_ppo_run / FOLDER, FORMAT, (VERSION,))
    assert set(man.files) == {WEIGHTS} and man.meta["algo"] == "ppo"
    assert man.meta["counters"]["iteration"] == 2 and man.meta["counters"]["env_steps"] == 200
    assert man.meta["config"] == json.loads((small_ppo_run / "config.json").read_text())
    # The tensors load with weights_only=True on their own: nothing but tensors and plain containers.
    state = torch.load(man.path(WEIGHTS), weights_only=True)
    assert set(state) == {"policy", "torch_rng"} and set(state["policy"]) == {"model", "optimizer"}
    assert not (small_ppo_run / "checkpoint.pt").exists()


class _Payload:
    """Unpickled, it makes the folder ``marker``: a stand-in for any code a crafted file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(small_ppo_run, tmp_path):
    out = _copy(small_ppo_run, tmp_path)
    marker = tmp_path / "payload-ran"
    ck = read_checkpoint(out / FOLDER)
    # A checkpoint whose manifest is consistent (sizes, crc32s) but whose weights carry a __reduce__ payload.
    write_checkpoint(out / FOLDER, "ppo", ck.config, ck.counters, {**ck.weights, "policy": _Payload(marker)})
    r = _cli("--resume", "--out", str(out))
    assert r.returncode == 2, r.stderr
    err = _one_line_error(r.stderr.splitlines()[-1])
    assert f"{out / FOLDER}" in err and WEIGHTS in err and "weights_only=True" in err
    assert "put back a copy" in err
    assert not marker.exists()
    with pytest.raises(FileIntegrityError, match="weights_only=True"):
        read_checkpoint(out / FOLDER)
    assert not marker.exists()
    # The payload is real: the loader trajview no longer uses would have run it.
    torch.load(_io.read_manifest(out / FOLDER, FORMAT, (VERSION,)).path(WEIGHTS), weights_only=False)
    assert marker.is_dir()


def test_a_checkpoint_of_the_earlier_pickled_format_is_not_read(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    marker = tmp_path / "payload-ran"
    torch.save({"config": {}, "policy": _Payload(marker)}, out / "checkpoint.pt")
    (out / "config.json").write_text("{}")
    r = _cli("--resume", "--out", str(out))
    assert r.returncode == 2, r.stderr
    err = _one_line_error(r.stderr.splitlines()[-1])
    assert str(out / "checkpoint.pt") in err and "earlier trajview" in err and "weights_only=False" in err
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest", "counters", "shape"])
def test_a_damaged_checkpoint_is_a_one_line_error_saying_what_to_do(small_ppo_run, tmp_path, capsys, damage):
    out = _copy(small_ppo_run, tmp_path)
    man = _io.read_manifest(out / FOLDER, FORMAT, (VERSION,))
    wpath, mpath = man.path(WEIGHTS), out / FOLDER / "manifest.json"
    if damage == "flip":
        data = bytearray(wpath.read_bytes())
        data[len(data) // 2] ^= 0x10
        wpath.write_bytes(bytes(data))
        says = [str(wpath), "crc32"]
    elif damage == "truncate":
        wpath.write_bytes(wpath.read_bytes()[:-7])
        says = [str(wpath), "truncated"]
    elif damage == "manifest":
        mpath.write_text(mpath.read_text()[:40])
        says = [str(mpath), "not valid JSON"]
    elif damage == "counters":
        body = json.loads(mpath.read_text())
        body["meta"]["counters"]["env_steps"] = -5
        mpath.write_bytes(_io.manifest_bytes(body))
        says = [str(mpath), "'env_steps'", "-5"]
    else:  # weights of another model, committed properly: they do not fit this run's
        ck = read_checkpoint(out / FOLDER)
        model = {k: torch.zeros(3) for k in ck.weights["policy"]["model"]}
        write_checkpoint(out / FOLDER, "ppo", ck.config, ck.counters, {**ck.weights, "policy": {
            "model": model, "optimizer": ck.weights["policy"]["optimizer"]}})
        says = [WEIGHTS, "does not fit this run"]
    before = (out / "metrics.csv").read_bytes()
    assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    for s in says:
        assert s in err, (s, err)
    assert "put back a copy" in err and "another --out" in err
    assert (out / "metrics.csv").read_bytes() == before  # nothing changed


def test_damaged_or_missing_config_json(small_ppo_run, tmp_path, capsys):
    out = _copy(small_ppo_run, tmp_path)
    (out / "config.json").write_text('{"seed": 0,')
    assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert str(out / "config.json") in err and "not valid JSON" in err and "--resume writes it anew" in err
    (out / "config.json").unlink()  # what the error says to do: the checkpoint's settings are written again
    saved = read_checkpoint(out / FOLDER).config
    assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 0
    assert json.loads((out / "config.json").read_text()) == saved


# -- a run killed at any byte keeps its last complete checkpoint -------------------------------------------------


def _tiny(out: Path, **kw) -> TrainConfig:
    return TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=2, train_batch_size=100,
                       sgd_minibatch_size=50, num_sgd_iter=1, stop_reward=None, out_dir=str(out), **kw)


def _killed_at(nbytes: int, step: str, work) -> None:
    """Runs ``work`` in a forked child that dies (``os._exit``, no cleanup, as a SIGKILL) after writing ``nbytes``
    bytes through `trajview._io`, or at ``step`` ("replaced": the manifest renamed, older generations not yet
    removed)."""
    for _ in range(3):  # a child that deadlocks (a lock another thread of pytest held at the fork) is run again
        if _killed_child(nbytes, step, work):
            return
    pytest.fail("the forked child hung three times (a lock held across fork by another thread of this process)")


def _killed_child(nbytes: int, step: str, work, timeout: float = 120.0) -> bool:
    """`_killed_at`'s child; False when it did not end within ``timeout`` (then killed). Being killed at any point
    is what the child models: a run of it that hung and was killed leaves what any kill leaves."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            written = [0]
            orig_write = _io._CrcFile.write

            def write(self, data):
                view = memoryview(data).cast("B")
                room = nbytes - written[0]
                if len(view) > room:
                    orig_write(self, view[:max(room, 0)])
                    self._f.flush()
                    os._exit(0)
                written[0] += len(view)
                return orig_write(self, view)

            _io._CrcFile.write = write
            if step == "replaced":
                _io.shutil.rmtree = lambda *a, **k: os._exit(0)
            work()
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return True


def _trainer(algo: str, out: Path, timesteps: int, resume: bool = False):
    if algo == "ppo":
        return PPOTrainer(_tiny(out, timesteps=timesteps), resume=resume)
    from trajview.train.dqn_trainer import DQNTrainer

    return DQNTrainer(DQNConfig(timesteps=timesteps, iteration_steps=100, envs=2, learning_starts=50,
                                gradient_steps=1, batch_size=16, buffer_size=1000, hidden=16, stop_reward=None,
                                out_dir=str(out)), resume=resume)


def _stop(t) -> None:
    t.stop() if hasattr(t, "stop") else t.worker.stop()


@settings(max_examples=16, deadline=None)
@given(frac=st.floats(0.0, 1.0), step=st.sampled_from(["bytes", "bytes", "replaced"]),
       algo=st.sampled_from(["ppo", "dqn"]))
def test_a_checkpoint_killed_at_any_byte_leaves_the_old_or_the_new_one(tmp_path_factory, frac, step, algo):
    """PPO's checkpoint (weights, optimizer, counters) and DQN's (the same and the replay buffer's files): a
    writer killed at any byte of it leaves the previous checkpoint or the new one, complete, and the run goes on."""
    out = tmp_path_factory.mktemp("kill") / "run"
    _trainer(algo, out, 100).train(progress=False)
    old = read_checkpoint(out / FOLDER)
    assert old.counters["iteration"] == 1
    sizes = sum(s for s, _ in old.manifest.files.values()) + (out / FOLDER / "manifest.json").stat().st_size

    def second_iteration():
        t2 = _trainer(algo, out, 200, resume=True)
        try:
            t2.train_iteration()
            t2.save_checkpoint()
        finally:
            _stop(t2)

    # The second checkpoint is about as large as the first (DQN's: its replay buffer holds twice the steps): the
    # kill lands anywhere in it, or after it; "replaced": after the manifest's rename, before the old set is gone.
    grown = 2.2 if algo == "dqn" else 1.1
    _killed_at(int(frac * sizes * grown) if step == "bytes" else 1 << 62, step, second_iteration)
    ck = read_checkpoint(out / FOLDER)  # complete and verified, whichever it is
    assert ck.counters["iteration"] in (1, 2)
    if ck.counters["iteration"] == 1:
        assert ck.manifest.files == old.manifest.files
    # And the run goes on from it (DQN: its replay buffer restored from the same committed set).
    t3 = _trainer(algo, out, 400, resume=True)
    assert t3.iteration == ck.counters["iteration"]
    if algo == "dqn":
        assert len(t3.buffer) == ck.counters["env_steps"]
    t3.train(progress=False)
    assert [r["iteration"] for r in read_metrics(out / "metrics.csv")] == [1, 2, 3, 4]


# -- metrics rows --------------------------------------------------------------------------------------------


def _row(i: int) -> dict:
    return {**{k: float(i) / 3 for k in METRIC_FIELDS}, "iteration": i, "env_steps": 100 * i}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), cut=st.floats(0.0, 1.0), fmt=st.sampled_from(["csv", "jsonl"]))
def test_a_metrics_file_cut_at_any_byte_reads_its_complete_rows(tmp_path_factory, n, cut, fmt):
    path = tmp_path_factory.mktemp("m") / f"metrics.{fmt}"
    for i in range(1, n + 1):
        append_metrics(path, _row(i), fmt)
    data = path.read_bytes()
    at = int(cut * len(data))
    path.write_bytes(data[:at])
    # The reference: the rows whose whole line (newline included) is before the cut.
    lines = data.split(b"\n")[:-1]
    ends = [sum(len(x) + 1 for x in lines[:k + 1]) for k in range(len(lines))]
    complete = sum(1 for e in ends if e <= at) - (1 if fmt == "csv" and ends[0] <= at else 0)
    if fmt == "csv" and ends[0] > at:
        complete = 0
    rows = read_metrics(path)
    assert [r["iteration"] for r in rows] == list(range(1, complete + 1))
    # --resume's truncation drops the partial line; appending then goes on cleanly.
    dropped, partial = truncate_metrics(path, complete, fmt)
    assert dropped == 0 and partial == (at not in [0, *ends])
    append_metrics(path, _row(complete + 1), fmt)
    assert [r["iteration"] for r in read_metrics(path)] == list(range(1, complete + 2))


def test_a_partial_last_metrics_line_is_dropped_and_the_run_resumes(small_ppo_run, tmp_path, capsys, caplog):
    out = _copy(small_ppo_run, tmp_path)
    with open(out / "metrics.csv", "a") as f:
        f.write("3,300,12,9.")  # a run killed mid-row
    with caplog.at_level("WARNING", logger="trajview.train"):
        assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 0
    assert any("a partial last line" in r.getMessage() for r in caplog.records)
    rows = read_metrics(out / "metrics.csv")
    assert [r["iteration"] for r in rows] == [1, 2, 3] and [r["env_steps"] for r in rows] == [100, 200, 300]


def test_a_damaged_metrics_line_is_a_one_line_error(small_ppo_run, tmp_path, capsys):
    out = _copy(small_ppo_run, tmp_path)
    lines = (out / "metrics.csv").read_text().splitlines()
    lines[1] = lines[1].replace(",", ",x", 1)
    (out / "metrics.csv").write_text("\n".join(lines) + "\n")
    assert main(["train", "--resume", "--timesteps", "300", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert f"{out / 'metrics.csv'}: line 2, column 'env_steps': not a number" in err and "remove that line" in err
    assert main(["report", str(out)]) == 2
    assert "line 2" in capsys.readouterr().err


# -- one run per --out ------------------------------------------------------------------------------------------


def _wait_for_rows(out: Path, proc: subprocess.Popen, n: int) -> None:
    deadline = time.monotonic() + 120
    while not (out / "metrics.csv").exists() or len(read_metrics(out / "metrics.csv")) < n:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)


def test_one_run_per_out_and_a_killed_runs_lock_does_not_block(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "trajview.train.cli", "train", "--timesteps", "10000000",
                              "--out", str(out), *SMALL], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=_env())
    try:
        _wait_for_rows(out, first, 2)
        for extra in ([], ["--resume"]):
            r = _cli("--timesteps", "200", "--out", str(out), *extra, *SMALL)
            assert r.returncode == 2, r.stderr
            err = _one_line_error(r.stderr.splitlines()[-1])
            assert f"--out {out} is in use by process {first.pid}" in err, err
        first.send_signal(signal.SIGKILL)  # killed at whatever byte it was writing
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=30)
    # The killed run's lock went with it; its last complete checkpoint goes on.
    ck = read_checkpoint(out / FOLDER)
    r = _cli("--resume", "--timesteps", str(ck.counters["env_steps"] + 100), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    rows = read_metrics(out / "metrics.csv")
    assert [x["iteration"] for x in rows] == list(range(1, ck.counters["iteration"] + 2))


def test_a_new_run_is_not_started_over_an_earlier_one(small_ppo_run, capsys):
    def files():
        return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in small_ppo_run.rglob("*") if p.is_file() and p.name != ".lock"}

    before = files()
    assert main(["train", "--timesteps", "100", "--out", str(small_ppo_run), *SMALL]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert f"--out {small_ppo_run} holds an earlier run" in err and "--resume continues it" in err
    assert files() == before


# -- settings -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "says"), [
    (["--gamma", "5"], "gamma (--gamma) must be a finite number in [0, 1], got 5.0"),
    (["--lambda", "-0.1"], "lambda_ (--lambda) must be a finite number in [0, 1], got -0.1"),
    (["--clip-param", "-1"], "clip_param (--clip-param) must be a finite number > 0, got -1.0"),
    (["--clip-param", "nan"], "clip_param (--clip-param) must be a finite number > 0, got nan"),
    (["--lr", "0"], "lr (--lr) must be a finite number > 0, got 0.0"),
    (["--lr", "inf"], "lr (--lr) must be a finite number > 0, got inf"),
    (["--entropy-coeff", "-0.5"], "entropy_coeff (--entropy-coeff) must be a finite number >= 0, got -0.5"),
    (["--vf-loss-coeff", "-1"], "vf_loss_coeff (--vf-loss-coeff) must be a finite number >= 0, got -1.0"),
    (["--grad-clip", "nan"], "grad_clip (--grad-clip) must be a finite number > 0, got nan"),
    (["--num-sgd-iter", "0"], "num_sgd_iter (--num-sgd-iter) must be an int >= 1, got 0"),
    (["--minibatch-size", "0"], "sgd_minibatch_size (--minibatch-size) must be an int >= 1, got 0"),
    (["--train-batch-size", "-2"], "train_batch_size (--train-batch-size) must be an int >= 1, got -2"),
    (["--envs-per-worker", "0"], "envs_per_worker (--envs-per-worker) must be an int >= 1, got 0"),
    (["--workers", "0"], "workers (--workers) must be an int >= 1, got 0"),
    (["--timesteps", "0"], "timesteps (--timesteps) must be an int >= 1, got 0"),
    (["--threads", "0"], "threads (--threads) must be an int >= 1, got 0"),
    (["--seed", "-1"], "seed (--seed) must be an int in [0, 4294967295], got -1"),
    (["--stop-reward", "none", "--max-staleness", "-1", "--async"], "max_staleness (--max-staleness) must be an int >= 0, got -1"),
    (["--algo", "dqn", "--gamma", "1.5"], "gamma (--gamma) must be a finite number in [0, 1], got 1.5"),
    (["--algo", "dqn", "--lr", "-1"], "lr (--lr) must be a finite number > 0, got -1.0"),
    (["--algo", "dqn", "--threads", "0"], "threads (--threads) must be an int >= 1, got 0"),
    (["--algo", "dqn", "--lambda", "0.9", "--clip-param", "0.1"],
     "--lambda, --clip-param are PPO's, got --lambda --clip-param"),
])
def test_every_setting_is_range_checked_naming_the_option(tmp_path, capsys, flags, says):
    out = tmp_path / "run"
    small = [] if "dqn" in flags else SMALL
    assert main(["train", *small, *flags, "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert says in err, err
    assert not out.exists()


@pytest.mark.parametrize(("cls", "kw", "says"), [
    (TrainConfig, {"gamma": 5}, "gamma (--gamma) must be"),
    (TrainConfig, {"clip_param": -1}, "clip_param (--clip-param) must be"),
    (TrainConfig, {"grad_clip": 0}, "grad_clip (--grad-clip) must be a finite number > 0"),
    (TrainConfig, {"smoothing_episodes": 0}, "smoothing_episodes must be an int >= 1"),
    (TrainConfig, {"adam_fused": 1}, "adam_fused must be a bool"),
    (TrainConfig, {"model_config": [1]}, "model_config (--model-config) must be a JSON object"),
    (TrainConfig, {"stop_reward": float("inf")}, "stop_reward (--stop-reward) must be a finite number"),
    (TrainConfig, {"num_sgd_iter": True}, "num_sgd_iter (--num-sgd-iter) must be an int >= 1, got True"),
    (DQNConfig, {"gamma": -0.1}, "gamma (--gamma) must be a finite number in [0, 1]"),
    (DQNConfig, {"lr": 0.0}, "lr (--lr) must be a finite number > 0"),
    (DQNConfig, {"buffer_size": 0}, "buffer_size must be an int >= 1"),
    (DQNConfig, {"batch_size": 200, "buffer_size": 100}, "batch_size (200) must be at most buffer_size (100)"),
    (DQNConfig, {"target_update_interval": 0}, "target_update_interval must be an int >= 1"),
    (DQNConfig, {"eps_start": 1.5}, "eps_start must be a finite number in [0, 1]"),
    (DQNConfig, {"eps_end": -0.1}, "eps_end must be a finite number in [0, 1]"),
    (DQNConfig, {"eps_steps": -1}, "eps_steps must be an int >= 0"),
    (DQNConfig, {"num_frames": 1}, "num_frames must be an int >= 2"),
    (DQNConfig, {"learning_starts": -1}, "learning_starts must be an int >= 0"),
    (DQNConfig, {"gradient_steps": 0}, "gradient_steps must be an int >= 1"),
    (DQNConfig, {"per_alpha": -1.0}, "per_alpha must be a finite number >= 0"),
    (DQNConfig, {"per_beta": 2.0}, "per_beta must be a finite number in [0, 1]"),
    (DQNConfig, {"hidden": 0}, "hidden must be an int >= 1"),
    (DQNConfig, {"envs": 0}, "envs must be an int >= 1"),
    (DQNConfig, {"rollout_fragment_length": 0}, "rollout_fragment_length must be an int >= 1"),
    (DQNConfig, {"iteration_steps": 0}, "iteration_steps (--iteration-steps) must be an int >= 1"),
    (DQNConfig, {"dueling": "yes"}, "dueling must be a bool"),
    (DQNConfig, {"seed": 2**40}, "seed (--seed) must be an int in [0, 4294967295]"),
])
def test_the_python_api_checks_the_settings_too(cls, kw, says):
    with pytest.raises(ValueError) as e:
        cls(**kw)
    assert says in str(e.value)


@pytest.mark.parametrize(("cls", "kw"), [
    (TrainConfig, {"checkpoint_interval_s": np.float32(0.5), "lr": np.float32(1e-3), "seed": np.int64(3),
                   "timesteps": np.int32(500), "gamma": np.float64(0.9)}),
    (DQNConfig, {"lr": np.float32(1e-3), "seed": np.uint8(7), "per_alpha": np.float16(0.5)}),
])
def test_numpy_numbers_are_taken_as_the_same_python_numbers_and_written(cls, kw):
    """Settings given as numpy scalars pass the checks as their values do and are kept as the Python numbers of the
    same value (config.json could not write a numpy scalar: the run failed at its first checkpoint)."""

    c = cls(**kw)
    for k, v in kw.items():
        got = getattr(c, k)
        assert type(got) in (int, float) and got == v, k
    assert json.loads(json.dumps(dataclasses.asdict(c)))[next(iter(kw))] == getattr(c, next(iter(kw)))


def test_bad_model_config_and_an_out_that_is_a_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--model-config", "[1, 2]", "--out", str(tmp_path / "a")])
    assert e.value.code == 2
    assert "--model-config: expected a JSON object of the model's keyword arguments" in capsys.readouterr().err
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["train", "--out", str(f), *SMALL]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert f"--out {f} is a file, not a folder" in err
    assert f.read_text() == "x"


def test_resume_with_the_other_algo_says_which_the_run_holds(small_ppo_run, capsys):
    assert main(["train", "--resume", "--algo", "dqn", "--out", str(small_ppo_run), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert f"--out {small_ppo_run} holds a PPO run" in err and "leave out --algo dqn" in err


def test_resume_without_a_checkpoint_says_so(tmp_path, capsys):
    assert main(["train", "--resume", "--out", str(tmp_path / "none"), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert "no checkpoint in" in err and "start the run without --resume" in err
    assert not (tmp_path / "none").exists()
    # A run killed in its first iteration: its metrics row and an uncommitted checkpoint generation, no manifest.
    out = tmp_path / "killed"
    (out / FOLDER / "gen-0123456789abcdef").mkdir(parents=True)
    append_metrics(out / "metrics.csv", _row(1))
    assert main(["train", "--resume", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys.readouterr().err)
    assert "no checkpoint in" in err and f"remove {out}" in err and "checkpoint, metrics.csv" in err


# -- the checkpoint written while the next iteration runs ---------------------------------------------------------


def test_a_background_checkpoint_holds_the_state_it_was_taken_at(tmp_path):
    t = PPOTrainer(_tiny(tmp_path / "run", timesteps=300))
    try:
        t.train_iteration()
        before = {k: v.clone() for k, v in t.policy.model.state_dict().items()}
        t.save_checkpoint(background=True)
        with torch.no_grad():  # the run goes on and changes the weights while the checkpoint is written
            for p in t.policy.model.parameters():
                p.add_(1.0)
        t.train_iteration()
        t.wait_checkpoint()
        assert t.checkpointed == (1, 100)
        ck = read_checkpoint(tmp_path / "run" / FOLDER)
        assert ck.counters["iteration"] == 1 and ck.counters["env_steps"] == 100
        for k, v in ck.weights["policy"]["model"].items():
            assert torch.equal(v, before[k]), k
    finally:
        t.stop()


@pytest.mark.parametrize("background", [False, True])
def test_metrics_rows_are_fsynced_with_the_checkpoint_that_covers_them(tmp_path, monkeypatch, background):
    """Rows are appended without an fsync each (one per iteration cost more than the rest of a small model's
    bookkeeping); the metrics file is fsynced before each checkpoint commits, so every row the checkpoint covers
    is durable when it is (rows past it are dropped on --resume)."""
    from trajview.train import checkpoint as checkpoint_module
    from trajview.train import loop as loop_module

    events: list[tuple[str, object]] = []
    real_commit, real_fsync, real_append = checkpoint_module.commit_folder, loop_module.fsync_file, _io.append_line
    monkeypatch.setattr(checkpoint_module, "commit_folder", lambda *a, **k: (events.append(("commit", None)),
                                                                             real_commit(*a, **k))[1])
    monkeypatch.setattr(loop_module, "fsync_file", lambda p: (events.append(("fsync", Path(p).name)),
                                                              real_fsync(p))[1])
    synced_appends = []
    import trajview.train.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "append_line", lambda p, line, sync=True: (synced_appends.append(sync),
                                                                                    real_append(p, line, sync))[1])
    real_write = _io.write_line  # (the rows after the first: `MetricsLog`'s file kept open)
    monkeypatch.setattr(metrics_module, "write_line", lambda fd, line, sync=True: (synced_appends.append(sync),
                                                                                   real_write(fd, line, sync))[1])
    t = PPOTrainer(_tiny(tmp_path / "run", timesteps=300))
    try:
        for _ in range(2):
            t.train_iteration()
            t.save_checkpoint(background=background)
            t.wait_checkpoint()
    finally:
        t.stop()
    assert events == [("fsync", "metrics.csv"), ("commit", None)] * 2
    assert synced_appends and not any(synced_appends)  # (the first row comes with the header, atomically)
    assert [r["iteration"] for r in read_metrics(tmp_path / "run" / "metrics.csv")] == [1, 2]


def test_a_failed_background_write_is_raised_and_the_last_checkpoint_stands(tmp_path, monkeypatch, capsys):
    from trajview.train import checkpoint as checkpoint_module

    out = tmp_path / "run"
    real = checkpoint_module.commit_folder
    calls = []

    def full_disk_on_the_third(folder, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, f"No space left on device: writing {folder}/gen-x/weights.pt")
        return real(folder, *a, **k)

    monkeypatch.setattr(checkpoint_module, "commit_folder", full_disk_on_the_third)
    # (after every iteration: the third write is iteration 3's, in the background while iteration 4 runs; its error
    # comes up when iteration 4's commit waits for it, and the run stops holding iteration 4, its last complete one,
    # written as it stopped)
    assert main(["train", "--timesteps", "1000", "--out", str(out), "--checkpoint-interval", "0", *SMALL]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2] == f"trajview train: error: [Errno 28] No space left on device: writing {out / FOLDER}/gen-x/weights.pt"
    assert err[-1] == (f"the run's checkpoint {out / FOLDER} holds iteration 4 (400 env steps); --resume --out {out} "
                       f"continues it")
    assert len(calls) == 4
    monkeypatch.setattr(checkpoint_module, "commit_folder", real)
    assert main(["train", "--resume", "--timesteps", "600", "--out", str(out), "--no-progress"]) == 0
    assert [r["iteration"] for r in read_metrics(out / "metrics.csv")] == [1, 2, 3, 4, 5, 6]


def test_where_it_stopped_names_what_the_checkpoint_holds_on_disk(small_ppo_run, tmp_path):
    """A signal in the middle of a commit may land after the manifest was replaced and before the trainer noted
    it: the message reads the folder, not the trainer's note."""
    from types import SimpleNamespace

    from trajview.train.loop import where_it_stopped

    run = _copy(small_ppo_run, tmp_path)
    config = TrainConfig(out_dir=str(run))
    ck = read_checkpoint(run / FOLDER, weights=False)
    stale = SimpleNamespace(checkpointed=(ck.counters["iteration"] - 1, 0), start_iteration=0)
    assert where_it_stopped(stale, config) == (
        f"the run's checkpoint {run / FOLDER} holds iteration {ck.counters['iteration']} "
        f"({ck.counters['env_steps']} env steps); --resume --out {run} continues it")
