"""A crafted or damaged checkpoint refused at load, as one line naming the file, changing nothing and running
nothing: optimizer state that does not fit its parameters (checked before anything is loaded, PPO and DQN), a
FIFO / folder / socket in a checkpoint file's place (refused before it is opened: reading one would block), and
a pickle in ``weights.pt`` (no torch warning, the offending global named, never torch's advice to load with
``weights_only=False``)."""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

from trajview import _io  # noqa: E402
from trajview.errors import FileIntegrityError  # noqa: E402
from trajview.train.checkpoint import FOLDER, FORMAT, VERSION, WEIGHTS, read_checkpoint  # noqa: E402
from trajview.train.config import TrainConfig  # noqa: E402
from trajview.train.dqn_trainer import DQNConfig, DQNTrainer, dqn_policy, load_dqn_policy  # noqa: E402
from trajview.train.runs import config_from  # noqa: E402
from trajview.train.trainer import load_ppo_policy, ppo_policy  # noqa: E402
from train_runs import cli_env as _env  # noqa: E402
from train_runs import copy_run as _copy  # noqa: E402

#: The finished run of each algorithm (fixtures).
RUNS = {"ppo": "small_ppo_run", "dqn": "dqn_run"}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # (A guard against a hang, as the examples' smoke runs have: under ASan at idle priority, beside the timing
    # passes of scripts/test.sh on a slow 2-core machine, one resume took over 120 s.)
    return subprocess.run([sys.executable, "-m", "trajview.train.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env())


def _one_line(err: str, command: str) -> str:
    err = err.strip()
    assert err.count("\n") == 0 and err.startswith(f"trajview {command}: error: "), err
    assert "Traceback" not in err and "Warning" not in err
    return err


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory) -> Path:
    """A finished DQN run with gradient steps taken (its optimizer has moments)."""
    out = tmp_path_factory.mktemp("dqn") / "run"
    DQNTrainer(DQNConfig(timesteps=100, iteration_steps=100, envs=2, learning_starts=50, gradient_steps=1,
                         batch_size=16, buffer_size=1000, hidden=16, stop_reward=None,
                         out_dir=str(out))).train(progress=False)
    return out


def _commit_file(out: Path, name: str, data: bytes) -> Path:
    """Replaces the checkpoint's file ``name`` by ``data`` with the manifest's size and crc32 updated: a crafted
    or mixed checkpoint that every integrity check passes."""
    mpath = out / FOLDER / "manifest.json"
    body = json.loads(mpath.read_text())
    path = out / FOLDER / body["generation"] / name
    path.write_bytes(data)
    body["files"][name] = {"size": len(data), "crc32": zlib.crc32(data)}
    mpath.write_bytes(_io.manifest_bytes(body))
    return path


def _commit_weights(out: Path, weights: dict) -> Path:
    data = io.BytesIO()
    torch.save(weights, data)
    return _commit_file(out, WEIGHTS, data.getvalue())


def _snapshot(policy: Any) -> Any:
    return copy.deepcopy(policy.get_state())


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# -- B5: optimizer state that does not fit its parameters ----------------------------------------------------------


def _adam(weights: dict, algo: str) -> dict:
    return weights["policy"]["optimizer"] if algo == "ppo" else weights["optimizer"]


def _first_param(policy: Any, algo: str) -> tuple[str, Any]:
    """The name and tensor of the optimizer's parameter 0 (the model's first parameter)."""
    return next(iter((policy.model if algo == "ppo" else policy.q).named_parameters()))


def _damage(opt: dict, how: str) -> str:
    """Damages Adam's state dict ``opt`` in place; returns what the refusal must say."""
    state, group = opt["state"], opt["param_groups"][0]
    if how == "moments":  # the red team's: both moments of every parameter of another shape
        for st in state.values():
            st["exp_avg"], st["exp_avg_sq"] = torch.zeros(3), torch.zeros(3)
        return "the state of parameter 0 ({name}): 'exp_avg' has shape [3], expected {shape} (the parameter's)"
    if how == "one_moment":  # the last parameter's second moment only
        last = max(state)
        state[last]["exp_avg_sq"] = torch.zeros(state[last]["exp_avg_sq"].numel() + 1)
        return f"the state of parameter {last} "
    if how == "dtype":
        state[0]["exp_avg"] = state[0]["exp_avg"].to(torch.int64)
        return "'exp_avg' is torch.int64, expected a dtype like the parameter's torch.float32"
    if how == "step_vector":
        state[0]["step"] = torch.tensor([1.0, 2.0])
        return "'step' must be a finite scalar >= 0, got a torch.float32 tensor of shape [2]"
    if how == "step_negative":
        state[0]["step"] = torch.tensor(-4.0)
        return "'step' must be a finite scalar >= 0"
    if how == "missing_moment":
        del state[0]["exp_avg_sq"]
        return "the state of parameter 0 ({name}) lacks 'exp_avg_sq'"
    if how == "unknown_id":
        state[10_000] = {k: v.clone() for k, v in state[0].items()}
        return "'state' holds an entry for parameter 10000, which no param group lists"
    if how == "extra_group":
        opt["param_groups"].append(copy.deepcopy(group))
        return "2 param groups, expected 1 (this run's optimizer)"
    if how == "group_size":
        group["params"] = group["params"][:-1]
        return f"param group 0 holds {len(group['params'])} parameters, expected {len(group['params']) + 1}"
    if how == "duplicate_id":
        group["params"][1] = group["params"][0]
        return "parameter 0 is listed twice in the param groups"
    if how == "lr":
        group["lr"] = "fast"
        return "param group 0: 'lr' must be a finite number, got 'fast'"
    if how == "betas":
        group["betas"] = (0.9,)
        return "param group 0: 'betas' must be 2 finite numbers, got (0.9,)"
    if how == "not_a_state_dict":
        opt.clear()
        return "expected an optimizer's state dict"
    raise AssertionError(how)


DAMAGES = ["moments", "one_moment", "dtype", "step_vector", "step_negative", "missing_moment", "unknown_id",
           "extra_group", "group_size", "duplicate_id", "lr", "betas", "not_a_state_dict"]


def _policy(algo: str, out: Path) -> Any:
    ck = read_checkpoint(out / FOLDER)
    if algo == "ppo":
        policy = ppo_policy(config_from(TrainConfig, ck, str(out), None, {"device": "cpu"}))
        load_ppo_policy(policy, ck)  # the run's own state: moments, steps
    else:
        policy = dqn_policy(config_from(DQNConfig, ck, str(out), None, {"device": "cpu"}))
        load_dqn_policy(policy, ck)
    return policy


def _load(algo: str) -> Callable[[Any, Any], Any]:
    return load_ppo_policy if algo == "ppo" else load_dqn_policy


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_optimizer_state_that_does_not_fit_is_refused_before_anything_is_loaded(request, tmp_path, algo, how):
    out = _copy(request.getfixturevalue(RUNS[algo]), tmp_path)
    policy = _policy(algo, out)
    before = _snapshot(policy)
    weights = read_checkpoint(out / FOLDER).weights
    name, param = _first_param(policy, algo)
    says = _damage(_adam(weights, algo), how).format(name=name, shape=list(param.shape))
    # Its model differs from the policy's too: a refusal that loaded the model first would show.
    model = weights["policy"]["model"] if algo == "ppo" else weights["q"]
    for v in model.values():
        v.add_(1.0)
    wpath = _commit_weights(out, weights)
    ck = read_checkpoint(out / FOLDER)
    with pytest.raises(FileIntegrityError) as e:
        _load(algo)(policy, ck)
    msg = str(e.value)
    assert msg.startswith(f"{wpath}: {'policy[' + repr('optimizer') + ']' if algo == 'ppo' else 'optimizer'}: "), msg
    assert says in msg, (says, msg)
    assert "\n" not in msg
    assert _same(_snapshot(policy), before)  # the networks, the optimizer (and DQN's epsilon, RNG) as they were


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_resume_with_moments_of_another_shape_is_a_one_line_error(request, tmp_path, algo):
    """The red team's repro: ``trajview train --resume`` crashed at the first optimizer step with a traceback."""
    out = _copy(request.getfixturevalue(RUNS[algo]), tmp_path)
    weights = read_checkpoint(out / FOLDER).weights
    _damage(_adam(weights, algo), "moments")
    wpath = _commit_weights(out, weights)
    metrics = (out / "metrics.csv").read_bytes()
    r = _cli("train", "--resume", "--out", str(out), "--timesteps", "400", "--no-progress")
    assert r.returncode == 2, r.stderr
    err = _one_line(r.stderr.strip().splitlines()[-1], "train")
    assert str(wpath) in err and "'exp_avg' has shape [3], expected [" in err, err
    assert (out / "metrics.csv").read_bytes() == metrics


def test_a_model_that_does_not_fit_leaves_the_policy_as_it_was(small_ppo_run, dqn_run, tmp_path):
    """torch loads a model's fitting entries before it refuses the others: the policy is put back."""
    for algo, run in (("ppo", small_ppo_run), ("dqn", dqn_run)):
        out = _copy(run, tmp_path / algo)
        policy = _policy(algo, out)
        before = _snapshot(policy)
        weights = read_checkpoint(out / FOLDER).weights
        model = weights["policy"]["model"] if algo == "ppo" else weights["q"]
        for v in model.values():
            v.add_(1.0)
        last = list(model)[-1]
        model[last] = torch.zeros(model[last].numel() + 1)
        _commit_weights(out, weights)
        with pytest.raises(FileIntegrityError, match="does not fit this run"):
            _load(algo)(policy, read_checkpoint(out / FOLDER))
        assert _same(_snapshot(policy), before), algo


def test_a_fitting_checkpoint_still_loads_whole(small_ppo_run, dqn_run, tmp_path):
    for algo, run in (("ppo", small_ppo_run), ("dqn", dqn_run)):
        ck = read_checkpoint(run / FOLDER)
        policy = _policy(algo, run)
        state = policy.get_state()
        saved = ck.weights["policy"] if algo == "ppo" else ck.weights
        assert saved["optimizer"]["state"], algo  # there were moments to check
        assert _same(state["optimizer"], saved["optimizer"]), algo


# -- B10: a FIFO, a folder, a socket in a checkpoint file's place -----------------------------------------------------


def _within(seconds: float, fn: Callable[[], Any], fifo: Path | None = None) -> BaseException | None:
    """What ``fn`` raises (None if it returns), failing the test when it still runs after ``seconds`` (a read of
    ``fifo`` blocked: a writer is opened and closed to end it)."""
    got: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            got.append(None)
        except BaseException as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail(f"still blocked after {seconds} s")
    return got[0]


def _special(path: Path, kind: str) -> Any:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return None
    if kind == "folder":
        path.mkdir()
        return None
    s = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    try:
        os.chdir(path.parent)  # (bound by its name: a socket's path is at most 107 bytes)
        s.bind(path.name)
    except BaseException:
        s.close()
        raise
    finally:
        os.chdir(cwd)
    return s


@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_a_non_regular_file_in_place_of_weights_is_refused_before_it_is_opened(small_ppo_run, tmp_path, kind):
    out = _copy(small_ppo_run, tmp_path)
    wpath = _io.read_manifest(out / FOLDER, FORMAT, (VERSION,)).path(WEIGHTS)
    keep = _special(wpath, kind)
    try:
        size = wpath.stat().st_size  # the manifest says what is there: only the file's kind is wrong
        mpath = out / FOLDER / "manifest.json"
        body = json.loads(mpath.read_text())
        body["files"][WEIGHTS]["size"] = size
        mpath.write_bytes(_io.manifest_bytes(body))
        e = _within(15, lambda: read_checkpoint(out / FOLDER), wpath if kind == "fifo" else None)
        assert isinstance(e, FileIntegrityError), e
        got = {"fifo": "a FIFO (named pipe)", "folder": "a folder", "socket": "a socket"}[kind]
        assert str(e) == f"{wpath}: expected a regular file, got {got}"
    finally:
        if keep is not None:
            keep.close()


def test_evaluate_refuses_a_fifo_in_place_of_weights(small_ppo_run, tmp_path):
    """The red team's repro: ``trajview evaluate`` blocked forever in open()."""
    out = _copy(small_ppo_run, tmp_path)
    wpath = _io.read_manifest(out / FOLDER, FORMAT, (VERSION,)).path(WEIGHTS)
    _commit_file(out, WEIGHTS, b"")
    _special(wpath, "fifo")
    try:
        r = _cli("evaluate", str(out), "--episodes", "1", timeout=60)
    except subprocess.TimeoutExpired:
        os.close(os.open(wpath, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("trajview evaluate blocked on the FIFO")
    assert r.returncode == 2, r.stderr
    err = _one_line(r.stderr, "evaluate")
    assert f"{wpath}: expected a regular file, got a FIFO (named pipe)" in err


def test_a_fifo_in_place_of_a_replay_file_or_the_manifest_is_refused(dqn_run, tmp_path):
    out = _copy(dqn_run, tmp_path / "a")
    man = _io.read_manifest(out / FOLDER, FORMAT, (VERSION,))
    replay = next(n for n in man.files if n != WEIGHTS)
    _commit_file(out, replay, b"")
    _special(man.path(replay), "fifo")
    e = _within(15, lambda: DQNTrainer(config_from(DQNConfig, read_checkpoint(out / FOLDER, weights=False),
                                                   str(out), 200, None), resume=True), man.path(replay))
    assert isinstance(e, FileIntegrityError) and str(e) == f"{man.path(replay)}: expected a regular file, got a " \
                                                           f"FIFO (named pipe)", e
    # The manifest itself: not "no checkpoint", and not read.
    out = _copy(dqn_run, tmp_path / "b")
    mpath = out / FOLDER / "manifest.json"
    _special(mpath, "fifo")
    e = _within(15, lambda: read_checkpoint(out / FOLDER), mpath)
    assert isinstance(e, FileIntegrityError) and str(e) == f"{mpath}: expected a regular file, got a FIFO (named pipe)"


# -- B11: a pickle in weights.pt ---------------------------------------------------------------------------------


class _Payload:
    """Unpickled, it makes the folder ``marker``: a stand-in for any code a crafted file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


GLOBAL = f"{os.mkdir.__module__}.mkdir"  # posix.mkdir


@pytest.mark.parametrize("how", ["pickle", "pickle2", "torch.save"])
def test_a_pickle_in_weights_is_refused_quietly_naming_its_global(small_ppo_run, tmp_path, how):
    out = _copy(small_ppo_run, tmp_path)
    marker = tmp_path / "payload-ran"
    payload = {"policy": _Payload(marker)}
    if how == "torch.save":
        wpath = _commit_weights(out, payload)
    else:
        wpath = _commit_file(out, WEIGHTS, pickle.dumps(payload, protocol=2 if how == "pickle2" else 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FileIntegrityError) as e:
            read_checkpoint(out / FOLDER)
    assert [str(w.message) for w in caught] == []  # torch's "Detected pickle protocol 4" among them, before
    msg = str(e.value)
    assert msg == (f"{wpath}: refused by torch.load(weights_only=True): it holds something other than tensors and "
                   f"plain containers: the global {GLOBAL} (code that unpickling would run; nothing of it ran)")
    assert not marker.exists()


def test_evaluate_of_a_pickle_in_weights_prints_one_line(small_ppo_run, tmp_path):
    """The red team's repro: two lines of torch's UserWarning first, then an error cut mid-sentence at torch's
    advice to load with weights_only=False, without the global."""
    out = _copy(small_ppo_run, tmp_path)
    marker = tmp_path / "payload-ran"
    wpath = _commit_file(out, WEIGHTS, pickle.dumps({"policy": _Payload(marker)}))
    r = _cli("evaluate", str(out), "--episodes", "1")
    assert r.returncode == 2, r.stderr
    err = _one_line(r.stderr, "evaluate")
    assert str(wpath) in err and f"the global {GLOBAL}" in err and "tensors and plain containers" in err
    assert "weights_only=False" not in err and "`False`" not in err and "UserWarning" not in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("data", "says"), [
    (b"not a torch file at all", "or is not a torch file ("),
    (b"PK\x03\x04" + b"\0" * 40, "or is not a torch file (RuntimeError: PytorchStreamReader failed"),
])
def test_bytes_that_are_no_torch_file_say_what_torch_found_without_its_advice(small_ppo_run, tmp_path, data, says):
    out = _copy(small_ppo_run, tmp_path)
    wpath = _commit_file(out, WEIGHTS, data)
    with pytest.raises(FileIntegrityError) as e:
        read_checkpoint(out / FOLDER)
    msg = str(e.value)
    assert msg.startswith(f"{wpath}: refused by torch.load(weights_only=True): ") and says in msg, msg
    assert "\n" not in msg and "weights_only=False" not in msg and "`False`" not in msg and len(msg) < 600


def test_the_earlier_gtrxl_layout_still_loads_and_its_optimizer_state_is_checked_as_loaded(tmp_path):
    """Weights of the earlier GTrXL layout are converted by PPOPolicy.set_state, which starts the optimizer afresh
    when the saved state is of the earlier parameters: not refused up front. A saved state that torch would load
    into the converted model (as many parameters) is checked as loaded, and the policy put back when it does not
    fit."""
    import gymnasium as gym

    from test_models import _earlier_gtrxl_layout
    from trajview._io import Manifest
    from trajview.algorithms.ppo import PPOPolicy
    from trajview.train.checkpoint import Checkpoint

    space, acts = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)
    cfg = {"model": "attention", "model_config": {"max_seq_len": 4, "memory": 3, "num_layers": 2}}
    source = PPOPolicy(space, acts, cfg)
    opt = source.get_optimizer()
    for p in source.model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    state = copy.deepcopy(source.get_state())
    folder = tmp_path / FOLDER / "gen-0123456789abcdef"

    def ck(optimizer: dict) -> Checkpoint:
        weights = {"policy": {"model": _earlier_gtrxl_layout(state["model"]), "optimizer": optimizer}}
        return Checkpoint("ppo", {}, {}, {}, weights, Manifest(FORMAT, VERSION, {WEIGHTS: (0, 0)}, {}, folder))

    fresh = PPOPolicy(space, acts, cfg)
    other = torch.optim.Adam([torch.zeros(3, requires_grad=True)]).state_dict()  # of the earlier parameters
    with pytest.warns(UserWarning, match="earlier layout"):
        load_ppo_policy(fresh, ck(other))
    assert _same(fresh.model.state_dict(), state["model"])
    damaged = copy.deepcopy(state["optimizer"])
    damaged["state"][0]["exp_avg"] = torch.zeros(3)
    target = PPOPolicy(space, acts, cfg)
    before = _snapshot(target)
    with pytest.raises(FileIntegrityError) as e:
        load_ppo_policy(target, ck(damaged))
    assert str(e.value).startswith(f"{folder / WEIGHTS}: policy['optimizer']: the state of parameter 0 (")
    assert "'exp_avg' has shape [3], expected [" in str(e.value)
    assert _same(_snapshot(target), before)
