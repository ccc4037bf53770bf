"""`concat_samples`, and the zero-copy joining of consecutive segments of one collector buffer.

A segment (`SampleBatch._segment`) remembers its `_Origin`: the flat parent arrays, its row (and sequence)
ranges and the arrays it handed out. Untouched segments of one parent that follow each other concatenate to
views of that parent instead of copies; lazy columns stay lazy (see docs/contract.md, Flat layout).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast, overload

import numpy as np

from .lazy_view import LazyView
from .multi_agent_batch import MultiAgentBatch
from .sample_batch import SampleBatch, _Origin

__all__ = ["concat_samples"]


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
    segs: list[_Origin],
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
        out._pruned = first._pruned
        out._seg = first._seg
        out.view_columns = first.view_columns
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
    out._pruned = batches[0]._pruned
    out.view_columns = frozenset().union(*(b.view_columns for b in batches))
    if handed and chain is not None:
        out._seg = _Origin(chain[0], chain[1], chain[2], handed)
    return out
