"""Observation filters applied where the samplers read observations (one place for both step loops).

A filter (`trajview.rollout.filter`) maps one observation; these apply it to
a step's rows in env order (each row pushed first, as RLlib does) or to one
agent's observation, keeping each leaf's dtype. A non-finite observation a
``MeanStdFilter(nonfinite="raise")`` refuses is raised naming the env (and
agent) that returned it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NonFiniteObservationError
from ..views.nest import Nest
from ..views.sample_batch import SampleBatch

__all__ = ["filter_observation", "filter_rows"]


def filter_rows(f: Any, obs: Any, nest: Nest, envs: np.ndarray, failed: np.ndarray | None = None) -> Any:
    """``f`` applied to each row of ``obs`` (an array, or a nested space's leaf columns ``obs.<leaf>``) in env
    order; the rows ``failed`` (of envs that failed) are filtered without being pushed. ``envs``: each row's env
    (a non-finite observation the filter refuses names it)."""
    try:
        return _filter_rows(f, obs, nest, set() if failed is None else set(failed.tolist()))
    except NonFiniteObservationError as e:
        if e.row is None:
            raise
        raise e.at_env(int(envs[e.row])) from None


def _filter_rows(f: Any, obs: Any, nest: Nest, skip: set[int]) -> Any:
    columns = hasattr(f, "filter_columns")  # MeanStdFilter: checked, pushed and filtered row by row, leaf by leaf
    if nest.flat:
        if columns:
            return f.filter_columns({(): obs}, skip)[()]
        out = np.empty(obs.shape, dtype=obs.dtype)
        for j in range(len(obs)):
            out[j] = f(obs[j], update=j not in skip)
        return out
    names = nest.names(SampleBatch.OBS)
    cols = [obs[c] for c in names]
    if columns:
        by_path = f.filter_columns({leaf.path: c for leaf, c in zip(nest.leaves, cols)}, skip)
        filtered = [by_path[leaf.path] for leaf in nest.leaves]
    else:  # another Filter: one nested observation at a time
        filtered = [np.empty_like(c) for c in cols]
        for j in range(len(cols[0])):
            row = f(nest.unflatten(c[j] for c in cols), update=j not in skip)
            for k, v in enumerate(nest.leaf_values(row, "the filtered observation")):
                filtered[k][j] = v
    return {**obs, **dict(zip(names, filtered))}


def filter_observation(f: Any, o: Any, nest: Nest, env: int, agent: Any) -> Any:
    """``f`` applied to agent ``agent`` of env ``env``'s observation ``o`` (pushed), in ``o``'s dtype (a nested
    one: the filter keeps each leaf's dtype); a non-finite one the filter refuses names the env and agent."""
    try:
        if not nest.flat:
            return f(o)
        dtype = np.asarray(o).dtype
        return np.asarray(f(o), dtype=dtype)
    except NonFiniteObservationError as e:
        raise e.at_env(env, agent) from None
