"""`trajview train --workers N --backend local|process|ray [--async]`: PPO sampling in parallel through a WorkerSet.

Tiny runs (a few hundred env steps of RepeatPrevious): the metrics columns, reproducibility for a given N,
``--resume`` of a multi-worker run, asynchronous sampling's staleness, the Ray backend, and the one-line errors
for bad settings. The WorkerSet parts they rest on (per-worker env seeds, per-worker sampling time, metrics
coming with asynchronous batches) are checked at the end.
"""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from trajview.train import TrainConfig, PPOTrainer  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.metrics import METRIC_FIELDS  # noqa: E402
from train_runs import popen_in_group  # noqa: E402

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

SMALL = ["--env", "trajview/RepeatPrevious-v0", "--model", "mlp", "--envs-per-worker", "2", "--train-batch-size",
         "200", "--minibatch-size", "50", "--num-sgd-iter", "2", "--no-progress"]

#: Columns that measure time: they differ run to run, everything else is reproducible.
TIME_COLUMNS = {"time_s", "steps_per_s", "learn_s", "learner_idle_s", "worker_steps_per_s", "weights_sync_s"}

PARALLEL_COLUMNS = ("learn_s", "learner_idle_s", "worker_steps_per_s", "weights_sync_bytes", "weights_sync_s",
                    "staleness_mean", "staleness_max", "stale_batches_dropped")


def _ckpt(out):
    """The run's checkpoint as one dict: its counters, settings (``config``) and tensors (read as trajview does)."""
    from trajview.train.checkpoint import read_checkpoint

    ck = read_checkpoint(out / "checkpoint")
    return {**ck.counters, "config": ck.config, "algo": ck.algo, "extra": ck.extra, **ck.weights}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _weights_nbytes(out) -> int:
    ckpt = _ckpt(out)
    return sum(v.numel() * v.element_size() for v in ckpt["policy"]["model"].values())


def _check_sane(rows, workers, weights_nbytes, asynchronous=False):
    assert set(PARALLEL_COLUMNS) <= set(rows[0]) and list(rows[0]) == METRIC_FIELDS
    for k, r in enumerate(rows):
        assert float(r["worker_steps_per_s"]) > 0 and float(r["learner_idle_s"]) >= 0 and float(r["learn_s"]) > 0
        # The workers start with the learner's weights: nothing to send before the first update.
        assert int(r["weights_sync_bytes"]) == (0 if k == 0 else workers * weights_nbytes)
        assert float(r["weights_sync_s"]) >= 0
        if not asynchronous:
            assert float(r["staleness_mean"]) == 0 and int(r["staleness_max"]) == 0
        assert int(r["stale_batches_dropped"]) >= 0


def test_two_process_workers_reproducible_with_sane_metrics(tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["train", "--workers", "2", "--timesteps", "600", "--seed", "5", "--out", str(out), *SMALL]) == 0
        runs.append(_rows(out / "metrics.csv"))
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["backend"] == "process" and cfg["workers"] == 2 and cfg["async_sampling"] is False
    a, b = runs
    assert [int(r["env_steps"]) for r in a] == [200, 400, 600]
    _check_sane(a, 2, _weights_nbytes(tmp_path / "a"))
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k not in TIME_COLUMNS} == {
            k: v for k, v in rb.items() if k not in TIME_COLUMNS}


def test_local_backend_two_workers_share_the_learners_policy(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--workers", "2", "--backend", "local", "--timesteps", "400", "--out", str(out),
                 *SMALL]) == 0
    rows = _rows(out / "metrics.csv")
    assert json.loads((out / "config.json").read_text())["backend"] == "local"
    assert [int(r["weights_sync_bytes"]) for r in rows] == [0, 0]  # the workers act with the learner's object
    assert all(float(r["worker_steps_per_s"]) > 0 for r in rows)


def test_one_worker_defaults_to_local_and_more_to_process():
    assert TrainConfig().backend == "local"
    assert TrainConfig(workers=2, train_batch_size=2000).backend == "process"
    assert TrainConfig(async_sampling=True).backend == "process"
    assert TrainConfig(workers=2, backend="local").backend == "local"


def test_async_sampling_reports_staleness_bounded_by_max_staleness(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--workers", "2", "--async", "--timesteps", "1000", "--out", str(out), *SMALL]) == 0
    rows = _rows(out / "metrics.csv")
    assert json.loads((out / "config.json").read_text())["async_sampling"] is True
    _check_sane(rows, 2, _weights_nbytes(out), asynchronous=True)
    assert float(rows[0]["staleness_mean"]) == 0  # the first batches: the weights the workers started with
    steps = [0] + [int(r["env_steps"]) for r in rows]
    for k, r in enumerate(rows):
        assert 0 <= float(r["staleness_mean"]) <= int(r["staleness_max"]) <= 1
        # Each iteration trains on 2 batches of 100 env steps (a worker's 2 envs x 50); a batch more than 1
        # version behind (a worker the others outran twice while it was starved of CPU) is dropped, its env
        # steps still counted.
        assert steps[k + 1] - steps[k] == 200 + 100 * int(r["stale_batches_dropped"])
    assert steps[-1] >= 1000
    # The workers sample while the learner trains: after the first update, batches one version behind come in.
    assert max(int(r["staleness_max"]) for r in rows) == 1


def test_async_max_staleness_zero_drops_every_stale_batch(tmp_path):
    cfg = TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", workers=2, envs_per_worker=2,
                      train_batch_size=200, sgd_minibatch_size=50, num_sgd_iter=2, timesteps=800,
                      async_sampling=True, max_staleness=0, stop_reward=None, out_dir=str(tmp_path / "run"))
    assert cfg.backend == "process"
    t = PPOTrainer(cfg)
    rows: list[dict] = []
    t.train(progress=False, on_iteration=rows.append)
    assert all(r["staleness_max"] == 0 for r in rows)
    assert sum(r["stale_batches_dropped"] for r in rows) > 0  # batches sampled before an update, then dropped
    # Dropped batches' env steps count: env_steps goes up by more than the batch in some iteration.
    steps = [0] + [r["env_steps"] for r in rows]
    assert max(b - a for a, b in zip(steps, steps[1:])) > 200


@pytest.mark.parametrize("asynchronous", [False, True])
def test_async_workers_sample_at_a_lower_cpu_priority_than_the_learner(tmp_path, asynchronous):
    """With --async the worker processes lower their priority (os.nice 19) so the learner keeps its core; synchronous
    workers never run while the learner trains and keep the learner's priority."""
    import os

    cfg = TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", workers=2, envs_per_worker=2,
                      train_batch_size=200, sgd_minibatch_size=50, num_sgd_iter=1, timesteps=400,
                      async_sampling=asynchronous, stop_reward=None, out_dir=str(tmp_path / "run"))
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    t = PPOTrainer(cfg)
    seen = []

    def look(_row):  # while the workers run (train() stops them at its end)
        seen.append([os.getpriority(os.PRIO_PROCESS, p) for p in t.rollouts.workers.worker_pids()])

    t.train(progress=False, on_iteration=look)
    want = min(mine + 19, 19) if asynchronous else mine
    assert seen and all(s == [want, want] for s in seen)
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the learner's own priority is untouched


def test_async_turns_on_the_decoupled_objective_and_sync_keeps_the_standard_one():
    assert TrainConfig(workers=2, async_sampling=True).ppo_config()["decoupled_clip"] is True
    assert TrainConfig(workers=2).ppo_config()["decoupled_clip"] is False
    assert TrainConfig().ppo_config()["decoupled_clip"] is False


class _ArrivalOrder:
    """A stand-in WorkerSet whose `sample_async` hands out the given batches in the given order (arrival order)."""

    def __init__(self, arrivals):
        self.arrivals = list(arrivals)

    def sample_async(self, with_metrics=False):
        return self.arrivals.pop(0)


def _async_batch(worker, rows, staleness, first_value, returns):
    batch = tv.SampleBatch({"actions": np.arange(first_value, first_value + rows), "eps_id": np.full(rows, worker)})
    metrics = {"episode_returns": returns, "episode_lengths": [int(r) for r in returns],
               "sample_env_steps": [rows], "sample_time_s": [0.01]}
    return tv.AsyncBatch(batch, worker, 0, staleness, metrics)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_async_iteration_puts_batches_and_episodes_in_worker_order_whatever_the_arrival(order):
    """The OS decides which worker's batch arrives first; the train batch and the episodes' order (which the
    return's window keeps) must not depend on it, or a seed's `--async` run would learn differently each time. A
    stale batch dropped keeps its episodes, in its worker's place."""
    from trajview.train.sampling import ParallelRollouts

    batches = [_async_batch(1, 3, 1, 0, [1.0]), _async_batch(2, 3, 1, 10, [2.0, 3.0]),
               _async_batch(3, 3, 2, 20, [4.0])]  # worker 3's is 2 versions behind: dropped with max_staleness 1
    sampler = object.__new__(ParallelRollouts)
    sampler.workers = _ArrivalOrder([batches[i] for i in order] + [_async_batch(1, 3, 0, 30, [5.0])])
    sampler.max_staleness, sampler.train_batch_size = 1, 6
    got = sampler._sample_async()
    # The batches kept until 6 rows: workers 1 and 2, whatever came first; worker 3's (if it came before both)
    # was dropped, and then only after both had come would the 6 rows be there.
    assert list(got.batch["actions"]) == [0, 1, 2, 10, 11, 12]
    assert got.staleness == [1, 1]
    dropped = order.index(2) < max(order.index(0), order.index(1))
    assert got.stale_batches_dropped == int(dropped) and got.env_steps == 6 + 3 * int(dropped)
    assert got.episode_returns == ([1.0, 2.0, 3.0, 4.0] if dropped else [1.0, 2.0, 3.0])
    assert got.episode_lengths == [int(r) for r in got.episode_returns]


@pytest.mark.alone  # the workers' interleaving: a niced worker shares its core with anything else that runs
def test_async_runs_of_a_seed_learn_alike(tmp_path, monkeypatch):
    """Two `--async` runs of one seed, 2 process workers: the same metrics (time columns aside) when every
    iteration took one batch, one version behind, from each worker (the usual case: each samples one fragment
    while the learner trains). On a loaded machine a worker may send two while the other sends none, and the
    runs then differ: such a pair is run again, up to 5 pairs. Which workers each iteration's batches came from
    is recorded in the learner (the staleness columns alone cannot tell: a worker that sends two batches before
    the learner's next update sends both one version behind)."""
    from trajview.rollout.worker_set import WorkerSet
    from trajview.train.sampling import ParallelRollouts

    senders: list[list[int]] = []  # per iteration: the worker index of each batch the learner took, in order
    sample_async, parallel_sample_async = WorkerSet.sample_async, ParallelRollouts._sample_async

    def recording_sample_async(self, *args, **kwargs):
        got = sample_async(self, *args, **kwargs)
        senders[-1].append(got.worker_index)
        return got

    def recording_parallel_sample_async(self):
        senders.append([])
        return parallel_sample_async(self)

    monkeypatch.setattr(WorkerSet, "sample_async", recording_sample_async)
    monkeypatch.setattr(ParallelRollouts, "_sample_async", recording_parallel_sample_async)

    def run(out):
        senders.clear()
        assert main(["train", *SMALL, "--workers", "2", "--async", "--timesteps", "1000", "--seed", "3",
                     "--out", str(out)]) == 0
        rows = _rows(out / "metrics.csv")
        one_each = len(senders) == len(rows) and all(sorted(s) == sorted(set(s)) and len(s) == 2 for s in senders)
        return rows, one_each and all(r["staleness_mean"] == "1.0" and r["stale_batches_dropped"] == "0"
                                      for r in rows[1:])

    pairs = []
    for attempt in range(5):
        (a, a_ok), (b, b_ok) = run(tmp_path / f"a{attempt}"), run(tmp_path / f"b{attempt}")
        pairs.append((a_ok, b_ok))
        if a_ok and b_ok:
            keep = [k for k in a[0] if k not in TIME_COLUMNS]
            assert [{k: r[k] for k in keep} for r in a] == [{k: r[k] for k in keep} for r in b]
            return
    pytest.fail(f"no pair of runs in which each iteration took one batch from each worker: {pairs}")


def test_low_priority_creator_nices_once_per_process_and_passes_the_config():
    from trajview.train.sampling import LowPriorityCreator

    seen = []
    c = LowPriorityCreator(lambda cfg: seen.append(cfg) or len(seen), increment=0)
    assert [c({"a": 1}), c({"a": 2})] == [1, 2] and seen == [{"a": 1}, {"a": 2}]
    assert c._niced_pid is not None


def test_resume_a_multi_worker_run(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--workers", "2", "--timesteps", "400", "--seed", "1", "--out", str(out), *SMALL]) == 0
    ckpt = _ckpt(out)
    assert ckpt["config"]["backend"] == "process" and ckpt["config"]["workers"] == 2
    assert main(["train", "--resume", "--timesteps", "800", "--out", str(out), "--no-progress"]) == 0
    rows = _rows(out / "metrics.csv")
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4]
    assert [int(r["env_steps"]) for r in rows] == [200, 400, 600, 800]
    # The re-created workers start with the checkpoint's weights: nothing to send in the first resumed iteration.
    nbytes = _weights_nbytes(out)
    assert [int(r["weights_sync_bytes"]) for r in rows] == [0, 2 * nbytes, 0, 2 * nbytes]
    assert _ckpt(out)["iteration"] == 4


@pytest.mark.ray
def test_ray_backend_sync_and_async(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray backend needs Ray (pip install 'trajview[ray]')")
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        out = tmp_path / "sync"
        assert main(["train", "--workers", "2", "--backend", "ray", "--timesteps", "400", "--out", str(out),
                     *SMALL]) == 0
        rows = _rows(out / "metrics.csv")
        assert json.loads((out / "config.json").read_text())["backend"] == "ray"
        _check_sane(rows, 2, _weights_nbytes(out))
        assert ray.is_initialized()  # the trainer leaves a Ray session it did not start running
        out = tmp_path / "async"
        assert main(["train", "--workers", "2", "--backend", "ray", "--async", "--timesteps", "600", "--out",
                     str(out), *SMALL]) == 0
        rows = _rows(out / "metrics.csv")
        _check_sane(rows, 2, _weights_nbytes(out), asynchronous=True)
        assert all(int(r["staleness_max"]) <= 1 for r in rows)
    finally:
        ray.shutdown()


@pytest.mark.parametrize(
    ("flags", "needs", "message"),
    [
        (["--backend", "threads"], None, "backend (--backend) must be one of auto, local, process, ray, got 'threads'"),
        (["--ray-address", "auto"], None, "ray_address (--ray-address) needs backend 'ray', got backend 'local'"),
        (["--async", "--backend", "local"], None, "async sampling (--async) needs backend 'process' or 'ray'"),
        (["--async", "--max-staleness", "-1"], None, "max_staleness (--max-staleness) must be an int >= 0, got -1"),
        (["--backend", "ray", "--ray-address", "no-port"], "ray", "--ray-address: expected auto, HOST:PORT"),
        (["--backend", "ray", "--ray-address", "127.0.0.1:1"], "ray",
         "--ray-address 127.0.0.1:1: no Ray cluster answers there"),
    ],
    ids=["backend", "address-without-ray", "async-local", "staleness", "address-format", "address-unreachable"],
)
def test_bad_parallel_settings_are_one_line_errors(tmp_path, capsys, flags, needs, message):
    if needs:
        pytest.importorskip(needs, reason=f"the {needs} backend's checks need {needs}")
    out = tmp_path / "run"
    assert main(["train", "--timesteps", "200", "--out", str(out), *flags, *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("trajview train: error: ") and message in err, err
    assert not out.exists()


def test_dqn_refuses_the_parallel_settings(tmp_path, capsys):
    assert main(["train", "--algo", "dqn", "--workers", "2", "--async", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--algo dqn samples with one worker" in err and "--workers, --async" in err
    assert not (tmp_path / "run").exists()


def test_help_says_what_async_does_with_stale_batches(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--backend", "--ray-address", "--async", "--max-staleness", "--recreate-failed-workers",
                 "--max-worker-restarts", "--sample-timeout"):
        assert flag in text
    assert "importance-weights" in text and "discarded" in text


# -- the WorkerSet parts -------------------------------------------------------------------------


class FirstObsPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {}


def cartpole(cfg):
    return gym.make("CartPole-v1")


def test_worker_set_seeds_each_workers_envs_apart_and_reports_sampling_time():
    def first_obs(ws):
        return [np.asarray(b["obs"])[:2] for b in ws.sample_each()]  # each env's first observation

    with tv.WorkerSet(cartpole, FirstObsPolicy, num_workers=2, num_envs=2, rollout_fragment_length=5,
                      seed=11) as ws:
        w1, w2 = first_obs(ws)
        m = ws.get_metrics()
    assert not np.array_equal(w1, w2)  # worker 2's envs got seeds 13, 14; worker 1's 11, 12
    assert m["sample_env_steps"] == [10, 10] and len(m["sample_time_s"]) == 2 and min(m["sample_time_s"]) > 0
    # Worker 2 of a set seeded 11 starts its envs as worker 1 of a set seeded 13 does.
    with tv.WorkerSet(cartpole, FirstObsPolicy, num_workers=1, num_envs=2, rollout_fragment_length=5,
                      seed=13) as ws:
        (v1,) = first_obs(ws)
    np.testing.assert_array_equal(v1, w2)


def test_sample_async_with_metrics_brings_each_workers_episodes():
    with tv.WorkerSet(cartpole, FirstObsPolicy, num_workers=2, num_envs=1, rollout_fragment_length=50,
                      seed=0) as ws:
        returns = []
        for _ in range(6):
            got = ws.sample_async(timeout=60, with_metrics=True)
            assert got.metrics is not None and got.metrics["sample_env_steps"] == [len(got.batch)]
            returns += got.metrics["episode_returns"]
        plain = ws.sample_async(timeout=60)  # dispatched by a with_metrics call: its metrics come along
        assert plain.metrics is not None
        # Samples dispatched from now on bring none.
        assert any(ws.sample_async(timeout=60).metrics is None for _ in range(5))
        assert ws.get_metrics()["sample_env_steps"]  # what the workers sampled since is reported the usual way
    # Always action 0: short CartPole episodes, each reported once.
    assert returns and all(0 < r < 50 for r in returns)


# -- failed workers ------------------------------------------------------------------------------


FAILING = ["--env", "tvtest/Failing-v0", "--env-module", "failing_env", "--model", "mlp", "--workers", "2",
           "--envs-per-worker", "2", "--train-batch-size", "200", "--minibatch-size", "50", "--num-sgd-iter", "1",
           "--no-progress"]


def _fail(monkeypatch, tmp_path, how: str, once: bool = True) -> None:
    # Each worker steps its envs 100 times an iteration: the failure comes in a worker's second iteration.
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # --env-module failing_env
    monkeypatch.setenv("TV_FAIL_HOW", how)
    monkeypatch.setenv("TV_FAIL_AT", "150")
    if once:
        monkeypatch.setenv("TV_FAIL_ONCE", str(tmp_path / "failed-once"))
    else:
        monkeypatch.delenv("TV_FAIL_ONCE", raising=False)


@pytest.mark.parametrize(
    ("how", "flags"),
    [("raise", []), ("exit", []), ("exit", ["--async"]), ("hang", ["--sample-timeout", "2"])],
    ids=["env-raises", "process-exits", "process-exits-async", "hangs"],
)
def test_a_failed_worker_is_replaced_and_the_run_goes_on(tmp_path, monkeypatch, caplog, how, flags):
    _fail(monkeypatch, tmp_path, how)
    out = tmp_path / "run"
    with caplog.at_level("WARNING", logger="trajview.rollout"):
        assert main(["train", "--timesteps", "800", "--out", str(out), "--recreate-failed-workers", *flags,
                     *FAILING]) == 0
    rows = _rows(out / "metrics.csv")
    # A lost sample is never counted. Synchronous: the failing iteration's round brought the other worker's 100
    # env steps, and a second round of both topped it up to 300 (at least the train batch size). Async: the
    # batches of whichever worker is done, to 200, plus any dropped as stale (their env steps count).
    steps = [int(r["env_steps"]) for r in rows]
    if "--async" in flags:
        assert steps == list(itertools.accumulate(200 + 100 * int(r["stale_batches_dropped"]) for r in rows))
        assert steps[-1] >= 800
    else:
        assert steps == [200, 500, 700, 900]
    restarts = [int(r["worker_restarts"]) for r in rows]
    assert restarts[-1] == 1 and restarts == sorted(restarts)
    # Synchronous: the failure comes in the second iteration. Async: it may come in the first, when one worker's
    # second sample (which fails) starts before the first iteration has its 200 steps (a slow second worker).
    assert restarts[0] == 0 or "--async" in flags
    assert (tmp_path / "failed-once").exists()
    why = {"raise": "RuntimeError: FailingEnv: the env failed on purpose", "exit": "died: exited with exit code 3",
           "hang": "gave no answer within sample_timeout_s=2 s (killed)"}[how]
    warned = [r.getMessage() for r in caplog.records if "starting a replacement" in r.getMessage()]
    assert len(warned) == 1 and why in warned[0] and "(restart 1 of max_restarts=10)" in warned[0], warned
    assert json.loads((out / "config.json").read_text())["recreate_failed_workers"] is True


def test_without_recreation_a_failed_worker_stops_the_run_and_resume_goes_on(tmp_path, monkeypatch, capsys):
    _fail(monkeypatch, tmp_path, "exit")
    out = tmp_path / "run"
    assert main(["train", "--timesteps", "800", "--out", str(out), *FAILING]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] in ("trajview train: error: rollout worker 1 died: exited with exit code 3",
                      "trajview train: error: rollout worker 2 died: exited with exit code 3"), err
    assert err[1] == (f"the run's checkpoint {out / 'checkpoint'} holds iteration 1 (200 env steps); --resume "
                      f"--out {out} continues it; --recreate-failed-workers replaces a failed worker and goes on"), err
    assert len(err) == 2  # no traceback: the worker's failure is the message
    assert _ckpt(out)["iteration"] == 1
    # The failure does not come back (TV_FAIL_ONCE): the resumed run, its failed workers now replaced, ends.
    assert main(["train", "--resume", "--out", str(out), "--recreate-failed-workers", "--no-progress"]) == 0
    assert [int(r["env_steps"]) for r in _rows(out / "metrics.csv")] == [200, 400, 600, 800]
    assert _ckpt(out)["config"]["recreate_failed_workers"] is True


def test_an_env_that_keeps_failing_uses_up_the_restarts(tmp_path, monkeypatch, capsys):
    _fail(monkeypatch, tmp_path, "raise", once=False)
    out = tmp_path / "run"
    assert main(["train", "--timesteps", "2000", "--out", str(out), "--recreate-failed-workers",
                 "--max-worker-restarts", "1", *FAILING]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("trajview train: error: rollout worker ") and " failed:\n" in err
    assert "RuntimeError: FailingEnv: the env failed on purpose" in err  # the worker's traceback, its env's line
    assert err.endswith("all 1 worker restarts allowed are used up: raise --max-worker-restarts for more"), err
    assert "Traceback" in err and "trajview/train/cli.py" not in err  # the worker's traceback, not the trainer's


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--recreate-failed-workers"], "recreate_failed_workers (--recreate-failed-workers) needs backend "
                                        "'process' or 'ray'"),
        (["--sample-timeout", "5"], "sample_timeout_s (--sample-timeout) needs backend 'process' or 'ray'"),
        (["--workers", "2", "--sample-timeout", "0"], "sample_timeout_s (--sample-timeout) must be None or a finite number of "
                                                      "seconds > 0, got 0.0"),
        (["--workers", "2", "--recreate-failed-workers", "--max-worker-restarts", "-1"],
         "max_worker_restarts (--max-worker-restarts) must be an int >= 0, got -1"),
        (["--start-timeout", "5"], "start_timeout_s (--start-timeout) needs backend 'process' or 'ray'"),
        (["--workers", "2", "--start-timeout", "-1"], "start_timeout_s (--start-timeout) must be None or a finite "
                                                      "number of seconds > 0, got -1.0"),
    ],
    ids=["recreate-local", "timeout-local", "timeout-zero", "restarts-negative", "start-local", "start-negative"],
)
def test_bad_failure_settings_are_one_line_errors(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert main(["train", "--timesteps", "200", "--out", str(out), *flags, *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("trajview train: error: ") and message in err, err
    assert not out.exists()


def test_metrics_appended_to_an_earlier_runs_file_keep_its_columns(tmp_path):
    from trajview.train.metrics import append_metrics

    path = tmp_path / "metrics.csv"
    old = [f for f in METRIC_FIELDS if f != "worker_restarts"]  # a file written before that column
    path.write_text(",".join(old) + "\n" + ",".join("1" for _ in old) + "\n")
    append_metrics(path, {**{f: 2 for f in METRIC_FIELDS}, "worker_restarts": 5})
    rows = _rows(path)
    assert list(rows[0]) == old and [r["iteration"] for r in rows] == ["1", "2"]
    assert all(v == "2" for v in rows[1].values())


@pytest.mark.parametrize("algo", [["--workers", "2", *SMALL], ["--algo", "dqn", "--iteration-steps", "500", "--no-progress"]],
                         ids=["ppo-2-workers", "dqn"])
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_and_sigterm_stop_the_workers_and_say_where_the_run_stands(tmp_path, algo, stop):
    """Ctrl-C in a terminal (SIGINT to the whole process group) and SIGTERM to the trainer (``kill PID``, a
    scheduler's stop): the workers stopped, the checkpoint named, exit code 130 or 143, no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    proc = popen_in_group([sys.executable, "-m", "trajview.train.cli", "train", "--timesteps", "10000000",
                           "--out", str(out), *algo], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.csv").exists() or len(_rows(out / "metrics.csv")) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # the trainer and its worker processes
        else:
            os.kill(proc.pid, signal.SIGTERM)  # the trainer alone: it stops its workers
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == (130 if stop == "ctrl-c" else 143), err
    lines = err.strip().splitlines()
    assert lines[-2] == ("trajview train: interrupted" if stop == "ctrl-c" else "trajview train: terminated (SIGTERM)"), err
    ckpt = _ckpt(out)
    assert lines[-1] == (f"the run's checkpoint {out / 'checkpoint'} holds iteration {ckpt['iteration']} "
                         f"({ckpt['env_steps']} env steps); --resume --out {out} continues it"), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err  # the workers ignore it: the trainer stops them
    deadline = time.monotonic() + 10  # the workers went with the trainer: nothing is left of its process group
    while _processes_in_group(proc.pid):  # (read from /proc: a pgrep would inherit the ASan pass's LD_PRELOAD)
        assert time.monotonic() < deadline, _processes_in_group(proc.pid)
        time.sleep(0.1)


def _processes_in_group(pgid: int) -> list[str]:
    """The live processes of process group ``pgid``: their pid and command line."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
            if int(fields[2]) == pgid and fields[0] != "Z":
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{pid}: {cmdline}")
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return found


@pytest.mark.parametrize("model", ["lstm", "attention"])
def test_memory_models_sampled_on_process_workers_replay_their_logp_in_the_learner(model):
    """Batches of 2 worker processes (their recurrent state / attention memory carried across fragments in the
    workers) read back in the learner give each action the logp the worker acted with: the state views the
    learner builds match what the workers computed."""
    cfg = TrainConfig.with_model_presets(env="trajview/StatelessCartPole-v1", model=model, workers=2,
                                         envs_per_worker=2, train_batch_size=200, timesteps=400, stop_reward=None,
                                         out_dir="unused")
    t = PPOTrainer(cfg)
    try:
        for _ in range(2):  # the second batch continues the first's episodes: state carried over a fragment edge
            got = t.rollouts.sample()
            tensors = dict(t.policy._to_torch(got.batch).items())
            logp = t.policy.logp_of_actions(tensors)
            torch.testing.assert_close(logp, tensors["action_logp"].float(), atol=1e-5, rtol=1e-5)
            assert len(got.batch) == 200
        # The second batch has sequences that start mid-episode, with the state the worker carried in (not zeros).
        lens = np.asarray(got.batch["seq_lens"])
        starts = np.cumsum(lens) - lens
        mid = np.asarray(got.batch["t"])[starts] > 0
        state = np.asarray(got.batch["state_in_0"]).reshape(len(lens), -1)
        assert mid.any() and np.abs(state[mid]).sum(axis=1).min() > 0
    finally:
        t.stop()


@pytest.mark.parametrize("model", ["lstm", "attention"])
def test_memory_models_train_on_async_process_workers(tmp_path, model):
    out = tmp_path / "run"
    assert main(["train", "--model", model, "--workers", "2", "--async", "--timesteps", "600", "--out", str(out),
                 "--envs-per-worker", "2", "--train-batch-size", "200", "--minibatch-size", "50",
                 "--num-sgd-iter", "1", "--no-progress"]) == 0
    rows = _rows(out / "metrics.csv")
    _check_sane(rows, 2, _weights_nbytes(out), asynchronous=True)
    assert int(rows[-1]["env_steps"]) >= 600 and all(float(r["kl"]) == float(r["kl"]) for r in rows)  # no NaN


class _FlakyRay:
    """Stands in for the ``ray`` module: ``ray.init`` raises ``errors`` in turn, then connects."""

    def __init__(self, *errors: str) -> None:
        self.errors = list(errors)
        self.inits = self.shutdowns = 0

    def init(self, address, log_to_driver):
        self.inits += 1
        if self.errors:
            raise ConnectionError(self.errors.pop(0))

    def shutdown(self):
        self.shutdowns += 1


def test_a_ray_client_connection_whose_server_failed_to_start_is_tried_again(monkeypatch, caplog):
    from trajview.train import sampling

    monkeypatch.setattr(sampling.time, "sleep", lambda s: None)
    start_failed = "Initialization failure from server: ... Starting Ray client server failed."
    ray = _FlakyRay(start_failed, start_failed)
    with caplog.at_level("WARNING", logger="trajview.train"):
        sampling.join_ray_cluster(ray, "ray://127.0.0.1:10001")
    assert (ray.inits, ray.shutdowns) == (3, 2)
    assert len([r for r in caplog.records if "did not start (attempt" in r.getMessage()]) == 2
    ray = _FlakyRay(*[start_failed] * 3)  # every attempt: the last failure is raised
    with pytest.raises(ConnectionError, match="Initialization failure"):
        sampling.join_ray_cluster(ray, "ray://127.0.0.1:10001")
    assert ray.inits == sampling.RAY_CLIENT_ATTEMPTS
    for address, error in (("127.0.0.1:6379", start_failed), ("ray://127.0.0.1:10001", "ray client connection timeout")):
        ray = _FlakyRay(error)  # not Ray Client, or a failure that would come again: raised at once
        with pytest.raises(ConnectionError):
            sampling.join_ray_cluster(ray, address)
        assert (ray.inits, ray.shutdowns) == (1, 0)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_an_env_that_raises_in_the_trainers_process_says_what_the_process_backend_says(tmp_path, monkeypatch, capsys,
                                                                                      algo):
    _fail(monkeypatch, tmp_path, "raise")
    import failing_env  # the env's steps are counted in this process (the local backend samples here)

    monkeypatch.setattr(failing_env.FailingEnv, "steps_in_process", 0)
    out = tmp_path / "run"
    if algo == "ppo":  # one worker of 2 envs: 200 env steps an iteration; the failure in the second
        monkeypatch.setenv("TV_FAIL_AT", "250")
        flags = [*FAILING[:FAILING.index("--workers")], "--workers", "1", *FAILING[FAILING.index("--workers") + 2:]]
        assert main(["train", "--timesteps", "800", "--out", str(out), *flags]) == 1
        where = (f"the run's checkpoint {out / 'checkpoint'} holds iteration 1 (200 env steps); --resume --out {out} "
                 f"continues it; --backend process --recreate-failed-workers replaces a failed worker and goes on")
    else:  # DQN's iterations of 500 env steps (512: whole samples of 32): the failure in the second
        monkeypatch.setenv("TV_FAIL_AT", "600")
        assert main(["train", "--algo", "dqn", "--env", "tvtest/Failing-v0", "--timesteps", "1500", "--iteration-steps",
                     "500", "--out", str(out), "--no-progress"]) == 1
        where = (f"the run's checkpoint {out / 'checkpoint'} holds iteration 1 (512 env steps); --resume --out {out} "
                 f"continues it")
    err = capsys.readouterr().err.strip().splitlines()
    # As test_an_env_that_keeps_failing_uses_up_the_restarts (the process backend): the worker's failure with its
    # env's traceback, then where the run stands.
    assert err[0] == "trajview train: error: rollout worker 1 failed:", err
    assert err[1].startswith("Traceback") and "RuntimeError: FailingEnv: the env failed on purpose" in err[-2]
    assert err[-1] == where, err[-1]
    assert _ckpt(out)["iteration"] == 1
    assert main(["train", "--resume", "--out", str(out), "--no-progress"]) == 0  # the failure does not come back
