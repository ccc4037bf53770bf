"""Fuzz test of trajview._core: bad input must be an error, never a crash.

``_TrajectoryStore`` and ``_Replay`` are driven straight through the bindings (no
Python checks in front) with random specs — dtypes, shapes (negative, absurd,
too many dims), view shifts including int64-extreme and beyond-int64 values,
batch_repeat_value, chunk_rows, num_envs, capacity — and random call orders of
every method with random data: arrays of the wrong dtype, shape, row count or
type, env_ids out of range or repeated, holds, picks and sample sizes up to
the int64 ends.

Every call must either work or raise ValueError, TypeError or IndexError (the
C++ core maps std::invalid_argument and std::length_error to ValueError): a
crash, OverflowError, SystemError, RuntimeError or MemoryError fails the
test. What works must have sane shapes and dtypes.

Sizes are either small or beyond the core's documented limits (spec.h,
store.h, replay.h: kMaxShift = 1'000'000, kMaxSampleRows = 2**30, ...): a size
in between would be valid and really allocated, which is not what this test
is about (and not what a sanitizer build can afford). Offsets of exactly
+-kMaxShift are valid and used: a store then allocates blocks of a million
rows of the (small) rows here.

Run it against a sanitizer build of the module too, where memory errors that
an exception would hide abort the process instead::

    pip wheel . --no-deps --no-build-isolation -w /tmp/asan -Cbuild-dir=build/asan-wheel \\
        -Ccmake.define.TRAJVIEW_SANITIZE=ON -Ccmake.build-type=Debug
    # unzip the wheel into D, then
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \\
        ASAN_OPTIONS=detect_leaks=0 PYTHONPATH=D pytest tests/test_core_fuzz.py -s

(``-s``: a sanitizer report goes to stderr, which pytest would otherwise
capture and lose with the process.)
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trajview import _core

ALLOWED = (ValueError, TypeError, IndexError)

K_MAX_SHIFT = 1_000_000
K_MAX_SAMPLE_ROWS = 2**30
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

FUZZ_SETTINGS = settings(
    max_examples=300,  # a few seconds; a sanitizer build takes about twice as long
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

DTYPES = [
    *("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"),
    *("float16", "float32", "float64"),
]
BAD_DTYPES = ["float33", "complex64", "object", "", 5]
NAMES = ["obs", "actions", "rewards", "x", "state"]
BAD_NAMES = ["", "t", "eps_id", "is_init", "a\x00b", "\ud800", 7]

# Extreme ints: the int64 ends, just beyond the limits, and beyond int64.
EXTREMES = [
    INT64_MIN,
    INT64_MAX,
    INT64_MIN + 1,
    INT64_MAX - 1,
    2**62,
    -(2**62),
    2**63,
    -(2**63) - 1,
    2**64,
    2**70,
    -(2**70),
]


def attempt(fn, *args):
    """(True, result) or (False, None) if it raised an allowed error; anything else propagates."""
    name = getattr(fn, "__name__", "call")
    try:
        result = fn(*args)
    except ALLOWED as e:
        event(f"{name}: {type(e).__name__}")
        return False, None
    event(f"{name}: ok")
    return True, result


# ---------------------------------------------------------------- specs
#
# A spec is drawn valid, then (in about half the examples) spoiled by one or
# two mutations, so that both the checks of bad specs and the calls on a
# store built from a good one are exercised.


def one_in(draw, n):
    """True about once in `n` draws."""
    return draw(st.integers(0, n - 1)) == n - 1  # (not 0: hypothesis draws its lower bound more often)


def bad_sizes(limit):
    """Below 1, beyond `limit`, or beyond int64."""
    return st.sampled_from([0, -1, limit + 1, INT64_MAX, INT64_MIN, 2**64]) | st.integers(limit + 1, 2**70)


def size(draw, small_max, limit, bad_one_in=5):
    """Mostly a small valid size; about once in `bad_one_in` a bad one."""
    return draw(bad_sizes(limit)) if one_in(draw, bad_one_in) else draw(st.integers(1, small_max))


good_shifts = st.integers(-4, 4) | st.sampled_from([K_MAX_SHIFT, -K_MAX_SHIFT])
bad_shift_values = st.sampled_from([K_MAX_SHIFT + 1, -K_MAX_SHIFT - 1, *EXTREMES]) | st.integers(
    K_MAX_SHIFT + 1, 2**70
).map(lambda v: v * (-1) ** v)
bad_dims = st.sampled_from(
    [[-1], [2, -1], [2**31], [2**40, 2**40], [0, INT64_MAX], [INT64_MIN], [2**64], [1] * 65, "ab", [0.5], None]
)


def maybe_list(draw, entry):
    """A spec entry as a tuple, now and then as a list (accepted too)."""
    return tuple(entry) if draw(st.integers(0, 9)) else list(entry)


@st.composite
def good_columns(draw, store: bool):
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    cols = []
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 3), max_size=2))  # at most 9 elements per row
        entry = [name, dtype, shape, draw(st.booleans())]
        if store and draw(st.booleans()):
            row = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            entry.append(draw(st.sampled_from([None, bytes((7 * i + 1) % 256 for i in range(row))])))
        cols.append(maybe_list(draw, entry))
    return cols


@st.composite
def good_views(draw, columns, store: bool, max_views=4):
    names = [c[0] for c in columns]
    repeat = draw(st.sampled_from([1, 1, 2, 3]))
    views = []
    for i in range(draw(st.integers(0, max_views))):
        if draw(st.integers(0, 1)):
            shifts, adds_axis = [draw(good_shifts)], False
        else:
            shifts, adds_axis = draw(st.lists(good_shifts, min_size=1, max_size=4)), True
        padding = draw(st.sampled_from(["zero", "zero", "reset"]))
        view = [f"v{i}", draw(st.sampled_from(names)), shifts, adds_axis, padding]
        if store:
            view += [draw(st.sampled_from([1, repeat])), draw(st.booleans()), draw(st.booleans())]
        views.append(maybe_list(draw, view))
    return views


COLUMN_MUTATIONS = ["name", "dtype", "shape", "pad", "short", "not_tuple", "duplicate", "none"]
VIEW_MUTATIONS = ["shift", "shift_list", "shifts", "padding", "repeat", "column", "duplicate", "name", "short"]


@st.composite
def spoil_columns(draw, cols, store: bool):
    cols = [list(c) if isinstance(c, (list, tuple)) else c for c in cols]
    what = draw(st.sampled_from(COLUMN_MUTATIONS))
    i = draw(st.integers(0, len(cols) - 1))
    if not (isinstance(cols[i], list) and len(cols[i]) >= 4):
        return cols  # spoilt already
    if what == "name":
        cols[i][0] = draw(st.sampled_from(BAD_NAMES))
    elif what == "dtype":
        cols[i][1] = draw(st.sampled_from(BAD_DTYPES))
    elif what == "shape":
        cols[i][2] = draw(bad_dims)
    elif what == "pad" and store:
        cols[i][4:] = [draw(st.sampled_from([b"\x01" * 100, b"", "str", 3]))]
    elif what == "short":
        cols[i] = cols[i][: draw(st.integers(0, 3))]
    elif what == "not_tuple":
        cols[i] = draw(st.sampled_from(["obs", 3, None]))
    elif what == "duplicate":
        cols.append(list(cols[i]))
    elif what == "none":
        cols = []
    return cols


@st.composite
def spoil_views(draw, views, columns, store: bool):
    views = [list(v) for v in views] or [["v0", "obs", [0], False, "zero"] + ([1, True, True] if store else [])]
    what = draw(st.sampled_from(VIEW_MUTATIONS))
    i = draw(st.integers(0, len(views) - 1))
    v = views[i]
    if len(v) < (8 if store else 5):
        return views  # spoilt already
    if what == "shift":
        v[2], v[3] = [draw(bad_shift_values)], False
    elif what == "shift_list":
        v[2], v[3] = draw(st.lists(good_shifts, max_size=2)) + [draw(bad_shift_values)], True
    elif what == "shifts":
        v[2] = draw(st.sampled_from([[], [0, 1], "ab", [0.5], None, [0] * 100_001]))
        v[3] = draw(st.booleans())
    elif what == "padding":
        v[4] = draw(st.sampled_from(["bogus", "", 0]))
    elif what == "repeat" and store:
        v[5] = draw(st.sampled_from([0, -1, 1_000_001, INT64_MAX, INT64_MIN, 2**64, 1.5]))
    elif what == "column":
        v[1] = draw(st.sampled_from(["nope", "", 3]))
    elif what == "duplicate":
        views.append(list(v))
    elif what == "name":
        v[0] = draw(st.sampled_from(["t", "is_init", "mask", "eps_id", 3, "\ud800"]))
    elif what == "short":
        views[i] = v[: draw(st.integers(0, 4))]
    return views


@st.composite
def specs(draw, store: bool):
    """(columns, views) for a store (views too), mostly valid."""
    columns = draw(good_columns(store))
    views = draw(good_views(columns, store)) if store else []
    for _ in range(draw(st.integers(1, 2)) if one_in(draw, 3) else 0):
        if store and draw(st.booleans()):
            views = draw(spoil_views(views, columns, store))
        elif columns:
            columns = draw(spoil_columns(columns, store))
    return columns, views


@st.composite
def sample_views(draw, columns):
    views = draw(good_views(columns, store=False, max_views=3))
    if one_in(draw, 4):
        views = draw(spoil_views(views, columns, store=False))
    return views


class Spec:
    """The accepted columns and views, for checking shapes."""

    def __init__(self, columns, views):
        self.col = {c[0]: (np.dtype(c[1]), tuple(c[2]), bool(c[3])) for c in columns}
        self.view = {v[0]: v for v in views}

    def view_shape(self, name, n):
        v = self.view[name]
        dtype, shape, _ = self.col[v[1]]
        return dtype, (n, *([len(v[2])] if v[3] else []), *shape)


# ---------------------------------------------------------------- data


def array_for(draw, dtype, shape, n):
    """[n, *shape] of `dtype`, or with a random mistake."""
    kind = draw(st.integers(0, 7)) if one_in(draw, 6) else 99
    if kind == 0:
        n = draw(st.integers(0, 5))
    elif kind == 1:
        shape = draw(st.lists(st.integers(0, 3), max_size=2)).copy()
    elif kind == 2:
        dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    elif kind == 3:
        return draw(st.sampled_from(["abc", None, 3.5, {"a": 1}, [[1, 2], [3]]]))
    elif kind == 4:
        return np.zeros((), dtype)  # 0-d
    full = (n, *shape)
    size = int(np.prod(full, dtype=np.int64))
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).integers(0, 3, size=size)
    arr = values.astype(dtype).reshape(full)
    if kind == 5 and n > 0:  # non-contiguous
        arr = np.repeat(arr, 2, axis=0)[::2]
    if kind == 6:
        arr = arr.astype(np.dtype(dtype).newbyteorder())
    return arr


def env_ids(draw, num_slots, candidates):
    """Mostly some of `candidates` (None when that is every slot); else ids out of range, repeated, or not ints."""
    if not one_in(draw, 6):
        if len(candidates) == num_slots and draw(st.booleans()):
            return None
        ids = draw(st.lists(st.sampled_from(candidates), unique=True)) if candidates else []
        return np.asarray(ids, dtype=draw(st.sampled_from([np.int64, np.int32, np.uint8])))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        ids = draw(st.lists(st.integers(INT64_MIN, INT64_MAX) | st.integers(-2, num_slots + 1), max_size=5))
        return np.asarray(ids)
    if kind == 1:
        return draw(st.sampled_from([np.zeros((2, 2), np.int64), np.zeros(2, np.float32), "ab", 3, [2**70]]))
    if kind == 2:
        return np.asarray(draw(st.lists(st.integers(0, num_slots - 1), unique=True)), np.int64)  # busy or idle slots
    return np.asarray([0, 0], np.int64)  # repeated


# ---------------------------------------------------------------- checks


def check_input_dict(out, spec, inference_keys, n):
    assert isinstance(out, dict)
    for k in inference_keys:
        dtype, shape = spec.view_shape(k, n)
        assert out[k].shape == shape and out[k].dtype == dtype, (k, out[k].shape, shape)
    for k in ("t", "eps_id", "env_id"):
        if k in out:
            assert out[k].shape == (n,) and out[k].dtype == np.int64


def check_batch(res, spec, training_keys):
    cols, segs, seq_keys, count, num_seqs = res
    assert count == sum(s["length"] for s in segs) and count >= 0
    assert num_seqs == sum(s["num_seqs"] for s in segs) and num_seqs >= 0
    for k in training_keys:
        v = spec.view[k]
        rows = num_seqs if k in seq_keys else count
        dtype, shape = spec.view_shape(k, rows)
        got = cols[k]
        if isinstance(got, tuple):  # lazy: (base rows, index)
            base, index = got
            assert base.dtype == dtype and base.shape[1:] == shape[1 + v[3] :]
            assert index.dtype == np.int64 and index.shape == shape[: 1 + v[3]]
            assert index.size == 0 or (index.min() >= 0 and index.max() < base.shape[0])
        else:
            assert got.shape == shape and got.dtype == dtype, (k, got.shape, shape)
    for k in ("eps_id", "t", "is_init", "env_id"):
        if k in cols:
            assert cols[k].shape == (count,)
    if "seq_lens" in cols:
        assert cols["seq_lens"].shape == (num_seqs,)
        assert cols["seq_lens"].sum() == count


def check_sample(res, spec, views, pad, slice_len, num_slices):
    cols, index, slices, count, steps_left, weights = res
    assert index.shape == (count,) and slices.shape == (num_slices, 3)
    assert steps_left.shape == (count,) and (steps_left >= 1).all() and weights.shape == (0,)
    assert count == (num_slices * slice_len if pad else int(slices[:, 2].sum()))
    assert np.all(slices[:, 2] >= 1) and np.all(slices[:, 2] <= slice_len) and np.all(slices[:, 1] >= 0)
    assert cols["is_init"].shape == (count,)
    assert ("mask" in cols) == (pad or any(v[0] == "mask" for v in views))
    names = [v[0] for v in views]
    for v in views:
        if names.count(v[0]) == 1 and v[0] not in ("is_init", "mask"):
            dtype, shape = spec.view_shape(v[0], count)
            assert cols[v[0]].shape == shape and cols[v[0]].dtype == dtype


# ---------------------------------------------------------------- _TrajectoryStore


@FUZZ_SETTINGS
@given(st.data())
def test_store_calls_work_or_raise_cleanly(data):
    draw = data.draw
    columns, views = draw(specs(store=True))
    num_slots = size(draw, 4, 2**20, bad_one_in=10)
    chunk_rows = size(draw, 6, 2**24, bad_one_in=10)
    boundary = draw(st.lists(st.sampled_from(["t", "eps_id", "env_id"]), max_size=2, unique=True))
    if one_in(draw, 10):
        boundary.append("bogus")
    eps_start = draw(st.integers(-5, 5))
    if one_in(draw, 8):
        eps_start = draw(st.sampled_from([INT64_MAX, INT64_MAX - 1, INT64_MIN]))
    lazy = draw(st.sampled_from([0, 0, 1, 8, 2**64 - 1]))
    ok, store = attempt(_core._TrajectoryStore, num_slots, columns, views, chunk_rows, eps_start, boundary, True, lazy)
    event(f"store built: {ok}")
    if not ok:
        return
    spec = Spec(columns, views)
    inference_keys = store.inference_keys()
    training_keys = store.training_keys()
    col_names = list(spec.col)
    obs_names = [c for c in col_names if spec.col[c][2]]

    def step_data(n):
        d = {c: array_for(draw, spec.col[c][0], spec.col[c][1], n) for c in col_names}
        mistake = draw(st.integers(0, 2)) if one_in(draw, 8) else 99
        if mistake == 0 and d:
            d.pop(draw(st.sampled_from(col_names)))
        elif mistake == 1:
            d["unknown"] = np.zeros(n)
        elif mistake == 2:
            return draw(st.sampled_from([[1, 2], "ab", None]))
        return d

    for _ in range(draw(st.integers(1, 25))):
        op = draw(st.sampled_from(["begin", "add", "add", "add", "step", "input", "end", "batch", "next", "stats"]))
        busy = [int(s) for s in np.flatnonzero(store.eps_ids() >= 0)]
        idle = [s for s in range(num_slots) if s not in busy]
        ids = env_ids(draw, num_slots, idle if op == "begin" else busy)
        n = num_slots if ids is None else (len(ids) if isinstance(ids, np.ndarray) and ids.ndim == 1 else 2)
        if op == "begin":
            obs = {c: array_for(draw, spec.col[c][0], spec.col[c][1], n) for c in obs_names}
            ok, got = attempt(store.begin_episodes, ids, obs)
            if ok:
                assert len(got) == n
        elif op == "add":
            attempt(store.add_step, step_data(n), ids)
        elif op == "step":
            ok, got = attempt(store.step, step_data(n), ids)
            if ok:
                check_input_dict(got, spec, inference_keys, n)
        elif op == "input":
            ok, got = attempt(store.input_dict, ids)
            if ok:
                check_input_dict(got, spec, inference_keys, n)
        elif op == "end":
            attempt(store.end_episodes, ids)
        elif op == "batch":
            hold = draw(
                st.none()
                | st.lists(st.integers(0, 2), min_size=num_slots, max_size=num_slots)
                | st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=5)
            )
            before = store.num_steps()
            hold = None if hold is None else np.asarray(hold, np.int64)
            ok, got = attempt(store.build_batch, draw(st.booleans()), hold)
            if ok:
                check_batch(got, spec, training_keys)
                assert store.num_steps() == before - got[3]
        elif op == "next":
            name = draw(st.sampled_from(col_names + ["nope"]))
            ok, rows = attempt(store._next_rows, name)
            if ok and rows is not None:
                assert rows.shape == (num_slots, *spec.col[name][1]) and rows.dtype == spec.col[name][0]
                rows[...] = 1
                d = step_data(num_slots)
                if isinstance(d, dict):
                    d[name] = rows
                attempt(store.add_step, d, None)
        else:
            assert store.num_steps() >= store.num_complete_steps() >= 0
            assert store.held_nbytes() >= 0 and store.nbytes() >= 0
            assert store.eps_ids().shape == (num_slots,) and store.episode_lengths().shape == (num_slots,)


# ---------------------------------------------------------------- _Replay


@FUZZ_SETTINGS
@given(st.data())
def test_replay_calls_work_or_raise_cleanly(data):
    draw = data.draw
    columns, _ = draw(specs(store=False))
    capacity = size(draw, 24, 2**40, bad_one_in=8)
    ok, rb = attempt(_core._Replay, capacity, columns)
    event(f"replay built: {ok}")
    if not ok:
        return
    spec = Spec(columns, [])
    col_names = list(spec.col)
    obs_names = [c for c in col_names if spec.col[c][2]]

    for _ in range(draw(st.integers(1, 25))):
        op = draw(st.sampled_from(["add", "add", "add", "sample", "sample", "gather", "stats"]))
        if op == "add":
            n = draw(st.integers(0, 6))
            if not one_in(draw, 4):
                n = min(n, capacity // 2)
            d = {c: array_for(draw, spec.col[c][0], spec.col[c][1], n) for c in col_names}
            nxt = {}
            if draw(st.booleans()):
                nxt = {c: array_for(draw, spec.col[c][0], spec.col[c][1], n) for c in obs_names}
                if one_in(draw, 6):
                    nxt["nope"] = np.zeros(n)
            key = st.integers(0, 2) | st.sampled_from([INT64_MIN, INT64_MAX])
            keys = np.asarray(draw(st.lists(key, min_size=n, max_size=n)), np.int64)
            t = draw(
                st.none()
                | st.just(np.arange(n, dtype=np.int64) + draw(st.integers(0, 5)))
                | st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=n, max_size=n).map(np.asarray)
            )
            done = np.asarray(draw(st.lists(st.integers(0, 1) | st.just(255), min_size=n, max_size=n)), np.uint8)
            bad = draw(st.integers(0, 3)) if one_in(draw, 8) else 99
            if bad == 0:
                keys = keys[:-1] if n else np.zeros(1, np.int64)
            elif bad == 1:
                done = np.zeros((n, 2), np.uint8)
            elif bad == 2:
                t = np.zeros(n + 1, np.int64)
            elif bad == 3:
                keys = list(keys)
            before = rb.rows_written()
            ok, _ = attempt(rb.add, d, nxt, keys, t, done)
            if not ok:
                assert rb.rows_written() == before  # a rejected add writes nothing
        elif op in ("sample", "gather"):
            views = draw(sample_views(columns))
            pad = draw(st.booleans())
            tk = draw(st.none() | st.sampled_from(col_names + ["nope"]))
            dk = draw(st.none() | st.sampled_from(col_names))
            slice_len = size(draw, 5, K_MAX_SAMPLE_ROWS, bad_one_in=10)
            if op == "sample":
                num_slices = size(draw, 5, K_MAX_SAMPLE_ROWS, bad_one_in=10)
                seed = draw(st.integers(0, 2**64 - 1))
                mode = draw(st.sampled_from([_core.SampleMode.PER_TRAJECTORY, _core.SampleMode.PER_STEP]))
                ok, req = attempt(_core.SliceRequest, mode, num_slices, slice_len, draw(st.booleans()), pad, seed,
                                  0.0, tk, dk)
                ok, got = attempt(rb.sample, req, views) if ok else (False, None)
                if ok:
                    check_sample(got, Spec(columns, views), views, pad, slice_len, num_slices)
            else:
                trajs = rb.trajectories()
                picks = []
                for _ in range(draw(st.integers(0, 4))):
                    if trajs and draw(st.integers(0, 3)):
                        tr = draw(st.sampled_from(trajs))
                        start = draw(st.integers(0, max(tr["steps"] - 1, 0)))
                        picks.append([tr["uid"], start, draw(st.integers(1, max(tr["steps"] - start, 1)))])
                    else:
                        picks.append([draw(st.integers(INT64_MIN, INT64_MAX)) for _ in range(3)])
                arr = np.asarray(picks, np.int64).reshape(-1, 3)
                if one_in(draw, 10):
                    arr = arr.reshape(-1)  # wrong shape
                ok, req = attempt(_core.SliceRequest, _core.SampleMode.GIVEN, len(picks), slice_len, False, pad, 0,
                                  0.0, tk, dk, arr)
                ok, got = attempt(rb.sample, req, views) if ok else (False, None)
                if ok:
                    check_sample(got, Spec(columns, views), views, pad, slice_len, len(picks))
                    assert np.array_equal(got[2], arr.reshape(-1, 3))
        else:
            assert 0 <= rb.num_steps() <= rb.rows_written()
            assert rb.capacity() == capacity and rb.nbytes() >= 0
            trajs = rb.trajectories()
            assert len(trajs) == rb.num_trajectories()
            assert sum(t["steps"] for t in trajs) == rb.num_steps()
