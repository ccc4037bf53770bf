"""`WorkerSet.sample_async`: workers keep sampling while the learner trains; batches tagged with their weights'
version; nothing lost when synchronous calls come in between; stale batches dropped on request."""

from __future__ import annotations

import itertools
import os
import signal

import numpy as np
import pytest

import trajview as tv
from rollout_helpers import CounterPolicy, ScriptedEnv

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

_ENV_INDEX = itertools.count()


def env_creator(cfg):
    return ScriptedEnv(lengths=(4, 6), env_index=next(_ENV_INDEX))


class RecordingCounterPolicy(CounterPolicy):
    def loss(self, batch):
        return [batch[k] for k in ("obs", "actions", "eps_id", "t")]


def rows_of(batch, worker):
    """(worker, uid, t) of every row: each env step once, whichever path handed it out."""
    uid, t = batch["obs"][:, 0].astype(int), batch["obs"][:, 1].astype(int)
    return {(worker, u, s) for u, s in zip(uid.tolist(), t.tolist())}


@pytest.mark.parametrize("backend", ["process"])
def test_async_batches_carry_their_weights_version_and_nothing_is_lost(backend):
    with tv.WorkerSet(env_creator, RecordingCounterPolicy, num_workers=2, backend=backend, num_envs=2,
                      rollout_fragment_length=5) as ws:
        seen: set = set()
        versions = []
        for k in range(12):
            got = ws.sample_async(timeout=60)
            assert isinstance(got, tv.AsyncBatch) and got.worker_index in (1, 2)
            # the batch was sampled with the weights of its version: CounterPolicy acts count % 5
            assert (got.batch["actions"] == (got.policy_version * 3) % 5).all(), (got.policy_version, got.batch["actions"])
            assert got.staleness == ws.policy_version - got.policy_version >= 0
            rows = rows_of(got.batch, got.worker_index)
            assert not rows & seen
            seen |= rows
            versions.append(got.policy_version)
            if k % 3 == 2:
                ws.set_weights({"count": np.array([(ws.policy_version + 1) * 3], np.int64)})
        assert max(versions) >= 2  # the workers took newer weights while sampling on
        # A synchronous call in between: the samples in flight are kept, not lost; the workers catch up.
        m = ws.get_metrics()
        assert m["policy_version"] == ws.policy_version
        sync = ws.sample_each()
        for w, b in enumerate(sync, start=1):
            assert (b["actions"] == (ws.policy_version * 3) % 5).all()  # synchronous: the newest weights
            rows = rows_of(b, w)
            assert not rows & seen
            seen |= rows
        kept = [ws.sample_async(timeout=60) for _ in range(2)]  # the drained ones come first
        for got in kept:
            rows = rows_of(got.batch, got.worker_index)
            assert not rows & seen
            seen |= rows
        # Per worker and env, the steps handed out have no gap: nothing was dropped on the way.
        by_env: dict = {}
        for w, uid, t in seen:
            by_env.setdefault((w, uid), set()).add(t)
        for (w, uid), ts in by_env.items():
            if uid % 1000 < 2:  # episodes that began early enough to be fully sampled by now
                assert ts == set(range(len(ts))), (w, uid, sorted(ts))


def test_stale_batches_are_dropped_and_counted():
    with tv.WorkerSet(env_creator, RecordingCounterPolicy, num_workers=2, num_envs=1, rollout_fragment_length=3) as ws:
        ws.sample_async(timeout=60)  # every worker now has a sample in flight with version 0
        for v in range(3):
            ws.set_weights({"count": np.array([v + 1], np.int64)})
        got = ws.sample_async(timeout=60, max_staleness=0)
        assert got.staleness == 0 and got.policy_version == 3
        assert ws.get_metrics()["num_stale_batches_dropped"] >= 1
    with pytest.raises(ValueError, match="max_staleness must be None or an int >= 0"):
        tv.WorkerSet(env_creator, RecordingCounterPolicy, num_workers=1).sample_async(max_staleness=-1)


def test_a_worker_killed_while_sampling_asynchronously_is_replaced():
    with tv.WorkerSet(env_creator, RecordingCounterPolicy, num_workers=2, num_envs=1, rollout_fragment_length=3,
                      recreate_failed_workers=True) as ws:
        ws.set_weights({"count": np.array([2], np.int64)})
        ws.sample_async(timeout=60)
        pid = ws.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        replaced_batch = False
        for _ in range(200):  # until the replacement of worker 1 (built meanwhile) hands in a batch
            got = ws.sample_async(timeout=60)
            assert (got.batch["actions"] == 2).all()  # the replacement got the last weights
            if ws.num_worker_restarts == 1 and got.worker_index == 1:
                replaced_batch = True
                break
        assert replaced_batch and ws.num_worker_restarts == 1
    with tv.WorkerSet(env_creator, RecordingCounterPolicy, num_workers=1, num_envs=1, rollout_fragment_length=3) as ws:
        ws.sample_async(timeout=60)
        os.kill(ws.worker_pids()[0], signal.SIGKILL)
        with pytest.raises(tv.WorkerError, match="rollout worker 1 died"):
            for _ in range(3):
                ws.sample_async(timeout=60)
