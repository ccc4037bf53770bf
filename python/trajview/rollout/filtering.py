"""Observation filters applied where the samplers read observations (one place for both step loops).

A filter (`trajview.rollout.filter`) maps one observation; these apply it to
a step's rows in env order (each row pushed first, as RLlib does) or to one
agent's observation, keeping each leaf's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..views.nest import Nest
from ..views.sample_batch import SampleBatch

__all__ = ["filter_observation", "filter_rows"]


def filter_rows(f: Any, obs: Any, nest: Nest, skip: set[int] | None = None) -> Any:
    """``f`` applied to each row of ``obs`` (an array, or a nested space's leaf columns ``obs.<leaf>``) in env
    order; rows in ``skip`` (failed envs) are filtered without being pushed."""
    if nest.flat:
        out = np.empty(obs.shape, dtype=obs.dtype)
        for j in range(len(obs)):
            out[j] = f(obs[j], update=skip is None or j not in skip)
        return out
    names = nest.names(SampleBatch.OBS)
    cols = [obs[c] for c in names]
    if hasattr(f, "filter_columns"):  # MeanStdFilter: leaf by leaf
        by_path = f.filter_columns({leaf.path: c for leaf, c in zip(nest.leaves, cols)}, skip or ())
        filtered = [by_path[leaf.path] for leaf in nest.leaves]
    else:  # another Filter: one nested observation at a time
        filtered = [np.empty_like(c) for c in cols]
        for j in range(len(cols[0])):
            row = f(nest.unflatten(c[j] for c in cols), update=skip is None or j not in skip)
            for k, v in enumerate(nest.leaf_values(row, "the filtered observation")):
                filtered[k][j] = v
    return {**obs, **dict(zip(names, filtered))}


def filter_observation(f: Any, o: Any, nest: Nest) -> Any:
    """``f`` applied to one observation ``o`` (pushed), in ``o``'s dtype (a nested one: the filter keeps each
    leaf's dtype)."""
    if not nest.flat:
        return f(o)
    dtype = np.asarray(o).dtype
    return np.asarray(f(o), dtype=dtype)
