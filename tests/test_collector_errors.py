"""Bad input to `tv.Collector` (docs/contract.md, Bad input; docs/collector.md).

Each bad call must raise at once, naming the column or setting (and for a
dtype, the expected and the given dtype), and write nothing: afterwards the
collector goes on and its batches equal those of `ReferenceCollector` that
never saw the bad call.
"""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv
from trajview.testing import ReferenceCollector

VR = tv.ViewRequirement

COLUMNS = {
    "obs": (np.float32, (2,)),
    "img": (np.uint8, (3, 3)),
    "actions": (np.int64, ()),
    "rewards": (np.float32, ()),
    "terminateds": (np.bool_, ()),
    "truncateds": (np.bool_, ()),
}
VIEWS = {
    "obs": VR(),
    "stack": VR("obs", shift="-2:0"),
    "new_obs": VR("obs", shift=1),
    "img": VR(),
    "actions": VR(),
    "prev_actions": VR("actions", shift=-1),
    "next_actions": VR("actions", shift=1),
    "rewards": VR(),
    "terminateds": VR(),
    "t": VR(),
    "eps_id": VR(),
}
NUM_ENVS = 3


def obs_rows(n, t=0):
    return {"obs": np.full((n, 2), t, dtype=np.float32)}


def step_rows(n, t):
    return {
        "obs": np.full((n, 2), t + 1, dtype=np.float32),
        "img": np.full((n, 3, 3), t, dtype=np.uint8),
        "actions": np.arange(n, dtype=np.int64) + 10 * t,
        "rewards": np.full(n, 0.5 * t, dtype=np.float32),
        "terminateds": np.zeros(n, dtype=bool),
        "truncateds": np.zeros(n, dtype=bool),
    }


class Pair:
    """`tv.Collector` and the reference, both with episodes running in slots 0 and 1 (slot 2 idle)."""

    def __init__(self):
        self.cpp = tv.Collector(NUM_ENVS, COLUMNS, VIEWS, chunk_rows=2)
        self.ref = ReferenceCollector(NUM_ENVS, COLUMNS, VIEWS, chunk_rows=2)
        self.t = 0
        self.both("begin_episodes", np.array([0, 1]), obs_rows(2))
        self.step()

    def both(self, method, *args):
        got = getattr(self.cpp, method)(*args)
        want = getattr(self.ref, method)(*args)
        return got, want

    def step(self, env_ids=(0, 1)):
        self.both("add_step", step_rows(len(env_ids), self.t), np.array(env_ids))
        self.t += 1

    def check(self):
        """Same state, same input dicts, and after a few more steps the same batches."""
        assert self.cpp.num_steps() == self.ref.num_steps()
        assert self.cpp.num_complete_steps() == self.ref.num_complete_steps()
        np.testing.assert_array_equal(self.cpp.eps_ids(), self.ref.eps_ids())
        np.testing.assert_array_equal(self.cpp.episode_lengths(), self.ref.episode_lengths())
        running = np.flatnonzero(self.ref.eps_ids() >= 0)
        assert_same(*self.both("input_dict", running))
        for _ in range(3):
            self.step(tuple(running))
        assert_same(*self.both("input_dict", running))
        self.both("end_episodes", running[:1])
        got, want = self.both("build_batch")
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert_same(g, w)


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        assert got[key].shape == want[key].shape, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def with_change(column, value):
    def bad(n, t):
        rows = step_rows(n, t)
        rows[column] = value(rows[column])
        return rows

    return bad


LOSSY_DTYPES = [
    ("obs", np.float64, "float32"),
    ("obs", np.int64, "float32"),
    ("img", np.int16, "uint8"),
    ("img", np.float32, "uint8"),
    ("actions", np.float32, "int64"),
    ("actions", np.uint64, "int64"),
    ("rewards", np.float64, "float32"),
    ("rewards", np.int32, "float32"),
    ("terminateds", np.int8, "bool"),
]


@pytest.mark.parametrize("column, dtype, expected", LOSSY_DTYPES)
def test_lossy_dtype_raises_naming_column_and_dtypes(column, dtype, expected):
    pair = Pair()
    data = step_rows(2, pair.t)
    data[column] = data[column].astype(dtype)
    with pytest.raises(ValueError, match=column) as info:
        pair.cpp.add_step(data, np.array([0, 1]))
    message = str(info.value)
    assert expected in message and np.dtype(dtype).name in message, message
    with pytest.raises(ValueError, match=column):
        pair.ref.add_step(data, np.array([0, 1]))
    pair.check()


@pytest.mark.parametrize("fused", [False, True])
def test_lossy_obs_dtype_in_step_writes_nothing(fused):
    pair = Pair()
    data = step_rows(2, pair.t)
    data["obs"] = data["obs"].astype(np.float64)
    with pytest.raises(ValueError, match="obs"):
        (pair.cpp.step if fused else pair.cpp.add_step)(data, np.array([0, 1]))
    pair.check()


BAD_SHAPES = [
    ("obs", lambda a: np.zeros((2, 3), dtype=np.float32)),
    ("obs", lambda a: a[:, :1]),
    ("obs", lambda a: a[0]),
    ("img", lambda a: a.reshape(2, 9)),
    ("img", lambda a: a[:1]),
    ("actions", lambda a: a[:, None]),
    ("actions", lambda a: np.concatenate([a, a])),
    ("rewards", lambda a: a[:1]),
    ("rewards", lambda a: np.float32(1.0)),
    ("truncateds", lambda a: a[None]),
]


@pytest.mark.parametrize("column, change", BAD_SHAPES)
def test_wrong_shape_raises_naming_column(column, change):
    pair = Pair()
    data = with_change(column, change)(2, pair.t)
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match=column):
            coll.add_step(data, np.array([0, 1]))
    pair.check()


def _out_arrays(pair, n=2):
    """Arrays shaped as an input dict of ``n`` rows (``out=``)."""
    return {k: np.array(v, copy=True) for k, v in dict.items(pair.cpp.input_dict(np.arange(n)))}


BAD_OUTS = [
    (lambda o: o.pop("stack"), "no column 'stack'"),
    (lambda o: o.update(extra=np.zeros(2)), "exactly the input dict's columns; not one: 'extra'"),
    (lambda o: o.update(stack=o["stack"].astype(np.float64)), "'stack' must have dtype float32, got float64"),
    (lambda o: o.update(t=o["t"].astype(np.int32)), "'t' must have dtype int64, got int32"),
    (lambda o: o.update(stack=o["stack"][:1]), r"'stack' must have shape \[2, 3, 2\], got \[1, 3, 2\]"),
    (lambda o: o.update(obs=np.zeros((4, 2), np.float32)[::2]), r"'obs' must be C-contiguous, got strides \(16, 4\)"),
    (lambda o: o["stack"].setflags(write=False), "'stack' must be writeable, got a read-only array"),
    (lambda o: o.update(obs=np.zeros(17, np.uint8)[1:].view(np.float32).reshape(2, 2)),
     "'obs' must be aligned, got an unaligned array"),
    (lambda o: o.update(obs=[[0.0, 0.0], [0.0, 0.0]]),
     r"'obs' must be a numpy array \(float32 of shape \[2, 2\]\), got list"),
    (lambda o: o.pop("t"), r"no column 't' \(expected int64 of shape \[2\]\)"),
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("change, match", BAD_OUTS)
def test_bad_out_arrays_are_refused_before_anything_is_stored(change, match, fused):
    """``out=`` (arrays to write the input dict into): anything but the input dict's columns, each writeable,
    C-contiguous, of its dtype and shape, is refused naming the column, and a step is not stored."""
    pair = Pair()
    out = _out_arrays(pair)
    change(out)
    with pytest.raises((ValueError, TypeError), match=match):
        if fused:
            pair.cpp.step(step_rows(2, pair.t), np.array([0, 1]), out=out)
        else:
            pair.cpp.input_dict(np.array([0, 1]), out=out)
    with pytest.raises(TypeError, match="out must be a dict of arrays"):
        pair.cpp.input_dict(np.array([0, 1]), out=list(out.values()))
    pair.check()


class _Vanishing:
    """A key of ``out`` that removes itself from the dict when compared."""

    def __init__(self, d):
        self.d = d

    def __hash__(self):
        return 1

    def __eq__(self, other):
        self.d.pop(self, None)
        return False


def test_an_out_dict_that_changes_while_checked_is_refused_without_a_crash():
    """A key whose comparison empties ``out`` (a red team's: the scan for unknown keys read freed keys and
    crashed the process): refused, naming the key's type; no key's ``__eq__`` runs during the scan."""
    pair = Pair()
    for extra in range(3):
        out = _out_arrays(pair)
        for _ in range(extra + 1):
            out[_Vanishing(out)] = np.zeros(2)
        with pytest.raises(ValueError, match="not one: a key of type _Vanishing"):
            pair.cpp.input_dict(np.array([0, 1]), out=out)
    pair.check()


def test_out_arrays_are_the_input_dict():
    """A step and an input dict written into the same arrays again and again: each equals a new one (the
    reference's), and the arrays returned are the ones given."""
    pair = Pair()
    out = _out_arrays(pair)
    for _ in range(5):
        data = step_rows(2, pair.t)
        pair.t += 1
        got, want = pair.cpp.step(data, np.array([0, 1]), out=out), pair.ref.step(data, np.array([0, 1]))
        assert got is out and all(got[k] is v for k, v in out.items())
        assert_same(got, want)
    assert_same(pair.cpp.input_dict(np.array([1, 0]), out=out), pair.ref.input_dict(np.array([1, 0])))
    pair.check()



class _Sub(np.ndarray):
    """An ndarray subclass (the store reads numpy's ndarray itself directly, anything else through numpy)."""


#: One step's columns as a caller may hold them: each must be stored as its values (the store reads a C-contiguous
#: ndarray of the column's own dtype object directly; every other layout goes through numpy's conversion).
LAYOUTS = {
    "contiguous": lambda a: a,
    "strided": lambda a: np.stack([a, a], axis=0)[0] if a.ndim == 0 else np.repeat(a, 2, axis=0)[::2],
    "fortran": np.asfortranarray,
    "an equal dtype object": lambda a: a.view(a.dtype.newbyteorder("=")),
    "byte-swapped, where a safe cast": lambda a: (a.astype(a.dtype.newbyteorder()) if a.dtype.itemsize > 1
                                                  and a.dtype.kind != "b" else a),
    "a subclass": lambda a: a.view(_Sub),
    "read-only": lambda a: _read_only(a),
}


def _read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_step_columns_of_any_layout_are_stored_as_their_values(layout, fused):
    """A step's columns strided, Fortran-ordered, of an equal but distinct dtype object, byte-swapped, an ndarray
    subclass or read-only: stored as their values, the input dicts and batches the reference's (the store's direct
    read of the common case must not take any of them for it)."""
    pair = Pair()
    out = _out_arrays(pair)
    for _ in range(3):
        data = step_rows(2, pair.t)
        changed = {k: LAYOUTS[layout](v) for k, v in data.items()}
        pair.t += 1
        if fused:
            got = pair.cpp.step(changed, np.array([0, 1]), out=out)
            assert_same(got, pair.ref.step(data, np.array([0, 1])))
        else:
            pair.cpp.add_step(changed, np.array([0, 1]))
            pair.ref.add_step(data, np.array([0, 1]))
    pair.check()


def test_out_arrays_of_an_equal_dtype_object_are_written():
    """``out=`` arrays whose dtype objects are equal to the input dict's but not numpy's own (the store checks
    the common case by the object): accepted, and they hold the input dict."""
    pair = Pair()
    out = {k: v.view(v.dtype.newbyteorder("=")) for k, v in _out_arrays(pair).items()}
    assert all(v.dtype is not np.dtype(v.dtype.name) and v.dtype == np.dtype(v.dtype.name) for v in out.values())
    data = step_rows(2, pair.t)
    pair.t += 1
    got = pair.cpp.step(data, np.array([0, 1]), out=out)
    assert got is out
    assert_same(got, pair.ref.step(data, np.array([0, 1])))
    pair.check()

def test_missing_column():
    pair = Pair()
    data = step_rows(2, pair.t)
    del data["rewards"]
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match="rewards"):
            coll.add_step(data, np.array([0, 1]))
    pair.check()


def test_unknown_column():
    pair = Pair()
    data = step_rows(2, pair.t)
    data["bogus"] = data["rewards"]
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match="bogus"):
            coll.add_step(data, np.array([0, 1]))
    pair.check()


def test_new_obs_is_not_a_column():
    pair = Pair()
    data = step_rows(2, pair.t)
    data["new_obs"] = data["obs"]
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match="new_obs"):
            coll.add_step(data, np.array([0, 1]))
    pair.check()


@pytest.mark.parametrize("env_ids", [[0, 2], [2], None])
def test_add_step_on_a_slot_without_episode(env_ids):
    pair = Pair()
    n = NUM_ENVS if env_ids is None else len(env_ids)
    ids = None if env_ids is None else np.array(env_ids)
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match=r"\b2\b"):
            coll.add_step(step_rows(n, pair.t), ids)
        with pytest.raises(ValueError, match=r"\b2\b"):
            coll.step(step_rows(n, pair.t), ids)
        with pytest.raises(ValueError, match=r"\b2\b"):
            coll.input_dict(ids)
    pair.check()


def test_end_episodes_on_a_slot_without_episode():
    pair = Pair()
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match=r"\b2\b"):
            coll.end_episodes(np.array([0, 2]))
    pair.check()


def test_begin_episodes_on_a_slot_with_an_episode_in_progress():
    pair = Pair()
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match=r"\b1\b"):
            coll.begin_episodes(np.array([2, 1]), obs_rows(2))
    np.testing.assert_array_equal(pair.cpp.eps_ids(), [0, 1, -1])
    # The next episode still gets the next id: the failed call took none.
    got, want = pair.both("begin_episodes", np.array([2]), obs_rows(1, 5))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, [2])
    pair.check()


@pytest.mark.parametrize(
    "obs, match",
    [
        ({"obs": np.zeros((1, 2), dtype=np.float64)}, "obs"),
        ({"obs": np.zeros((1, 3), dtype=np.float32)}, "obs"),
        ({"obs": np.zeros((2, 2), dtype=np.float32)}, "obs"),
        ({}, "obs"),
        ({"obs": np.zeros((1, 2), dtype=np.float32), "actions": np.zeros(1, dtype=np.int64)}, "actions"),
    ],
)
def test_bad_first_observation(obs, match):
    pair = Pair()
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match=match):
            coll.begin_episodes(np.array([2]), obs)
    np.testing.assert_array_equal(pair.cpp.eps_ids(), [0, 1, -1])
    pair.check()


BAD_ENV_IDS = [
    np.array([0, 3]),  # out of range
    np.array([-1, 0]),  # negative
    np.array([0, 0]),  # repeated
    np.array([[0, 1]]),  # 2-D
    np.array([0.0, 1.0]),  # not ints
]


@pytest.mark.parametrize("env_ids", BAD_ENV_IDS, ids=["out_of_range", "negative", "repeated", "2d", "float"])
@pytest.mark.parametrize("method", ["add_step", "step", "input_dict", "end_episodes"])
def test_bad_env_ids(method, env_ids):
    pair = Pair()
    args = {"add_step": (step_rows(2, pair.t), env_ids), "step": (step_rows(2, pair.t), env_ids)}.get(method, (env_ids,))
    for coll in (pair.cpp, pair.ref):
        with pytest.raises((ValueError, TypeError), match="env_ids"):
            getattr(coll, method)(*args)
    pair.check()


@pytest.mark.parametrize("env_ids", BAD_ENV_IDS[:3], ids=["out_of_range", "negative", "repeated"])
def test_bad_env_ids_in_begin_episodes(env_ids):
    pair = Pair()
    pair.both("end_episodes", np.array([0, 1]))
    for coll in (pair.cpp, pair.ref):
        with pytest.raises((ValueError, TypeError), match="env_ids"):
            coll.begin_episodes(env_ids, obs_rows(2))
    np.testing.assert_array_equal(pair.cpp.eps_ids(), [-1, -1, -1])
    pair.both("begin_episodes", np.array([0, 2]), obs_rows(2, 3))
    pair.check()


def test_rows_must_match_env_ids():
    pair = Pair()
    for coll in (pair.cpp, pair.ref):
        with pytest.raises(ValueError, match="obs|img|actions|rewards|terminateds|truncateds"):
            coll.add_step(step_rows(2, pair.t), np.array([0]))
    pair.check()


def test_caller_arrays_are_copied():
    """Changing an array after add_step changes nothing stored."""
    pair = Pair()
    data = step_rows(2, pair.t)
    pair.both("add_step", data, np.array([0, 1]))
    pair.t += 1
    for value in data.values():
        value[...] = 1
    pair.check()


# -- bad configuration ----------------------------------------------------------


@pytest.mark.parametrize(
    "views, kwargs, match",
    [
        ({"x": VR("nope")}, {}, "nope"),
        ({"a": VR("obs", batch_repeat_value=2), "b": VR("obs", batch_repeat_value=3)}, {}, "batch_repeat_value"),
        ({"prev_actions": VR("actions", shift=-1, padding="reset")}, {}, "prev_actions"),
        ({"time": VR("t")}, {}, "time"),
        ({"t": VR(shift=-1)}, {}, "boundary"),
        ({"obs": VR()}, {"obs_columns": ("obs", "pixels")}, "pixels"),
        ({"obs": VR()}, {"initial_rows": {"obs": np.zeros(3, dtype=np.float32)}}, "obs"),
        ({"obs": VR()}, {"initial_rows": {"nope": np.zeros(2, dtype=np.float32)}}, "nope"),
        ({"obs": VR()}, {"num_envs": 0}, "num_envs"),
        ({"obs": VR()}, {"chunk_rows": 0}, "chunk_rows"),
        ({"obs": VR()}, {"slots_per_env": 0}, "slots_per_env"),
        ({"obs": VR()}, {"num_envs": 4, "slots_per_env": 3}, r"slots_per_env must .* divide num_envs \(4\), got 3"),
    ],
)
def test_bad_configuration(views, kwargs, match):
    kwargs = {"num_envs": 2, **kwargs}
    num_envs = kwargs.pop("num_envs")
    for cls in (tv.Collector, ReferenceCollector):
        with pytest.raises(ValueError, match=match):
            cls(num_envs, COLUMNS, views, **kwargs)


# -- the fused calls: add_step(end=) and begin_episodes(out=) ---------------------------------------------------------


@pytest.mark.parametrize("end", [[1], [0, 1], [1, 0], []])
def test_add_step_end_is_the_step_then_end_episodes(end):
    """``add_step(data, env_ids, end)`` stores the step, then ends ``end``'s episodes: the reference's two calls."""
    pair = Pair()
    data = step_rows(2, pair.t)
    pair.t += 1
    pair.cpp.add_step(data, np.array([0, 1]), np.array(end, np.int64))
    pair.ref.add_step(data, np.array([0, 1]))
    if end:
        pair.ref.end_episodes(np.array(end))
    np.testing.assert_array_equal(pair.cpp.eps_ids(), pair.ref.eps_ids())
    if len(end) < 2:
        pair.check()
    else:
        assert_same(pair.cpp.build_flat_batch(), tv.concat_samples(pair.ref.build_batch()))  # (none left running)


@pytest.mark.parametrize("end, match", [([0, 2], r"add_step end: env 2 has no episode in progress"),
                                        ([1, 1], r"add_step end: env_ids must be distinct, got 1 twice"),
                                        ([5], r"add_step end: env_ids must be in \[0, 3\), got 5"),
                                        ([0.5], r"add_step end: env_ids must be a 1-D array of ints")])
def test_add_step_end_refused_before_the_step_is_stored(end, match):
    """An ``end`` that names an idle slot, a slot twice, one out of range, or no ints: refused, naming it, and the
    step is not stored (the collector goes on as the reference that never saw the call)."""
    pair = Pair()
    with pytest.raises((ValueError, TypeError), match=match):
        pair.cpp.add_step(step_rows(2, pair.t), np.array([0, 1]), np.array(end))
    pair.check()


def test_begin_episodes_out_is_the_input_dict():
    """``begin_episodes(ids, obs, out)`` begins the episodes, then gathers every slot's input dict into ``out``
    (returned ids and arrays as the reference's begin_episodes then input_dict)."""
    pair = Pair()
    out = _out_arrays(pair, NUM_ENVS - 1)
    out = {k: np.concatenate([v, v[:1]]) for k, v in out.items()}  # (every slot's rows)
    kept = dict(out)
    got_ids = pair.cpp.begin_episodes(np.array([2]), obs_rows(1, 7), out)
    want_ids = pair.ref.begin_episodes(np.array([2]), obs_rows(1, 7))
    np.testing.assert_array_equal(got_ids, want_ids)
    assert all(out[k] is v for k, v in kept.items())
    assert_same(out, pair.ref.input_dict(np.arange(NUM_ENVS)))
    pair.check()


@pytest.mark.parametrize("bad", ["an idle slot", "out"])
def test_begin_episodes_out_refused_before_anything_begins(bad):
    """An ``out`` that does not fit, or another slot with no episode (the input dict is every slot's): refused,
    naming it, before any episode begins."""
    pair = Pair()
    out = _out_arrays(pair, NUM_ENVS - 1)
    out = {k: np.concatenate([v, v[:1]]) for k, v in out.items()}
    if bad == "out":
        out["stack"] = out["stack"][:2]
        match = r"begin_episodes: out column 'stack' must have shape \[3, 3, 2\], got \[2, 3, 2\]"
        ids = np.array([2])
    else:
        pair.both("end_episodes", np.array([1]))
        match = r"begin_episodes \(out: the input dict of every slot\): env 1 has no episode in progress"
        ids = np.array([2])
    with pytest.raises(ValueError, match=match):
        pair.cpp.begin_episodes(ids, obs_rows(1, 7), out)
    pair.check()


def test_the_fused_calls_on_steps_big_enough_to_release_the_gil():
    """``add_step(end=)`` and ``begin_episodes(out=)`` where the step's and the input dict's arrays are big enough
    that the store releases the GIL (64 KiB): the same store as the reference's separate calls, and a refusal
    there changes nothing."""
    cols = {"obs": (np.uint8, (64, 64, 8)), "actions": (np.int64, ()), "terminateds": (np.bool_, ()),
            "truncateds": (np.bool_, ())}
    views = {"obs": VR(), "stack": VR("obs", shift="-1:0"), "actions": VR(), "t": VR()}
    cpp, ref = tv.Collector(4, cols, views, chunk_rows=3), ReferenceCollector(4, cols, views, chunk_rows=3)
    first = {"obs": np.arange(4 * 64 * 64 * 8, dtype=np.int64).reshape(4, 64, 64, 8).astype(np.uint8)}
    for c in (cpp, ref):
        c.begin_episodes(np.arange(4), first)
    out = {k: np.array(v, copy=True) for k, v in dict.items(cpp.input_dict())}
    assert sum(v.nbytes for v in out.values()) >= 64 << 10
    for t in range(5):
        data = {"obs": (first["obs"] + t + 1).astype(np.uint8), "actions": np.arange(4, dtype=np.int64) + t,
                "terminateds": np.zeros(4, bool), "truncateds": np.zeros(4, bool)}
        ends = np.array([t % 4, (t + 2) % 4])
        cpp.add_step(data, None, ends)
        ref.add_step(data, None)
        ref.end_episodes(ends)
        restart = {"obs": (first["obs"][:2] + 50 + t).astype(np.uint8)}
        if t == 3:  # (a refusal: a slot that has an episode in progress)
            before = {k: v.copy() for k, v in out.items()}
            three = {"obs": np.concatenate([restart["obs"], restart["obs"][:1]])}
            with pytest.raises(ValueError, match=r"env 0 has an episode in progress"):
                cpp.begin_episodes(np.array([*ends, (t + 1) % 4]), three, out)
            with pytest.raises(ValueError, match=r"every slot\): env 1 has no episode in progress"):
                cpp.begin_episodes(ends[:1], {"obs": restart["obs"][:1]}, out)
            with pytest.raises(ValueError, match=r"add_step end: env \d has no episode in progress"):
                cpp.add_step(data, np.array([(t + 1) % 4, (t + 3) % 4]), ends)
            assert_same(out, before)  # (nothing gathered)
        np.testing.assert_array_equal(cpp.begin_episodes(ends, restart, out), ref.begin_episodes(ends, restart))
        assert_same(out, ref.input_dict())
    assert_same(cpp.build_flat_batch(), tv.concat_samples(ref.build_batch()))
