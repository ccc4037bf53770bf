"""Advantage estimation for one trajectory (RLlib's ``compute_advantages``, with correct bootstrapping), or for the
episode segments of a flat batch in one pass (`gae_of_segments`): one arithmetic, `_core.discounted_sums`' scan."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import _core
from ..views.nest import assemble
from ..views.sample_batch import SampleBatch

__all__ = ["Postprocessing", "discount_cumsum", "compute_advantages", "compute_gae_for_sample_batch", "last_rows",
           "rows_of", "bootstraps", "gae_of_segments"]


class Postprocessing:
    """Column names that postprocessing adds."""

    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"


def _np(v: Any) -> np.ndarray:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def _map(fn: Callable[[Any], Any], value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _map(fn, v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_map(fn, v) for v in value)
    return fn(value)


def last_rows(batch: Mapping[str, Any], key: str, n: int = 1) -> Any:
    """The last ``n`` rows of column ``key`` as numpy (``[n, ...]``; a nested column: its structure, per leaf).

    Lazy columns (image frames, frame stacks) of a `SampleBatch` are read
    row by row without materializing the whole column; a batch that tracks
    reads (the view-pruning pass) is read normally, so the read counts.
    """
    return _rows(batch, key, lambda v: v[-n:])


def rows_of(batch: Mapping[str, Any], key: str, rows: np.ndarray) -> Any:
    """Rows ``rows`` (int64 indices) of column ``key`` as numpy (``[len(rows), ...]``), read as `last_rows` reads."""
    return _rows(batch, key, lambda v: v[rows])


def _rows(batch: Mapping[str, Any], key: str, take: Callable[[Any], Any]) -> Any:
    if isinstance(batch, SampleBatch) and not getattr(batch, "_tracking", False):
        if dict.__contains__(batch, key):
            return _np(take(dict.__getitem__(batch, key)))
        keys = list(dict.keys(batch))
        return assemble(key, keys, lambda k: _np(take(dict.__getitem__(batch, k))))
    return _map(lambda v: _np(take(v)), batch[key])


def discount_cumsum(x: np.ndarray, gamma: float) -> np.ndarray:
    """``y[t] = sum_k gamma**k * x[t + k]`` (float64; computed backwards as ``y[t] = x[t] + gamma * y[t + 1]``)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    return _core.discounted_sums(x, np.array([len(x)], np.int64), float(gamma))


def gae_of_segments(
    rewards: np.ndarray, vf_preds: np.ndarray, lengths: np.ndarray, last_r: np.ndarray, gamma: float, lambda_: float
) -> tuple[np.ndarray, np.ndarray]:
    """GAE's advantages and value targets (float32) of consecutive trajectories' rows: ``lengths`` their row counts
    (in order, summing to the rows), ``last_r`` each one's value after its last step (`compute_advantages`).
    ``delta[t] = r[t] + gamma * V[t + 1] - V[t]`` (``V`` after a trajectory's last row: its ``last_r``), the
    advantages its discounted sums by ``gamma * lambda_`` within each trajectory, the targets advantages + ``V``; all
    in float64, so a trajectory's figures are the same whether it is computed alone or with others."""
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    vf = np.asarray(vf_preds, dtype=np.float64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if len(vf) != len(rewards):
        raise ValueError(f"gae_of_segments: expected {len(rewards)} vf_preds (one per reward), got {len(vf)}")
    ends = np.cumsum(lengths)
    if len(ends) and ends[-1] != len(rewards) or not len(ends) and len(rewards):
        raise ValueError(f"gae_of_segments: the lengths sum to {int(ends[-1]) if len(ends) else 0} rows, "
                         f"expected {len(rewards)}")
    nonempty = lengths > 0
    v_next = np.empty_like(vf)
    v_next[:-1] = vf[1:]
    v_next[ends[nonempty] - 1] = np.asarray(last_r, dtype=np.float64).reshape(-1)[nonempty]
    delta = rewards + gamma * v_next - vf
    adv = _core.discounted_sums(delta, lengths, float(gamma * lambda_))
    targets = adv + vf
    return adv.astype(np.float32), targets.astype(np.float32)


def compute_advantages(
    rollout: SampleBatch,
    last_r: float,
    gamma: float = 0.9,
    lambda_: float = 1.0,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """Adds ``advantages`` and ``value_targets`` (float32) to one trajectory's batch.

    ``last_r`` is the value of the state after the batch's last step: the
    critic's value of the last ``new_obs`` when the trajectory was truncated
    (time limit, horizon, fragment cut), 0 when it terminated.
    ``compute_gae_for_sample_batch`` chooses it for you.
    """
    rewards = np.asarray(rollout[SampleBatch.REWARDS], dtype=np.float64)
    if use_gae:
        if not use_critic:
            raise ValueError("compute_advantages: use_gae=True needs a critic (use_critic=True)")
        adv32, targets32 = gae_of_segments(rewards, rollout[SampleBatch.VF_PREDS], np.array([len(rewards)]),
                                           np.array([float(last_r)]), gamma, lambda_)
        rollout[Postprocessing.ADVANTAGES] = adv32
        rollout[Postprocessing.VALUE_TARGETS] = targets32
        return rollout
    returns = discount_cumsum(np.append(rewards, float(last_r)), gamma)[:-1]
    if use_critic:
        vf = np.asarray(rollout[SampleBatch.VF_PREDS], dtype=np.float64)
        adv, targets = returns - vf, returns
    else:
        adv, targets = returns, np.zeros_like(returns)
    rollout[Postprocessing.ADVANTAGES] = adv.astype(np.float32)
    rollout[Postprocessing.VALUE_TARGETS] = targets.astype(np.float32)
    return rollout


def bootstraps(sample_batch: Mapping[str, Any], use_critic: bool = True) -> bool:
    """Whether `compute_gae_for_sample_batch` asks its ``value_fn`` for the value after the trajectory's last step:
    a critic, and steps that did not end with a termination (a time limit, the horizon, a fragment's cut)."""
    return use_critic and len(sample_batch) > 0 and not bool(np.asarray(sample_batch[SampleBatch.TERMINATEDS])[-1])


def compute_gae_for_sample_batch(
    sample_batch: SampleBatch,
    value_fn: Callable[[np.ndarray], float] | None,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """``compute_advantages`` with ``last_r`` chosen by how the trajectory ended.

    Terminated at its last step: ``last_r = 0``. Otherwise (truncated by a
    time limit or the horizon, or cut at a fragment's end) the episode goes
    on past the batch, so ``last_r = value_fn(new_obs[-1])`` (for a nested
    observation: its structure of last rows).
    """
    if len(sample_batch) == 0:
        return sample_batch
    if not bootstraps(sample_batch, use_critic):
        last_r = 0.0
    else:
        if value_fn is None:
            raise ValueError("compute_gae_for_sample_batch: a truncated trajectory needs value_fn to bootstrap")
        last_r = float(value_fn(_map(lambda v: v[0], last_rows(sample_batch, SampleBatch.NEXT_OBS))))
    return compute_advantages(sample_batch, last_r, gamma, lambda_, use_gae, use_critic)
