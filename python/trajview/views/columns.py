"""The column vocabulary, in one copy: column names, the boundary columns, the recurrent-state prefixes, and
``(dtype, per-step shape)`` of a column from a space or a ``(dtype, shape)`` pair.

Every layer takes these from here (`SampleBatch`'s name constants, the collector, the policy's pruning pass,
replay, the reference oracles); see docs/contract.md, Views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "cast_exactly",
    "BOUNDARY_COLUMNS",
    "PYTHON_COLUMNS",
    "ColumnSpec",
    "STATE_IN_PREFIX",
    "STATE_OUT_PREFIX",
    "column_spec",
    "column_spec_from_space",
    "column_specs",
]

#: (dtype, per-step shape) of a stored column.
ColumnSpec = tuple[np.dtype, tuple[int, ...]]

# -- names: the constants of `SampleBatch` (user code reads them there: `SampleBatch.OBS`) ---------------

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

#: Columns every batch carries, computed by the store from the episode rather than stored.
BOUNDARY_COLUMNS = (EPS_ID, ENV_ID, T, IS_INIT)

#: Columns a sampler computes when it builds a batch (never stored; views of them at shift 0 only):
#: ``dones`` (terminated or truncated), ``unroll_id`` (which ``sample()`` call built the row) and
#: ``agent_index`` (the agent's position in ``possible_agents``; 0 in single-agent batches).
PYTHON_COLUMNS = {DONES: np.dtype(np.bool_), UNROLL_ID: np.dtype(np.int64), AGENT_INDEX: np.dtype(np.int64)}

#: Recurrent state: ``state_in_{i}`` (per-sequence in training batches) reads ``state_out_{i}`` at shift -1.
STATE_IN_PREFIX = "state_in_"
STATE_OUT_PREFIX = "state_out_"


# -- (dtype, shape) ----------------------------------------------------------------------------------------


def column_spec_from_space(space: Any, what: str | None = None) -> ColumnSpec:
    """(dtype, per-step shape) of a gymnasium space's samples.

    ``what`` names the space in the error (e.g. ``"observation_space"``) when it has no fixed dtype and shape.
    """
    dtype = getattr(space, "dtype", None)
    shape = getattr(space, "shape", None)
    if dtype is None or shape is None:
        if shape is None and what is not None:
            from .nest import Nest

            Nest.from_space(space, what)  # a Text / Graph / Sequence leaf: its own error, naming its path
            raise ValueError(f"{what}: the nested space {space!r} is stored one column per leaf, not as one column")
        if what is None:
            raise ValueError(f"cannot store samples of space {space!r}: it has no fixed dtype and shape")
        raise ValueError(f"{what}: space {space!r} has no fixed dtype and shape; trajview stores fixed-shape arrays")
    return np.dtype(dtype), tuple(int(d) for d in shape)


def column_spec(name: str, spec: Any, *, spaces: bool = True) -> ColumnSpec:
    """(dtype, per-step shape) of column ``name`` from ``(dtype, shape)`` (shape an int or a sequence of ints)
    or, with ``spaces``, from a gymnasium space."""
    if not (isinstance(spec, tuple) and len(spec) == 2):
        if spaces:
            return column_spec_from_space(spec)
        raise ValueError(f"columns[{name!r}] must be (dtype, shape), got {spec!r}")
    dtype, shape = spec
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"column {name!r}: bad dtype {dtype!r}") from e
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shp = tuple(int(d) for d in shape)
    except TypeError as e:
        raise ValueError(f"column {name!r}: shape must be a tuple of ints, got {shape!r}") from e
    return dt, shp


def column_specs(columns: Mapping[Any, Any], *, spaces: bool = True) -> dict[str, ColumnSpec]:
    """`column_spec` of every entry of ``{name: (dtype, shape) or space}``, names as str.

    A nested space (``Dict`` / ``Tuple``) gives one column per leaf (``name.key``, see `trajview.views.nest`);
    a leaf also given by name is a ValueError naming both (`flatten_columns`). ``spaces=False`` refuses a
    space that is one column (``(dtype, shape)`` only).
    """
    from .nest import flatten_columns, space_specs

    named = {str(k): v for k, v in columns.items()}
    flat = flatten_columns(named, space_specs)
    return {k: column_spec(k, v, spaces=spaces) if k in named else v for k, v in flat.items()}


def cast_exactly(name: str, arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``arr`` as ``dtype`` if numpy calls the cast safe and no value changes, else a ValueError naming ``name``.

    numpy counts int64 -> float64 as safe, but float64 holds integers exactly
    only up to 2**53: a larger value would be rounded without a word.
    """
    if arr.dtype == dtype:
        return arr
    if not np.can_cast(arr.dtype, dtype, "safe"):
        raise ValueError(f"column {name!r}: expected dtype {dtype}, got {arr.dtype} (casting would lose data)")
    if arr.dtype.kind in "iu" and dtype.kind == "f" and arr.size:
        exact = 2 ** (np.finfo(dtype).nmant + 1)
        big = max(abs(int(arr.max())), abs(int(arr.min())))
        if big > exact:
            raise ValueError(
                f"column {name!r}: the {arr.dtype} value {big} has no exact {dtype} (the column's dtype); integers "
                f"above 2**{np.finfo(dtype).nmant + 1} would be rounded"
            )
    return arr.astype(dtype)
