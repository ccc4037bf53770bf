"""WorkerSet: env steps per second with 1 RolloutWorker in this process vs N worker processes.

Workload: an env whose step costs ``STEP_US`` microseconds of CPU (a busy
loop, as a simulator would), obs float32[4], 50-step episodes, 8 envs per
worker, a constant policy. One round = one ``sample()`` (8 x ``L`` env steps
per worker). Reported per round: ``env_steps`` and ``steps_per_s``; the
speed-up of N workers is their steps/s over the single worker's, in the same
run (it can be at most the number of cores).
"""

from __future__ import annotations

import os

import pytest

import trajview as tv
from train_parallel import ConstantPolicy, TimedEnv  # the workload of its part (b)

L = 100  # rollout_fragment_length
NUM_ENVS = 8
STEP_US = 200


def busy_env(cfg):
    """The env of ``train_parallel.py``'s part (b): ``STEP_US`` of busy loop per step, 50-step episodes."""
    return TimedEnv("busy", STEP_US)


WORKERS = (0, 2)  # 0: one RolloutWorker in this process (the baseline)


@pytest.mark.parametrize("num_workers", WORKERS, ids=lambda n: "in-process" if n == 0 else f"{n}-processes")
def test_worker_set(benchmark, num_workers):
    kwargs = dict(num_envs=NUM_ENVS, rollout_fragment_length=L)
    if num_workers == 0:
        runner = tv.RolloutWorker(busy_env, ConstantPolicy, **kwargs)
        sample, stop, n_workers = runner.sample, runner.stop, 1
    else:
        ws = tv.WorkerSet(busy_env, ConstantPolicy, num_workers=num_workers, **kwargs)
        sample, stop, n_workers = ws.sample, ws.stop, num_workers
    try:
        benchmark.group = "worker-set"
        steps = n_workers * NUM_ENVS * L
        benchmark.extra_info.update(question="worker-set", num_workers=n_workers, env_steps=steps,
                                    step_us=STEP_US, cores=os.cpu_count())
        batch = benchmark.pedantic(sample, rounds=5, warmup_rounds=1)
        assert len(batch) == steps
        meta = getattr(benchmark, "stats", None)
        if meta is not None:
            benchmark.extra_info["steps_per_s"] = steps / float(meta.stats.median)
    finally:
        stop()
