"""`SampleBatch`, `MultiAgentBatch` and `concat_samples` (SPEC sections 2 and 4).

A `SampleBatch` maps column names to arrays with one row per timestep; the
trajectories of a batch sit end to end. Recurrent batches also hold
``seq_lens`` and *per-sequence* columns (``state_in_*`` and any name
registered with ``seq_keys=``) that have one row per sequence instead.

The collector hands out per-episode *segments*: batches whose columns are
slices of one flat C++-owned array per column (`SampleBatch._segment`).
`concat_samples` of untouched consecutive segments of the same parent returns
views of that parent instead of copying.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast, overload

import numpy as np

__all__ = ["LazyView", "MultiAgentBatch", "SampleBatch", "concat_samples"]

_STATE_IN = "state_in_"


class LazyView:
    """A batch column kept as rows of a shared array plus an index: its value is ``base[index]``.

    Collectors built with ``lazy_views`` hand these out for the views of big
    columns (e.g. a 4-frame stack and ``new_obs`` over 84x84 frames): the
    batch then holds each stored row once (``base``, shared by every view of
    that column) plus 8 bytes per (row, offset) of ``index``, instead of
    copying every row each view reads. ``SampleBatch`` materializes a lazy
    column when it is read (``batch[key]``) and keeps the result; ``to_torch``
    gathers on a device instead (ship ``base`` once, gather there).

    ``shape``/``dtype``/``len`` are those of the array it stands for; slicing
    rows (``view[a:b]``) is another `LazyView`; any other indexing, ``np.asarray``
    and `materialize` give numpy arrays.
    """

    __slots__ = ("base", "index")

    def __init__(self, base: np.ndarray, index: np.ndarray) -> None:
        base = np.asarray(base)
        index = np.asarray(index)
        if base.ndim == 0:
            raise ValueError("LazyView base must have a row axis, got a 0-d array")
        if not np.issubdtype(index.dtype, np.integer) or index.ndim == 0:
            raise TypeError(f"LazyView index must be an integer array with a row axis, got {index.dtype} {index.shape}")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= len(base)):
            raise IndexError(
                f"LazyView index must be in [0, {len(base)}) (the base's rows), got [{index.min()}, {index.max()}]"
            )
        self.base = base
        self.index = index

    @classmethod
    def _trusted(cls, base: np.ndarray, index: np.ndarray) -> LazyView:
        view = cls.__new__(cls)
        view.base = base
        view.index = index
        return view

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.index.shape) + tuple(self.base.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    @property
    def ndim(self) -> int:
        return self.index.ndim + self.base.ndim - 1

    @property
    def nbytes(self) -> int:
        """Bytes of the materialized array (numpy's meaning); `stored_nbytes` is what it holds."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.base.itemsize

    @property
    def stored_nbytes(self) -> int:
        """Bytes this view holds: its base (shared with the other views of its column) and its index."""
        return self.base.nbytes + self.index.nbytes

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is slice and key.step is None or isinstance(key, slice) and key.step == 1:
            view = LazyView.__new__(LazyView)
            view.base = self.base
            view.index = self.index[key]
            return view
        if isinstance(key, tuple) and len(key) > self.index.ndim:
            return self.materialize()[key]
        return self.base[self.index[key]]

    def materialize(self) -> np.ndarray:
        """The array this view stands for (a fresh copy)."""
        return np.take(self.base, self.index, axis=0)

    def copy(self) -> np.ndarray:
        return self.materialize()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.materialize()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def to_torch(self, device: Any = None, _bases: dict | None = None) -> Any:
        """``base[index]`` as a torch tensor, gathered on ``device``.

        ``_bases`` (id(base) -> tensor) lets several views of one column share one transfer of ``base``.
        """
        import torch

        key = id(self.base)
        if _bases is not None and key in _bases:
            base = _bases[key]
        else:
            base = self.base if self.base.flags.writeable else self.base.copy()
            base = torch.from_numpy(base).to(device)
            if _bases is not None:
                _bases[key] = base
        return base[torch.from_numpy(self.index).to(device)]

    def __repr__(self) -> str:
        return f"LazyView(shape={self.shape}, dtype={self.dtype}, base rows={len(self.base)})"


@dataclass(frozen=True, slots=True)
class _Segment:
    """Where a batch's columns come from: ``parent[k][rows]`` / ``parent[k][seqs]``.

    ``handed`` maps each column to the exact array object handed out; a column
    whose current array is a different object was replaced by the user.
    """

    parent: Mapping[str, np.ndarray]
    rows: tuple[int, int]
    seqs: tuple[int, int] | None
    handed: dict[str, Any]


def _to_array(key: str, value: Any) -> Any:
    """Convert a column value to an array with a batch axis, naming ``key`` on error."""
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "__getitem__"):
        # A framework tensor (torch, jax, ...): kept as is, it has a batch axis.
        if len(value.shape) == 0:
            raise ValueError(f"SampleBatch column {key!r} must have a batch axis, got a 0-d {type(value).__name__}")
        return value
    elif key == SampleBatch.INFOS and isinstance(value, (list, tuple)):
        arr = np.empty(len(value), dtype=object)
        for i, item in enumerate(value):
            arr[i] = item
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise type(e)(f"SampleBatch column {key!r} cannot be converted to a numpy array: {e}") from e
    if arr.ndim == 0:
        raise ValueError(f"SampleBatch column {key!r} must have a batch axis, got a 0-d value {value!r}")
    if arr.dtype == object and key != SampleBatch.INFOS:
        raise TypeError(
            f"SampleBatch column {key!r} must have a numeric, bool or string dtype, got dtype object "
            f"(ragged or mixed values?); only {SampleBatch.INFOS!r} may hold objects"
        )
    return arr


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise TypeError(f"SampleBatch column names must be str, got {key!r} ({type(key).__name__})")


def _is_integer_dtype(dtype: Any) -> bool:
    try:
        return bool(np.issubdtype(dtype, np.integer))
    except TypeError:  # a framework's dtype (torch tensors in TorchPolicy's batches)
        return not (getattr(dtype, "is_floating_point", True) or getattr(dtype, "is_complex", True)) and str(
            dtype
        ) != "torch.bool"


def _layout(cols: Mapping[str, Any], extra_seq_keys: frozenset[str]) -> tuple[int, frozenset[str]]:
    """Validate ``cols`` and return (number of timestep rows, per-sequence column names).

    With ``seq_lens`` present, ``seq_lens`` and every ``state_in_*`` or registered
    column with ``len(seq_lens)`` rows is per-sequence; all others are per-step
    and must share one length.
    """
    seq_lens = cols.get(SampleBatch.SEQ_LENS)
    n_seqs: int | None = None
    if seq_lens is not None:
        if seq_lens.ndim != 1 or not _is_integer_dtype(seq_lens.dtype):
            raise TypeError(
                f"SampleBatch column {SampleBatch.SEQ_LENS!r} must be a 1-D integer array, "
                f"got shape {tuple(seq_lens.shape)} dtype {seq_lens.dtype}"
            )
        n_seqs = len(seq_lens)
    seq: set[str] = set()
    count: int | None = None
    ref = ""
    for k, v in cols.items():
        n = v.shape[0]
        candidate = k == SampleBatch.SEQ_LENS or k.startswith(_STATE_IN) or k in extra_seq_keys
        if n_seqs is not None and candidate and (k == SampleBatch.SEQ_LENS or n == n_seqs):
            seq.add(k)
        elif count is None:
            count, ref = n, k
        elif n != count:
            also = f" or {n_seqs} (one row per sequence)" if candidate and n_seqs is not None else ""
            raise ValueError(
                f"SampleBatch column {k!r} has {n} rows, expected {count} (the rows of column {ref!r}){also}"
            )
    if count is None:
        count = int(np.sum(seq_lens)) if seq_lens is not None else 0
    return count, frozenset(seq)


def _rebuild(cls: type[SampleBatch], data: dict[str, Any], seq_keys: frozenset[str]) -> SampleBatch:
    """Unpickling helper."""
    return cls(data, seq_keys=seq_keys)


class SampleBatch(dict):
    """Columns of experience: column name -> array, one row per timestep.

    ``SampleBatch(data=None, /, *, seq_keys=(), **columns)``: lists are
    converted with ``np.asarray`` (object dtype only for ``infos``). ``count``
    and ``len(batch)`` give the timestep rows. ``batch[a:b]`` is a batch of
    views of rows ``a:b``. ``seq_keys`` registers extra per-sequence column
    names besides ``seq_lens`` and ``state_in_*``.
    """

    OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    DONES = "dones"
    INFOS = "infos"
    EPS_ID = "eps_id"
    UNROLL_ID = "unroll_id"
    AGENT_INDEX = "agent_index"
    ENV_ID = "env_id"
    T = "t"
    SEQ_LENS = "seq_lens"
    IS_INIT = "is_init"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"

    __slots__ = (
        "count",
        "_seq_keys",
        "_extra_seq_keys",
        "_seg",
        "_tracking",
        "accessed_keys",
        "added_keys",
        "deleted_keys",
    )

    def __init__(
        self,
        data: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        /,
        *,
        seq_keys: Iterable[str] = (),
        **columns: Any,
    ) -> None:
        super().__init__()
        if isinstance(seq_keys, str):
            raise TypeError(f"SampleBatch seq_keys must be an iterable of column names, got the str {seq_keys!r}")
        extra = frozenset(seq_keys)
        if isinstance(data, SampleBatch):
            extra |= data._extra_seq_keys
        merged = dict(data) if data is not None else {}
        merged.update(columns)
        cols: dict[str, Any] = {}
        for k, v in merged.items():
            _check_key(k)
            cols[k] = _to_array(k, v)
        count, seq = _layout(cols, extra)
        dict.update(self, cols)
        self._init_attrs(count, seq, extra)

    def _init_attrs(self, count: int, seq: frozenset[str], extra: frozenset[str]) -> None:
        self.count = count
        self._seq_keys = seq
        self._extra_seq_keys = extra
        self._seg: _Segment | None = None
        self._tracking = False
        self.accessed_keys: set[str] = set()
        self.added_keys: set[str] = set()
        self.deleted_keys: set[str] = set()

    @classmethod
    def _from_columns(
        cls, cols: dict[str, Any], count: int, seq: frozenset[str], extra: frozenset[str]
    ) -> SampleBatch:
        """Build a batch from already validated arrays, without checks or copies."""
        batch = cls.__new__(cls)
        dict.update(batch, cols)
        batch._init_attrs(count, seq, extra)
        return batch

    @classmethod
    def _segment(
        cls,
        parent: Mapping[str, np.ndarray],
        rows: tuple[int, int],
        seqs: tuple[int, int] | None,
        seq_keys: frozenset[str],
    ) -> SampleBatch:
        """A batch of views ``parent[k][rows[0]:rows[1]]`` (``[seqs[0]:seqs[1]]`` for ``seq_keys``).

        The batch remembers ``parent``, the ranges and each array it handed out,
        so that `concat_samples` of consecutive untouched segments is zero copy.
        """
        r0, r1 = int(rows[0]), int(rows[1])
        if not 0 <= r0 <= r1:
            raise ValueError(f"SampleBatch._segment rows must satisfy 0 <= start <= stop, got {rows!r}")
        seq = frozenset(k for k in seq_keys if k in parent)
        if seq and seqs is None:
            raise ValueError(f"SampleBatch._segment got per-sequence columns {sorted(seq)} but seqs=None")
        s0, s1 = (int(seqs[0]), int(seqs[1])) if seqs is not None else (0, 0)
        if seq:
            cols = {k: arr[s0:s1] if k in seq else arr[r0:r1] for k, arr in parent.items()}
        else:
            cols = {k: arr[r0:r1] for k, arr in parent.items()}
        for k, view in cols.items():
            b = s1 if k in seq else r1
            if len(view) != b - (s0 if k in seq else r0):
                raise ValueError(
                    f"SampleBatch._segment: column {k!r} has {len(parent[k])} rows, expected at least {b}"
                )
        batch = cls._from_columns(cols, r1 - r0, seq, frozenset(seq_keys))
        batch._seg = _Segment(parent, (r0, r1), (s0, s1) if seqs is not None else None, dict(cols))
        return batch

    # -- reads ---------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return self._slice_rows(key)
        if self._tracking:
            self.accessed_keys.add(key)
        value = dict.__getitem__(self, key)
        if type(value) is LazyView:
            return self._materialize(key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        if self._tracking:
            self.accessed_keys.add(key)
        value = dict.get(self, key, default)
        if type(value) is LazyView:
            return self._materialize(key, value)
        return value

    def _materialize(self, key: str, view: LazyView) -> np.ndarray:
        """Replaces a lazy column by its array (kept: later reads are free).

        The array is a copy, so writes to it do not reach the collector's
        buffer: from now on `concat_samples` treats the column as replaced and
        concatenates this array (no zero-copy view of the parent), so such
        writes are kept.
        """
        arr = view.materialize()
        dict.__setitem__(self, key, arr)
        return arr

    def materialize(self) -> SampleBatch:
        """Materializes every `LazyView` column in place (see `lazy_keys`); returns the batch."""
        for k in self.lazy_keys:
            self._materialize(k, dict.__getitem__(self, k))
        return self

    @property
    def lazy_keys(self) -> list[str]:
        """Columns still held as `LazyView` (not materialized yet)."""
        return [k for k, v in dict.items(self) if type(v) is LazyView]

    def items(self):  # type: ignore[override]
        """Like `dict.items` (lazy columns materialized); with tracking on, reads every column."""
        if self._tracking:
            self.accessed_keys.update(dict.keys(self))
        self.materialize()
        return dict.items(self)

    def values(self):  # type: ignore[override]
        """Like `dict.values` (lazy columns materialized); with tracking on, reads every column."""
        if self._tracking:
            self.accessed_keys.update(dict.keys(self))
        self.materialize()
        return dict.values(self)

    def __len__(self) -> int:
        return self.count

    @property
    def seq_keys(self) -> frozenset[str]:
        """Names of the per-sequence columns (one row per sequence)."""
        return self._seq_keys

    # -- writes --------------------------------------------------------------

    def _relayout(self, cols: dict[str, Any]) -> None:
        self.count, self._seq_keys = _layout(cols, self._extra_seq_keys)

    def __setitem__(self, key: str, value: Any) -> None:
        _check_key(key)
        arr = _to_array(key, value)
        cols = {k: v for k, v in dict.items(self) if k != key}
        cols[key] = arr
        self._relayout(cols)  # raises before anything is written
        if self._tracking and not dict.__contains__(self, key):
            self.added_keys.add(key)
        dict.__setitem__(self, key, arr)

    def __delitem__(self, key: str) -> None:
        if not dict.__contains__(self, key):
            raise KeyError(key)
        self._relayout({k: v for k, v in dict.items(self) if k != key})
        if self._tracking:
            self.deleted_keys.add(key)
        dict.__delitem__(self, key)

    _MISSING = object()

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        if not dict.__contains__(self, key):
            if default is SampleBatch._MISSING:
                raise KeyError(key)
            return default
        value = dict.__getitem__(self, key)
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        if not dict.__len__(self):
            raise KeyError("popitem(): SampleBatch has no columns")
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def clear(self) -> None:
        if self._tracking:
            self.deleted_keys.update(dict.keys(self))
        dict.clear(self)
        self.count, self._seq_keys = 0, frozenset()

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        for k, v in dict(other, **kwargs).items():
            self[k] = v

    # |= is update() (any mapping); misc: typeshed's dict.__or__ takes and returns plain dicts only.
    def __ior__(self, other: Any) -> SampleBatch:  # type: ignore[override, misc]
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self[key] = default
        return self[key]

    # -- access tracking -----------------------------------------------------

    def enable_access_tracking(self) -> None:
        """Record reads (``[]``, ``get``, ``items``/``values``), added and deleted columns.

        They go to ``accessed_keys``, ``added_keys`` and ``deleted_keys``.
        Slices and copies of a tracked batch are tracked too and record their
        reads into the same ``accessed_keys`` set.
        """
        self._tracking = True

    def disable_access_tracking(self) -> None:
        """Stop recording accesses (the recorded sets are kept)."""
        self._tracking = False

    def _inherit_tracking(self, child: SampleBatch) -> SampleBatch:
        if self._tracking:
            child._tracking = True
            child.accessed_keys = self.accessed_keys
        return child

    # -- rows ----------------------------------------------------------------

    def _slice_rows(self, s: slice) -> SampleBatch:
        if s.step not in (None, 1):
            raise ValueError(f"SampleBatch row slices must have step 1, got {s.step!r}")
        count = self.count
        a, b, _ = s.indices(count)
        b = max(a, b)
        seqs: tuple[int, int] | None = None
        seq_lens = dict.get(self, SampleBatch.SEQ_LENS)
        if seq_lens is not None:
            bounds = np.concatenate(([0], np.cumsum(seq_lens)))
            if bounds[-1] != count:
                raise ValueError(
                    f"cannot slice rows of a SampleBatch whose {SampleBatch.SEQ_LENS!r} sum to {bounds[-1]}, "
                    f"expected {count} (the batch rows)"
                )

            def seq_index(x: int) -> int:
                i = len(seq_lens) if x == count else int(np.searchsorted(bounds, x))
                if bounds[i] != x:
                    shown = bounds.tolist() if len(bounds) <= 20 else [*bounds[:20].tolist(), "..."]
                    raise ValueError(
                        f"SampleBatch row slice {a}:{b} must start and end on sequence boundaries "
                        f"{shown}, got {x}"
                    )
                return i

            seqs = (seq_index(a), seq_index(b))
        cols = {
            k: (v[seqs[0] : seqs[1]] if seqs is not None and k in self._seq_keys else v[a:b])
            for k, v in dict.items(self)
        }
        out = self._from_columns(cols, b - a, self._seq_keys, self._extra_seq_keys)
        seg = self._seg
        if seg is not None:
            handed = {k: cols[k] for k, v in dict.items(self) if seg.handed.get(k) is v}
            new_seqs = None
            if seqs is not None and seg.seqs is not None:
                new_seqs = (seg.seqs[0] + seqs[0], seg.seqs[0] + seqs[1])
            out._seg = _Segment(seg.parent, (seg.rows[0] + a, seg.rows[0] + b), new_seqs, handed)
        return self._inherit_tracking(out)

    def split_by_episode(self) -> list[SampleBatch]:
        """Split into one batch (of views) per episode.

        Episodes end where ``eps_id`` changes or, without ``eps_id``, after each
        row where ``terminateds`` or ``truncateds`` (or ``dones``) is set.
        """
        if self.count == 0:
            return []
        eps = dict.get(self, SampleBatch.EPS_ID)
        if eps is not None:
            eps = np.asarray(eps)
            cuts = np.flatnonzero(eps[1:] != eps[:-1]) + 1
        else:
            flags = [dict.__getitem__(self, k) for k in (self.TERMINATEDS, self.TRUNCATEDS, self.DONES) if k in self]
            if not flags:
                raise ValueError(
                    f"split_by_episode needs column {self.EPS_ID!r} or {self.TERMINATEDS!r}/"
                    f"{self.TRUNCATEDS!r}/{self.DONES!r}, got columns {list(self.keys())}"
                )
            done = np.zeros(self.count, dtype=bool)
            for f in flags:
                done |= np.asarray(f, dtype=bool).reshape(self.count, -1).any(axis=1)
            cuts = np.flatnonzero(done[:-1]) + 1
        edges = [0, *cuts.tolist(), self.count]
        return [self[a:b] for a, b in zip(edges[:-1], edges[1:])]

    def to_padded(self) -> dict[str, np.ndarray]:
        """One row per episode, padded: ``{column: [N, T_max, *shape], "mask": bool [N, T_max]}``.

        Episodes as in `split_by_episode`; ``T_max`` is the longest; rows past
        an episode's end are zeros (``None`` for ``infos``) and ``mask`` is
        ``False`` there. Per-sequence columns (``seq_lens``, ``state_in_*``)
        have no per-step rows and raise ``ValueError``.
        """
        if self._seq_keys:
            raise ValueError(
                f"to_padded needs per-step columns only, got per-sequence columns {sorted(self._seq_keys)}"
            )
        if "mask" in self:
            raise ValueError("to_padded adds a 'mask' column, but the batch already has one")
        episodes = self.split_by_episode()
        n = len(episodes)
        t_max = max((e.count for e in episodes), default=0)
        out: dict[str, np.ndarray] = {}
        for k in dict.keys(self):
            col = np.asarray(dict.__getitem__(self, k))
            padded = np.zeros((n, t_max, *col.shape[1:]), dtype=col.dtype)
            if col.dtype == object:
                padded[...] = None
            start = 0
            for i, e in enumerate(episodes):
                padded[i, : e.count] = col[start : start + e.count]
                start += e.count
            out[k] = padded
        mask = np.zeros((n, t_max), dtype=bool)
        for i, e in enumerate(episodes):
            mask[i, : e.count] = True
        out["mask"] = mask
        return out

    def to_tensordict(self) -> Any:
        """A `tensordict.TensorDict` in TorchRL's layout, zero copy where possible.

        ``new_obs`` -> ``("next", "obs")``; ``rewards`` -> ``("next", "reward")``,
        ``terminateds``/``truncateds`` -> ``("next", "terminated")``/``("next", "truncated")``
        and ``("next", "done")`` (their OR, or ``dones``), each ``[B, 1]``; the
        root ``done``/``terminated``/``truncated`` (the flags before each
        step: always ``False`` inside a trajectory); ``is_init`` ``[B, 1]``
        (the batch's, else ``t == 0``, else where ``eps_id`` changes);
        ``eps_id`` -> ``("collector", "traj_ids")``; ``actions`` -> ``action``;
        every other column under its own name. ``infos`` is left out.
        Needs ``torch`` and ``tensordict`` (``pip install tensordict``).
        """
        try:
            import torch
            from tensordict import TensorDict
        except ImportError as e:
            raise ImportError("SampleBatch.to_tensordict needs torch and tensordict (pip install tensordict)") from e
        if self._seq_keys:
            raise ValueError(
                f"to_tensordict needs per-step columns only, got per-sequence columns {sorted(self._seq_keys)}"
            )
        n = self.count

        def tensor(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                return a
            arr = np.asarray(a)
            if arr.dtype == object:
                raise ValueError(f"to_tensordict cannot convert a column of dtype object (shape {arr.shape})")
            if not arr.flags.writeable or not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr).copy()
            return torch.from_numpy(arr)

        def flag(a: Any) -> Any:
            t = tensor(a)
            t = t.reshape(n, -1).any(dim=1) if t.dim() > 1 else t.bool()
            return t.unsqueeze(-1)

        cols = dict(dict.items(self))
        root: dict[str, Any] = {}
        nxt: dict[str, Any] = {}
        collector: dict[str, Any] = {}
        false = torch.zeros(n, 1, dtype=torch.bool)
        if self.NEXT_OBS in cols:
            nxt["obs"] = tensor(cols.pop(self.NEXT_OBS))
        if self.REWARDS in cols:
            r = tensor(cols.pop(self.REWARDS))
            nxt["reward"] = r.unsqueeze(-1) if r.dim() == 1 else r
        term = flag(cols.pop(self.TERMINATEDS)) if self.TERMINATEDS in cols else None
        trunc = flag(cols.pop(self.TRUNCATEDS)) if self.TRUNCATEDS in cols else None
        dones = flag(cols.pop(self.DONES)) if self.DONES in cols else None
        if term is not None:
            nxt["terminated"] = term
        if trunc is not None:
            nxt["truncated"] = trunc
        if dones is not None:
            nxt["done"] = dones
        elif term is not None or trunc is not None:
            nxt["done"] = (term if term is not None else false) | (trunc if trunc is not None else false)
        for k in ("done", "terminated", "truncated"):
            if k in nxt:
                root[k] = torch.zeros(n, 1, dtype=torch.bool)
        if self.IS_INIT in cols:
            root["is_init"] = flag(cols.pop(self.IS_INIT))
        elif self.T in cols:
            root["is_init"] = (tensor(cols[self.T]) == 0).unsqueeze(-1)
        elif self.EPS_ID in cols:
            eps = np.asarray(cols[self.EPS_ID])
            init = np.ones(n, dtype=bool)
            init[1:] = eps[1:] != eps[:-1]
            root["is_init"] = torch.from_numpy(init).unsqueeze(-1)
        if self.EPS_ID in cols:
            collector["traj_ids"] = tensor(cols.pop(self.EPS_ID))
        if self.ACTIONS in cols:
            root["action"] = tensor(cols.pop(self.ACTIONS))
        cols.pop(self.INFOS, None)
        for k, v in cols.items():
            root[k] = tensor(v)
        if nxt:
            root["next"] = TensorDict(nxt, batch_size=[n])
        if collector:
            root["collector"] = TensorDict(collector, batch_size=[n])
        return TensorDict(root, batch_size=[n])

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield one dict per timestep row holding that row of every per-step column."""
        keys = [k for k in dict.keys(self) if k not in self._seq_keys]
        if self._tracking:
            self.accessed_keys.update(keys)
        cols = [dict.__getitem__(self, k) for k in keys]
        for i in range(self.count):
            yield {k: c[i] for k, c in zip(keys, cols)}

    # -- copies --------------------------------------------------------------

    def copy(self, shallow: bool = False) -> SampleBatch:
        """A new batch; its arrays are copies unless ``shallow`` (then the same arrays)."""
        if shallow:
            out = self._from_columns(dict(dict.items(self)), self.count, self._seq_keys, self._extra_seq_keys)
            out._seg = self._seg  # same array objects, so still a segment
        else:
            cols = {k: (v.copy() if hasattr(v, "copy") else np.array(v)) for k, v in dict.items(self)}
            out = self._from_columns(cols, self.count, self._seq_keys, self._extra_seq_keys)
        return self._inherit_tracking(out)

    def __copy__(self) -> SampleBatch:
        return self.copy(shallow=True)

    def to_dict(self) -> dict[str, Any]:
        """A plain ``dict`` of the columns (the same arrays)."""
        if self._tracking:
            self.accessed_keys.update(dict.keys(self))
        self.materialize()
        return dict(dict.items(self))

    def __reduce__(self):
        return _rebuild, (type(self), dict(dict.items(self)), self._extra_seq_keys)

    def __repr__(self) -> str:
        seqs = ""
        if SampleBatch.SEQ_LENS in self:
            seqs = f", {len(dict.__getitem__(self, SampleBatch.SEQ_LENS))} seqs"
        return f"{type(self).__name__}({self.count} rows{seqs}: {list(self.keys())})"


class MultiAgentBatch:
    """One `SampleBatch` per policy, plus the number of env steps they cover.

    ``count`` and ``len(batch)`` are ``env_steps``; ``agent_steps()`` sums the
    rows of the policy batches.
    """

    __slots__ = ("policy_batches", "count")

    def __init__(self, policy_batches: Mapping[str, SampleBatch | Mapping[str, Any]], env_steps: int) -> None:
        if not isinstance(policy_batches, Mapping):
            raise TypeError(
                f"MultiAgentBatch policy_batches must be a dict policy_id -> SampleBatch, "
                f"got {type(policy_batches).__name__}"
            )
        if isinstance(env_steps, (bool, np.bool_)) or not isinstance(env_steps, (int, np.integer)):
            raise TypeError(f"MultiAgentBatch env_steps must be an int, got {env_steps!r}")
        if env_steps < 0:
            raise ValueError(f"MultiAgentBatch env_steps must be >= 0, got {env_steps}")
        batches: dict[str, SampleBatch] = {}
        for pid, b in policy_batches.items():
            if isinstance(b, SampleBatch):
                batches[pid] = b
            elif isinstance(b, Mapping):
                batches[pid] = SampleBatch(b)
            else:
                raise TypeError(
                    f"MultiAgentBatch policy_batches[{pid!r}] must be a SampleBatch, got {type(b).__name__}"
                )
        self.policy_batches = batches
        self.count = int(env_steps)

    def env_steps(self) -> int:
        """Env steps covered by this batch."""
        return self.count

    def agent_steps(self) -> int:
        """Sum of the rows of all policy batches."""
        return sum(b.count for b in self.policy_batches.values())

    def __len__(self) -> int:
        return self.count

    def copy(self, shallow: bool = False) -> MultiAgentBatch:
        """A new batch whose policy batches are `SampleBatch.copy` ``(shallow)`` copies."""
        return MultiAgentBatch({pid: b.copy(shallow) for pid, b in self.policy_batches.items()}, self.count)

    def __repr__(self) -> str:
        inner = ", ".join(f"{pid!r}: {b!r}" for pid, b in self.policy_batches.items())
        return f"MultiAgentBatch(env_steps={self.count}, {{{inner}}})"


def _concat_column(key: str, arrays: list[Any], bases: dict) -> Any:
    """``bases`` caches joined bases: the lazy columns of one stored column (obs, new_obs, a stack) share one."""
    shape0 = tuple(arrays[0].shape[1:])
    for i, a in enumerate(arrays[1:], 1):
        if tuple(a.shape[1:]) != shape0:
            raise ValueError(
                f"concat_samples: column {key!r} has per-row shape {tuple(a.shape[1:])} in batch {i}, "
                f"expected {shape0} (as in batch 0)"
            )
    lazy = all(type(a) is LazyView for a in arrays)
    if lazy and len({a.dtype for a in arrays}) == 1 and len({a.index.ndim for a in arrays}) == 1:
        # Lazy views stay lazy: each distinct base once, end to end, and the indices shifted to match.
        ids = tuple(id(a.base) for a in arrays)
        if ids not in bases:
            distinct: dict[int, np.ndarray] = {}
            for a in arrays:
                distinct.setdefault(id(a.base), a.base)
            starts = np.cumsum([0] + [len(b) for b in distinct.values()])
            offset = dict(zip(distinct, starts[:-1].tolist()))
            base = next(iter(distinct.values())) if len(distinct) == 1 else np.concatenate(list(distinct.values()))
            bases[ids] = (base, offset)
        base, offset = bases[ids]
        index = np.concatenate([a.index + offset[id(a.base)] if offset[id(a.base)] else a.index for a in arrays])
        return LazyView._trusted(base, index)
    return np.concatenate([np.asarray(a) if type(a) is LazyView else a for a in arrays], axis=0)


def _concat_multi_agent(batches: list[MultiAgentBatch]) -> MultiAgentBatch:
    pids: dict[str, None] = {}
    for b in batches:
        pids.update(dict.fromkeys(b.policy_batches))
    merged = {
        pid: concat_samples([b.policy_batches[pid] for b in batches if pid in b.policy_batches]) for pid in pids
    }
    return MultiAgentBatch(merged, sum(b.count for b in batches))


def _chain(
    segs: list[_Segment],
) -> tuple[Mapping[str, np.ndarray], tuple[int, int], tuple[int, int] | None] | None:
    """(parent, rows span, seqs span or None) when ``segs`` are consecutive segments of one parent."""
    parent = segs[0].parent
    if any(s.parent is not parent for s in segs):
        return None
    if any(segs[i].rows[0] != segs[i - 1].rows[1] for i in range(1, len(segs))):
        return None
    rows = (segs[0].rows[0], segs[-1].rows[1])
    seqs_list = [s.seqs for s in segs if s.seqs is not None]
    seqs = None
    if len(seqs_list) == len(segs) and all(seqs_list[i][0] == seqs_list[i - 1][1] for i in range(1, len(seqs_list))):
        seqs = (seqs_list[0][0], seqs_list[-1][1])
    return parent, rows, seqs


@overload
def concat_samples(batches: Iterable[SampleBatch]) -> SampleBatch: ...
@overload
def concat_samples(batches: Iterable[SampleBatch | MultiAgentBatch]) -> SampleBatch | MultiAgentBatch: ...
def concat_samples(batches: Iterable[SampleBatch | MultiAgentBatch]) -> SampleBatch | MultiAgentBatch:
    """Concatenate batches along their rows (per policy for `MultiAgentBatch`, summing env steps).

    All batches must have the same columns. Per-sequence columns are
    concatenated too. Where every batch is an untouched segment of the same
    collector buffer and the segments are consecutive, a column of the result
    is a view of that buffer (no copy); otherwise it is a fresh array. The
    result of a single batch shares its arrays.
    """
    batches = list(batches)
    if not batches:
        return SampleBatch()
    if all(isinstance(b, MultiAgentBatch) for b in batches):
        return _concat_multi_agent(cast("list[MultiAgentBatch]", batches))
    for i, b in enumerate(batches):
        if not isinstance(b, SampleBatch):
            raise TypeError(
                f"concat_samples expects a list of SampleBatch or a list of MultiAgentBatch, "
                f"got {type(b).__name__} at index {i}"
            )
    batches = cast("list[SampleBatch]", batches)  # checked just above
    first = batches[0]
    if len(batches) == 1:
        out = SampleBatch._from_columns(dict(dict.items(first)), first.count, first._seq_keys, first._extra_seq_keys)
        out._seg = first._seg
        return out
    keys = list(dict.keys(first))
    for i, b in enumerate(batches[1:], 1):
        if dict.keys(b) != dict.keys(first):
            missing = [k for k in keys if not dict.__contains__(b, k)]
            if missing:
                raise ValueError(f"concat_samples: batch {i} has no column {missing[0]!r} (batch 0 has it)")
            extra = next(k for k in dict.keys(b) if not dict.__contains__(first, k))
            raise ValueError(f"concat_samples: batch 0 has no column {extra!r} (batch {i} has it)")
        if b._seq_keys != first._seq_keys:
            k = sorted(b._seq_keys ^ first._seq_keys)[0]
            where = (0, i) if k in first._seq_keys else (i, 0)
            raise ValueError(
                f"concat_samples: column {k!r} is per-sequence in batch {where[0]} but per-step in batch {where[1]}"
            )

    # Zero-copy eligibility shared by all columns: one parent, consecutive ranges.
    segs = [b._seg for b in batches if b._seg is not None]
    chain = _chain(segs) if len(segs) == len(batches) else None
    seq_keys = first._seq_keys
    cols: dict[str, Any] = {}
    handed: dict[str, Any] = {}
    bases: dict = {}
    for k in keys:
        arrays = [dict.__getitem__(b, k) for b in batches]
        span = None if chain is None else (chain[2] if k in seq_keys else chain[1])
        if (
            chain is not None
            and span is not None
            and k in chain[0]
            and all(a is s.handed.get(k) for a, s in zip(arrays, segs))
        ):
            cols[k] = handed[k] = chain[0][k][span[0] : span[1]]
        else:
            cols[k] = _concat_column(k, arrays, bases)
    extra = frozenset().union(*(b._extra_seq_keys for b in batches))
    out = SampleBatch._from_columns(cols, sum(b.count for b in batches), seq_keys, extra)
    if handed and chain is not None:
        out._seg = _Segment(chain[0], chain[1], chain[2], handed)
    return out
