"""Replay persistence: dumps, loads and state dicts of a `ReplayBuffer`, and the files of a memory-mapped one.

A dump is a folder committed as one unit by `trajview._io.commit_folder` (format ``trajview.replay``, version
2): ``manifest.json`` (each file's size and crc32) names a generation sub-folder holding

- ``state.json``: everything but the arrays, as plain JSON: capacity, batch size, the column specs, the
  next-observation mapping, views and `NStep` returns (as dicts), the open trajectories, the store's write
  head, next trajectory uid and priority settings, the sampler's type, settings and generator state, and a
  descriptor (dtype, shape) of each array below;
- one ``.npy`` file per array: ``col.<i>.npy`` (column i's ring rows in use, written from the store's
  memory), ``trajectories.npy`` / ``pieces.npy`` (the C++ trajectory table), ``leaf_mantissas.npy`` / ``leaf_exponents.npy`` (the exact priority leaf of
  each ring row, prioritized buffers) and ``sampler.<name>.npy`` (a sampler's array state).

Nothing is unpickled: JSON and ``.npy`` headers are parsed as data. A load checks every file's size and
crc32, every state entry's type and range, each array's dtype and shape, then the C++ store checks the
trajectory table against the rows (`_Replay.restore`); it builds a fresh store and swaps it in only when all
of that passed, so a load that raises leaves the buffer as it was. The pickle format of trajview 0.1.0
(``state.pkl``) is refused (unpickling it could run code).

API (signatures are stable: ``trajview train`` checkpoints use the two ``*_parts`` functions)::

    dump_parts(buffer, prefix="replay.") -> ContextManager[tuple[dict[str, Callable[[IO], None]], dict]]
        # ``with dump_parts(rb) as (files, meta):`` ``files`` maps each file name (``prefix`` + name) to a
        # function writing its bytes to the file object it is given, ``meta`` is JSON-able; hand both to
        # `_io.commit_folder` (with any other files) inside the ``with``: the buffer's lock is held there.
    load_parts(buffer, manifest, meta, prefix="replay.") -> None
        # ``manifest``: `_io.read_manifest` of the committed folder; ``meta``: the ``meta`` dump_parts gave.
        # e.g. a checkpoint holding a buffer beside other files:
        #   with dump_parts(rb) as (files, meta):
        #       _io.commit_folder(out, "my.checkpoint", 1, {**files, "policy.pt": write_policy}, {"replay": meta})
        #   man = _io.read_manifest(out, "my.checkpoint", (1,))
        #   load_parts(rb, man, man.meta["replay"])
    dumps(buffer, path) -> None;  loads(buffer, path) -> None
    state_dict(buffer) -> dict;  load_state_dict(buffer, state) -> None
        # {"state": <the state.json dict>, "arrays": {name: numpy array}}: plain data only

A memory-mapped buffer's ring files are `trajview.replay.memmap`'s.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any

import numpy as np

from .. import _io
from ..errors import FileIntegrityError
from ..views import ViewRequirement
from .memmap import commit_staged_rings, drop_staged_rings, row_bytes as _row_bytes
from .nstep import NStep
from .sampler_settings import check_max_capacity
from .schema import check_key_columns, check_views, dtype_from_str
from .trajectory_keys import TrajectoryKeys

#: A `ReplayBuffer` (not imported: the buffer imports this module, and the layers allow no cycle).
ReplayBuffer = Any

__all__ = ["FORMAT", "VERSION", "dump_parts", "dumps", "load_parts", "load_state_dict", "loads", "state_dict"]

FORMAT = "trajview.replay"
VERSION = 2
STATE = "state.json"
#: Largest write head and uid a state may hold (far beyond any run; keeps the store's arithmetic in int64).
_MAX_COUNT = 1 << 62
_TRAJ_FIELDS = 8  # uid, key, first_g, steps, last_t, open, starts_episode, number of pieces
_PIECE_FIELDS = 4  # g0, n, step0, tail
#: The buffer's attributes a load replaces (all at once, under its lock).
_FIELDS = ("batch_size", "_next_obs", "_explicit_columns", "_views", "_nsteps", "_default_views", "_has_next",
           "_traj_keys", "_specs", "_impl", "_rings")
_OLD_PICKLE = "state.pkl"


class _Bad(Exception):
    """A state entry that is not what a dump holds (turned into `FileIntegrityError` for files, `ValueError`
    for state dicts)."""


class _Passed(Exception):
    """A ``before_swap`` check's error, carried through `_load`'s own handling unchanged."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Mismatch(ValueError):
    """A sound state that this buffer cannot take (another capacity or sampler type): a `ValueError`."""


# -- the state of a buffer as JSON and arrays ---------------------------------------------------------------


def _snapshot(buf: ReplayBuffer) -> tuple[dict[str, Any], dict[str, tuple[np.dtype, tuple[int, ...], np.ndarray]]]:
    """The buffer's state (JSON-able) and its arrays as ``name -> (dtype, shape, raw bytes)``; the rows are
    views of the store's memory (no copy). Called with the buffer's lock held."""
    arrays: dict[str, tuple[np.dtype, tuple[int, ...], np.ndarray]] = {}

    def put(name: str, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        arrays[name] = (arr.dtype, tuple(arr.shape), arr.reshape(-1).view(np.uint8))

    sampler_json: dict[str, Any] = {}
    for k, v in buf.sampler.state_dict().items():
        if isinstance(v, np.ndarray):
            put(f"sampler.{k}", v)
        else:
            sampler_json[k] = v.item() if isinstance(v, np.generic) else v
    specs = buf._specs
    state: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "capacity": buf._capacity,
        "batch_size": buf.batch_size,
        "sampler": {"type": type(buf.sampler).__name__, "state": sampler_json},
        "columns": None if specs is None else [[k, np.dtype(dt).str, list(sh)] for k, (dt, sh) in specs.items()],
        "explicit_columns": None if buf._explicit_columns is None else list(buf._explicit_columns),
        "next_obs": dict(buf._next_obs),
        "views": None if buf._views is None else {k: _view_to_json(v) for k, v in buf._views.items()},
        "nsteps": {k: _nstep_to_json(v) for k, v in buf._nsteps.items()},
        "default_views": buf._default_views,
        "has_next": buf._has_next,
        "open": [[k, a, b] for k, (a, b) in buf._traj_keys.open.items()],
        "fallback_key": buf._traj_keys.fallback_key,
        "store": None,
    }
    if buf._impl is not None and specs is not None:
        m = buf._impl.meta()
        state["store"] = {"head": int(m["head"]), "next_uid": int(m["next_uid"]), "prioritized": bool(m["prioritized"]),
                          "alpha": float(m["alpha"]), "eps": float(m["eps"]), "max_priority": float(m["max_priority"])}
        put("trajectories", np.asarray(m["trajectories"], np.int64))
        put("pieces", np.asarray(m["pieces"], np.int64))
        if m["prioritized"]:  # each leaf exactly: mantissa x 2^exponent (it may lie beyond a double's range)
            put("leaf_mantissas", np.asarray(m["leaf_mantissas"], np.float64))
            put("leaf_exponents", np.asarray(m["leaf_exponents"], np.int64))
        used = min(int(m["head"]), buf._capacity)
        for i, (dt, sh) in enumerate(specs.values()):
            dt = np.dtype(dt)
            arrays[f"col.{i}"] = (dt, (used, *sh), buf._impl.column_view(i)[: used * _row_bytes(dt, sh)])
    state["arrays"] = {k: {"dtype": dt.str, "shape": list(sh)} for k, (dt, sh, _) in arrays.items()}
    return state, arrays


def _view_to_json(vr: ViewRequirement) -> dict[str, Any]:
    # Replay never reads a view's space: it is left out (a space need not be describable as JSON).
    d = vr.to_dict() if vr.space is None else ViewRequirement(
        vr.data_col, None, vr.shift, batch_repeat_value=vr.batch_repeat_value, padding=vr.padding,
        used_for_compute_actions=vr.used_for_compute_actions, used_for_training=vr.used_for_training).to_dict()
    d.pop("space", None)
    return d


def _nstep_to_json(ns: NStep) -> dict[str, Any]:
    return {"n": ns.n, "gamma": ns.gamma, "reward_key": ns.reward_key, "obs_key": ns.obs_key,
            "terminated_key": ns.terminated_key, "truncated_key": ns.truncated_key}


@functools.lru_cache(maxsize=256)
def _npy_header(dt: np.dtype, shape: tuple[int, ...]) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        f, {"descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False, "shape": tuple(shape)})
    return f.getvalue()


def npy_writer(dt: np.dtype, shape: tuple[int, ...], raw: np.ndarray) -> Callable[[IO[bytes]], None]:
    def write(f: IO[bytes]) -> None:
        f.write(_npy_header(dt, shape))
        f.write(raw.data)  # straight from the store's memory
    return write


@contextlib.contextmanager
def dump_parts(buf: ReplayBuffer, prefix: str = "replay.") -> Iterator[tuple[dict[str, Callable[[IO[bytes]], None]],
                                                                              dict[str, Any]]]:
    """The files of the buffer's dump (``prefix`` + name -> writer) and the manifest metadata to commit with
    them; the buffer's lock is held until the ``with`` ends (adds wait), so commit them inside it."""
    with buf._lock:
        state, arrays = _snapshot(buf)
        body = json.dumps(state, indent=1, allow_nan=False).encode()

        def write_state(f: IO[bytes]) -> None:
            f.write(body)

        files: dict[str, Callable[[IO[bytes]], None]] = {prefix + STATE: write_state}
        for name, (dt, shape, raw) in arrays.items():
            files[f"{prefix}{name}.npy"] = npy_writer(dt, shape, raw)
        yield files, {"format": FORMAT, "version": VERSION, "prefix": prefix}


#: What a dump's or a load's `_io.PathLock` on the dump folder says it is for.
_DUMP_LOCK = "a replay dump being written (ReplayBuffer.dumps)"
_LOAD_LOCK = "a replay dump being read (ReplayBuffer.loads)"


def _folder_format(mpath: Path) -> Any:
    """The format an existing manifest names (FORMAT where there is none or it is damaged: a dump replaces it).
    A manifest that is no regular file (a FIFO, a device) or too big to be one is refused, naming it (never read
    without end, never blocked on)."""
    try:
        data = _io.read_regular(mpath, _io.MAX_MANIFEST)
    except FileNotFoundError:
        return FORMAT
    try:
        return json.loads(data).get("format", FORMAT)
    except (ValueError, RecursionError, AttributeError):
        return FORMAT


def dumps(buf: ReplayBuffer, path: str | os.PathLike[str]) -> None:
    # One dump at a time per folder: a second, in this process or another, gets a PathInUseError naming the
    # holder (two commits side by side could each remove the other's generation), and no load reads meanwhile.
    with _io.PathLock(path, _DUMP_LOCK):
        other = _folder_format(Path(path) / _io.MANIFEST)  # never over another kind of committed folder
        if other != FORMAT:
            raise ValueError(f"dumps: {path} holds a {other!r} folder, not a replay dump; dump into another folder")
        with dump_parts(buf, prefix="") as (files, meta):
            _io.commit_folder(path, FORMAT, VERSION, files, meta)


def state_dict(buf: ReplayBuffer) -> dict[str, Any]:
    with buf._lock:
        state, arrays = _snapshot(buf)
        out = {}
        for name, (dt, shape, raw) in arrays.items():
            out[name] = np.empty(shape, dt) if raw.size == 0 else raw.copy().view(dt).reshape(shape)
    return {"state": json.loads(json.dumps(state, allow_nan=False)), "arrays": out}


# -- sources of arrays ---------------------------------------------------------------------------------------


class _Arrays:
    """Where a load reads its arrays from: a committed folder (`FileArrays`) or a state dict (`_DictArrays`)."""

    def expect(self, name: str, dt: np.dtype, shape: tuple[int, ...]) -> None:
        """Refuses (`_Bad`) an array that is missing or not of this dtype and shape, before anything is read."""
        raise NotImplementedError

    def read(self, name: str, dt: np.dtype, shape: tuple[int, ...], into: np.ndarray | None = None) -> np.ndarray:
        """The array (into the uint8 buffer ``into`` when given)."""
        raise NotImplementedError


class FileArrays(_Arrays):
    """The ``.npy`` files ``prefix + name + ".npy"`` of a committed folder, each read only as the dtype and shape
    its reader expects: its size, crc32 and header checked against them (no header decides what is allocated)."""

    def __init__(self, man: _io.Manifest, prefix: str) -> None:
        self.man, self.prefix = man, prefix

    def rows(self, name: str, dt: np.dtype, tail: tuple[int, ...]) -> int:
        """How many rows of ``dt`` and per-row shape ``tail`` the file holds, by its size in the manifest (the
        header `npy_writer` writes for that many rows, and the rows); a size no row count gives is a
        `FileIntegrityError` naming it."""
        fname = self._name(name)
        self.man.path(fname)  # (a name the manifest lacks: FileIntegrityError naming the manifest)
        size = self.man.files[fname][0]
        row = _row_bytes(dt, tail)
        for h in range(64, min(int(size), 1 << 16) + 1, 64):  # (numpy pads a header to a multiple of 64 bytes)
            if row == 0 or (size - h) % row:
                continue
            k = (size - h) // row
            if len(_npy_header(dt, (k, *tail))) == h:
                return int(k)
        raise FileIntegrityError(self.man.path(fname), f"holds {size} bytes: no number of {dt} rows of shape {tail} "
                                                       f"with their .npy header")

    def _name(self, name: str) -> str:
        return f"{self.prefix}{name}.npy"

    def expect(self, name: str, dt: np.dtype, shape: tuple[int, ...]) -> None:
        fname = self._name(name)
        self.man.path(fname)  # a name the manifest lacks: FileIntegrityError naming the manifest
        want = len(_npy_header(dt, shape)) + _row_bytes(dt, shape)
        if self.man.files[fname][0] != want:
            raise FileIntegrityError(self.man.path(fname), f"holds {self.man.files[fname][0]} bytes; a {dt} array "
                                                           f"of shape {shape} takes {want}")

    def read(self, name: str, dt: np.dtype, shape: tuple[int, ...], into: np.ndarray | None = None) -> np.ndarray:
        self.expect(name, dt, shape)
        fname = self._name(name)
        expected = _npy_header(dt, shape)
        header = bytearray(len(expected))
        out = np.empty(_row_bytes(dt, shape), np.uint8) if into is None else into
        _io.read_verified(self.man, fname, into=[header, out])  # one pass, straight into the rows
        if bytes(header) != expected:
            raise FileIntegrityError(self.man.path(fname), f"not the .npy header of a {dt} array of shape {shape}: "
                                                           f"{bytes(header)[10:].decode(errors='replace').strip()}")
        return out.view(dt).reshape(shape) if out.size else np.empty(shape, dt)


class _DictArrays(_Arrays):
    def __init__(self, arrays: Mapping[str, Any]) -> None:
        self.arrays = arrays

    def expect(self, name: str, dt: np.dtype, shape: tuple[int, ...]) -> None:
        a = self.arrays.get(name)
        if not isinstance(a, np.ndarray):
            raise _Bad(f"arrays[{name!r}] must be a numpy array, got {type(a).__name__}")
        if a.dtype != dt or a.shape != shape:
            raise _Bad(f"arrays[{name!r}]: expected a {dt} array of shape {shape}, got {a.dtype} {a.shape}")

    def read(self, name: str, dt: np.dtype, shape: tuple[int, ...], into: np.ndarray | None = None) -> np.ndarray:
        self.expect(name, dt, shape)
        a = np.ascontiguousarray(self.arrays[name])
        if into is None:
            return a.copy()
        into[:] = a.reshape(-1).view(np.uint8)
        return a


# -- checking a state ----------------------------------------------------------------------------------------


def _get(d: Mapping[str, Any], key: str, types: tuple[type, ...], where: str, *, none: bool = False) -> Any:
    if key not in d:
        raise _Bad(f"{where}: missing entry {key!r}")
    v = d[key]
    if v is None and none:
        return None
    if not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
        want = " or ".join(t.__name__ for t in types) + (" or null" if none else "")
        raise _Bad(f"{where}[{key!r}] must be {want}, got {v!r}")
    return v


def _count(d: Mapping[str, Any], key: str, where: str, low: int = 0) -> int:
    v = _get(d, key, (int,), where)
    if not low <= v <= _MAX_COUNT:
        raise _Bad(f"{where}[{key!r}] must be an int in [{low}, 2**62], got {v}")
    return int(v)


def _real(d: Mapping[str, Any], key: str, where: str) -> float:
    v = float(_get(d, key, (int, float), where))
    if not np.isfinite(v) or v < 0:
        raise _Bad(f"{where}[{key!r}] must be finite and >= 0, got {v}")
    return v


def _str_map(v: Any, where: str) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise _Bad(f"{where} must map names to names, got {v!r}")
    return dict(v)


def _dtype(s: Any, where: str) -> np.dtype:
    dt = dtype_from_str(s)
    if dt is None or dt.kind not in "biuf" or not dt.isnative or dt.itemsize > 8:
        raise _Bad(f"{where}: {s!r} is not a bool, int or float dtype of this machine")
    return dt


def _shape(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX_COUNT
                                          for x in v):
        raise _Bad(f"{where}: a shape must be a list of ints >= 0, got {v!r}")
    return tuple(v)


class _Plan:
    """A state checked and parsed: the buffer's new attributes, the store's meta and the arrays to read."""

    def __init__(self, buf: ReplayBuffer, state: Any, src: _Arrays) -> None:
        if not isinstance(state, dict):
            raise _Bad(f"the state must be a JSON object, got {type(state).__name__}")
        fmt, version = state.get("format"), state.get("version")
        if fmt != FORMAT or version != VERSION:
            if "config" in state and state.get("version") == 1:
                raise _Bad("a version-1 state (trajview 0.1.0's pickle-era state_dict) is not read by this "
                           "trajview; refill the buffer or load it with the trajview that wrote it")
            raise _Bad(f"format {fmt!r} version {version!r}, expected {FORMAT!r} version {VERSION}")
        w = "state"
        cap = _count(state, "capacity", w, 1)
        if cap != buf._capacity:
            raise _Mismatch(f"the state has capacity {cap}, this buffer {buf._capacity}: load it into a "
                             f"ReplayBuffer({cap}, ...)")
        bs = _get(state, "batch_size", (int,), w, none=True)
        self.batch_size = None if bs is None else _count(state, "batch_size", w, 1)
        sampler = _get(state, "sampler", (dict,), w)
        kind = _get(sampler, "type", (str,), "state['sampler']")
        if kind != type(buf.sampler).__name__:
            raise _Mismatch(f"the state's sampler is a {kind}, this buffer's a {type(buf.sampler).__name__}: "
                             f"load it into a buffer with a {kind}")
        descr = _get(state, "arrays", (dict,), w)
        self.arrays: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        for name, d in descr.items():
            if not isinstance(d, dict) or not _io._valid_name(f"{name}.npy"):
                raise _Bad(f"state['arrays'][{name!r}] must be {{'dtype': ..., 'shape': [...]}}")
            self.arrays[name] = (_dtype(d.get("dtype"), f"state['arrays'][{name!r}]"),
                                 _shape(d.get("shape"), f"state['arrays'][{name!r}]"))
        sstate = dict(_get(sampler, "state", (dict,), "state['sampler']"))
        for name, (dt, shape) in self.arrays.items():
            if name.startswith("sampler."):
                sstate[name[len("sampler."):]] = src.read(name, dt, shape)
        try:
            self.sampler_state = buf.sampler._checked_state(sstate)
        except (TypeError, ValueError) as e:
            raise _Bad(f"state['sampler']: {e}") from None
        self._config(buf, state)
        try:  # the constructors' checks: max_capacity (the buffer's), the key columns (the stored ones)
            check_max_capacity(kind, self.sampler_state.get("max_capacity"), cap)
            if self.specs is not None:
                check_key_columns(self.sampler_state.get("traj_key"), self.sampler_state.get("truncated_key"),
                                  self.specs)
        except ValueError as e:
            raise _Bad(f"state['sampler']: {e}") from None
        self._store(state, cap, src)
        expected = {n for n in self.arrays if n.startswith("sampler.")} | set(self.rows) | set(self.tables)
        if set(self.arrays) != expected:
            raise _Bad(f"state['arrays'] names {sorted(self.arrays)}, expected {sorted(expected)}")

    def _config(self, buf: ReplayBuffer, state: dict[str, Any]) -> None:
        w = "state"
        cols = _get(state, "columns", (list,), w, none=True)
        self.specs: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        if cols is not None:
            self.specs = {}
            for c in cols:
                if not (isinstance(c, list) and len(c) == 3 and isinstance(c[0], str)) or c[0] in self.specs:
                    raise _Bad(f"state['columns']: each entry must be [name, dtype, shape] with a new name, got {c!r}")
                self.specs[c[0]] = (_dtype(c[1], f"column {c[0]!r}"), _shape(c[2], f"column {c[0]!r}"))
            if not self.specs:
                raise _Bad("state['columns'] is empty")
        ex = _get(state, "explicit_columns", (list,), w, none=True)
        if ex is not None and not all(isinstance(c, str) for c in ex):
            raise _Bad(f"state['explicit_columns'] must be a list of names, got {ex!r}")
        self.explicit = None if ex is None else tuple(ex)
        self.next_obs = _str_map(_get(state, "next_obs", (dict,), w), "state['next_obs']")
        views = _get(state, "views", (dict,), w, none=True)
        nsteps = _get(state, "nsteps", (dict,), w)
        try:
            vrs = {} if views is None else {k: ViewRequirement.from_dict({**v, "space": None}) for k, v in views.items()}
            nss = {k: NStep(**v) for k, v in nsteps.items()}
            self.views = None if views is None else check_views(vrs)[0]
            self.nsteps = check_views(nss)[1]
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise _Bad(f"state['views'] / state['nsteps']: {type(e).__name__}: {e}") from None
        self.default_views = _get(state, "default_views", (bool,), w)
        self.has_next = _get(state, "has_next", (bool,), w)
        self.fallback_key = _get(state, "fallback_key", (int,), w)
        self.open: dict[int, tuple[int, int]] = {}
        for ent in _get(state, "open", (list,), w):
            if not (isinstance(ent, list) and len(ent) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                     for x in ent)) or ent[0] in self.open:
                raise _Bad(f"state['open']: each entry must be [key, first t, last t] with a new key, got {ent!r}")
            self.open[ent[0]] = (ent[1], ent[2])
        for v in (self.fallback_key, *self.open, *(x for p in self.open.values() for x in p)):
            if not -(1 << 63) <= v < (1 << 63):
                raise _Bad(f"state: {v} does not fit an int64 (trajectory key or t)")

    def _store(self, state: dict[str, Any], cap: int, src: _Arrays) -> None:
        st = _get(state, "store", (dict,), "state", none=True)
        self.rows: dict[str, tuple[int, np.dtype, tuple[int, ...]]] = {}
        self.tables: dict[str, np.ndarray] = {}
        self.meta: dict[str, Any] | None = None
        if st is None:
            return
        if self.specs is None:
            raise _Bad("state['store'] is given but state['columns'] is null")
        w = "state['store']"
        head = _count(st, "head", w)
        self.meta = {"head": head, "next_uid": _count(st, "next_uid", w),
                     "prioritized": _get(st, "prioritized", (bool,), w), "alpha": _real(st, "alpha", w),
                     "eps": _real(st, "eps", w), "max_priority": _real(st, "max_priority", w)}
        used = min(head, cap)
        for i, (dt, sh) in enumerate(self.specs.values()):
            self.rows[f"col.{i}"] = (i, dt, (used, *sh))
        for name, (dt, shape) in self.arrays.items():
            if name in self.rows and (dt, shape) != self.rows[name][1:]:
                raise _Bad(f"state['arrays'][{name!r}] is {dt} {shape}, the column spec says {self.rows[name][1:]}")
        tables: dict[str, tuple[np.dtype, int]] = {"trajectories": (np.dtype(np.int64), _TRAJ_FIELDS),
                                                   "pieces": (np.dtype(np.int64), _PIECE_FIELDS)}
        if self.meta["prioritized"]:
            tables["leaf_mantissas"] = (np.dtype(np.float64), 0)
            tables["leaf_exponents"] = (np.dtype(np.int64), 0)
        for name, (dt, width) in tables.items():
            if name not in self.arrays:
                raise _Bad(f"state['arrays'] lacks {name!r}")
            got_dt, shape = self.arrays[name]
            per_row = name.startswith("leaf_")
            ok = shape == (cap,) if per_row else len(shape) == 2 and shape[1] == width
            if got_dt != dt or not ok:
                raise _Bad(f"state['arrays'][{name!r}]: expected {dt} of shape "
                           f"{(cap,) if per_row else ('n', width)}, got {got_dt} {shape}")
            self.tables[name] = src.read(name, dt, shape)
        for name, (_, dt, shape) in self.rows.items():
            src.expect(name, dt, shape)
        self.meta.update(self.tables)
        if not self.meta["prioritized"]:
            self.meta["leaf_mantissas"] = np.zeros(0, np.float64)
            self.meta["leaf_exponents"] = np.zeros(0, np.int64)


# -- loading -------------------------------------------------------------------------------------------------


def _build(buf: ReplayBuffer, plan: _Plan, src: _Arrays) -> ReplayBuffer:
    """A twin of ``buf`` (sharing its lock, sampler and storage settings) holding the planned state in a fresh
    store, its rows read in; ``buf`` is untouched. If it raises, the rings it staged (a memory-mapped buffer's
    ``.ring_<i>.bin.loading``) are gone."""
    tmp = object.__new__(type(buf))
    try:
        return _fill(buf, tmp, plan, src)
    except BaseException:
        if tmp.__dict__.get("_staging") and tmp._path is not None:
            drop_staged_rings(tmp)
        raise


def _create(tmp: ReplayBuffer) -> None:
    """``tmp``'s store made (`ReplayBuffer._create`); an allocation that fails (a dump's columns too big for
    this machine) is a `_Bad` naming the biggest column, its shape and bytes."""
    try:
        tmp._create()
    except MemoryError:
        assert tmp._specs is not None
        sizes = {k: tmp._capacity * _row_bytes(np.dtype(dt), sh) for k, (dt, sh) in tmp._specs.items()}
        big = max(sizes, key=lambda k: sizes[k])
        dt, sh = tmp._specs[big]
        raise _Bad(f"the columns take {sum(sizes.values())} bytes at capacity {tmp._capacity}, more than this machine "
                   f"could allocate; the biggest, column {big!r} ({np.dtype(dt)}, per-step shape {tuple(sh)}), "
                   f"{sizes[big]} bytes") from None


def _fill(buf: ReplayBuffer, tmp: ReplayBuffer, plan: _Plan, src: _Arrays) -> ReplayBuffer:
    tmp.__dict__.update(buf.__dict__)
    tmp.batch_size = plan.batch_size
    tmp._next_obs = dict(plan.next_obs)
    tmp._explicit_columns = plan.explicit
    tmp._views = plan.views
    tmp._nsteps = plan.nsteps
    tmp._default_views = plan.default_views
    tmp._has_next = plan.has_next
    tmp._traj_keys = TrajectoryKeys(plan.open, plan.fallback_key)
    tmp._specs = plan.specs
    tmp._impl = None
    tmp._rings = None
    tmp._staging = True
    if plan.specs is None:
        return tmp
    views = tmp._views
    _create(tmp)
    tmp._views = views if views is not None else tmp._views
    assert tmp._impl is not None
    if plan.meta is None:  # the schema without a store (a buffer closed before it was dumped)
        return tmp
    if plan.meta["prioritized"] != buf.sampler.prioritized:
        raise _Bad(f"state['store']['prioritized'] is {plan.meta['prioritized']}, but a {type(buf.sampler).__name__} "
                   f"{'is' if buf.sampler.prioritized else 'is not'} prioritized")
    if plan.meta["prioritized"]:
        s = plan.sampler_state
        if (plan.meta["alpha"], plan.meta["eps"]) != (s.get("_alpha"), s.get("_eps")):
            raise _Bad(f"state['store']: alpha {plan.meta['alpha']} and eps {plan.meta['eps']} differ from the "
                       f"sampler's ({s.get('_alpha')}, {s.get('_eps')})")
    rings = [(name, dt, shape, tmp._impl.column_view(i)[: _row_bytes(dt, shape[1:]) * shape[0]])
             for name, (i, dt, shape) in plan.rows.items()]

    def read_rows() -> None:
        for name, dt, shape, into in rings:
            src.read(name, dt, shape, into=into)

    # The rows are read (and checksummed) on a thread while the store checks and rebuilds its trajectory table
    # (neither touches the other's memory; both release the GIL); the table's error, if any, comes first.
    with ThreadPoolExecutor(1, thread_name_prefix="trajview-load") as pool:
        reading = pool.submit(read_rows)
        try:
            tmp._impl.restore(plan.meta)
        except ValueError as e:
            reading.exception()  # (the thread writes into tmp's rings: let it finish)
            raise _Bad(f"the trajectory table does not match the rows: {e}") from None
        finally:
            wait([reading])
        reading.result()
    return tmp


def _swap(buf: ReplayBuffer, tmp: ReplayBuffer, plan: _Plan) -> None:
    with buf._lock:
        if tmp._rings is not None:
            commit_staged_rings(buf, tmp)
        for k in _FIELDS:
            setattr(buf, k, getattr(tmp, k))
        buf.sampler._apply_state(plan.sampler_state)


#: What a caller loading a buffer inside a bigger state checks before the swap (`load_parts`, `load_state_dict`):
#: it gets the built twin holding the loaded rows; if it raises, the buffer is left as it was.
BeforeSwap = Callable[[ReplayBuffer], None]


def _load(buf: ReplayBuffer, state: Any, src: _Arrays, where: str, file: Path | None,
          before_swap: BeforeSwap | None = None) -> None:
    tmp = None
    try:
        plan = _Plan(buf, state, src)
        tmp = _build(buf, plan, src)
        if before_swap is not None:
            try:
                before_swap(tmp)
            except BaseException as e:  # (the caller's refusal, as it is: not one of this state's files)
                raise _Passed(e) from None
        _swap(buf, tmp, plan)
        tmp = None
    except _Passed as p:
        raise p.error from None
    except FileIntegrityError:
        raise
    except (_Bad, ValueError) as e:  # a file whose content the buffer refuses (its schema, views) is damaged
        if file is not None and not isinstance(e, _Mismatch):
            raise FileIntegrityError(file, str(e)) from None
        raise ValueError(f"{where}: {e}") from None
    finally:
        if tmp is not None and tmp._rings is not None:
            drop_staged_rings(tmp)


def load_state_dict(buf: ReplayBuffer, sd: Any, before_swap: BeforeSwap | None = None) -> None:
    buf._check_open()  # a closed buffer: a ValueError about it, before any file is read
    if not isinstance(sd, Mapping) or set(sd) != {"state", "arrays"} or not isinstance(sd["arrays"], Mapping):
        if isinstance(sd, Mapping) and sd.get("version") == 1:
            raise ValueError("load_state_dict: a version-1 state dict (trajview 0.1.0) is not read by this "
                             "trajview; refill the buffer or load it with the trajview that wrote it")
        raise ValueError("load_state_dict: expected {'state': ..., 'arrays': {...}} as ReplayBuffer.state_dict() "
                         f"returns, got {type(sd).__name__} with keys {list(sd) if isinstance(sd, Mapping) else ''}")
    try:  # plain data only: the state must be JSON
        state = json.loads(json.dumps(sd["state"], allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"load_state_dict: state['state'] must be plain JSON data: {e}") from None
    _load(buf, state, _DictArrays(sd["arrays"]), "load_state_dict", None, before_swap)


def load_parts(buf: ReplayBuffer, man: _io.Manifest, meta: Any, prefix: str = "replay.",
               before_swap: BeforeSwap | None = None) -> None:
    buf._check_open()  # a closed buffer: a ValueError about it, before any file is read
    mpath = (man.folder.parent if man.folder is not None else Path(".")) / _io.MANIFEST
    if meta != {"format": FORMAT, "version": VERSION, "prefix": prefix}:
        raise FileIntegrityError(mpath, f"the replay metadata is {meta!r}, expected format {FORMAT!r} version "
                                        f"{VERSION} with prefix {prefix!r}")
    spath = man.path(prefix + STATE)
    body = _io.read_verified(man, prefix + STATE)
    try:
        state = json.loads(bytes(body))
    except (ValueError, RecursionError) as e:  # (not JSON, not UTF-8, an int too long, nested too deep)
        raise FileIntegrityError(spath, f"not valid JSON: {type(e).__name__}: {e}") from None
    _load(buf, state, FileArrays(man, prefix), f"loads({man.folder})", spath, before_swap)


def loads(buf: ReplayBuffer, path: str | os.PathLike[str]) -> None:
    buf._check_open()  # a closed buffer: a ValueError about it, before any file is read
    path = Path(path)
    if (path / _OLD_PICKLE).exists() and not (path / _io.MANIFEST).exists():
        raise FileIntegrityError(
            path / _OLD_PICKLE,
            "a replay dump in the pickle format of trajview 0.1.0: not read, because unpickling a file can run "
            "code. Refill the buffer, or (if you trust the file) load it with the trajview that wrote it",
        )
    # A reader's lock: a dump into this folder (which removes the generation read here once it commits) cannot
    # start while the load reads, and a load does not start while a dump writes (PathInUseError naming it).
    with _io.PathLock(path, _LOAD_LOCK, shared=True):
        man = _io.read_manifest(path, FORMAT, (VERSION,))
        load_parts(buf, man, man.meta, prefix="")
