"""`TrajviewStorage`'s state at rest: `state_dict` / `load_state_dict` (torch tensors and plain values, which
``torch.load(weights_only=True)`` reads back) and `dumps` / `loads` (one folder committed by
`trajview._io.commit_folder`, format ``trajview.torchrl-storage``: the store's rows as trajview's replay dump
(`trajview.replay.persistence.dump_parts`), the slot map and the trajectories' bookkeeping as ``.npy`` files and
JSON; nothing pickled, every file verified on load). A saved state is checked whole against the storage (its
settings, every entry's type and shape, every slot's row held by the store) and swapped in only then: a load that
raises changes nothing (a memory-mapped storage's rows load through its buffer's own staged swap). Functions of
the storage (``st``), which calls them.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import _io
from ..errors import FileIntegrityError
from ..replay import ReplayBuffer, Sampler, persistence
from ..replay.schema import check_specs
from ..views.nest import SEP

FORMAT = "trajview.torchrl-storage"
VERSION = 1
#: Internal columns handed to the store with each write (never stored): the store key and end flag of each step.
KEY, END = "__tv_key", "__tv_end"

Key = tuple[str, ...]


def flat_key(k: Key) -> str:
    """The store column of TensorDict key ``k`` (its parts joined by `SEP`): the one name a key is stored under."""
    for part in k:
        if SEP in part or part.startswith("__tv_"):
            raise ValueError(f"TrajviewStorage: key {k!r}: names may not hold {SEP!r} nor start with '__tv_'")
    return SEP.join(k)


def meta(st: Any) -> dict[str, Any]:
    return {
        "max_size": st.max_size, "extra_rows": st.extra_rows, "len": st._len,
        "schema": [[name, list(key), dt.str, list(shape)] for name, (key, dt, shape) in st._schema.items()],
        "shared": dict(st._shared), "views": sorted(st._views),
        "open": [[uk, *v] for uk, v in st._open.items()],
        "next_ikey": st._next_ikey, "fallback": st._fallback,
        "last_cursor": st._last_cursor_index,
    }

def arrays(st: Any) -> dict[str, np.ndarray]:
    out = {"slot_row": st._slot_row.copy(), "slot_first": st._slot_first.copy()}
    keys = sorted(st._pending)
    out["pending_keys"] = np.asarray(keys, np.int64)
    for o in st._shared:
        if keys:
            out[f"pending.{o}"] = np.stack([st._pending[k][o] for k in keys])
    return out

def state_dict(st: Any) -> dict[str, Any]:
    """Torch tensors and plain Python values (JSON-able; no objects), as TorchRL's own storages give: what
    ``torch.load(weights_only=True)`` reads back. The slots, the trajectories' bookkeeping and the trajview
    `ReplayBuffer`'s own `state_dict` with its numpy arrays as tensors."""
    replay = None
    if st._rb is not None:
        replay = st._rb.state_dict()
        replay = {**replay, "arrays": _tensors(replay["arrays"])}
    return {"meta": meta(st), "arrays": _tensors(arrays(st)), "replay": replay}

def load_state_dict(st: Any, state_dict: Mapping[str, Any]) -> None:
    """Restores a `state_dict` (its tensors, or numpy arrays as earlier trajview gave), checked first; a state
    that is refused changes nothing."""
    if not isinstance(state_dict, Mapping) or set(state_dict) != {"meta", "arrays", "replay"}:
        raise ValueError("TrajviewStorage.load_state_dict: expected the entries ['arrays', 'meta', 'replay']")
    meta_ = state_dict["meta"]
    extra = check_config(st, meta_)
    state = _State(st, meta_)
    saved = state_dict["arrays"]
    if not isinstance(saved, Mapping):
        raise ValueError(f"TrajviewStorage state: 'arrays' must be a dict, got {type(saved).__name__}")
    state.take_arrays(_arrays(saved))
    replay = state_dict["replay"]
    if replay is None:
        state.check_rows(None)
        state.apply(None, extra)
        return
    if not isinstance(replay, Mapping) or not isinstance(replay.get("arrays"), Mapping):
        raise ValueError("TrajviewStorage state: 'replay' must be a dict with an 'arrays' dict")
    with _loading_into(st, extra) as rb:
        persistence.load_state_dict(rb, {**replay, "arrays": _arrays(replay["arrays"])}, before_swap=state.check_rows)
        state.apply(rb, extra)


def _tensors(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """numpy arrays as CPU tensors of the same dtype and shape (copies: the state owns its data)."""
    return {name: torch.from_numpy(np.array(a, copy=True, order="C")) for name, a in arrays.items()}


def _arrays(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A state's tensors as numpy arrays (numpy arrays kept; anything else passed on for the checks to name)."""
    out: dict[str, Any] = {}
    for name, a in saved.items():
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu()
            out[name] = (a.to_dense() if a.layout != torch.strided else a).numpy()
        else:
            out[name] = a
    return out

def dumps(st: Any, path: str | os.PathLike[str]) -> None:
    """Writes the storage to the folder ``path`` as one committed unit (`trajview._io.commit_folder`: the
    store's rows as trajview's replay dump, the slots as ``.npy`` files): a kill at any byte leaves the
    previous dump whole."""
    files = {f"torchrl.{name}.npy": _npy(arr) for name, arr in arrays(st).items()}
    man_meta: dict[str, Any] = {"torchrl": meta(st)}
    with _io.PathLock(path, "a TrajviewStorage dump being written (dumps)"):  # one dump at a time per folder
        if st._rb is None:
            _io.commit_folder(path, FORMAT, VERSION, files, man_meta)
            return
        with persistence.dump_parts(st._rb) as (rfiles, rmeta):
            man_meta["replay"] = rmeta
            _io.commit_folder(path, FORMAT, VERSION, {**rfiles, **files}, man_meta)

def loads(st: Any, path: str | os.PathLike[str]) -> None:
    """Reads a `dumps` folder, verifying every file (`trajview.errors.FileIntegrityError` naming a damaged
    one); a load that raises changes nothing."""
    with _io.PathLock(path, "a TrajviewStorage dump being read (loads)", shared=True):  # no dump meanwhile
        _loads(st, path)


def _loads(st: Any, path: str | os.PathLike[str]) -> None:
    man = _io.read_manifest(Path(path), FORMAT, (VERSION,))
    mpath = Path(path) / _io.MANIFEST
    saved = man.meta.get("torchrl")
    if not isinstance(saved, dict):
        raise FileIntegrityError(mpath, "holds no TrajviewStorage state (meta 'torchrl')")
    extra = check_config(st, saved)  # (another storage's settings: a ValueError, not damage)
    try:
        state = _State(st, saved)
        state.read_arrays(man)
        if "replay" not in man.meta:
            state.check_rows(None)
            state.apply(None, extra)
        else:
            with _loading_into(st, extra) as rb:
                persistence.load_parts(rb, man, man.meta["replay"], before_swap=state.check_rows)
                state.apply(rb, extra)
    except FileIntegrityError:
        raise
    except ValueError as e:  # the saved state refused (`_State`): the manifest that holds it is damaged or crafted
        raise FileIntegrityError(mpath, str(e)) from None
    st._bump_mutation_revision()


@contextlib.contextmanager
def _loading_into(st: Any, extra: int) -> Iterator[ReplayBuffer]:
    """The buffer a load fills (`fresh_buffer`); a new one is closed again if the load raises (a memory-mapped
    one holds its folder's lock)."""
    rb = fresh_buffer(st, extra)
    try:
        yield rb
    except BaseException:
        if rb is not st._rb:
            rb.close()
        raise


#: The bytes of extra rows a default ``extra_rows`` may take beyond ``max_size // 25`` (`default_extra_rows`).
SMALL_ROWS_BYTES = 64 << 20


def default_extra_rows(max_size: int, row_bytes: int | None = None) -> int:
    """`TrajviewStorage`'s default ``extra_rows`` for rows of ``row_bytes`` stored bytes:
    ``max(max_size // 25, 40 * isqrt(max_size), 256)`` (1.04 rows per step from 1M steps up; a larger share for
    small buffers), raised to as many rows as `SMALL_ROWS_BYTES` hold (at most ``max_size``): small rows are
    cheap, and short episodes need a row each. ``row_bytes`` None (before the first write): the first part."""
    base = max(max_size // 25, 40 * math.isqrt(max_size), 256)
    if row_bytes is None:
        return base
    return max(base, min(max_size, SMALL_ROWS_BYTES // max(int(row_bytes), 1)))


def stored_row_bytes(specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> int:
    """Bytes of one row of the stored columns (``name -> (dtype, per-step shape)``)."""
    return sum(np.dtype(dt).itemsize * math.prod(shape) for dt, shape in specs.values())


def fresh_buffer(st: Any, extra_rows: int) -> ReplayBuffer:
    """The buffer a load fills (``max_size + extra_rows`` rows, ``extra_rows`` as `check_config` gave): a new one (swapped in when all of the load passed),
    or, for a memory-mapped storage that has one, its own (which loads into staged ring files and swaps them in
    itself: its folder has one owner)."""
    if st._backing == "memmap" and st._rb is not None:
        return st._rb
    sampler = Sampler()
    sampler.traj_key, sampler.end_key = KEY, END
    return ReplayBuffer(st.max_size + extra_rows, sampler=sampler, storage=st._backing, path=st._path)

def check_config(st: Any, saved: Any) -> int:
    """Refuses a saved state of a storage made with other settings; returns the extra rows the state has (this
    storage's, or, where its default is not fixed yet, the default for the saved rows' bytes)."""
    where = "TrajviewStorage state"
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where}: 'meta' must be a dict")
    if type(saved.get("max_size")) is not int or saved.get("max_size") != st.max_size:
        raise ValueError(f"{where}: max_size is {saved.get('max_size')!r}, this storage's is {st.max_size}")
    want = st.extra_rows
    if st.extra_rows_given is None and st._rb is None:  # the default, for the rows the state holds
        try:
            stored = {str(n): (np.dtype(str(dt)), tuple(int(d) for d in shape)) for n, _, dt, shape in saved["schema"]}
            next_cols = {str(n) for n in dict(saved["shared"]).values()}
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"{where}: malformed meta ({type(e).__name__}: {e})") from None
        specs = {n: v for n, v in stored.items() if n not in next_cols}
        want = default_extra_rows(st.max_size, stored_row_bytes(specs) if specs else None)
    if saved.get("extra_rows") != want:
        raise ValueError(f"{where}: extra_rows is {saved.get('extra_rows')!r}, this storage's is {want}")
    if sorted(saved.get("views", [])) != sorted(st._views):
        raise ValueError(f"{where}: views {saved.get('views')!r} differ from this storage's {sorted(st._views)}")
    return want

class _State:
    """A saved state (``meta`` passed `check_config`), checked whole against the storage ``st`` before anything of
    it goes in: its metadata here, its arrays (`take_arrays` / `read_arrays`), its slots against the store's rows
    (`check_rows`, given the buffer holding the loaded rows before they are swapped in); then `apply`. Every
    refusal is a `ValueError` naming the entry."""

    WHERE = "TrajviewStorage state"

    def __init__(self, st: Any, meta: Mapping[str, Any]) -> None:
        where = self.WHERE
        self.st = st
        length = meta.get("len")
        if type(length) is not int or not 0 <= length <= st.max_size:
            raise ValueError(f"{where}: len must be an int in [0, {st.max_size}], got {length!r}")
        self.length = length
        schema: dict[str, tuple[Key, np.dtype, tuple[int, ...]]] = {}
        try:
            for name, key, dt, shape in meta["schema"]:
                entry = (tuple(str(p) for p in key), np.dtype(str(dt)), tuple(int(d) for d in shape))
                if str(name) in schema:
                    raise ValueError(f"schema: {name!r} twice")
                schema[str(name)] = entry
            shared = {str(o): str(n) for o, n in dict(meta["shared"]).items()}
            self.open = {int(e[0]): [int(e[1]), int(e[2]), int(e[3])] for e in meta["open"]}
            self.next_ikey, self.fallback = int(meta["next_ikey"]), int(meta["fallback"])
            last_cursor = meta["last_cursor"]
            self.last_cursor = None if last_cursor is None else int(last_cursor)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as e:
            raise ValueError(f"{where}: malformed meta ({type(e).__name__}: {e})") from None
        ikeys = [v[0] for v in self.open.values()]
        if self.next_ikey < 0 or self.fallback < 0 or any(not 0 <= k < self.next_ikey for k in ikeys):
            raise ValueError(f"{where}: next_ikey {self.next_ikey} must be >= 0 and above every open trajectory's "
                             f"store key {sorted(ikeys)}; fallback {self.fallback} >= 0")
        if len(set(ikeys)) != len(ikeys) or any(v[1] < 1 for v in self.open.values()):
            raise ValueError(f"{where}: open trajectories must have store keys of their own and at least one step")
        if self.last_cursor is not None and not -1 <= self.last_cursor < st.max_size:
            raise ValueError(f"{where}: last_cursor must be None or an int in [-1, {st.max_size}), got "
                             f"{self.last_cursor}")
        for name, (key, dt, shape) in schema.items():
            try:
                flat = flat_key(key) if key else None
            except ValueError as e:
                raise ValueError(f"{where}: schema entry {name!r}: {e}") from None
            if flat != name:  # (the one name a key is stored under: a swapped pair would read one as the other)
                raise ValueError(f"{where}: schema entry {name!r} is for key {key!r}, whose column is {flat!r}")
            check_specs({name: (dt, shape)}, "the state is not one a TrajviewStorage writes")
        for o, n in shared.items():
            if o not in schema or n != flat_key(("next", *schema[o][0])) or n not in schema or schema[o][1:] != schema[n][1:]:
                raise ValueError(f"{where}: shared {o!r} -> {n!r} is not an entry and its ('next', ...) entry of one "
                                 f"dtype and shape")
        self.schema, self.shared = schema, shared
        self.arrays: dict[str, np.ndarray] = {}

    def take_arrays(self, saved: Mapping[str, Any]) -> None:
        """The state's arrays from a state dict (checked by kind and shape)."""
        n = self.st.max_size
        for name in ("slot_row", "slot_first"):
            a = saved.get(name)
            if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.shape != (n,):
                got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"{self.WHERE}: {name} must be int64 of shape ({n},), got {got}")
            self.arrays[name] = a.copy()
        pk = saved.get("pending_keys", np.zeros(0, np.int64))
        if not isinstance(pk, np.ndarray) or pk.dtype != np.int64 or pk.ndim != 1:
            raise ValueError(f"{self.WHERE}: pending_keys must be a 1-D int64 array")
        self.arrays["pending_keys"] = pk.copy()
        for o in self.shared:
            if not len(pk):
                continue
            a = saved.get(f"pending.{o}")
            _, dt, shape = self.schema[o]
            if not isinstance(a, np.ndarray) or a.dtype != dt or a.shape != (len(pk), *shape):
                raise ValueError(f"{self.WHERE}: pending.{o} must be {dt} of shape {(len(pk), *shape)}")
            self.arrays[f"pending.{o}"] = a.copy()

    def read_arrays(self, man: _io.Manifest) -> None:
        """The state's arrays from a dump's ``.npy`` files: each one's size, crc32 and header checked against the
        dtype and shape the state gives it before its rows are read (`trajview.errors.FileIntegrityError` naming
        the file): no header decides what is allocated."""
        src = persistence.FileArrays(man, "torchrl.")
        n = self.st.max_size
        self.arrays = {name: src.read(name, np.dtype(np.int64), (n,)).copy() for name in ("slot_row", "slot_first")}
        k = src.rows("pending_keys", np.dtype(np.int64), ()) if "torchrl.pending_keys.npy" in man.files else 0
        self.arrays["pending_keys"] = src.read("pending_keys", np.dtype(np.int64), (k,)).copy() if k else \
            np.zeros(0, np.int64)
        for o in self.shared:
            if k:
                _, dt, shape = self.schema[o]
                self.arrays[f"pending.{o}"] = src.read(f"pending.{o}", dt, (k, *shape)).copy()

    def check_rows(self, rb: ReplayBuffer | None) -> None:
        """The slots against the store: ``rb`` (the buffer holding the loaded rows, before they are swapped in; None
        for a state without a store) must have the schema's columns, and every held slot's row and its
        trajectory's first row must hold steps of one trajectory, no row held by two slots."""
        where = self.WHERE
        if (rb is None) != (not self.schema):
            raise ValueError(f"{where}: the store's rows and the schema do not go together")
        rows, first = self.arrays["slot_row"], self.arrays["slot_first"]
        pk = self.arrays["pending_keys"]
        if len(np.unique(pk)) != len(pk) or not set(pk.tolist()) <= {v[0] for v in self.open.values()}:
            raise ValueError(f"{where}: pending_keys must name open trajectories' store keys, each once")
        held = rows >= 0
        if held[self.length:].any():
            raise ValueError(f"{where}: a slot at or past len {self.length} holds a step")
        if rb is None:
            if held.any() or self.open:
                raise ValueError(f"{where}: slots hold steps or trajectories are open, but the state has no store")
            return
        specs = {name: (dt, shape) for name, (_, dt, shape) in self.schema.items() if name not in self.shared.values()}
        got = {name: (np.dtype(dt), tuple(shape)) for name, (dt, shape) in (rb._specs or {}).items()}
        if got != specs or dict(rb._next_obs) != self.shared:
            raise ValueError(f"{where}: the store's columns {sorted(got)} (next observations {dict(rb._next_obs)}) "
                             f"differ from the schema's {sorted(specs)} ({self.shared})")
        assert rb._impl is not None
        if self.open:  # each open trajectory's first row: step 0 of a trajectory in the store
            firsts = np.asarray([v[2] for v in self.open.values()], np.int64)
            oloc = np.asarray(rb._impl.locate(np.ascontiguousarray(firsts)), np.int64).reshape(-1, 3)
            if (oloc[:, 0] < 0).any() or (oloc[:, 1] != 0).any():
                raise ValueError(f"{where}: an open trajectory's first row is not the first step of a trajectory in "
                                 f"the store")
        if not held.any():
            return
        r, f = rows[held], first[held]
        if len(np.unique(r)) != len(r):
            raise ValueError(f"{where}: slot_row names a row for two slots")
        if (f < 0).any() or (f > r).any():
            raise ValueError(f"{where}: slot_first must be a row at or before each held slot's row")
        loc = np.asarray(rb._impl.locate(np.ascontiguousarray(r)), np.int64).reshape(-1, 3)
        if (loc[:, 0] < 0).any():
            raise ValueError(f"{where}: slot_row names rows that hold no step in the store")
        floc = np.asarray(rb._impl.locate(np.ascontiguousarray(f)), np.int64).reshape(-1, 3)
        if (floc[:, 0] != loc[:, 0]).any() or (floc[:, 1] != 0).any():
            raise ValueError(f"{where}: slot_first must name the first step of each held slot's trajectory")

    def apply(self, rb: ReplayBuffer | None, extra: int) -> None:
        """Swaps the checked state in (``rb``: the buffer holding its rows, already loaded)."""
        st = self.st
        pk = self.arrays["pending_keys"].tolist()
        pending: dict[int, dict[str, np.ndarray]] = {int(k): {} for k in pk}
        for o in self.shared:
            for i, k in enumerate(pk):
                pending[int(k)][o] = self.arrays[f"pending.{o}"][i].copy()
        old = st._rb
        st._rb, st._schema, st._shared, st.extra_rows = rb, self.schema, self.shared, extra
        st._slot_row, st._slot_first = self.arrays["slot_row"], self.arrays["slot_first"]
        st._len, st._open, st._pending = self.length, self.open, pending
        st._next_ikey, st._fallback = self.next_ikey, self.fallback
        st._set_last_cursor(self.last_cursor)
        if old is not None and old is not rb:
            old.close()


def _npy(arr: np.ndarray) -> Any:
    arr = np.ascontiguousarray(arr)
    return persistence.npy_writer(arr.dtype, arr.shape, arr)  # (the header `FileArrays` reads back)
