"""`SampleBatch`: columns of experience in the flat layout (see docs/contract.md, Views and Flat layout).

A `SampleBatch` maps column names to arrays with one row per timestep; the
trajectories of a batch sit end to end. Recurrent batches also hold
``seq_lens`` and *per-sequence* columns (``state_in_*`` and any name
registered with ``seq_keys=``) that have one row per sequence instead.

The collector hands out per-episode *segments*: batches whose columns are
slices of one flat C++-owned array per column (`SampleBatch._segment`). Each
remembers its `_Origin`, so that `concat_samples` (in `views.concat`) of
untouched consecutive segments of the same parent returns views of that
parent instead of copying.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import columns as _c
from . import interop
from .layout import _check_key, _layout, _to_array
from .lazy_view import LazyView
from .nest import SEP, assemble, flatten_columns, flatten_value, is_nested_value, leaf_names

__all__ = ["SampleBatch"]


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where a batch's columns come from: ``parent[k][rows]`` / ``parent[k][seqs]``.

    ``handed`` maps each column to the exact array object handed out; a column
    whose current array is a different object was replaced by the user.
    """

    parent: Mapping[str, np.ndarray]
    rows: tuple[int, int]
    seqs: tuple[int, int] | None
    handed: dict[str, Any]


def _rebuild(
    cls: type[SampleBatch],
    data: dict[str, Any],
    seq_keys: frozenset[str],
    pruned: frozenset[str] = frozenset(),
    view_columns: frozenset[str] = frozenset(),
) -> SampleBatch:
    """Unpickling helper."""
    out = cls(data, seq_keys=seq_keys)
    out._pruned = pruned
    out.view_columns = view_columns
    return out


def _nested_leaves(key: str, value: Any) -> dict[str, Any] | None:
    """``{leaf column: leaf}`` of a nested column's value, None for a plain one (``infos`` is always plain)."""
    return flatten_value(key, value) if key != _c.INFOS and is_nested_value(value) else None


def pruned_message(key: str) -> str:
    """The KeyError text for a view the view-pruning pass removed."""
    return (
        f"{key!r}: this view was pruned. The view-pruning pass ran the policy's compute_actions_from_input_dict, "
        f"postprocess_trajectory and loss on dummy batches before the first sample, and none of them read {key!r}, "
        f"so it is neither built nor stored (docs/contract.md, Pruning). To keep it, name it in policy.keep_views "
        f"before the first sample (policy.keep_views = {{{key!r}}}), read it in the loss (or in "
        f"postprocess_trajectory), or set policy.view_requirements[{key!r}].used_for_training = True after the "
        f"pass (e.g. after the first sample(); the worker then rebuilds its store and restarts its episodes)"
    )


class SampleBatch(dict):
    """Columns of experience: column name -> array, one row per timestep.

    ``SampleBatch(data=None, /, *, seq_keys=(), **columns)``: lists are
    converted with ``np.asarray`` (object dtype only for ``infos``). ``count``
    and ``len(batch)`` give the timestep rows. ``batch[a:b]`` is a batch of
    views of rows ``a:b``. ``seq_keys`` registers extra per-sequence column
    names besides ``seq_lens`` and ``state_in_*``.

    Nested columns (a ``Dict`` / ``Tuple`` observation, views of it) are
    stored one column per leaf, named ``"obs.image"``, ``"obs.0"`` (see
    `trajview.views.nest`): ``keys()`` lists those flat names, and
    ``batch["obs"]`` gives the leaves in their structure again (a dict, or a
    tuple where the children are ``0 .. n-1``); ``"obs" in batch`` is True.
    Setting ``batch["obs"] = {"image": ..., "vec": ...}`` stores the leaves.
    """

    OBS = _c.OBS
    NEXT_OBS = _c.NEXT_OBS
    ACTIONS = _c.ACTIONS
    REWARDS = _c.REWARDS
    PREV_ACTIONS = _c.PREV_ACTIONS
    PREV_REWARDS = _c.PREV_REWARDS
    TERMINATEDS = _c.TERMINATEDS
    TRUNCATEDS = _c.TRUNCATEDS
    DONES = _c.DONES
    INFOS = _c.INFOS
    EPS_ID = _c.EPS_ID
    UNROLL_ID = _c.UNROLL_ID
    AGENT_INDEX = _c.AGENT_INDEX
    ENV_ID = _c.ENV_ID
    T = _c.T
    SEQ_LENS = _c.SEQ_LENS
    IS_INIT = _c.IS_INIT
    ACTION_LOGP = _c.ACTION_LOGP
    ACTION_DIST_INPUTS = _c.ACTION_DIST_INPUTS
    VF_PREDS = _c.VF_PREDS

    __slots__ = (
        "count",
        "_pruned",
        "_seq_keys",
        "_extra_seq_keys",
        "_seg",
        "_tracking",
        "accessed_keys",
        "added_keys",
        "deleted_keys",
        "view_columns",
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
        for k in merged:
            _check_key(k)
        cols = {k: _to_array(k, v) for k, v in flatten_columns(merged, _nested_leaves).items()}
        count, seq = _layout(cols, extra)
        dict.update(self, cols)
        self._init_attrs(count, seq, extra)

    def _init_attrs(self, count: int, seq: frozenset[str], extra: frozenset[str]) -> None:
        self.count = count
        #: Views the view-pruning pass removed from this batch (named in the KeyError for them).
        self._pruned: frozenset[str] = frozenset()
        self._seq_keys = seq
        self._extra_seq_keys = extra
        self._seg: _Origin | None = None
        self._tracking = False
        #: Columns the collector built as views of other columns (a frame stack, ``new_obs``, previous actions):
        #: kept by slicing, copies, `concat_samples` and pickling; `ReplayBuffer` does not store them by default.
        self.view_columns: frozenset[str] = frozenset()
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
        batch._seg = _Origin(parent, (r0, r1), (s0, s1) if seqs is not None else None, dict(cols))
        return batch

    # -- reads ---------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return self._slice_rows(key)
        if self._tracking:
            self.accessed_keys.add(key)
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            keys = list(dict.keys(self))
            if type(key) is str and leaf_names(key, keys):
                return assemble(key, keys, self.__getitem__)  # a nested column
            if key in self._pruned:
                raise KeyError(pruned_message(key)) from None
            raise KeyError(key) from None
        if type(value) is LazyView:
            return self._materialize(key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        if self._tracking:
            self.accessed_keys.add(key)
        value = dict.get(self, key, SampleBatch._MISSING)
        if value is SampleBatch._MISSING:
            if type(key) is str and leaf_names(key, dict.keys(self)):
                return self[key]
            return default
        if type(value) is LazyView:
            return self._materialize(key, value)
        return value

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        return type(key) is str and bool(leaf_names(key, dict.keys(self)))

    def leaf_keys(self, key: str) -> list[str]:
        """The flat columns of ``key``: ``[key]`` for a plain column, its leaves (``key.a``, ...) for a nested one."""
        if dict.__contains__(self, key):
            return [key]
        return leaf_names(key, dict.keys(self))

    def nested_keys(self) -> list[str]:
        """The top-level names: plain columns, and nested ones once each (``obs`` for ``obs.image``, ``obs.vec``)."""
        return list(dict.fromkeys(k.split(SEP, 1)[0] for k in dict.keys(self)))

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
        # The batch's per-step columns that stay as they are keep their kind (a one-step sequence's state_in_0 has
        # as many rows per step as per sequence).
        seq = self._seq_keys
        kept = frozenset(k for k, v in dict.items(self) if k not in seq and cols.get(k) is v)
        self.count, self._seq_keys = _layout(cols, self._extra_seq_keys, kept)

    def __setitem__(self, key: str, value: Any) -> None:
        _check_key(key)
        if key != _c.INFOS and is_nested_value(value):
            self._set_nested(key, value)
            return
        arr = _to_array(key, value)
        old = leaf_names(key, dict.keys(self))  # a nested column replaced by a plain one
        if not (type(arr) is np.ndarray and arr.ndim and arr.shape[0] == self.count and key != _c.SEQ_LENS
                and not dict.__contains__(self, _c.SEQ_LENS)):
            cols = {k: v for k, v in dict.items(self) if k != key and k not in old}
            cols[key] = arr
            self._relayout(cols)  # raises before anything is written
        # (else: a per-step column of the batch's row count in a batch without sequences, which `_layout` would
        # take, leaving the count as it is and no per-sequence column: nothing to lay out again)
        if self._tracking and not dict.__contains__(self, key):
            self.added_keys.add(key)
        for k in old:
            dict.__delitem__(self, k)
        dict.__setitem__(self, key, arr)

    def _set_nested(self, key: str, value: Any) -> None:
        """Stores a nested value's leaves (``key.a``, ``key.b.0``, ...) in place of whatever ``key`` held."""
        leaves = {k: _to_array(k, v) for k, v in flatten_value(key, value).items()}
        old = set(self.leaf_keys(key))
        cols = {k: v for k, v in dict.items(self) if k not in old and k not in leaves}
        cols.update(leaves)
        self._relayout(cols)  # raises before anything is written
        if self._tracking and not old:
            self.added_keys.add(key)
        for k in old - set(leaves):
            dict.__delitem__(self, k)
        dict.update(self, leaves)

    def __delitem__(self, key: str) -> None:
        keys = self.leaf_keys(key) if type(key) is str else []
        if not keys:
            raise KeyError(key)
        self._relayout({k: v for k, v in dict.items(self) if k not in keys})
        if self._tracking:
            self.deleted_keys.add(key)
        for k in keys:
            dict.__delitem__(self, k)

    _MISSING = object()

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self:
            if default is SampleBatch._MISSING:
                raise KeyError(key)
            return default
        value = dict.__getitem__(self, key) if dict.__contains__(self, key) else self[key]
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
        if key not in self:
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
        out._pruned = self._pruned
        out.view_columns = self.view_columns
        seg = self._seg
        if seg is not None:
            handed = {k: cols[k] for k, v in dict.items(self) if seg.handed.get(k) is v}
            new_seqs = None
            if seqs is not None and seg.seqs is not None:
                new_seqs = (seg.seqs[0] + seqs[0], seg.seqs[0] + seqs[1])
            out._seg = _Origin(seg.parent, (seg.rows[0] + a, seg.rows[0] + b), new_seqs, handed)
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

    # -- RLlib's batch utilities -------------------------------------------------

    def env_steps(self) -> int:
        """The rows (RLlib: a single-agent batch counts each row as one env step)."""
        return self.count

    def agent_steps(self) -> int:
        """The rows (RLlib: a single-agent batch counts each row as one agent step)."""
        return self.count

    def shuffle(self, seed: int | np.random.Generator | None = None) -> SampleBatch:
        """Shuffles the rows in place (every column by the same permutation) and returns the batch, as RLlib.

        Not for batches with ``seq_lens`` (their rows belong to sequences):
        a ValueError, as in RLlib. Lazy columns are materialized first.
        """
        if dict.__contains__(self, SampleBatch.SEQ_LENS) or self._seq_keys:
            raise ValueError(
                "SampleBatch.shuffle is not possible when the batch has `seq_lens` (recurrent sequences); "
                "shuffle whole sequences instead: slice the batch at the sequence bounds (b = np.cumsum([0, "
                "*batch['seq_lens']]); [batch[b[i]:b[i + 1]] for i in range(len(b) - 1)]), shuffle that list, then "
                "tv.concat_samples(it)"
            )
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        perm = rng.permutation(self.count)
        for k in list(dict.keys(self)):
            v = self[k]  # materializes a LazyView
            dict.__setitem__(self, k, v[perm])
        self._seg = None
        return self

    def timeslices(self, size: int | None = None, num_slices: int | None = None, k: int | None = None) -> list[SampleBatch]:
        """RLlib's ``timeslices``: consecutive slices of ``size`` rows (the last may be shorter), or
        ``num_slices`` slices of (nearly) equal length. ``k`` is RLlib's old name of ``size``.

        Slices are views, taken by row position: like RLlib's, they may cross
        episode boundaries (`split_by_episode` does not).
        """
        if size is None and num_slices is None:
            if k is None:
                raise ValueError("SampleBatch.timeslices needs size (or k) or num_slices")
            size = k
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise ValueError(f"SampleBatch.timeslices: size must be a positive int, got {size!r}")
            return [self[i : i + int(size)] for i in range(0, self.count, int(size))]
        assert num_slices is not None
        if isinstance(num_slices, bool) or not isinstance(num_slices, (int, np.integer)) or num_slices < 1:
            raise ValueError(f"SampleBatch.timeslices: num_slices must be a positive int, got {num_slices!r}")
        out, start, left = [], 0, self.count
        for i in range(int(num_slices)):
            n = left // (int(num_slices) - i)
            out.append(self[start : start + n])
            start += n
            left -= n
        return out

    def right_zero_pad(self, max_seq_len: int, exclude_states: bool = True) -> SampleBatch:
        """RLlib's ``right_zero_pad``: each sequence of ``seq_lens`` padded with zero rows to ``max_seq_len``,
        in place; returns the batch (``count`` becomes ``len(seq_lens) * max_seq_len``).

        This is opt-in padding for code that wants a ``[B, T]`` grid (see the
        flat layout in docs/contract.md). Per-sequence columns (``seq_lens``,
        ``state_in_*``: one row per sequence) are left as they are, as RLlib
        does with ``exclude_states=True``; ``infos`` pad with ``None``.
        """
        seq_lens = dict.get(self, SampleBatch.SEQ_LENS)
        if seq_lens is None:
            raise ValueError(f"cannot right-zero-pad a SampleBatch without {SampleBatch.SEQ_LENS!r}: {self!r}")
        seq_lens = np.asarray(seq_lens)
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
            raise ValueError(f"right_zero_pad: max_seq_len must be a positive int, got {max_seq_len!r}")
        if len(seq_lens) and int(seq_lens.max()) > max_seq_len:
            raise ValueError(f"right_zero_pad: a sequence has {int(seq_lens.max())} rows, more than max_seq_len={max_seq_len}")
        if int(seq_lens.sum()) != self.count:
            raise ValueError(f"right_zero_pad: seq_lens sum to {int(seq_lens.sum())}, the batch has {self.count} rows")
        length = len(seq_lens) * int(max_seq_len)
        starts = np.concatenate(([0], np.cumsum(seq_lens)[:-1])).astype(np.int64)
        src = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, seq_lens)]) if len(seq_lens) else np.zeros(0, np.int64)
        dst = np.concatenate([np.arange(q * max_seq_len, q * max_seq_len + n) for q, n in enumerate(seq_lens)]) if len(seq_lens) else np.zeros(0, np.int64)
        for key in list(dict.keys(self)):
            if key == SampleBatch.SEQ_LENS or key in self._seq_keys:
                continue
            v = self[key]
            pad = np.empty(length, dtype=object) if v.dtype == object else np.zeros((length, *v.shape[1:]), dtype=v.dtype)
            pad[dst] = v[src]
            dict.__setitem__(self, key, pad)
        self.count = length
        self._seg = None
        return self

    def to_padded(self) -> dict[str, np.ndarray]:
        """One row per episode, padded: ``{column: [N, T_max, *shape], "mask": bool [N, T_max]}``.

        Episodes as in `split_by_episode`; ``T_max`` is the longest; rows past
        an episode's end are zeros (``None`` for ``infos``) and ``mask`` is
        ``False`` there. Per-sequence columns (``seq_lens``, ``state_in_*``)
        have no per-step rows and raise ``ValueError``. Nested columns keep
        their structure (``out["obs"]["image"]``).
        """
        if self._seq_keys:
            raise ValueError(
                f"to_padded needs per-step columns only, got per-sequence columns {sorted(self._seq_keys)}"
            )
        if "mask" in self:
            raise ValueError("to_padded adds a 'mask' column, but the batch already has one")
        lengths = [e.count for e in self.split_by_episode()]
        flat = interop.to_padded(dict(dict.items(self)), lengths)
        if all(SEP not in k for k in flat):
            return flat
        keys = list(flat)  # nested columns in their structure again: out["obs"]["image"] is [N, T_max, ...]
        return {k: flat[k] if k in flat else assemble(k, keys, flat.__getitem__) for k in dict.fromkeys(
            k.split(SEP, 1)[0] for k in keys)}

    def to_tensordict(self, obs_key: str = OBS) -> Any:
        """A `tensordict.TensorDict` in TorchRL's layout, zero copy where possible.

        ``new_obs`` -> ``("next", "obs")``, ``rewards`` -> ``("next", "reward")``,
        ``actions`` -> ``action``, ``eps_id`` -> ``("collector", "traj_ids")``, the
        end flags and ``is_init`` as ``[B, 1]`` bools, ``infos`` left out (the whole
        mapping: `views.interop.to_tensordict`; docs/contract.md, Flat layout).
        ``obs_key="observation"``: the observation under TorchRL's envs' name (``obs`` -> ``observation``,
        ``new_obs`` -> ``("next", "observation")``).
        Needs ``torch`` and ``tensordict`` (``pip install tensordict``).
        """
        return interop.to_tensordict(dict(dict.items(self)), self.count, self._seq_keys, obs_key)

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
            out._pruned = self._pruned
            out._seg = self._seg  # same array objects, so still a segment
        else:
            cols = {k: (v.copy() if hasattr(v, "copy") else np.array(v)) for k, v in dict.items(self)}
            out = self._from_columns(cols, self.count, self._seq_keys, self._extra_seq_keys)
            out._pruned = self._pruned
        out.view_columns = self.view_columns
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
        return _rebuild, (type(self), dict(dict.items(self)), self._extra_seq_keys, self._pruned, self.view_columns)

    def __repr__(self) -> str:
        seqs = ""
        if SampleBatch.SEQ_LENS in self:
            seqs = f", {len(dict.__getitem__(self, SampleBatch.SEQ_LENS))} seqs"
        return f"{type(self).__name__}({self.count} rows{seqs}: {list(self.keys())})"


def __getattr__(name: str) -> Any:
    # `MultiAgentBatch` and `concat_samples` lived here before the split: deprecated (`trajview._compat.RENAMED`),
    # resolved on first use (their modules import this one)
    from .._compat import renamed

    return renamed(__name__, name)
