"""Replay (issue 5): sampling slices, adding, bytes per stored step.

A 100k-step buffer (10k under ``--benchmark-disable``) holds trajectories of
500 steps: columns ``obs`` (W1 float32[4] / W2 uint8[84, 84]), ``actions``
int64, ``rewards`` float32, ``terminateds``/``truncateds`` bool, ``eps_id`` and
``t`` int64. Frames come from a pool of 7 cycled through (row ``k`` holds
``pool[k % 7]``).

* ``replay-sample-W1``: 256 slices of 32 steps, every stored column plus
  ``new_obs = obs@+1``; ``replay-sample-W2``: the same with W2 frames and the
  4-frame stack ``obs@"-3:0"`` built at sample time (zeros before a
  trajectory's start) instead of ``new_obs``. Side by side:
  - ``trajview``: ``rb.sample(8192, views=...)`` (picks + C++ gather);
  - ``numpy``: the same slices gathered from flat numpy arrays by fancy
    indexing (one ``take`` per column and per stack offset, zeros written
    where the stack reaches before ``t = 0``): the same output bytes, the limit.
  Each round's output is checked against the numpy gather of the same slices.
* ``replay-add``: adding one 1000-step W2 batch (two 500-step trajectories,
  with ``new_obs``) to a full buffer, vs ``np.copyto`` of the same columns into
  preallocated ring slices.
* bytes per step: ``nbytes() / len(rb) / 7056`` for the full W2 buffer
  (``extra_info.bytes_per_step_per_frame``, recorded on the add benchmark).
"""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv

VR = tv.ViewRequirement
NUM_SLICES, SLICE_LEN = 256, 32
TRAJ_LEN = 500
ADD_ROWS = 1000
FRAME_BYTES = 84 * 84
OBS = {"W1": (np.float32, (4,)), "W2": (np.uint8, (84, 84))}


def capacity(benchmark) -> int:
    return 10_000 if getattr(benchmark, "disabled", False) else 100_000


def make_batch(workload: str, k0: int, eps0: int, pool: np.ndarray) -> tv.SampleBatch:
    """ADD_ROWS steps starting at global step k0: trajectories of TRAJ_LEN steps, ids from eps0."""
    k = np.arange(k0, k0 + ADD_ROWS)
    t = k % TRAJ_LEN
    last = t == TRAJ_LEN - 1
    return tv.SampleBatch({
        "obs": pool[k % len(pool)],
        "new_obs": pool[(k + 1) % len(pool)],
        "actions": k.astype(np.int64),
        "rewards": (k % 13).astype(np.float32),
        "terminateds": last,
        "truncateds": np.zeros(ADD_ROWS, bool),
        "eps_id": (k // TRAJ_LEN).astype(np.int64) + eps0,
        "t": t.astype(np.int64),
    })


def make_pool(workload: str) -> np.ndarray:
    dt, shape = OBS[workload]
    rng = np.random.default_rng(0)
    if dt == np.uint8:
        return rng.integers(0, 255, (7, *shape), dtype=np.uint8)
    return rng.normal(size=(7, *shape)).astype(dt)


_CACHE: dict[tuple[str, int], tuple] = {}


def filled(workload: str, cap: int):
    """(buffer, flat numpy copy of its steps) with cap steps of ADD_ROWS-step adds (no new_obs rows)."""
    key = (workload, cap)
    if key not in _CACHE:
        _CACHE.clear()  # one big buffer at a time
        pool = make_pool(workload)
        rb = tv.ReplayBuffer(cap, columns=["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"])
        parts = []
        for k0 in range(0, cap, ADD_ROWS):
            b = make_batch(workload, k0, 0, pool)
            del b["new_obs"]  # no final-observation rows: the ring holds exactly cap steps
            rb.add(b)
            parts.append(b)
        flat = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
        assert len(rb) == cap
        _CACHE[key] = (rb, flat)
    return _CACHE[key]


def numpy_gather(flat: dict[str, np.ndarray], starts: np.ndarray, stack: bool) -> dict[str, np.ndarray]:
    """The same slices by fancy indexing: rows starts[:, None] + arange(SLICE_LEN)."""
    idx = (starts[:, None] + np.arange(SLICE_LEN)).reshape(-1)
    out = {c: flat[c].take(idx, axis=0) for c in flat}
    if stack:
        frames, t = flat["obs"], out["t"]
        st = np.empty((len(idx), 4, *frames.shape[1:]), frames.dtype)
        for j, s in enumerate(range(-3, 1)):
            np.take(frames, np.maximum(idx + s, 0), axis=0, out=st[:, j])
            st[t + s < 0, j] = 0  # before the trajectory's start
        out["stack"] = st
    else:
        nxt = flat["obs"].take(np.minimum(idx + 1, len(flat["obs"]) - 1), axis=0)
        nxt[out["t"] == TRAJ_LEN - 1] = 0  # no final observations stored here: zeros past the end
        out["new_obs"] = nxt
    out["is_init"] = np.zeros(len(idx), bool)
    out["is_init"][::SLICE_LEN] = True
    out["is_init"] |= out["t"] == 0
    out["truncateds"] = out["truncateds"].copy()
    out["truncateds"][SLICE_LEN - 1 :: SLICE_LEN] = True
    return out


def out_bytes(out) -> int:
    return sum(np.asarray(v).nbytes for v in out.values())


@pytest.mark.parametrize("impl", ["trajview", "numpy"])
@pytest.mark.parametrize("workload", ["W1", "W2"])
def test_replay_sample(benchmark, workload, impl):
    cap = capacity(benchmark)
    rb, flat = filled(workload, cap)
    stack = workload == "W2"
    views = {"stack": VR("obs", shift="-3:0")} if stack else {"new_obs": VR("obs", shift=1)}
    rb.sampler = tv.SliceSampler(slice_len=SLICE_LEN, seed=0)
    rng = np.random.default_rng(0)
    last: dict = {}

    if impl == "trajview":
        def run():
            out, info = rb.sample(NUM_SLICES * SLICE_LEN, views=views, return_info=True)
            last["out"], last["index"] = out, info["index"]
            return out
    else:
        def run():
            # Slice starts as the sampler draws them (a trajectory, then a start in it).
            traj = rng.integers(0, cap // TRAJ_LEN, NUM_SLICES)
            starts = traj * TRAJ_LEN + rng.integers(0, TRAJ_LEN - SLICE_LEN + 1, NUM_SLICES)
            out = numpy_gather(flat, starts, stack)
            last["out"], last["index"] = out, (starts[:, None] + np.arange(SLICE_LEN)).reshape(-1)
            return out

    benchmark.group = f"replay-sample-{workload}"
    benchmark.extra_info.update(question="replay-sample", impl=impl, workload=workload, capacity=cap,
                                num_slices=NUM_SLICES, slice_len=SLICE_LEN)
    out = benchmark.pedantic(run, rounds=15 if stack else 50, warmup_rounds=1)
    # The output equals the numpy gather of the same rows (the ring holds step k at row k).
    starts = last["index"][::SLICE_LEN]
    want = numpy_gather(flat, starts, stack)
    assert sorted(out) == sorted(want)
    for c in want:
        np.testing.assert_array_equal(np.asarray(out[c]), want[c], err_msg=f"{impl} {c}")
    benchmark.extra_info["bytes_out"] = out_bytes(out)


@pytest.mark.parametrize("impl", ["trajview", "numpy"])
def test_replay_add(benchmark, impl):
    cap = capacity(benchmark)
    pool = make_pool("W2")
    batches = [make_batch("W2", k0, 0, pool) for k0 in range(0, 4 * ADD_ROWS, ADD_ROWS)]
    state = {"i": 0}
    if impl == "trajview":
        rb = tv.ReplayBuffer(cap)
        while rb.rows_written() + ADD_ROWS + 2 <= cap:  # fill: the timed adds overwrite
            b = batches[state["i"] % 4]
            b["eps_id"] = b["eps_id"] + 1000 * (state["i"] + 1)  # fresh trajectories
            rb.add(b)
            state["i"] += 1

        def run():
            b = batches[state["i"] % 4]
            state["i"] += 1
            rb.add(b)
    else:
        ring = {c: np.empty((cap, *np.asarray(v).shape[1:]), np.asarray(v).dtype) for c, v in batches[0].items()}
        ring["obs"][:] = 0  # touched, as a filled buffer is

        def run():
            b = batches[state["i"] % 4]
            r = (state["i"] * ADD_ROWS) % (cap - ADD_ROWS)
            state["i"] += 1
            for c, v in b.items():
                np.copyto(ring[c][r : r + ADD_ROWS], v)

    benchmark.group = "replay-add-W2"
    benchmark.extra_info.update(question="replay-add", impl=impl, workload="W2", capacity=cap, rows=ADD_ROWS)
    benchmark.pedantic(run, rounds=20, warmup_rounds=1)
    if impl == "trajview":
        # bytes per stored step: the ring holds each frame once, plus one final observation per trajectory piece
        ratio = rb.nbytes() / len(rb) / FRAME_BYTES
        benchmark.extra_info["bytes_per_step_per_frame"] = ratio
        assert 1.0 < ratio < 1.1, ratio
        out = rb.sample(64, views={"new_obs": VR("obs", shift=1)})
        np.testing.assert_array_equal(out["obs"][1:], out["obs"][1:])  # readable
        k = out["actions"]
        np.testing.assert_array_equal(out["obs"], pool[k % 7])
        np.testing.assert_array_equal(out["new_obs"], pool[(k + 1) % 7])
