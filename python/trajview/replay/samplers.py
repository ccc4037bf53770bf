"""Samplers of `ReplayBuffer`: which slices of which stored trajectories a sample reads (see docs/contract.md, Replay).

`SliceSampler` is TorchRL's: slices of trajectories, uniform over the
eligible trajectories, then uniform over start steps. The buffer hands the
sampler's settings and a fresh seed to the C++ store, which picks the slices
and builds every view without the GIL.
"""

from __future__ import annotations

import threading

import numpy as np

from .._validate import positive_int

__all__ = ["SliceSampler"]

#: Steps one `sample` may ask for (2**31: far beyond any training batch; a larger request is a mistake, refused
#: before anything is allocated).
MAX_BATCH_SIZE = 2**31


class SliceSampler:
    """Samples slices of trajectories, with TorchRL's names and semantics.

    Args:
        num_slices: slices per sample; the slice length is then
            ``batch_size // num_slices``. Exclusive with ``slice_len``.
        slice_len: steps per slice; ``num_slices = batch_size // slice_len``.
            The batch size must be divisible by either.
        traj_key: the column holding trajectory ids (default: ``eps_id``, else
            ``traj_ids``, else trajectories are cut at the ``end_key`` flags).
        end_key: a bool column marking a trajectory's last step (default:
            ``terminateds | truncateds``, or ``dones``).
        truncated_key: a bool column set ``True`` at each slice's last real
            step in the output (so that value estimators see where a slice
            stops), as TorchRL does; when the buffer does not store it, the
            sample gets it as a computed column. ``None`` marks nothing. A
            stored ``dones`` column is OR-ed with the same mark. Padding rows
            (``pad_output``) are not marked.
        strict_length: ``True``: only trajectories of at least ``slice_len``
            steps are sampled. ``False`` (default): shorter trajectories give
            shorter slices (the output then has fewer rows than the batch size).
        pad_output: pad every slice to ``slice_len`` rows by repeating its last
            real step and add a bool ``mask`` column (``False`` on padding).
            Not with ``strict_length=True`` (a ValueError, as in TorchRL).
        seed: seed of the sampler's random generator.

    A slice picks a trajectory uniformly among the eligible ones, then a start
    uniformly among those leaving ``slice_len`` steps. Slices never cross a
    trajectory boundary, the buffer's write head, or a partly overwritten
    trajectory. ``is_init`` is set at each slice's first step and at every
    real episode start.
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: str | None = None,
        end_key: str | None = None,
        truncated_key: str | None = "truncateds",
        strict_length: bool = False,
        pad_output: bool = False,
        seed: int | None = None,
    ) -> None:
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"SliceSampler needs exactly one of num_slices and slice_len, got num_slices={num_slices!r}, "
                f"slice_len={slice_len!r}"
            )
        self.num_slices = None if num_slices is None else positive_int("num_slices", num_slices)
        self.slice_len = None if slice_len is None else positive_int("slice_len", slice_len)
        for name, key in (("traj_key", traj_key), ("end_key", end_key), ("truncated_key", truncated_key)):
            if key is not None and not isinstance(key, str):
                raise TypeError(f"SliceSampler {name} must be a column name (str) or None, got {key!r}")
        self.traj_key = traj_key
        self.end_key = end_key
        self.truncated_key = truncated_key
        if strict_length and pad_output:
            raise ValueError(
                "SliceSampler: strict_length=True and pad_output=True cannot go together (strict_length samples only "
                "trajectories of at least slice_len steps, so there is nothing to pad), as in TorchRL"
            )
        self.strict_length = bool(strict_length)
        self.pad_output = bool(pad_output)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def slices(self, batch_size: int) -> tuple[int, int]:
        """``(num_slices, slice_len)`` for a batch of ``batch_size`` steps."""
        batch_size = positive_int("batch_size", batch_size)
        if batch_size > MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be at most {MAX_BATCH_SIZE} steps per sample, got {batch_size}")
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size must be divisible by num_slices={self.num_slices}, got batch_size={batch_size}"
                )
            return self.num_slices, batch_size // self.num_slices
        assert self.slice_len is not None
        if batch_size % self.slice_len:
            raise ValueError(f"batch_size must be divisible by slice_len={self.slice_len}, got batch_size={batch_size}")
        return batch_size // self.slice_len, self.slice_len

    def _next_seed(self) -> int:
        with self._lock:
            return int(self._rng.integers(0, 2**63))

    def __repr__(self) -> str:
        size = f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"
        return (
            f"SliceSampler({size}, traj_key={self.traj_key!r}, end_key={self.end_key!r}, "
            f"strict_length={self.strict_length}, pad_output={self.pad_output})"
        )
