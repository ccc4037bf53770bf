"""TorchRL's slice samplers, reading trajectories from a `TrajviewStorage` one entry at a time.

TorchRL's `SliceSampler` finds trajectories by reading ``storage[:]`` and taking its trajectory-id (or end)
entry. On a `TrajviewStorage` that works, but gathers every stored step with its views at each sample (or at
each write, with ``cache_values=True``): fine for small buffers, too much for a million frames. These
subclasses read the same entry through `TrajviewStorage.columns_only` (that entry alone, gathered from the
store's rows); on any other storage, and in everything else, they are TorchRL's samplers.
"""

from __future__ import annotations

from typing import Any

from torchrl.data.replay_buffers.samplers import (
    PrioritizedSliceSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)

from .storage import TrajviewStorage

__all__ = ["TrajviewPrioritizedSliceSampler", "TrajviewSliceSampler", "TrajviewSliceSamplerWithoutReplacement"]


class _ColumnsOnly:
    """Runs TorchRL's trajectory lookups with the storage handing out single entries."""

    def _get_stop_and_length(self, storage: Any, fallback: bool = True) -> Any:
        if isinstance(storage, TrajviewStorage):
            with storage.columns_only():
                return super()._get_stop_and_length(storage, fallback)  # type: ignore[misc]
        return super()._get_stop_and_length(storage, fallback)  # type: ignore[misc]

    def _finalize_index(self, *, storage: Any, **kwargs: Any) -> Any:
        # TorchRL reads the sampled steps' done / terminated / is_init entries here (``storage[index]``): on a
        # TrajviewStorage those entries alone, not a second gather of the whole batch with its frames and views.
        if isinstance(storage, TrajviewStorage):
            with storage.columns_only():
                return super()._finalize_index(storage=storage, **kwargs)  # type: ignore[misc]
        return super()._finalize_index(storage=storage, **kwargs)  # type: ignore[misc]

    def _resolve_traj_key(self, storage: Any) -> Any:
        if isinstance(storage, TrajviewStorage):
            with storage.columns_only():
                return super()._resolve_traj_key(storage)  # type: ignore[misc]
        return super()._resolve_traj_key(storage)  # type: ignore[misc]


class TrajviewSliceSampler(_ColumnsOnly, SliceSampler):  # type: ignore[misc]
    """TorchRL's `SliceSampler` (same arguments and samples), reading a `TrajviewStorage`'s trajectory ids
    without gathering its frames."""


class TrajviewSliceSamplerWithoutReplacement(_ColumnsOnly, SliceSamplerWithoutReplacement):  # type: ignore[misc]
    """TorchRL's `SliceSamplerWithoutReplacement`, reading a `TrajviewStorage`'s trajectory ids alone."""


class TrajviewPrioritizedSliceSampler(_ColumnsOnly, PrioritizedSliceSampler):  # type: ignore[misc]
    """TorchRL's `PrioritizedSliceSampler` (needs torchrl's C++ extension), reading a `TrajviewStorage`'s
    trajectory ids alone."""
