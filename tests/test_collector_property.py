"""Property tests: the C++ `tv.Collector` against the pure-Python `ReferenceCollector`.

Both collectors are driven by the same random script (episodes beginning and
ending at random steps in random slots, random env_ids subsets, fragment cuts
with or without ``complete_only``) over random columns and views, and every
``input_dict`` and every ``build_batch`` must agree array by array: same
values, dtype and shape.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.collect import BOUNDARY_COLUMNS
from trajview.testing import ReferenceCollector

VR = tv.ViewRequirement

PROPERTY_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BASE_COLUMNS = {
    "obs": (np.float32, (2,)),
    "actions": (np.int64, ()),
    "rewards": (np.float32, ()),
    "terminateds": (np.bool_, ()),
    "truncateds": (np.bool_, ()),
}
# Types that cast safely (without loss) into each column's dtype: add_step must accept them.
SAFE_SOURCES = {
    np.dtype(np.float32): [np.float32, np.float16, np.int8, np.uint8],
    np.dtype(np.int64): [np.int64, np.int32, np.int8, np.uint16],
    np.dtype(np.uint8): [np.uint8],
    np.dtype(np.bool_): [np.bool_],
}


def shifts(lowest=-6, longest=6):
    """int, list or "a:b" shifts with offsets in ``lowest..3``; ranges up to ``longest`` offsets."""
    return st.one_of(
        st.integers(lowest, 3),
        st.lists(st.integers(lowest, 3), min_size=1, max_size=4),
        st.tuples(st.integers(lowest, 3), st.integers(0, longest - 1)).map(lambda ab: f"{ab[0]}:{min(ab[0] + ab[1], 3)}"),
    )


@st.composite
def setups(draw, value_columns_only=False, lowest_shift=-6, longest_range=6):
    """A random collector configuration: the constructor's keyword arguments."""
    columns = dict(BASE_COLUMNS)
    obs_columns = ["obs"]
    if draw(st.booleans()):
        columns["img"] = (np.uint8, (3, 3))
        if draw(st.booleans()):
            obs_columns.append("img")
    if draw(st.booleans()):
        columns["state_out_0"] = (np.float32, (2,))
    initial_rows = {}
    if "state_out_0" in columns and draw(st.booleans()):
        initial_rows["state_out_0"] = np.array([-1.5, -2.5], dtype=np.float32)
    if draw(st.booleans()):
        initial_rows["rewards"] = np.float32(-3.0)

    readable = [c for c in columns if not (value_columns_only and columns[c][0] is np.bool_)]
    k = draw(st.sampled_from([1, 1, 2, 3, 5]))
    views = {}
    for i in range(draw(st.integers(1, 6))):
        col = draw(st.sampled_from(readable))
        # Sometimes store the view under its column's name, with data_col=None.
        key, data_col = (col, None) if col not in views and draw(st.booleans()) else (f"v{i}", col)
        shift = draw(shifts(lowest_shift, longest_range))
        padding = draw(st.sampled_from(["zero", "reset"]))
        vr = VR(shift=shift)
        known_before_action = vr.shift_to <= (0 if col in obs_columns else -1)
        # padding="reset" on a step column cannot be known before the first action: the
        # collectors refuse it for compute actions (test_collector_errors.py checks that).
        reset_refused = padding == "reset" and col not in obs_columns and known_before_action
        views[key] = VR(
            data_col,
            shift=shift,
            padding=padding,
            batch_repeat_value=k if draw(st.booleans()) else 1,
            used_for_compute_actions=not reset_refused and draw(st.sampled_from([True, True, False])),
            used_for_training=draw(st.sampled_from([True, True, False])),
        )
    for col in BOUNDARY_COLUMNS:
        if draw(st.booleans()):
            views[col] = VR(used_for_compute_actions=draw(st.booleans()), used_for_training=draw(st.booleans()))
    if value_columns_only:
        views["eps_id"] = VR()  # the isolation test reads each input_dict row's eps_id
    num_envs = draw(st.integers(1, 5))
    kwargs = dict(
        num_envs=num_envs,
        columns=columns,
        view_requirements=views,
        obs_columns=tuple(obs_columns),
        initial_rows=initial_rows or None,
        chunk_rows=draw(st.sampled_from([1, 2, 3, 7, 256])),  # tiny chunks: views cross chunk boundaries
        eps_id_start=draw(st.integers(1, 200)),
        # Row-bytes threshold of lazy batch columns: off, every column, or only the wider ones
        # (bool/int64/float32[2]/uint8[3,3] rows are 1/8/8/9 bytes).
        lazy_views=draw(st.sampled_from([False, 1, 9])),
        # env_id = slot // slots_per_env (a multi-agent store's slots: one per agent of an env).
        slots_per_env=draw(st.sampled_from([d for d in range(1, num_envs + 1) if num_envs % d == 0])),
    )
    return kwargs


def assert_dicts_equal(got, want, where):
    assert sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
    for key in want:
        g, w = np.asarray(got[key]), want[key]
        assert g.dtype == w.dtype, f"{where}[{key!r}]: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{where}[{key!r}]: shape {g.shape} != {w.shape}"
        np.testing.assert_array_equal(g, w, err_msg=f"{where}[{key!r}]")


def assert_batches_equal(got, want, where):
    assert len(got) == len(want), (
        f"{where}: {len(got)} segments != {len(want)}; "
        f"eps_ids {[int(b['eps_id'][0]) for b in got]} != {[int(b['eps_id'][0]) for b in want]}"
    )
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, tv.SampleBatch)
        assert g.count == w.count, f"{where} segment {i}: count {g.count} != {w.count}"
        assert_dicts_equal(g, w, f"{where} segment {i}")


class Twin:
    """The C++ collector and the reference, driven in lockstep."""

    def __init__(self, kwargs):
        self.cpp = tv.Collector(**kwargs)
        self.ref = ReferenceCollector(**kwargs)
        self.columns = kwargs["columns"]
        self.num_envs = kwargs["num_envs"]
        self._outs: dict = {}  # an earlier input dict's arrays by row count (`_out`)
        self._calls = 0
        self.obs_columns = kwargs.get("obs_columns", ("obs",))

    def check_counters(self, where):
        assert self.cpp.num_steps() == self.ref.num_steps(), f"{where}: num_steps"
        assert self.cpp.num_complete_steps() == self.ref.num_complete_steps(), f"{where}: num_complete_steps"
        np.testing.assert_array_equal(self.cpp.eps_ids(), self.ref.eps_ids(), err_msg=f"{where}: eps_ids")
        np.testing.assert_array_equal(
            self.cpp.episode_lengths(), self.ref.episode_lengths(), err_msg=f"{where}: episode_lengths"
        )

    def begin(self, env_ids, data, where):
        got, want = self.cpp.begin_episodes(env_ids, data), self.ref.begin_episodes(env_ids, data)
        np.testing.assert_array_equal(got, want, err_msg=f"{where}: begin_episodes")

    def step(self, data, env_ids, fused, where):
        if fused:
            n = self.num_envs if env_ids is None else len(env_ids)
            got, want = self.cpp.step(data, env_ids, out=self._out(n)), self.ref.step(data, env_ids)
            assert_dicts_equal(got, want, f"{where} step")
            self._keep(got, n)
        else:
            self.cpp.add_step(data, env_ids)
            self.ref.add_step(data, env_ids)

    def input_dict(self, env_ids, where):
        n = self.num_envs if env_ids is None else len(env_ids)
        got = self.cpp.input_dict(env_ids, out=self._out(n))
        assert_dicts_equal(got, self.ref.input_dict(env_ids), f"{where} input_dict")
        self._keep(got, n)

    # Every other input dict is written into the arrays of an earlier one of as many rows (``out=``), which
    # hold garbage first: every value must be written.
    def _out(self, n):
        self._calls += 1
        outs = self._outs
        if self._calls % 2 or n not in outs:
            return None
        out = outs[n]
        for v in out.values():
            v.view(np.uint8)[...] = 0xA5 if v.dtype != np.bool_ else 1
        return out

    def _keep(self, got, n):
        self._outs[n] = {k: np.array(v, copy=True) for k, v in dict.items(got)}

    def emitted(self):
        """Per slot, steps of its ongoing episode already emitted (from the reference)."""
        return [0 if ep is None else ep.emitted for ep in self.ref.ongoing]

    def end(self, env_ids):
        self.cpp.end_episodes(env_ids)
        self.ref.end_episodes(env_ids)

    def expected_lazy(self):
        """Training views the C++ batch must hold as `tv.LazyView` (before anything reads them)."""
        threshold = self.cpp.lazy_min_row_bytes
        out = set()
        for key, vr in self.cpp.view_requirements.items():
            col = vr.column(key)
            if not threshold or not vr.used_for_training or vr.batch_repeat_value > 1 or col in BOUNDARY_COLUMNS:
                continue
            dtype, shape = self.cpp.columns[col]
            if np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)) >= threshold:
                out.add(key)
        return out

    def build(self, complete_only, where, hold=None):
        got = self.cpp.build_batch(complete_only=complete_only, hold=hold)
        want = self.ref.build_batch(complete_only=complete_only, hold=hold)
        lazy = self.expected_lazy()
        for i, g in enumerate(got):
            assert set(g.lazy_keys) == lazy, f"{where} segment {i}: lazy columns {g.lazy_keys} != {sorted(lazy)}"
        assert_batches_equal(got, want, f"{where} build_batch(complete_only={complete_only}, hold={hold})")
        return got


def random_rows(rng, columns, names, n, fill=None, safe_cast=False):
    """``[n, *shape]`` data for each column of ``names``; ``fill``: per-row values instead of random ones."""
    out = {}
    for c in names:
        dtype, shape = np.dtype(columns[c][0]), columns[c][1]
        if dtype == np.bool_:
            arr = rng.random((n, *shape)) < 0.3 if fill is None else np.zeros((n, *shape), dtype=bool)
        elif fill is not None:
            arr = np.broadcast_to(np.asarray(fill).reshape((n,) + (1,) * len(shape)), (n, *shape)).astype(dtype)
        else:
            arr = rng.integers(0, 100, (n, *shape)).astype(dtype)  # small ints: exact in every safe source type
        if safe_cast and fill is None:
            arr = arr.astype(SAFE_SOURCES[dtype][int(rng.integers(len(SAFE_SOURCES[dtype])))])
        out[c] = arr
    return out


def as_env_ids(rng, slots):
    """``slots`` as an env_ids argument: an int64 or int32 array."""
    return np.array(slots, dtype=np.int64 if rng.random() < 0.7 else np.int32)


DEFAULT_WEIGHTS = dict(build=1, begin=1, step=3, input_dict=1, end=1)


def play(data, twin, kwargs, fill_eps_id=False, on_dict=None, on_batches=None, ops_range=(1, 40), weights=None):
    """Run one random script on ``twin``; ``fill_eps_id``: every value of an episode is its eps_id.

    ``weights``: relative odds of each operation (a ``build`` is a fragment cut).
    """
    weights = weights or DEFAULT_WEIGHTS
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    num_envs, columns = kwargs["num_envs"], kwargs["columns"]
    ref = twin.ref
    n_ops = data.draw(st.integers(*ops_range), label="n_ops")
    for op_i in range(n_ops):
        lengths = ref.episode_lengths()
        idle = [i for i in range(num_envs) if lengths[i] < 0]
        running = [i for i in range(num_envs) if lengths[i] >= 0]
        possible = {"build": True, "begin": bool(idle), "step": bool(running), "input_dict": bool(running), "end": bool(running)}
        ops = [op for op, w in weights.items() if possible[op] for _ in range(w)]
        op = data.draw(st.sampled_from(ops), label=f"op {op_i}")
        where = f"op {op_i} ({op})"
        if op == "begin":
            slots = data.draw(st.lists(st.sampled_from(idle), unique=True), label="begin slots")
            env_ids = np.array(slots, dtype=np.int64)
            next_ids = ref.next_eps_id + np.arange(len(slots))
            rows = random_rows(rng, columns, twin.obs_columns, len(slots), fill=next_ids if fill_eps_id else None)
            twin.begin(env_ids, rows, where)
        elif op in ("step", "input_dict"):
            if len(running) == num_envs and data.draw(st.booleans(), label="env_ids=None"):
                slots, env_ids = running, None  # None: every slot, in slot order
            else:
                slots = data.draw(st.lists(st.sampled_from(running), unique=True), label=f"{op} slots")
                env_ids = as_env_ids(rng, slots)
            if op == "step":
                fill = ref.eps_ids()[slots] if fill_eps_id else None
                rows = random_rows(rng, columns, columns, len(slots), fill=fill, safe_cast=rng.random() < 0.3)
                twin.step(rows, env_ids, fused=rng.random() < 0.5, where=where)
            if op == "input_dict" or rng.random() < 0.3:
                twin.input_dict(env_ids, where)
            if on_dict is not None:
                on_dict(twin.cpp.input_dict(env_ids))
        elif op == "end":
            slots = data.draw(st.lists(st.sampled_from(running), unique=True), label="end slots")
            twin.end(np.array(slots, dtype=np.int64))
        else:
            hold = None
            if data.draw(st.booleans(), label="hold some steps back"):
                unemitted = [0 if n < 0 else n - e for n, e in zip(lengths, twin.emitted())]
                hold = [data.draw(st.integers(0, u), label=f"hold[{i}]") for i, u in enumerate(unemitted)]
            batches = twin.build(data.draw(st.booleans(), label="complete_only"), where, hold)
            if on_batches is not None:
                on_batches(batches)
        twin.check_counters(where)
    batches = twin.build(False, "final")
    if on_batches is not None:
        on_batches(batches)
    twin.check_counters("final")


@settings(max_examples=300, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_collector_matches_reference(data):
    kwargs = data.draw(setups(), label="setup")
    play(data, Twin(kwargs), kwargs)


@settings(max_examples=80, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_long_episodes_across_many_fragments(data):
    """Few slots, many steps and cuts: long lookbacks reach back across fragments and chunks."""
    kwargs = data.draw(setups(lowest_shift=-30, longest_range=35), label="setup")
    kwargs["num_envs"] = min(kwargs["num_envs"], 2)
    kwargs["slots_per_env"] = math.gcd(kwargs["slots_per_env"], kwargs["num_envs"])
    play(data, Twin(kwargs), kwargs, ops_range=(60, 150), weights=dict(build=3, begin=1, step=30, input_dict=1, end=1))


def _check_own_episode(kwargs, arrays, eps_ids, where):
    """Every value of every view is its row's eps_id, zero padding or an initial row."""
    initial = {c: {float(x) for x in np.ravel(v)} for c, v in (kwargs["initial_rows"] or {}).items()}
    for key, vr in kwargs["view_requirements"].items():
        if key not in arrays or vr.column(key) in BOUNDARY_COLUMNS:
            continue
        col = vr.column(key)
        values = np.asarray(arrays[key])
        ids = np.asarray(eps_ids)[: len(values)]
        for row, eps in zip(values, ids):
            allowed = {0.0, float(eps % 256 if col == "img" else eps)} | initial.get(col, set())
            bad = {float(x) for x in np.ravel(row)} - allowed
            assert not bad, f"{where}[{key!r}] row of eps_id {eps} holds {sorted(bad)}: another episode's data"


@settings(max_examples=150, **PROPERTY_SETTINGS)
@given(data=st.data())
def test_views_never_read_another_episode(data):
    kwargs = data.draw(setups(value_columns_only=True), label="setup")

    def on_dict(d):
        _check_own_episode(kwargs, d, d["eps_id"], "input_dict")

    def on_batches(batches):
        for b in batches:
            assert len(set(b["eps_id"].tolist())) == 1, "a segment holds two episodes"
            _check_own_episode(kwargs, b, b["eps_id"], "build_batch")

    play(data, Twin(kwargs), kwargs, fill_eps_id=True, on_dict=on_dict, on_batches=on_batches)


@pytest.mark.parametrize("chunk_rows", [1, 4, 256])
def test_arrays_stay_valid_after_the_collector_moves_on(chunk_rows):
    """Arrays handed out keep their values after more steps, more batches and deleting the collector."""
    kwargs = dict(
        num_envs=2,
        columns=BASE_COLUMNS,
        view_requirements={"stack": VR("obs", shift="-3:0"), "new_obs": VR("obs", shift=1), "actions": VR()},
        chunk_rows=chunk_rows,
    )
    twin = Twin(kwargs)
    rng = np.random.default_rng(0)
    kept, dicts = [], []
    twin.begin(np.array([0, 1]), random_rows(rng, BASE_COLUMNS, ["obs"], 2), "begin")
    for t in range(30):
        twin.step(random_rows(rng, BASE_COLUMNS, BASE_COLUMNS, 2), None, fused=True, where=f"step {t}")
        d = twin.cpp.input_dict()
        dicts.append((d, {k: v.copy() for k, v in d.items()}))
        if t % 7 == 6:
            kept.append((twin.cpp.build_batch(), [{k: v.copy() for k, v in b.items()} for b in twin.ref.build_batch()]))
        if t == 12:
            twin.end(np.array([0]))
            twin.begin(np.array([0]), random_rows(rng, BASE_COLUMNS, ["obs"], 1), "begin")
    del twin
    gc.collect()
    for got, want in dicts:
        assert_dicts_equal(got, want, "input_dict kept")
    for got, want in kept:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for key in w:
                np.testing.assert_array_equal(g[key], w[key])


@pytest.mark.parametrize("chunk_rows", [1, 3, 256])
def test_frame_stacks_of_aligned_slots_match_the_reference(chunk_rows):
    """Frame stacks gathered while every slot steps at one stream position (slots whose episodes began at other
    steps, so each reads a different mix of stored rows, row 0 and padding): as the reference builds them, for
    stacks inside the episode, reaching past its last row, with zero and reset padding, across frees."""
    views = {
        "stack": VR("obs", shift="-3:0"),
        "stack_reset": VR("obs", shift="-4:0", padding="reset"),
        "prev_acts": VR("actions", shift="-3:-1"),
        "prev_rews": VR("rewards", shift="-5:-1"),
        "ahead": VR("obs", shift="-1:1"),  # reads past the last row: the general rule
        "actions": VR(),
    }
    kwargs = dict(num_envs=4, columns=BASE_COLUMNS, view_requirements=views, chunk_rows=chunk_rows)
    twin = Twin(kwargs)
    rng = np.random.default_rng(1)
    all_cols = list(BASE_COLUMNS)
    twin.begin(np.array([0, 1, 2, 3]), random_rows(rng, BASE_COLUMNS, ["obs"], 4), "begin")
    for t in range(40):
        twin.step(random_rows(rng, BASE_COLUMNS, all_cols, 4), None, fused=True, where=f"step {t}")
        if t % 9 == 4:  # one slot begins again, the others go on: aligned again at the next step, steps differ
            slot = np.array([t % 4])
            twin.end(slot)
            twin.begin(slot, random_rows(rng, BASE_COLUMNS, ["obs"], 1), f"begin {t}")
            twin.input_dict(None, f"input_dict after begin {t}")
        if t % 7 == 6:
            twin.build(False, f"build {t}", hold=None)
