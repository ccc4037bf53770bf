"""The row layout rules of a batch's columns: which columns have one row per step and which one per sequence.

A batch's columns are checked and converted here (`_to_array`), and `_layout`
works out its row count and its per-sequence columns (``seq_lens`` and the
``state_in_*`` columns, plus any name registered as per-sequence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import columns as _c
from .columns import STATE_IN_PREFIX

def _to_array(key: str, value: Any) -> Any:
    """Convert a column value to an array with a batch axis, naming ``key`` on error."""
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "__getitem__"):
        # A framework tensor (torch, jax, ...): kept as is, it has a batch axis.
        if len(value.shape) == 0:
            raise ValueError(f"SampleBatch column {key!r} must have a batch axis, got a 0-d {type(value).__name__}")
        return value
    elif key == _c.INFOS and isinstance(value, (list, tuple)):
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
    if arr.dtype == object and key != _c.INFOS:
        raise TypeError(
            f"SampleBatch column {key!r} must have a numeric, bool or string dtype, got dtype object "
            f"(ragged or mixed values?); only {_c.INFOS!r} may hold objects"
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


def _layout(
    cols: Mapping[str, Any], extra_seq_keys: frozenset[str], per_step: frozenset[str] = frozenset()
) -> tuple[int, frozenset[str]]:
    """Validate ``cols`` and return (number of timestep rows, per-sequence column names).

    With ``seq_lens`` present, ``seq_lens`` and every ``state_in_*`` or registered
    column with ``len(seq_lens)`` rows is per-sequence; all others are per-step
    and must share one length. ``per_step``: columns known to be per-step (a batch's own, kept as they are when
    another column is set): never taken for per-sequence ones, which a batch of one sequence of one step could
    not tell apart by their rows.
    """
    seq_lens = cols.get(_c.SEQ_LENS)
    n_seqs: int | None = None
    if seq_lens is not None:
        if seq_lens.ndim != 1 or not _is_integer_dtype(seq_lens.dtype):
            raise TypeError(
                f"SampleBatch column {_c.SEQ_LENS!r} must be a 1-D integer array, "
                f"got shape {tuple(seq_lens.shape)} dtype {seq_lens.dtype}"
            )
        n_seqs = len(seq_lens)
    seq: set[str] = set()
    count: int | None = None
    ref = ""
    for k, v in cols.items():
        n = v.shape[0]
        candidate = (k == _c.SEQ_LENS or k.startswith(STATE_IN_PREFIX) or k in extra_seq_keys) and k not in per_step
        if n_seqs is not None and candidate and (k == _c.SEQ_LENS or n == n_seqs):
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
