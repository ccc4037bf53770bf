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

import io
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from .. import _io
from ..replay import ReplayBuffer, Sampler, persistence

FORMAT = "trajview.torchrl-storage"
VERSION = 1
#: Internal columns handed to the store with each write (never stored): the store key and end flag of each step.
KEY, END = "__tv_key", "__tv_end"

Key = tuple[str, ...]


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
    extra = check_config(st, state_dict["meta"])
    rb = None
    replay = state_dict["replay"]
    if replay is not None:
        if not isinstance(replay, Mapping) or not isinstance(replay.get("arrays"), Mapping):
            raise ValueError("TrajviewStorage state: 'replay' must be a dict with an 'arrays' dict")
        rb = fresh_buffer(st, extra)
        rb.load_state_dict({**replay, "arrays": _arrays(replay["arrays"])})
    saved = state_dict["arrays"]
    if not isinstance(saved, Mapping):
        raise ValueError(f"TrajviewStorage state: 'arrays' must be a dict, got {type(saved).__name__}")
    restore(st, state_dict["meta"], _arrays(saved), rb, extra)


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
    saved = man.meta.get("torchrl")
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: the manifest holds no TrajviewStorage state")
    extra = check_config(st, saved)
    read: dict[str, np.ndarray] = {}
    for name in man.files:
        if name.startswith("torchrl.") and name.endswith(".npy"):
            raw = _io.read_verified(man, name)
            read[name[len("torchrl."):-len(".npy")]] = np.load(io.BytesIO(bytes(raw)), allow_pickle=False)
    rb = None
    if "replay" in man.meta:
        rb = fresh_buffer(st, extra)
        persistence.load_parts(rb, man, man.meta["replay"])
    restore(st, saved, read, rb, extra)
    st._bump_mutation_revision()

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
    if saved.get("max_size") != st.max_size:
        raise ValueError(f"{where}: max_size is {saved.get('max_size')!r}, this storage's is {st.max_size}")
    want = st.extra_rows
    if st.extra_rows_given is None and st._rb is None:  # the default, for the rows the state holds
        try:
            stored = {str(n): (np.dtype(str(dt)), tuple(int(d) for d in shape)) for n, _, dt, shape in saved["schema"]}
            next_cols = {str(n) for n in dict(saved["shared"]).values()}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: malformed meta ({type(e).__name__}: {e})") from None
        specs = {n: v for n, v in stored.items() if n not in next_cols}
        want = default_extra_rows(st.max_size, stored_row_bytes(specs) if specs else None)
    if saved.get("extra_rows") != want:
        raise ValueError(f"{where}: extra_rows is {saved.get('extra_rows')!r}, this storage's is {want}")
    if sorted(saved.get("views", [])) != sorted(st._views):
        raise ValueError(f"{where}: views {saved.get('views')!r} differ from this storage's {sorted(st._views)}")
    return want

def restore(st: Any, meta: Any, saved: Mapping[str, Any], rb: ReplayBuffer | None, extra: int) -> None:
    """Checks a saved state against this storage and swaps it in (nothing changes if it is refused); ``meta``
    passed `check_config`, which gave ``extra`` (its extra rows)."""
    where = "TrajviewStorage state"
    length = meta.get("len")
    if type(length) is not int or not 0 <= length <= st.max_size:
        raise ValueError(f"{where}: len must be an int in [0, {st.max_size}], got {length!r}")
    schema: dict[str, tuple[Key, np.dtype, tuple[int, ...]]] = {}
    try:
        for name, key, dt, shape in meta["schema"]:
            schema[str(name)] = (tuple(str(p) for p in key), np.dtype(str(dt)), tuple(int(d) for d in shape))
        shared = {str(o): str(n) for o, n in dict(meta["shared"]).items()}
        open_ = {int(e[0]): [int(e[1]), int(e[2]), int(e[3])] for e in meta["open"]}
        next_ikey, fallback = int(meta["next_ikey"]), int(meta["fallback"])
        last_cursor = meta["last_cursor"]
        if last_cursor is not None:
            last_cursor = int(last_cursor)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: malformed meta ({type(e).__name__}: {e})") from None
    if (rb is None) != (not schema):
        raise ValueError(f"{where}: the store's rows and the schema do not go together")
    checked: dict[str, np.ndarray] = {}
    for name in ("slot_row", "slot_first"):
        a = np.asarray(saved.get(name))
        if a.dtype != np.int64 or a.shape != (st.max_size,):
            raise ValueError(f"{where}: {name} must be int64 of shape ({st.max_size},), got {a.dtype} {a.shape}")
        checked[name] = a.copy()
    pk = np.asarray(saved.get("pending_keys", np.zeros(0, np.int64)))
    if pk.dtype != np.int64 or pk.ndim != 1:
        raise ValueError(f"{where}: pending_keys must be a 1-D int64 array")
    pending: dict[int, dict[str, np.ndarray]] = {int(k): {} for k in pk.tolist()}
    for o in shared:
        if len(pk) == 0:
            continue
        a = np.asarray(saved.get(f"pending.{o}"))
        _, dt, shape = schema[o]
        if a.dtype != dt or a.shape != (len(pk), *shape):
            raise ValueError(f"{where}: pending.{o} must be {dt} of shape {(len(pk), *shape)}")
        for i, k in enumerate(pk.tolist()):
            pending[int(k)][o] = a[i].copy()
    rows = checked["slot_row"]
    held = rows >= 0
    if held[length:].any():
        raise ValueError(f"{where}: a slot at or past len {length} holds a step")
    if rb is not None and held.any():
        assert rb._impl is not None
        loc = np.asarray(rb._impl.locate(np.ascontiguousarray(rows[held])), np.int64).reshape(-1, 3)
        if (loc[:, 0] < 0).any():
            raise ValueError(f"{where}: slot_row names rows that hold no step in the store")
    old = st._rb
    st._rb, st._schema, st._shared, st.extra_rows = rb, schema, shared, extra
    st._slot_row, st._slot_first = rows, checked["slot_first"]
    st._len, st._open, st._pending = length, open_, pending
    st._next_ikey, st._fallback = next_ikey, fallback
    st._set_last_cursor(last_cursor)
    if old is not None and old is not rb:
        old.close()


def _npy(arr: np.ndarray) -> Any:
    def write(f: IO[bytes]) -> None:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
    return write
