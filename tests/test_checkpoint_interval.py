"""`run_loop`'s checkpoints with an interval (PPO's ``--checkpoint-interval``): which iterations are written, against
a pure-Python reference, with iteration times, intervals and a stop (Ctrl-C, SIGTERM, an error) drawn at random;
and what each written checkpoint holds: exactly the state its iteration ended with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")

from trajview.train import loop as loop_module  # noqa: E402
from trajview.train.checkpoint import read_checkpoint  # noqa: E402
from trajview.train.loop import RunCounters, Terminated, run_loop  # noqa: E402


@dataclasses.dataclass
class _Config:
    out_dir: str
    timesteps: int
    checkpoint_interval_s: float

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.out_dir) / "checkpoint"

    @property
    def metrics_path(self) -> Path:
        return Path(self.out_dir) / "metrics.csv"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class _Run(RunCounters):
    """A trainer of `run_loop`'s protocol: each iteration takes ``durations[i]`` seconds of the fake clock, adds 10
    env steps, and changes its weights in place (``w`` holds the iteration's number, the optimizer's moment its
    square), as an SGD step changes a model's; iteration ``stop_at`` raises ``stop`` halfway, its weights half
    changed."""

    def __init__(self, config: _Config, durations: list[float], clock: _Clock, stop_at: int | None = None,
                 stop: BaseException | None = None) -> None:
        self.config = config
        self.start_counters(0, 1, 10)
        self.durations, self.clock, self.stop_at, self.stop = durations, clock, stop_at, stop
        self.w = torch.zeros(3)
        self.moments = {"exp_avg": torch.zeros(2), "step": torch.tensor(0.0)}

    def done(self) -> bool:
        return self.env_steps >= self.config.timesteps

    def train_iteration(self) -> dict:
        i = self.iteration + 1
        self.clock.now += self.durations[self.iteration]
        self.w.fill_(i - 0.5)
        if i == self.stop_at:
            assert self.stop is not None
            raise self.stop
        self.w.fill_(i)
        self.moments["exp_avg"].fill_(i * i)
        self.moments["step"] += 1
        self.iteration, self.env_steps = i, self.env_steps + 10
        self.returns.append(float(i))
        return {"env_steps": self.env_steps, "episode_return_mean": self.mean_return, "steps_per_s": 1.0}

    def save_checkpoint(self, background: bool = False, defer: bool = False) -> None:
        self.commit_checkpoint("ppo", {"w": self.w, "opt": {"state": self.moments, "groups": [(0.9, 0.99)]}},
                               extra={"seen": [self.iteration]}, background=background, defer=defer)


def _reference(durations: list[float], interval: float, iterations: int, stop_at: int | None) -> list[int]:
    """The iterations a run writes: one that ends ``interval`` or more seconds after the last written one was taken
    (the first measured from the loop's start), the last one, and, when the run stops early, the last one it
    completed (if it was not written already)."""
    written, t, last = [], 0.0, 0.0
    for i in range(1, iterations + 1):
        t += durations[i - 1]
        if i == stop_at:
            if i > 1 and (not written or written[-1] != i - 1):
                written.append(i - 1)
            return written
        if t - last >= interval or i == iterations:
            written.append(i)
            last = t
    return written


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    durations=st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.5]), min_size=8, max_size=8),
    interval=st.sampled_from([0.0, 0.5, 1.0, 3.0, 100.0]),
    iterations=st.integers(1, 8),
    stop=st.one_of(st.none(), st.tuples(st.integers(1, 8), st.sampled_from(["ctrl-c", "sigterm", "error"]))),
)
def test_which_iterations_are_written_and_what_each_holds(tmp_path_factory, monkeypatch, durations, interval,
                                                          iterations, stop):
    out = tmp_path_factory.mktemp("run")
    clock = _Clock()
    monkeypatch.setattr(loop_module.time, "monotonic", clock.monotonic)
    stop_at, exc = None, None
    if stop is not None and stop[0] <= iterations:
        stop_at = stop[0]
        exc = {"ctrl-c": KeyboardInterrupt(), "sigterm": Terminated(), "error": RuntimeError("env raised")}[stop[1]]
    run = _Run(_Config(str(out), 10 * iterations, interval), durations, clock, stop_at, exc)
    written: list[int] = []
    real = loop_module.prepare_checkpoint

    def recording(folder, algo, config, counters, *rest):
        written.append(counters["iteration"])
        return real(folder, algo, config, counters, *rest)

    monkeypatch.setattr(loop_module, "prepare_checkpoint", recording)
    if exc is None:
        run_loop(run, desc="t", log_line=str, progress=False, on_iteration=None, close=lambda: None)
    else:
        with pytest.raises(type(exc)):
            run_loop(run, desc="t", log_line=str, progress=False, on_iteration=None, close=lambda: None)
    assert written == _reference(durations, interval, iterations, stop_at)
    if not written:
        assert run.checkpointed is None and not (out / "checkpoint" / "manifest.json").exists()
        return
    # The checkpoint on disk holds the last written iteration's own state: its weights, optimizer moments,
    # counters and JSON as that iteration left them (a deferred state is a copy, not changed by later steps).
    k = written[-1]
    ck = read_checkpoint(out / "checkpoint")
    assert run.checkpointed == (k, 10 * k)
    assert ck.counters["iteration"] == k and ck.counters["env_steps"] == 10 * k
    assert ck.counters["returns"] == [float(i) for i in range(max(1, k - 9), k + 1)]
    assert torch.equal(ck.weights["w"], torch.full((3,), float(k)))
    assert torch.equal(ck.weights["opt"]["state"]["exp_avg"], torch.full((2,), float(k * k)))
    assert ck.weights["opt"]["state"]["step"].item() == k and ck.weights["opt"]["groups"] == [(0.9, 0.99)]
    assert ck.extra == {"seen": [k]}


def test_a_checkpoint_with_files_is_not_deferred(tmp_path):
    run = _Run(_Config(str(tmp_path), 10, 1.0), [0.0], _Clock())
    with pytest.raises(ValueError, match="cannot be deferred"):
        run.commit_checkpoint("dqn", {"w": run.w}, files={"replay.bin": lambda f: f.write(b"x")}, defer=True)
    assert run._deferred is None and not (tmp_path / "checkpoint").exists()


def test_a_deferred_state_is_a_copy_whatever_its_containers(tmp_path):
    """Tensors inside a namedtuple, a list and a nested dict are copied too: the state written is the one taken."""
    from collections import namedtuple

    from trajview.policy.torch_policy import cloned_state

    Pair = namedtuple("Pair", "a b")
    state = {"p": Pair(torch.zeros(2), 3), "l": [torch.ones(1), (torch.zeros(1), "x")], "n": None}
    copied = cloned_state(state)
    state["p"].a.fill_(5.0)
    state["l"][0].fill_(5.0)
    state["l"][1][0].fill_(5.0)
    assert type(copied["p"]) is Pair and copied["p"].b == 3 and torch.equal(copied["p"].a, torch.zeros(2))
    assert torch.equal(copied["l"][0], torch.ones(1)) and torch.equal(copied["l"][1][0], torch.zeros(1))
    assert copied["l"][1][1] == "x" and copied["n"] is None and type(copied["l"][1]) is tuple


def test_a_new_checkpoint_drops_the_deferred_one(tmp_path):
    run = _Run(_Config(str(tmp_path), 30, 1.0), [0.0] * 3, _Clock())
    run.train_iteration()
    run.save_checkpoint(defer=True)
    run.train_iteration()
    run.save_checkpoint()  # written now: the deferred state of iteration 1 is older, and goes
    run.flush_checkpoint()
    assert read_checkpoint(tmp_path / "checkpoint").counters["iteration"] == 2 and run._deferred is None


# -- `trajview train --checkpoint-interval` ----------------------------------------------------------------------

SMALL = ["--env", "tvtest/Failing-v0", "--env-module", "failing_env", "--model", "mlp", "--envs-per-worker", "2",
         "--train-batch-size", "100", "--minibatch-size", "50", "--num-sgd-iter", "1", "--no-progress"]


def test_a_run_that_fails_between_checkpoints_keeps_its_last_complete_iteration(tmp_path, monkeypatch, capsys):
    """The env raises in iteration 3 (local backend, in this process); the interval is far off, so iterations 1 and
    2 were only copied in memory: the run writes iteration 2's state as it stops, and --resume goes on from it."""
    from trajview.train.cli import main

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # --env-module failing_env
    import failing_env

    monkeypatch.setattr(failing_env.FailingEnv, "steps_in_process", 0)
    monkeypatch.setenv("TV_FAIL_HOW", "raise")
    monkeypatch.setenv("TV_FAIL_AT", "250")
    monkeypatch.setenv("TV_FAIL_ONCE", str(tmp_path / "failed-once"))
    out = tmp_path / "run"
    written: list[int] = []
    real = loop_module.prepare_checkpoint
    monkeypatch.setattr(loop_module, "prepare_checkpoint",
                        lambda folder, algo, config, counters, *rest: (written.append(counters["iteration"]),
                                                                       real(folder, algo, config, counters, *rest))[1])
    assert main(["train", "--timesteps", "500", "--out", str(out), "--checkpoint-interval", "1000", *SMALL]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "trajview train: error: rollout worker 1 failed:", err  # (the env's traceback follows)
    assert any("FailingEnv: the env failed on purpose" in line for line in err), err
    assert err[-1].startswith(f"the run's checkpoint {out / 'checkpoint'} holds iteration 2 (200 env steps); "
                              f"--resume --out {out} continues it"), err
    assert written == [2]  # (one write, as the run stopped)
    ck = read_checkpoint(out / "checkpoint")
    assert ck.counters["iteration"] == 2 and ck.config["checkpoint_interval_s"] == 1000
    # This session's interval may differ from the first's (it changes no learning): not a conflict.
    assert main(["train", "--resume", "--out", str(out), "--checkpoint-interval", "0", "--no-progress"]) == 0
    assert written == [2, 3, 4, 5]
    assert read_checkpoint(out / "checkpoint", weights=False).counters["iteration"] == 5


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_interval_is_a_one_line_error(tmp_path, capsys, value):
    from trajview.train.cli import main

    assert main(["train", "--out", str(tmp_path / "run"), "--checkpoint-interval", value, "--timesteps", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "checkpoint_interval_s (--checkpoint-interval)" in err and value in err, err


def test_dqn_refuses_the_interval(tmp_path, capsys):
    from trajview.train.cli import main

    assert main(["train", "--algo", "dqn", "--out", str(tmp_path / "run"), "--checkpoint-interval", "5"]) == 2
    assert "--checkpoint-interval" in capsys.readouterr().err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    durations=st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.5]), min_size=8, max_size=8),
    interval=st.sampled_from([0.0, 0.5, 1.0, 100.0]),
    iterations=st.integers(1, 8),
    where=st.sampled_from(["prepare", "wait", "second-ctrl-c", "sigterm-then-ctrl-c"]),
    nth=st.integers(1, 9),
)
def test_a_stop_inside_a_commit_or_while_the_stop_writes_loses_no_complete_iteration(
        tmp_path_factory, monkeypatch, durations, interval, iterations, where, nth):
    """A real SIGINT (the process's own, handled as Ctrl-C is) delivered inside a commit: at its ``nth`` serialization
    (``prepare``: a checkpoint being written, or a deferred state being taken) or its ``nth`` wait for an earlier
    write (``wait``); or a second one while a run stopped in iteration ``nth`` (by Ctrl-C, or by SIGTERM) writes its
    last iteration. Whenever the run stops, the checkpoint on disk holds its last complete iteration, whole."""
    import signal

    out = tmp_path_factory.mktemp("run")
    clock = _Clock()
    monkeypatch.setattr(loop_module.time, "monotonic", clock.monotonic)
    stop_at = nth if where in ("second-ctrl-c", "sigterm-then-ctrl-c") and nth <= iterations else None
    first = Terminated() if where == "sigterm-then-ctrl-c" else KeyboardInterrupt()
    run = _Run(_Config(str(out), 10 * iterations, interval), durations, clock, stop_at, first)
    calls = {"prepare": 0, "wait": 0}
    stopping = {"now": False, "armed": True}
    real_prepare, real_wait = loop_module.prepare_checkpoint, RunCounters.wait_checkpoint
    real_iteration = run.train_iteration

    def iteration() -> dict:
        try:
            return real_iteration()
        except BaseException:
            stopping["now"] = True
            raise

    def prepare(*args, **kwargs):
        calls["prepare"] += 1
        if stopping["armed"] and ((where == "prepare" and calls["prepare"] == nth) or (
                where not in ("prepare", "wait") and stopping["now"])):
            signal.raise_signal(signal.SIGINT)
        return real_prepare(*args, **kwargs)

    def wait(self):
        real_wait(self)
        calls["wait"] += 1
        if stopping["armed"] and where == "wait" and calls["wait"] == nth:
            signal.raise_signal(signal.SIGINT)

    run.train_iteration = iteration  # type: ignore[method-assign]
    monkeypatch.setattr(loop_module, "prepare_checkpoint", prepare)
    monkeypatch.setattr(RunCounters, "wait_checkpoint", wait)
    try:
        run_loop(run, desc="t", log_line=str, progress=False, on_iteration=None, close=lambda: None)
        stopped = None
    except KeyboardInterrupt as e:
        stopped = e
    finally:
        stopping["armed"] = False
        run.wait_checkpoint()
    k = run.iteration  # the last complete iteration
    if stopped is None:
        assert k == iterations
    if k == 0:
        assert not (out / "checkpoint" / "manifest.json").exists()
        return
    ck = read_checkpoint(out / "checkpoint")
    assert ck.counters["iteration"] == k and ck.counters["env_steps"] == 10 * k, (where, nth, stopped)
    assert torch.equal(ck.weights["w"], torch.full((3,), float(k)))
    assert torch.equal(ck.weights["opt"]["state"]["exp_avg"], torch.full((2,), float(k * k)))
    assert ck.extra["seen"] == [k]
    if where == "second-ctrl-c" and stop_at is not None:
        assert type(stopped) is KeyboardInterrupt  # (the second Ctrl-C is handled once the write is done)
