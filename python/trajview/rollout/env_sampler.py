"""`EnvSampler`: what a `RolloutWorker` drives, and the one emit protocol both step loops hand batches out by.

As RLlib's ``EnvRunner`` base serves its single- and multi-agent runners, a
worker sees one interface: ``build(rebuild)`` (new stores for the policies'
views, every env reset), ``sample()``, ``collectors`` (the store of each
policy), ``filters`` (the observation filter of each policy that has one) and
``explore``. `SingleAgentSampler` and `MultiAgentSampler` implement it.

The emit protocol (docs/contract.md, Faults), written once here:

1. a subclass steps its envs until a batch is due (``_sample``), builds the
   batch's episode segments from its stores and hands them to `_hand_out`;
2. each batch takes the next ``unroll_id``, and a finished trajectory cut by
   a fault has its last stored step marked ``truncateds=True`` in the batch
   that holds that step (`_note_cut`, `_was_cut`);
3. the segments are postprocessed (``_postprocess``: the subclass's
   ``postprocess_trajectory`` calls and concatenation), then
   ``on_sample_end`` runs. If either raises, the built batch stays pending,
   and the next ``sample()`` hands it out (retrying only what raised) before
   any env steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, Generic

from ..collect.collector import Collector
from .config import RolloutConfig
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .options import BatchT

__all__ = ["EnvSampler"]


class _Pending:
    """A batch built but not handed out: its segments until postprocessed, then the batch itself."""

    __slots__ = ("batch", "segments")

    def __init__(self, segments: Any, batch: Any) -> None:
        self.segments = segments
        self.batch = batch


class EnvSampler(ABC, Generic[BatchT]):
    """The interface a `RolloutWorker` drives, and the emit protocol (see the module's docstring)."""

    def __init__(self, config: RolloutConfig, hooks: Hooks, metrics: EpisodeMetrics) -> None:
        self.config = config
        self.hooks = hooks
        self.metrics = metrics
        #: The explore flag passed to the policies (`RolloutWorker(explore=...)`, `sample(explore=...)`).
        self.explore: Any = True
        #: Observation filters by policy id (RLlib's ``observation_filter``); policies without one are not in it.
        self.filters: dict[str, Any] = {}
        self._unroll_id = 0
        #: Trajectories cut by a fault with steps not emitted yet (keys of the subclass's choosing).
        self._cut_eps: set[Hashable] = set()
        self._pending: _Pending | None = None

    # -- the interface ------------------------------------------------------------

    @property
    @abstractmethod
    def collectors(self) -> dict[str, Collector]:
        """The store of each policy (empty before the first `build`)."""

    @abstractmethod
    def build(self, rebuild: int) -> None:
        """New stores for the policies' current views; every env resets (seeded on the first build only).
        Subclasses call `_reset_emit`."""

    def sample(self) -> BatchT:
        """One batch (docs/contract.md, Rollouts): a pending one first, else the envs step until one is due."""
        if self._pending is not None:
            return self._finish_emit()
        return self._sample()

    # -- what subclasses implement -------------------------------------------------

    @abstractmethod
    def _sample(self) -> BatchT:
        """Steps the envs until a batch is due, builds its segments and returns `_hand_out` of them."""

    @abstractmethod
    def _postprocess(self, segments: Any) -> BatchT:
        """The batch of built ``segments``: each postprocessed, then concatenated. Raises before it changes any
        state (it is retried from the same segments)."""

    # -- the protocol -------------------------------------------------------------

    def _reset_emit(self) -> None:
        """A new store: nothing cut, nothing pending (unroll ids go on counting)."""
        self._cut_eps = set()
        self._pending = None

    def _next_unroll_id(self) -> int:
        unroll = self._unroll_id
        self._unroll_id += 1
        return unroll

    def _note_cut(self, key: Hashable, unemitted: int) -> None:
        """Trajectory ``key`` was cut by a fault with ``unemitted`` steps no batch holds yet: the batch that holds
        its last step marks that step truncated (unless ``no_done_at_end``; none to mark if all were emitted)."""
        if unemitted > 0 and not self.config.no_done_at_end:
            self._cut_eps.add(key)

    def _was_cut(self, key: Hashable, finished: bool) -> bool:
        """Whether the batch now built ends trajectory ``key`` (``finished``: it holds its last step) after a cut:
        that step is to be marked truncated. Said once per cut."""
        if finished and self._cut_eps and key in self._cut_eps:
            self._cut_eps.discard(key)
            return True
        return False

    def _hand_out(self, segments: Any = None, batch: BatchT | None = None) -> BatchT:
        """Hands out a batch built from the stores: ``segments`` to postprocess, or a ``batch`` that needs none."""
        self._pending = _Pending(segments, batch)
        return self._finish_emit()

    def _finish_emit(self) -> BatchT:
        """Postprocesses the pending segments (if not done yet), runs ``on_sample_end`` and hands the batch out;
        it stays pending if anything raises."""
        pending = self._pending
        assert pending is not None
        if pending.batch is None:
            pending.batch = self._postprocess(pending.segments)
            pending.segments = None
        self.hooks.sample_end(pending.batch)
        self._pending = None
        return pending.batch
