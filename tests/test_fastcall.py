"""The plain-function forms of two C++ methods called at every step (`cpp/bindings/fastcall.h`): the store's ``step``
(`Collector.step_into`) and `_core._OutputCheck`'s call (`PolicyColumns.check_outputs`' common case). Each returns and
raises exactly what the pybind11 method does, on the same arguments, positional; a wrong count of arguments is a
TypeError naming the call; each keeps its object alive."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview import _core


def _collector(n=2):
    return tv.Collector(n, {"obs": (np.float32, (3,)), "actions": (np.int64, ()), "rewards": (np.float64, ()),
                            "terminateds": (np.bool_, ()), "truncateds": (np.bool_, ())},
                        {"obs": tv.ViewRequirement("obs"), "prev_n_obs": tv.ViewRequirement("obs", shift="-2:0")})


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", {k: v.copy() for k, v in out.items()})


def _step_data(rng, n, bad):
    data = {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32), "actions": rng.integers(0, 3, n),
            "rewards": rng.uniform(0, 1, n), "terminateds": np.zeros(n, bool), "truncateds": np.zeros(n, bool)}
    if bad == "missing":
        del data["actions"]
    elif bad == "dtype":
        data["obs"] = data["obs"].astype(np.float64)  # (a cast that could lose values: refused)
    elif bad == "rows":
        data["rewards"] = data["rewards"][:1]
    elif bad == "unknown":
        data["extra"] = np.zeros(n)
    return data


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), bad=st.sampled_from([None, "missing", "dtype", "rows", "unknown", "out", "ids"]))
def test_the_plain_step_returns_and_raises_what_the_method_does(seed, bad):
    rng = np.random.default_rng(seed)
    a, b = _collector(), _collector()
    first = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    for c in (a, b):
        c.begin_episodes(np.arange(2), {"obs": first})
    out_a = a.input_dict(np.arange(2))
    out_b = {k: v.copy() for k, v in out_a.items()}
    if bad == "out":
        out_a["prev_n_obs"] = out_b["prev_n_obs"] = np.zeros((2, 2, 3), np.float32)
    fast = b.step_into()
    for step in range(4):
        data = _step_data(rng, 2, bad if step == 2 else None)
        ids = np.array([0, 5]) if bad == "ids" and step == 2 else None
        got_a = _outcome(a._impl.step, data, ids, out_a)
        got_b = _outcome(fast, data, ids, out_b)
        assert got_a[0] == got_b[0], (bad, got_a, got_b)
        if got_a[0] == "error":
            assert got_a == got_b
            continue
        assert sorted(got_a[1]) == sorted(got_b[1])
        for k in got_a[1]:
            np.testing.assert_array_equal(got_a[1][k], got_b[1][k])


def test_the_plain_functions_take_their_count_of_positional_arguments_and_keep_their_object():
    c = _collector()
    fast = c.step_into()
    with pytest.raises(TypeError, match=r"step: expected 3 positional arguments, got 2"):
        fast({}, None)
    with pytest.raises(TypeError):
        fast({}, None, out={})  # (positional only)
    check = _core._OutputCheck(np.ndarray, ("actions", np.dtype(np.int64), (), False), (0, 2), [], [])
    plain = check._fast()
    with pytest.raises(TypeError, match=r"_OutputCheck: expected 4 to 5 positional arguments, got 3"):
        plain(np.zeros(1, np.int64), [], {})
    with pytest.raises(TypeError):
        plain(np.zeros(1, np.int64), [], {}, 1.5)  # (n: an int, as the method's)
    first = np.arange(6, dtype=np.float32).reshape(2, 3)
    c.begin_episodes(np.arange(2), {"obs": first})
    out = c.input_dict(np.arange(2))
    del check, c
    gc.collect()
    # Their objects (the output check, the store) live as long as the functions.
    assert plain(np.ones(2, np.int64), [], {}, 2)["actions"].tolist() == [1, 1]
    assert plain(np.full(2, 7, np.int64), [], {}, 2) is None  # (outside the bounds: Python's checks decide)
    data = _step_data(np.random.default_rng(0), 2, None)
    got = fast(data, None, out)
    assert got is out
    np.testing.assert_array_equal(out["obs"], data["obs"])
    np.testing.assert_array_equal(out["prev_n_obs"][:, 1], first)  # (frames t-2, t-1, t: t-1 the episodes' first)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(0, 4),
       what=st.sampled_from(["ok", "dtype", "shape", "nan", "outside", "list", "missing", "into-list"]))
def test_the_plain_output_check_returns_and_raises_what_the_method_does(seed, n, what):
    rng = np.random.default_rng(seed)
    check = _core._OutputCheck(np.ndarray, ("actions", np.dtype(np.int64), (), False), (0, 2),
                               [("state_out_0", np.dtype(np.float32), (2,), True)],
                               [("vf_preds", np.dtype(np.float32), (), True)])
    actions = rng.integers(0, 3, n)
    states = [rng.uniform(-1, 1, (n, 2)).astype(np.float32)]
    extra = {"vf_preds": rng.uniform(-1, 1, n).astype(np.float32)}
    into: object = {}
    if what == "dtype":
        actions = actions.astype(np.int32)
    elif what == "shape":
        states = [states[0][:, :1]]
    elif what == "nan" and n:
        extra["vf_preds"][0] = np.nan
    elif what == "outside" and n:
        actions[0] = 5
    elif what == "list":
        actions = actions.tolist()
    elif what == "missing":
        extra = {}
    elif what == "into-list":
        into = []
    plain = check._fast()
    for args in ((actions, states, extra, n), (actions, states, extra, n, into)):
        a = _outcome(lambda *x: check(*x) or {}, *args)
        b = _outcome(lambda *x: plain(*x) or {}, *args)
        assert a[0] == b[0]
        if a[0] == "error":
            assert a == b
        else:
            assert sorted(a[1]) == sorted(b[1])
            for k in a[1]:
                np.testing.assert_array_equal(a[1][k], b[1][k])
