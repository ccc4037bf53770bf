"""Many writers into one `tv.ReplayBuffer`: 4 writer processes (through `tv.ReplayServer`) and 2 sampler threads
for a bounded time: no slice spans two trajectories, no row is torn. Fragments of one episode: joined in order,
separate trajectories out of order. A Ray buffer actor fed by two Ray tasks.

The long run: ``TRAJVIEW_WRITERS_SECONDS=60 pytest tests/test_replay_writers.py -k processes``.
"""

from __future__ import annotations

from collections.abc import Iterator

import multiprocessing
import os
import sys
import threading
import time

import numpy as np
import pytest

import trajview as tv

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

SECONDS = float(os.environ.get("TRAJVIEW_WRITERS_SECONDS", "10"))
SLICE = 8


def make_fragment(w: int, eps: int, t0: int, n: int, end: bool) -> dict:
    """Rows whose every column encodes (writer, episode, t), so a torn or stitched row shows."""
    t = np.arange(t0, t0 + n)
    obs = np.stack([np.full(n, w), np.full(n, eps), t, w * 1e9 + eps * 1e3 + t], axis=1).astype(np.float64)
    nxt = obs.copy()
    nxt[:, 2] += 1
    nxt[:, 3] += 1
    term = np.zeros(n, bool)
    term[-1] = end
    return {"obs": obs, "new_obs": nxt, "actions": (eps * 31 + t) % 1009, "rewards": t.astype(np.float32),
            "terminateds": term, "truncateds": np.zeros(n, bool), "eps_id": np.full(n, eps, np.int64), "t": t}


def two_env_batches(w: int, rng: np.random.Generator, max_len: int, max_chunk: int) -> Iterator[dict]:
    """Endless batches of writer ``w``, as a rollout worker with 2 envs: each batch holds a fragment (1 to
    ``max_chunk - 1`` steps) of each env's episode (1 to ``max_len - 1`` steps); episode e of writer w has id
    (w + 1) << 20 | e."""
    next_eps = 0

    def new() -> dict:
        nonlocal next_eps
        next_eps += 1
        return dict(eps=(w + 1) << 20 | next_eps, t=0, length=int(rng.integers(1, max_len)))

    envs = [new(), new()]
    while True:
        parts = []
        for i, e in enumerate(envs):
            n = min(int(rng.integers(1, max_chunk)), e["length"] - e["t"])
            done = e["t"] + n == e["length"]
            parts.append(make_fragment(w, e["eps"], e["t"], n, done))
            e["t"] += n
            if done:
                envs[i] = new()
        yield {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def writer_main(w: int, handle, seconds: float, counter, complete_only: bool = False) -> None:
    """A writer like a rollout worker with 2 envs: each batch holds a fragment of each env's episode."""
    batches = two_env_batches(w, np.random.default_rng(w), max_len=40, max_chunk=12)
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        batch = next(batches)
        handle.add(tv.SampleBatch(batch))
        sent += len(batch["t"])
    if complete_only:
        handle.flush()
        sent -= sum(len(p) for parts in handle._pending.values() for p in parts)  # incomplete: never sent
    counter.value += sent


def check_slice(b, lo: int, hi: int) -> list[str]:
    """What is wrong with rows [lo, hi) of a sample (one slice)."""
    obs, eps = b["obs"][lo:hi], b["eps_id"][lo:hi]
    t = b["t"][lo:hi]
    bad = []
    if (eps != eps[0]).any():
        bad.append("slice spans two trajectories")
    if (np.diff(t) != 1).any():
        bad.append("t not consecutive in a slice")
    w = obs[:, 0]
    torn = ((obs[:, 1] != eps) | (obs[:, 2] != t) | (obs[:, 3] != w * 1e9 + eps * 1e3 + t)
            | (b["actions"][lo:hi] != (eps * 31 + t) % 1009) | (b["rewards"][lo:hi] != t)
            | (w != (eps >> 20) - 1) | (b["new_obs"][lo:hi, 2] != t + 1) | (b["new_obs"][lo:hi, 1] != eps))
    if torn.any():
        bad.append("torn row")
    return bad


@pytest.mark.parametrize("trajs_per_batch", [None, 3])
def test_processes_write_while_threads_sample(trajs_per_batch):
    ctx = multiprocessing.get_context("fork")
    rb = tv.ReplayBuffer(2_000, sampler=tv.SliceSampler(slice_len=SLICE, seed=0))
    server = tv.ReplayServer(rb, context=ctx, maxsize=16)
    counter = ctx.Value("q", 0)
    seconds = SECONDS if trajs_per_batch is None else min(SECONDS, 3.0)
    procs = [ctx.Process(target=writer_main, args=(w, server.writer(trajs_per_batch), seconds, counter,
                                                   trajs_per_batch is not None)) for w in range(4)]
    for p in procs:  # fork before any thread of this process starts
        p.start()
    server.start()
    problems: list[str] = []
    slices = [0, 0]
    stop = threading.Event()

    def sampler(i: int) -> None:
        while not stop.is_set():
            if len(rb) == 0:
                time.sleep(0.01)
                continue
            b, info = rb.sample(64 * SLICE, return_info=True)
            off = 0
            for length in info["slices"][:, 2].tolist():
                problems.extend(check_slice(b, off, off + length))
                off += length
            slices[i] += len(info["slices"])

    threads = [threading.Thread(target=sampler, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for p in procs:
        p.join(seconds + 60)
        assert p.exitcode == 0
    server.close()
    stop.set()
    for th in threads:
        th.join()
    print(f"\n{len(procs)} writers, {seconds:g} s: {server.steps_added} steps in {server.batches_added} batches, "
          f"{rb.rows_written() / rb.capacity:.1f} rings, {sum(slices)} slices checked, {len(problems)} problems")
    assert not server.errors, server.errors[:3]
    assert problems == [], sorted(set(problems))
    assert server.steps_added == counter.value > 0
    assert rb.rows_written() > rb.capacity  # the ring wrapped under the samplers
    assert min(slices) > (100 if trajs_per_batch is None else 10)
    if trajs_per_batch is not None:
        # TorchRL's trajs_per_batch: only complete episodes reach the buffer.
        assert all(not d["open"] and d["starts_episode"] for d in rb.trajectories()[1:])
    # Every stored trajectory is one writer's one episode, its steps in order.
    for tr in rb.trajectories()[-200:]:
        b, _ = rb._gather([(tr["uid"], 0, tr["steps"])], tr["steps"])
        assert check_slice(b, 0, tr["steps"]) == []


def test_fragments_in_order_join_out_of_order_stay_apart():
    e = 1 << 20 | 5  # writer 0's episode 5
    a, b2, c = make_fragment(0, e, 0, 4, False), make_fragment(0, e, 4, 3, False), make_fragment(0, e, 7, 2, True)
    rb = tv.ReplayBuffer(100)
    for f in (a, b2, c):
        rb.add(f)
    assert [(d["steps"], d["starts_episode"]) for d in rb.trajectories()] == [(9, True)]
    # The middle fragment first: each fragment is a trajectory of its own (no error, nothing stitched).
    rb = tv.ReplayBuffer(100, sampler=tv.SliceSampler(slice_len=2))
    for f in (b2, a, c):
        rb.add(f)
    assert [(d["steps"], d["starts_episode"]) for d in rb.trajectories()] == [(3, False), (4, True), (2, False)]
    for _ in range(20):
        s = rb.sample(8)
        for lo in range(0, s.count, 2):
            assert check_slice(s, lo, lo + 2) == []
    # Two writers that share ids (overlapping t) are still refused.
    rb = tv.ReplayBuffer(100)
    rb.add(make_fragment(0, e, 0, 4, False))
    with pytest.raises(ValueError, match="reused"):
        rb.add(make_fragment(1, e, 2, 4, False))


@pytest.mark.ray
def test_ray_buffer_actor_takes_whole_batches():
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never an existing cluster
        buf = tv.replay.ray_replay_buffer(5_000, sampler=tv.SliceSampler(slice_len=4, seed=1))

        @ray.remote
        def write(w, buf):
            for n in range(1, 30):
                frag = make_fragment(w, (w + 1) << 20 | n, 0, 3 + n % 7, True)
                ray.get(buf.add.remote(tv.SampleBatch(frag)))

        ray.get([write.remote(w, buf) for w in range(2)])
        b, info = ray.get(buf.sample.remote(40 * 4, return_info=True))
        off = 0
        for length in info["slices"][:, 2].tolist():
            assert check_slice(b, off, off + length) == []
            off += length
        assert ray.get(buf.num_trajectories.remote()) == 58
    finally:
        ray.shutdown()


def test_worker_set_workers_write_complete_trajectories():
    """WorkerSet workers (processes) send their batches to the learner's buffer themselves, complete
    trajectories only (trajs_per_batch): no partial episode, none stitched, each from one worker."""
    sys.path.insert(0, os.path.dirname(__file__))
    from rollout_helpers import ObsActionPolicy, ScriptedEnv

    rb = tv.ReplayBuffer(10_000, sampler=tv.SliceSampler(slice_len=4, seed=0))
    server = tv.ReplayServer(rb, context=multiprocessing.get_context("fork"))
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((7, 13, 4), env_index=next(counter)), ObsActionPolicy, num_workers=2,
                      num_envs=2, rollout_fragment_length=10,
                      callbacks=tv.ReplayWritingCallbacks(server.writer(trajs_per_batch=2))) as ws:
        server.start()
        for _ in range(6):
            ws.sample()
    server.close()
    assert not server.errors and rb.num_trajectories() > 6
    for tr in rb.trajectories():
        assert not tr["open"] and tr["starts_episode"] and tr["steps"] in (7, 13, 4)
        b, _ = rb._gather([(tr["uid"], 0, tr["steps"])], tr["steps"])
        uid, t = b["obs"][:, 0], b["obs"][:, 1]
        assert (uid == uid[0]).all() and (t == np.arange(tr["steps"])).all() and (b["t"] == t).all()
        assert len(set((b["eps_id"] >> 40).tolist())) == 1  # one worker's
