"""Per episode segment of a batch: its computed columns, infos, ``postprocess_trajectory`` and
``on_postprocess_trajectory``.

One copy for the single- and the multi-agent sampler (the emit protocol that uses these is `sampler.EnvSampler`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..policy.policy import Policy
from ..views.sample_batch import SampleBatch
from .callbacks import Episode
from .hooks import Hooks
from .plan import PolicyColumns

__all__ = [
    "FlatSegments",
    "InfoLog",
    "add_python_columns",
    "cast_rewards",
    "custom_postprocess",
    "finish_segment",
    "postprocess_segment",
]

F32 = np.dtype(np.float32)


def cast_rewards(d: Any, keys: list[str], dtype: np.dtype) -> None:
    """The rewards views ``keys`` of ``d`` (a batch or an input dict) in the env's reward dtype (float32)."""
    if dtype != F32:
        return
    for k in keys:
        if k in d:
            d[k] = np.asarray(d[k], dtype=F32)


class InfoLog:
    """One trajectory's info dicts from ``start`` on, handed out segment by segment (infos are not stored in C++)."""

    __slots__ = ("infos", "start")

    def __init__(self, start: int = 0) -> None:
        self.infos: list = []
        self.start = start  # the timestep of infos[0]

    def attach(self, seg: SampleBatch) -> None:
        """Sets ``seg["infos"]`` to the infos of its steps and forgets them."""
        n = len(seg)
        k = int(seg[SampleBatch.T][0]) - self.start
        arr = np.empty(n, dtype=object)
        arr[:] = self.infos[k : k + n]
        seg[SampleBatch.INFOS] = arr
        self.infos = self.infos[k + n :]
        self.start += k + n


def add_python_columns(seg: SampleBatch, cols: list[tuple[str, str]], unroll_id: int, agent_index: int) -> None:
    """Adds the computed columns (``dones``, ``unroll_id``, ``agent_index``) that the policy reads to ``seg``."""
    n = len(seg)
    if n == 0:
        return
    for key, col in cols:
        if col == SampleBatch.DONES:
            seg[key] = np.logical_or(seg[SampleBatch.TERMINATEDS], seg[SampleBatch.TRUNCATEDS])
        elif col == SampleBatch.UNROLL_ID:
            seg[key] = np.full(n, unroll_id, np.int64)
        else:
            seg[key] = np.full(n, agent_index, np.int64)


def finish_segment(
    seg: SampleBatch, columns: PolicyColumns, unroll_id: int, agent_index: int, reward_dtype: np.dtype
) -> None:
    """A built segment (or flat batch) as the policy trains on it: the computed columns it reads, rewards in the
    env's dtype, and which views the pruning pass took out (their KeyError says so)."""
    add_python_columns(seg, columns.python_columns, unroll_id, agent_index)
    cast_rewards(seg, columns.reward_keys, reward_dtype)
    seg._pruned = columns.pruned


def custom_postprocess(policy: Policy) -> bool:
    """Whether ``policy`` overrides ``postprocess_trajectory`` (the default one returns the segment as it is, and
    reads neither the episode nor other agents' batches)."""
    return getattr(policy.postprocess_trajectory, "__func__", None) is not Policy.postprocess_trajectory


class FlatSegments:
    """A built batch's episode segments as the flat batch (``lengths``: their rows, in order), to postprocess with
    the policy's `Policy.flat_postprocessor` (``post``) in one pass."""

    __slots__ = ("batch", "lengths", "post")

    def __init__(self, batch: SampleBatch, lengths: np.ndarray, post: Any) -> None:
        self.batch, self.lengths, self.post = batch, lengths, post

    def postprocess(self, policy: Policy) -> SampleBatch:
        """The postprocessed batch, checked as `postprocess_segment` checks a segment's."""
        out = self.post(self.batch, self.lengths)
        if not isinstance(out, SampleBatch):
            raise TypeError(f"{type(policy).__name__}.flat_postprocessor()'s function must return a SampleBatch, "
                            f"got {type(out).__name__}")
        return out


def postprocess_segment(
    policy: Policy,
    seg: SampleBatch,
    others: dict | None,
    episode: Episode,
    hooks: Hooks,
    agent_id: Any,
    policy_id: str,
) -> SampleBatch:
    """``policy.postprocess_trajectory(seg, others, episode)``, checked, then the ``on_postprocess_trajectory`` hook."""
    post = policy.postprocess_trajectory(seg, others, episode)
    if not isinstance(post, SampleBatch):
        raise TypeError(
            f"{type(policy).__name__}.postprocess_trajectory must return a SampleBatch, got {type(post).__name__}"
        )
    hooks.postprocess_trajectory(episode, agent_id, policy_id, post, {agent_id: (policy, seg)})
    return post
