"""`TrajviewStorage`: a TorchRL storage (``torchrl.data.replay_buffers.Storage``) over trajview's C++ replay store.

TorchRL's replay buffer composes a storage, a sampler and a writer; the writer puts each step in a *slot*
``0 .. max_size - 1`` (``storage.set(cursor, data)``), the sampler picks slots (reading ``len(storage)``,
``storage[:]`` for trajectory ids and end flags, the write cursor), and ``storage.get(index)`` builds the
batch. This storage keeps TorchRL's slots as a map onto the rows of a trajview `ReplayBuffer` (the C++ store):

- every step is appended to the C++ store, whose trajectories follow the data's trajectory ids
  (``("collector", "traj_ids")``, else ``"episode"``) and end flags (``("next", "done")``, else
  ``("next", "terminated") | ("next", "truncated")``); slot ``i`` remembers its step's row;
- ``("next", k)`` of a root key ``k`` (an observation) is not stored: it is ``k`` read at ``+1`` in the
  trajectory, with each trajectory piece's final observation in one extra row (the store's rule), so a step's
  observation is stored once. A write whose ``("next", k)`` differs from the next step's ``k`` is refused;
- ``views`` (``tv.ViewRequirement`` s, e.g. a frame stack ``observation@-3:0``) are built by the C++ store at
  ``get`` time from the one stored copy, never stored;
- ``get`` gathers the slots' rows (consecutive steps of one trajectory as one slice) without the GIL.

The C++ store holds ``max_size + extra_rows`` rows: the final-observation rows and the rows of the oldest
slots' trajectories. A trajectory is stored in pieces that each span at most ``cut_len = extra_rows // 2`` rows
of the store (``cut_len`` steps of one env written alone; fewer where writes interleave several envs' steps);
views do not read across such a cut, as before an episode start. So every step a slot holds stays in the store;
a write that would overwrite a step some slot still holds (too small ``extra_rows`` for the data) is refused and
changes nothing.

Rows beyond the steps: a *segment* is the steps of one trajectory piece within one write (a write of ``N``
envs' steps holds about ``N`` segments, plus one per episode that ends in it and one per cut), and each segment
takes one final-observation row. Writes (in TorchRL's round-robin slot order) are never refused while any
``max_size`` consecutive steps start at most ``extra_rows - cut_len`` segments (`fits_segments`: the oldest held
step's piece starts less than ``cut_len`` rows before it). The default ``extra_rows`` is `default_extra_rows`,
fixed at the first write from the bytes of a stored row: ``max(max_size // 25, 40 * isqrt(max_size), 256)``,
or more where rows are small: as many as 64 MiB hold (`SMALL_ROWS_BYTES`), up to ``max_size``. Frames: 1.04
rows per step at 1M Atari-sized steps or more (40,000 extra rows at 1M: room for 20,000 segments per million
steps, e.g. episodes of 100 steps or more written in collector batches of 1000 steps from 8 envs). Small rows
(vectors such as CartPole's: about 1M extra rows at 1M steps, 64 MiB) leave room for episodes of a few steps.
Writing one step at a time costs two rows per step (a segment each): write batches, or raise ``extra_rows``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data.replay_buffers.storages import Storage, TensorStorage

from .. import _core
from .._validate import positive_int
from ..replay import ReplayBuffer, Sampler
from ..replay.schema import check_specs
from ..views import ViewRequirement
from ..views.nest import SEP
from . import storage_state
from .storage_state import END as _END, KEY as _KEY, SMALL_ROWS_BYTES, Key, default_extra_rows, stored_row_bytes
from .storage_state import flat_key as _flat

__all__ = ["SMALL_ROWS_BYTES", "TrajviewStorage", "default_extra_rows", "fits_segments", "stored_row_bytes"]

#: Candidate trajectory-id keys, as TorchRL's SliceSampler looks for them.
TRAJ_KEYS: tuple[tuple[str, ...], ...] = (("collector", "traj_ids"), ("episode",))
#: End flags: ``("next", "done")``, else the OR of these.
DONE_KEY = ("next", "done")
END_KEYS = (("next", "terminated"), ("next", "truncated"))
#: Root keys that are never read as observations under ``"next"`` (flags and rewards differ between steps; value
#: estimates are computed per row and need not match the next row's bit for bit).
NOT_OBS = ("done", "terminated", "truncated", "reward", "state_value", "state_action_value", "advantage",
           "value_target")


def fits_segments(max_size: int, extra_rows: int) -> int:
    """The most segments (the steps of one trajectory piece within one write) that any ``max_size`` consecutive
    steps may start for a storage's writes never to be refused: from the oldest held step's piece start (less
    than ``cut_len`` rows before it) to the newest step, each step takes a row and each segment one more."""
    return extra_rows - max(extra_rows // 2, 1)


def _key(k: Any) -> Key:
    return (k,) if isinstance(k, str) else tuple(k)


def _numpy(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def _index(index: Any, length: int) -> tuple[np.ndarray, bool]:
    """A TorchRL storage index as int64 slots (negative ones wrapped by ``length``), and whether it was one int."""
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        idx = np.asarray([int(index)], np.int64)
        scalar = True
    elif isinstance(index, slice):
        idx = np.arange(length, dtype=np.int64)[index]
        scalar = False
    elif isinstance(index, range):
        idx = np.asarray(index, np.int64)
        scalar = False
    else:
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        arr = _numpy(index)
        if arr.dtype == bool:
            arr = np.flatnonzero(arr.reshape(-1))
        if arr.ndim == 0:
            return _index(int(arr), length)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"TrajviewStorage: an index must hold ints, got dtype {arr.dtype}")
        idx = arr.astype(np.int64).reshape(-1)
        scalar = False
    idx = np.where(idx < 0, idx + length, idx)
    return idx, scalar


class _Writer:
    """What one `TrajviewStorage.set` will do, computed before anything changes (then `TrajviewStorage._commit`)."""

    def __init__(self, rows: np.ndarray, first: np.ndarray, open_: dict[int, list[int]],
                 pending: dict[int, dict[str, np.ndarray]], next_ikey: int, fallback: int,
                 data: dict[str, np.ndarray]) -> None:
        self.rows, self.first, self.open, self.pending = rows, first, open_, pending
        self.next_ikey, self.fallback, self.data = next_ikey, fallback, data


class TrajviewStorage(TensorStorage):  # type: ignore[misc]
    """A TorchRL storage of ``max_size`` steps over trajview's C++ replay store.

    Use it as any TorchRL storage: ``TensorDictReplayBuffer(storage=TrajviewStorage(100_000,
    views={"stack": tv.ViewRequirement("observation", shift="-3:0")}), sampler=SliceSampler(num_slices=8))``.

    Args:
        max_size: TorchRL's storage size, in steps (slots).
        views: ``{name: tv.ViewRequirement}`` built into every batch ``get`` returns (a nested key's name is
            its parts joined with ``"."``: ``"next.pixels"``); read from the stored columns, never stored.
        next_keys: the root keys whose ``("next", key)`` is read from the store as the key at ``+1`` (stored
            once). ``None`` (default): every root key that also sits under ``"next"`` with the same dtype and
            shape (except done flags and rewards) for which the first write holds the rule (``("next", key)``
            of each step is ``key`` of the step after it in its trajectory). ``()``: store every ``"next"``
            entry as it is.
        extra_rows: rows of the C++ store beyond ``max_size``, for final observations and long trajectories.
            Default `default_extra_rows`, fixed at the first write: ``max(max_size // 25, 40 * isqrt(max_size),
            256)`` (1.04 rows per step at 1M steps), or as many rows as 64 MiB hold where rows are small (up to
            ``max_size``); writes are never refused while any ``max_size`` consecutive steps start at most
            `fits_segments` ``= extra_rows - cut_len`` segments (one per trajectory piece per write); see the
            module's doc.
        storage: ``"memory"`` or ``"memmap"`` (rows in files under ``path``), as `trajview.ReplayBuffer`.
        path: the folder of ``storage="memmap"``.
    """

    def __init__(
        self,
        max_size: int,
        views: Mapping[Any, ViewRequirement] | None = None,
        *,
        next_keys: Iterable[Any] | None = None,
        extra_rows: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        max_size = positive_int("max_size", max_size)
        # A TensorStorage to TorchRL (its replay buffers pick their collate function and fast paths by type), with
        # none of its tensors: Storage's own setup, then what TorchRL reads of a TensorStorage.
        Storage.__init__(self, max_size)
        self.ndim = 1
        self.device = torch.device("cpu")
        self._storage = None
        self._last_cursor = None
        self.__dict__["_storage_keys"] = None
        #: ``extra_rows`` as given (None: `default_extra_rows`, fixed at the first write from the row's bytes).
        self.extra_rows_given = None if extra_rows is None else positive_int("extra_rows", extra_rows)
        if self.extra_rows_given is not None and self.extra_rows_given < 2:
            raise ValueError(f"extra_rows must be >= 2, got {self.extra_rows_given}")
        self.extra_rows: int = default_extra_rows(max_size) if self.extra_rows_given is None else self.extra_rows_given
        self._views: dict[str, ViewRequirement] = {}
        for name, vr in (views or {}).items():
            if not isinstance(vr, ViewRequirement):
                raise TypeError(f"views[{name!r}] must be a tv.ViewRequirement, got {type(vr).__name__}")
            self._views[_flat(_key(name))] = vr
        self._next_keys = None if next_keys is None else [_key(k) for k in next_keys]
        self._backing = storage
        self._path = path
        if storage not in ("memory", "memmap"):
            raise ValueError(f"storage must be 'memory' or 'memmap', got {storage!r}")
        self._reset()

    # -- state ---------------------------------------------------------------------------------------------

    def _reset(self) -> None:
        if self.extra_rows_given is None:  # fixed again at the next first write
            self.extra_rows = default_extra_rows(self.max_size)
        self._columns_only = False
        self._rb: ReplayBuffer | None = None
        #: The TensorDict leaves: flat name -> (nested key, dtype, per-step shape); ``"next"`` ones included.
        self._schema: dict[str, tuple[Key, np.dtype, tuple[int, ...]]] = {}
        #: Shared observation columns: root flat name -> its ``"next"`` flat name (read at +1, not stored).
        self._shared: dict[str, str] = {}
        self._slot_row = np.full(self.max_size, -1, np.int64)  # each slot's absolute row in the store
        self._slot_first = np.full(self.max_size, -1, np.int64)  # the first row of its store trajectory
        self._len = 0
        #: Open store trajectories, by the data's trajectory key: [store key, steps, first row].
        self._open: dict[int, list[int]] = {}
        #: Last next observation of each open store trajectory (checked against the step that continues it).
        self._pending: dict[int, dict[str, np.ndarray]] = {}
        self._next_ikey = 0
        self._fallback = 0  # the data's trajectory key where it has no ids (counts end flags)

    @property
    def rows(self) -> int:
        """Rows of the C++ store (``max_size + extra_rows``)."""
        return self.max_size + self.extra_rows

    @property
    def cut_len(self) -> int:
        """The most rows of the store one trajectory piece spans (views read across a piece's steps, not across
        pieces)."""
        return max(self.extra_rows // 2, 1)

    supports_conditional_update = False

    @property
    def _total_shape(self) -> torch.Size:
        return torch.Size([self.max_size])

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self._len])

    def flatten(self) -> TrajviewStorage:
        return self

    def _init(self) -> None:
        pass

    @property
    def initialized(self) -> bool:
        return self._rb is not None

    @initialized.setter
    def initialized(self, value: bool) -> None:
        pass

    def __len__(self) -> int:
        return self._len

    def _empty(self) -> None:
        if self._rb is not None:
            self._rb.close()
        self._reset()

    def contains(self, item: Any) -> bool:
        if isinstance(item, (int, np.integer)):
            i = int(item) + (self._len if item < 0 else 0)
            return 0 <= i < self._len and bool(self._slot_row[i] >= 0)
        idx, _ = _index(item, self._len)
        return bool(((idx >= 0) & (idx < self._len)).all() and (self._slot_row[np.clip(idx, 0, self.max_size - 1)] >= 0).all())

    @property
    def replay_buffer(self) -> ReplayBuffer | None:
        """The trajview `ReplayBuffer` holding the rows (``None`` before the first write)."""
        return self._rb

    # -- schema --------------------------------------------------------------------------------------------

    def _infer(self, td: TensorDictBase) -> None:
        schema: dict[str, tuple[Key, np.dtype, tuple[int, ...]]] = {}
        for k in td.keys(include_nested=True, leaves_only=True):
            key = _key(k)
            v = td.get(key)
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"TrajviewStorage: entry {key!r} is a {type(v).__name__}; only tensors are stored")
            try:
                dt = np.dtype(str(v.dtype).removeprefix("torch."))
            except TypeError:  # (bfloat16, quantized and other dtypes numpy lacks)
                raise ValueError(f"TrajviewStorage: entry {key!r}: dtype {v.dtype} has no numpy dtype; trajview stores "
                                 f"bool, int and float entries: convert it (e.g. .float()) or leave it out of the "
                                 f"data") from None
            check_specs({repr(key): (dt, tuple(v.shape[1:]))}, "convert it or leave it out of the data")
            schema[_flat(key)] = (key, dt, tuple(v.shape[1:]))
        auto = self._next_keys is None
        if auto:
            cands = [s[0] for s in schema.values() if s[0][0] not in ("next", "collector") and s[0][-1] not in NOT_OBS]
            cols = {name: _numpy(td.get(key)) for name, (key, _, _) in schema.items()}
            ukeys, done, _ = self._trajectories(cols, td.batch_size[0])
            starts = _core.trajectory_pieces(ukeys, done.view(np.uint8))
            ends = np.r_[starts[1:], len(ukeys)]
        else:
            cands = list(self._next_keys or [])
        shared: dict[str, str] = {}
        for key in cands:
            o, n = _flat(key), _flat(("next", *key))
            if o in schema and n in schema and schema[o][1:] == schema[n][1:]:
                # By default, only where the first write holds the rule (a network's outputs, such as a value
                # computed on each observation, need not be equal bit for bit: they are stored as they come).
                if auto and not all(_same(cols[n][a:b - 1], cols[o][a + 1:b]).all() for a, b in zip(starts, ends)):
                    continue
                shared[o] = n
            elif self._next_keys is not None:
                raise ValueError(f"next_keys: {key!r} and ('next', {', '.join(map(repr, key))}) must both be in the "
                                 f"data with one dtype and shape; got {schema.get(o, (None,) * 3)[1:]} and "
                                 f"{schema.get(n, (None,) * 3)[1:]}")
        specs = {name: (dt, shape) for name, (_, dt, shape) in schema.items() if name not in shared.values()}
        views = {n: ViewRequirement(o, shift=1) for o, n in shared.items()}
        for name, vr in self._views.items():
            if name in schema:
                raise ValueError(f"views[{name!r}]: the data has an entry of that name; give the view another name")
            views[name] = vr
        sampler = Sampler()
        sampler.traj_key, sampler.end_key = _KEY, _END
        kw: dict[str, Any] = {"storage": self._backing, "path": self._path}
        extra = self.extra_rows_given
        extra = default_extra_rows(self.max_size, stored_row_bytes(specs)) if extra is None else extra
        rb = ReplayBuffer(self.max_size + extra, sampler=sampler, columns=specs, views=views, next_obs=shared, **kw)
        self._rb, self._schema, self._shared, self.extra_rows = rb, schema, shared, extra

    # -- writing -------------------------------------------------------------------------------------------

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        try:
            self._set(cursor, data, set_cursor)
        except (ValueError, TypeError, IndexError):
            _undo_writer_advance(self, sys._getframe(1))
            raise

    def _set(self, cursor: Any, data: Any, set_cursor: bool) -> None:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"TrajviewStorage stores TensorDicts (TensorDictReplayBuffer, or ReplayBuffer.extend of a "
                            f"TensorDict), got {type(data).__name__}")
        slots, scalar = _index(cursor, self.max_size)
        if scalar:
            data = data.unsqueeze(0)
        given = tuple(data.batch_size)
        if data.batch_dims != 1:
            data = data.reshape(-1)
        if data.batch_size[0] != len(slots):
            more = (f" (the data's batch size {list(given)}: a TrajviewStorage slot holds one step, so a write takes "
                    f"a TensorDict of batch size [n], one slot per step; reshape(-1) a batch of several dims)"
                    if len(given) > 1 else "")
            raise ValueError(f"TrajviewStorage.set: {len(slots)} slots for {data.batch_size[0]} steps{more}")
        if len(slots) > self.max_size:  # as TorchRL's storages: the last max_size steps (the others are overwritten)
            slots, data = slots[-self.max_size:], data[-self.max_size:]
        n = len(slots)
        if ((slots < 0) | (slots >= self.max_size)).any():
            raise IndexError(f"TrajviewStorage.set: slots must be in [0, {self.max_size}), got {slots.tolist()[:8]}...")
        if len(np.unique(slots)) != n:
            raise ValueError("TrajviewStorage.set: a slot is written twice in one call")
        if n == 0:
            return
        if self._rb is None:
            self._infer(data)
        plan = self._plan(slots, data)
        assert self._rb is not None
        self._rb.add(plan.data)
        self._commit(slots, plan)
        if set_cursor:
            self._set_last_cursor(torch.from_numpy(slots))
            self._len = min(self._len + n, self.max_size)
        self._bump_mutation_revision()

    def _columns(self, data: TensorDictBase, n: int) -> dict[str, np.ndarray]:
        cols: dict[str, np.ndarray] = {}
        keys = {_flat(_key(k)) for k in data.keys(include_nested=True, leaves_only=True)}
        if keys != set(self._schema):
            raise ValueError(f"TrajviewStorage.set: the data's entries {sorted(keys)} differ from the stored ones "
                             f"{sorted(self._schema)}")
        for name, (key, dt, shape) in self._schema.items():
            arr = _numpy(data.get(key))
            if arr.dtype != dt or tuple(arr.shape[1:]) != shape:
                raise ValueError(f"TrajviewStorage.set: entry {key!r}: expected dtype {dt} and per-step shape {shape}, "
                                 f"got {arr.dtype} and {tuple(arr.shape[1:])}")
            cols[name] = arr
        return cols

    def _trajectories(self, cols: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """The data's trajectory key and end flag of each step, and whether the keys are the data's own."""
        done = np.zeros(n, bool)
        flags = [DONE_KEY] if _flat(DONE_KEY) in cols else [k for k in END_KEYS if _flat(k) in cols]
        for k in flags:
            done |= cols[_flat(k)].reshape(n, -1).astype(bool).any(axis=1)
        for tk in TRAJ_KEYS:
            if _flat(tk) in cols:
                ids = cols[_flat(tk)].reshape(n, -1)
                if ids.shape[1] != 1 or ids.dtype.kind not in "iu":
                    raise ValueError(f"TrajviewStorage.set: trajectory ids {tk!r} must be one int per step, got dtype "
                                     f"{ids.dtype} and per-step shape {ids.shape[1:]}")
                return ids[:, 0].astype(np.int64), done, True
        return self._fallback + (np.cumsum(done) - done).astype(np.int64), done, False

    def _plan(self, slots: np.ndarray, data: TensorDictBase) -> _Writer:
        """Where each step goes in the store, checked (nothing changes here)."""
        assert self._rb is not None
        n = len(slots)
        cols = self._columns(data, n)
        ukeys, done, own = self._trajectories(cols, n)
        has_next = bool(self._shared)
        upieces = _core.trajectory_pieces(ukeys, done.view(np.uint8))
        ends = np.r_[upieces[1:], n]
        head0 = self._rb.rows_written()
        cut = self.cut_len
        row = head0
        open_ = {k: list(v) for k, v in self._open.items()}
        ikeys = np.empty(n, np.int64)
        next_ikey = self._next_ikey
        first_of: dict[int, int] = {}  # store key -> first row, for the keys this write continues
        pending = {k: dict(v) for k, v in self._pending.items()}
        for s, e in zip(upieces.tolist(), ends.tolist()):
            uk = int(ukeys[s])
            cur = open_.get(uk)
            if cur is not None and not self._follows(pending.get(cur[0]), cols, s):
                pending.pop(cur[0], None)
                cur = None  # not what the stored steps lead to (the same data written again): its own trajectory
            for o, nx in self._shared.items():
                ok = _same(cols[nx][s:e - 1], cols[o][s + 1:e])
                if not ok.all():
                    j = s + int(np.flatnonzero(~ok)[0])
                    raise self._next_error(nx, o, j, j + 1)
            at = s
            while at < e:  # one segment (one final-observation row) per turn; ``row``: the row of step ``at``
                if cur is None or row - cur[2] >= cut:  # a piece spans at most cut_len rows of the store
                    if cur is not None:
                        pending.pop(cur[0], None)
                    cur = [next_ikey, 0, row]
                    next_ikey += 1
                take = min(e - at, cut - (row - cur[2]))
                ikeys[at:at + take] = cur[0]
                first_of[cur[0]] = cur[2]
                cur[1] += take
                at += take
                row += take + int(has_next)
            assert cur is not None
            if done[e - 1]:
                open_.pop(uk, None)
                pending.pop(cur[0], None)
            else:
                open_[uk] = cur
                pending[cur[0]] = {o: cols[nx][e - 1].copy() for o, nx in self._shared.items()}
        pieces = _core.trajectory_pieces(ikeys, done.view(np.uint8))
        piece_of = np.zeros(n, np.int64)
        piece_of[pieces[1:]] = 1
        piece_of = np.cumsum(piece_of)
        rows = head0 + np.arange(n, dtype=np.int64) + piece_of * int(has_next)
        head1 = head0 + n + len(pieces) * int(has_next)
        if head1 - head0 > self.rows:
            raise ValueError(f"TrajviewStorage.set: {n} steps take {head1 - head0} rows, more than the store's "
                             f"{self.rows}; raise extra_rows")
        first = np.empty(n, np.int64)
        for p, s in enumerate(pieces.tolist()):
            e = int(pieces[p + 1]) if p + 1 < len(pieces) else n
            k = int(ikeys[s])
            first_of.setdefault(k, int(rows[s]))
            first[s:e] = first_of[k]
        if head1 != row:  # never: the pieces are the segments counted above
            raise RuntimeError("TrajviewStorage: rows planned twice differ (a bug: please report it)")
        # Every step a slot still holds after this write must stay in the store.
        kept = self._slot_row >= 0
        kept[slots] = False
        if kept.any():
            oldest = int(self._slot_first[kept].min())
            if oldest < head1 - self.rows:
                raise ValueError(
                    f"TrajviewStorage.set: this write of {n} steps would overwrite steps that slots still hold (the "
                    f"store has {self.rows} rows: max_size {self.max_size} + extra_rows {self.extra_rows}); raise "
                    f"extra_rows (final-observation rows and long trajectories need them: writes fit while any "
                    f"{self.max_size} consecutive steps start at most extra_rows - extra_rows // 2 = "
                    f"{fits_segments(self.max_size, self.extra_rows)} segments, one per trajectory piece per write)"
                )
        if not own:
            fallback = self._fallback + int(done.sum())
        else:
            fallback = self._fallback
        store = {k: v for k, v in cols.items() if k not in self._shared.values()}
        for o, nx in self._shared.items():
            store[nx] = cols[nx]
        store[_KEY], store[_END] = ikeys, done
        return _Writer(rows, first, open_, pending, next_ikey, fallback, store)

    def _follows(self, prev: Mapping[str, np.ndarray] | None, cols: Mapping[str, np.ndarray], s: int) -> bool:
        """Whether step ``s`` is the next observation the open trajectory's last stored step saw."""
        if not self._shared:
            return True
        if prev is None:
            return False
        return all(bool(_same(prev[o][None], cols[o][s:s + 1]).all()) for o in self._shared)

    def _next_error(self, nx: str, o: str, j: int, j1: int) -> ValueError:
        return ValueError(
            f"TrajviewStorage.set: {self._schema[nx][0]!r} of step {j} differs from {self._schema[o][0]!r} of the "
            f"step after it ({j1}) in its trajectory, so it cannot be read from there; pass next_keys=() (or leave "
            f"{self._schema[o][0]!r} out of next_keys) to store it as its own column"
        )

    def _commit(self, slots: np.ndarray, plan: _Writer) -> None:
        self._slot_row[slots] = plan.rows
        self._slot_first[slots] = plan.first
        self._open, self._pending = plan.open, plan.pending
        self._next_ikey, self._fallback = plan.next_ikey, plan.fallback

    # -- reading -------------------------------------------------------------------------------------------

    def get(self, index: Any) -> TensorDictBase:
        if self._rb is None:  # (TorchRL's storages' error, word for word)
            raise RuntimeError("Cannot get elements out of a non-initialized storage.")
        idx, scalar = _index(index, self._len)
        bad = (idx < 0) | (idx >= self._len)
        if bad.any():
            raise IndexError(f"TrajviewStorage.get: index {int(idx[bad][0])} out of range for {self._len} steps")
        rows = self._slot_row[idx]
        if (rows < 0).any():
            raise IndexError(f"TrajviewStorage.get: slot {int(idx[rows < 0][0])} holds no step")
        if self._columns_only:
            return _Columns(self, rows)  # type: ignore[return-value]
        td = self._gather(rows)
        return td[0] if scalar else td

    @contextlib.contextmanager
    def columns_only(self) -> Iterator[None]:
        """Inside, ``get`` returns a read-only mapping whose ``[key]`` gathers that one stored entry over the
        slots (a view of the store's rows indexed by each slot's row), nothing else: what a slice sampler
        reads to find trajectories (`TrajviewSliceSampler`), without copying every frame and view."""
        was, self._columns_only = self._columns_only, True
        try:
            yield
        finally:
            self._columns_only = was

    def _column(self, name: str, rows: np.ndarray) -> torch.Tensor:
        """The stored column ``name`` at the store's absolute ``rows`` (one gather of that column alone)."""
        assert self._rb is not None and self._rb._impl is not None
        i = list(self._rb.columns).index(name)
        dt, shape = self._rb.columns[name]
        ring = self._rb._impl.column_view(i).view(dt).reshape(self.rows, *shape)
        return torch.from_numpy(ring[rows % self.rows])

    def _gather(self, rows: np.ndarray) -> TensorDictBase:
        assert self._rb is not None and self._rb._impl is not None
        loc = np.asarray(self._rb._impl.locate(np.ascontiguousarray(rows)), np.int64).reshape(-1, 3)
        if (loc[:, 0] < 0).any():  # never: set keeps every held step in the store
            raise RuntimeError("TrajviewStorage: a slot's step left the store (a bug: please report it)")
        n = len(rows)
        new = np.ones(n, bool)
        if n > 1:
            new[1:] = (loc[1:, 0] != loc[:-1, 0]) | (loc[1:, 1] != loc[:-1, 1] + 1)
        starts = np.flatnonzero(new)
        lengths = np.diff(np.r_[starts, n])
        picks = np.stack([loc[starts, 0], loc[starts, 1], lengths], axis=1)
        batch, _ = self._rb._gather(picks, int(lengths.max()) if n else 1)
        out = TensorDict({}, batch_size=[n])
        for name in dict.keys(batch):
            if name == "is_init":
                continue
            key: Key = self._schema[name][0] if name in self._schema else tuple(name.split(SEP))
            out.set(key, torch.from_numpy(np.asarray(batch[name])))
        return out

    # -- persistence (storage_state.py) --------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Torch tensors and plain Python values (no objects), as TorchRL's own storages give, so that
        ``torch.load(weights_only=True)`` reads a ``torch.save`` of it: the slots, the trajectories' bookkeeping
        and the trajview `ReplayBuffer`'s own `state_dict` (its arrays as tensors)."""
        return storage_state.state_dict(self)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores a `state_dict` (tensors; numpy arrays, as earlier versions gave, are read too), checked
        first; a state that is refused changes nothing."""
        storage_state.load_state_dict(self, state_dict)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Writes the storage to the folder ``path`` as one committed unit (`trajview._io.commit_folder`: the
        store's rows as trajview's replay dump, the slots as ``.npy`` files): a kill at any byte leaves the
        previous dump whole."""
        storage_state.dumps(self, path)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Reads a `dumps` folder, verifying every file (`trajview.errors.FileIntegrityError` naming a damaged
        one); a load that raises changes nothing."""
        storage_state.loads(self, path)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("TrajviewStorage is not pickled (its rows live in C++); use state_dict() or dumps(path)")

    def __repr__(self) -> str:
        return (f"TrajviewStorage(max_size={self.max_size}, len={self._len}, rows={self.rows}, "
                f"views={sorted(self._views)}, next_keys={sorted(self._shared)})")


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: ``a`` equals ``b`` (NaN equal to NaN)."""
    eq = a == b
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return eq.reshape(len(a), int(np.prod(a.shape[1:], dtype=np.int64))).all(axis=1)


class _Columns:
    """What `TrajviewStorage.get` returns inside `TrajviewStorage.columns_only`: entries gathered one at a time."""

    def __init__(self, storage: TrajviewStorage, rows: np.ndarray) -> None:
        self._storage, self._rows = storage, rows

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        out: list[Any] = []
        for key, _, _ in self._storage._schema.values():
            if include_nested:
                out.extend(key[:i] if i > 1 else key[0] for i in range(1, len(key) + 1))
            elif len(key) == 1:
                out.append(key[0])
        return list(dict.fromkeys(out))

    def __getitem__(self, key: Any) -> torch.Tensor:
        name = _flat(_key(key))
        rb = self._storage._rb
        if rb is None or name not in self._storage._schema:
            raise KeyError(key)
        if name in rb.columns:
            return self._storage._column(name, self._rows)
        # A shared next observation: read from the store with the rows' trajectories.
        return self._storage._gather(self._rows).get(self._storage._schema[name][0])

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: Any) -> bool:
        return _flat(_key(key)) in self._storage._schema


def _undo_writer_advance(storage: TrajviewStorage, caller: Any) -> None:
    """A write this storage refused leaves the buffer as it was. TorchRL's round-robin writers move their cursor
    and write count on before they call ``storage.set`` (``RoundRobinWriter.add`` / ``extend``, and the
    TensorDict ones); a refused write would leave those slots behind the cursor as holes that no read or sample
    could pass. When ``caller`` (the frame that called ``set``) is such a writer's ``add`` or ``extend`` on this
    storage, its cursor and write count are put back to what they were when it was called (its own local copy
    of the cursor). Any other caller (``write_at``, a direct ``storage.set``) moved nothing."""
    code = caller.f_code.co_name
    writer = caller.f_locals.get("self")
    if code not in ("add", "extend") or getattr(writer, "_storage", None) is not storage:
        return
    from torchrl.data.replay_buffers.writers import RoundRobinWriter

    if not isinstance(writer, RoundRobinWriter):
        return
    local = caller.f_locals
    before = local.get("cur_size") if code == "extend" else local.get("_cursor", local.get("index"))
    if isinstance(before, torch.Tensor) and before.numel() == 1:
        before = int(before)
    if not isinstance(before, int) or isinstance(before, bool):
        return
    moved = 1 if code == "add" else local.get("batch_size")
    if not isinstance(moved, int) or isinstance(moved, bool):
        return
    writer._cursor = before
    writer._write_count = max(0, int(writer._write_count) - moved)
