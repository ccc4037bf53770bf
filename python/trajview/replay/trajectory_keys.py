"""The writer side of a replay buffer's trajectories: each added row's trajectory key and end flag, the check
that two writers do not share a trajectory id, and where an add larger than the buffer starts. Pieces are cut
by the C++ store's rule (`trajview._core.trajectory_pieces`, the one `ReplayStore::add` cuts by)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _core
from .schema import END_FLAGS, TRAJ_KEYS

__all__ = ["TrajectoryKeys"]


class TrajectoryKeys:
    """A buffer's writer-side trajectory state: the trajectories not ended yet (key -> (first ``t``, last ``t``),
    to refuse ids reused by two writers) and the next synthetic trajectory id (batches without a ``traj_key``
    column). Methods check and compute; `commit` keeps an add's result once the store took it."""

    def __init__(self, open_: Mapping[int, tuple[int, int]] | None = None, fallback_key: int = 0) -> None:
        self.open: dict[int, tuple[int, int]] = dict(open_ or {})
        self.fallback_key = fallback_key

    @staticmethod
    def uses_traj_key(batch: Mapping[str, Any], traj_key: str | None) -> bool:
        return traj_key is not None or any(k in batch for k in TRAJ_KEYS)

    def keys(
        self, batch: Mapping[str, Any], n: int, traj_key: str | None, end_key: str | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per row: trajectory key (int64) and end flag (uint8)."""
        end_keys = (end_key,) if end_key is not None else tuple(k for k in END_FLAGS if k in batch)
        if end_key is not None and end_key not in batch:
            raise ValueError(f"add: missing end_key column {end_key!r}")
        done = np.zeros(n, dtype=bool)
        for k in end_keys:
            f = np.asarray(batch[k])
            if f.shape[:1] != (n,):
                raise ValueError(f"column {k!r}: expected {n} rows, got shape {f.shape}")
            if f.ndim == 1 and f.dtype == bool:
                done |= f  # (the common flag column)
            else:
                done |= f.reshape(n, int(np.prod(f.shape[1:], dtype=np.int64))).astype(bool).any(axis=1)
        if traj_key is None:
            traj_key = next((k for k in TRAJ_KEYS if k in batch), None)
        elif traj_key not in batch:
            raise ValueError(f"add: missing traj_key column {traj_key!r}")
        if traj_key is not None:
            keys = np.asarray(batch[traj_key])
            if keys.shape != (n,) or not np.issubdtype(keys.dtype, np.integer):
                raise ValueError(
                    f"column {traj_key!r} (the trajectory ids) must be a 1-D int array of {n} rows, "
                    f"got shape {keys.shape} dtype {keys.dtype}"
                )
            keys = keys.astype(np.int64)
        else:
            if not end_keys:
                raise ValueError(
                    "add: the batch has no trajectory ids ('eps_id' or 'traj_ids') and no end flags "
                    f"({', '.join(repr(k) for k in END_FLAGS)}), so its trajectories are unknown; "
                    f"got columns {list(batch)}"
                )
            # Synthetic ids: a new one after each end flag, carried across batches (`commit` advances them).
            ends_before = (np.cumsum(done) - done).astype(np.int64)
            keys = self.fallback_key + ends_before
        return np.ascontiguousarray(keys, dtype=np.int64), done.view(np.uint8)

    @staticmethod
    def first_kept_row(keys: np.ndarray, done: np.ndarray, capacity: int, has_next: bool) -> int:
        """0, or where to start a batch that does not fit in ``capacity`` rows (each piece adds a final row).

        The pieces of ``rows[first:]`` are the batch's pieces that start after ``first``, plus the one
        ``first`` cuts into."""
        n = len(keys)
        starts = _core.trajectory_pieces(keys, done) if has_next else np.zeros(0, np.int64)
        if n + len(starts) <= capacity:
            return 0
        first = max(0, n - capacity)
        while first < n:
            pieces = 1 + int(np.count_nonzero(starts > first)) if has_next else 0
            if n - first + pieces <= capacity:
                return first
            first += 1
        return n

    @staticmethod
    def check_steps(keys: np.ndarray, t: np.ndarray, done: np.ndarray, key_name: str) -> None:
        """Refuses a batch whose ``t`` does not go up by one along each of its trajectory pieces (the rows of one
        trajectory id between ends): its steps would be stored as one trajectory in an order they were not
        taken in, and every view across them would be wrong."""
        step = t[1:] - t[:-1]
        if (step == 1).all():
            return  # (the common batch: one step after another)
        jumps = np.flatnonzero(step != 1) + 1
        starts = np.zeros(len(t), dtype=bool)
        starts[_core.trajectory_pieces(keys, done)] = True
        inside = jumps[~starts[jumps]]  # a jump where a piece does not start
        if len(inside):
            r = int(inside[0])
            raise ValueError(
                f"add: column 't' goes from {int(t[r - 1])} to {int(t[r])} at rows {r - 1}-{r}, within one trajectory "
                f"(column {key_name!r} = {int(keys[r])}, no end between): a trajectory's steps must have t = t0, "
                f"t0 + 1, ... in order"
            )

    def check_writers(self, keys: np.ndarray, t: np.ndarray, done: np.ndarray, key_name: str) -> dict[int, tuple[int, int]]:
        """Refuses a trajectory id that two writers use at once (their steps would be glued into one trajectory).

        One writer's ``t`` only grows along a trajectory id: a piece whose key is the key of a trajectory that
        has not ended, but whose ``t`` overlaps that trajectory's stored steps (from its first ``t`` to its
        last), means two trajectories share an id (e.g. two workers left at ``worker_index=0``). A piece that
        skips ahead (``t`` > last + 1: steps missing) or that ends before the open trajectory's first ``t`` (an
        earlier fragment arriving late) is a fragment of the same episode that is not contiguous with what is
        stored: it starts a trajectory of its own (and the open one is not continued any more). Returns the open
        trajectories (key -> (first ``t``, last ``t``)) after this batch, kept by `commit` once the add succeeds.
        """
        state = dict(self.open)
        starts = _core.trajectory_pieces(keys, done)
        ends = np.r_[starts[1:], len(keys)] - 1
        for s, e in zip(starts.tolist(), ends.tolist()):
            k = int(keys[s])
            first, last = state.get(k, (None, None))
            if last is not None and first is not None and int(t[s]) <= last and int(t[e]) >= first:
                raise ValueError(
                    f"add: trajectory id {k} (column {key_name!r}) is reused: a piece "
                    f"starting at t={int(t[s])} arrived while the trajectory with that id is open at t={last}. Two "
                    f"writers share trajectory ids (e.g. two RolloutWorkers with the same worker_index); give each "
                    f"its own worker_index, or end the first trajectory (terminateds/truncateds) before reusing its id"
                )
            if done[e]:
                state.pop(k, None)
            elif last is not None and first is not None and int(t[s]) == last + 1:
                state[k] = (first, int(t[e]))  # joins the open trajectory
            else:
                state[k] = (int(t[s]), int(t[e]))  # a trajectory of its own
        return state

    def commit(self, open_after: dict[int, tuple[int, int]] | None, ends: int, uses_key: bool) -> None:
        """Keeps a successful add's writer-side state: its open trajectories (when checked) and, for synthetic
        ids, one id past each end flag of the batch (kept or not)."""
        if open_after is not None:
            self.open = open_after
        if not uses_key:
            self.fallback_key += ends
