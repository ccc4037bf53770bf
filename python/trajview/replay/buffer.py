"""`ReplayBuffer`: TorchRL-style replay in the flat layout (see docs/contract.md, Replay).

The buffer stores flat env steps in C++ circular storage, each observation
once: ``new_obs`` is ``obs`` read at ``+1`` within a trajectory, and each
trajectory piece's final observation is kept in one extra row after it.
Samples are single steps or slices of trajectories (which ones: the
buffer's sampler; by default `RandomSampler`, single transitions drawn
uniformly; `SliceSampler` for slices) with any view (frame stacks, previous
actions, ``new_obs``) built in C++ at sample time, without the GIL, into
fresh arrays (zero copy to numpy and, with ``torch.from_numpy``, to torch).

Trajectories: rows with the same ``traj_key`` value (default ``eps_id``,
else ``traj_ids``) that sit next to each other in a batch form a piece; a
piece ends after a row whose end flag (``end_key``; default ``terminateds |
truncateds``, or ``dones``) is set. A piece continues the stored trajectory
with the same key when that one has no end flag yet and ``t`` continues
(``t`` of the piece's first step = the stored last ``t`` + 1; without a ``t``
column the key alone decides): a batch cut at a rollout-fragment boundary
joins the next. Without a ``traj_key`` column, trajectories are delimited by
the end flags alone, across batches.

Overwriting: when full, the oldest rows are overwritten; a trajectory whose
first step is overwritten is dropped whole (never sampled again). A later
continuation of it starts a new trajectory, whose views read zeros before its
first stored step. ``capacity`` counts rows: steps plus one final-observation
row per piece when the batches carry ``new_obs``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core, _io
from .._validate import check_reward_array, positive_int
from ..views import MultiAgentBatch, SampleBatch, ViewRequirement
from ..views.columns import column_specs
from ..views.nest import expand_views, is_nested_value
from . import persistence, schema
from .memmap import drop_leftover_staging, open_rings
from .nstep import NStep
from .sampler_settings import check_max_capacity
from .samplers import RandomSampler, Sampler
from .schema import AnyView
from .trajectory_keys import TrajectoryKeys

__all__ = ["ReplayBuffer"]

def _as_numpy(x: Any) -> Any:
    """A torch tensor (detached, on the CPU) or anything array-like, for np.asarray."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


class ReplayBuffer:
    """Circular replay storage of flat steps, sampled as trajectory slices.

    Args:
        capacity: rows of storage (steps, plus one final-observation row per
            added trajectory piece when batches carry ``new_obs``).
        sampler: which steps or slices a sample reads (default `RandomSampler`): any `trajview.Sampler`
            (the library's, or a subclass with its own `Sampler.draw`).
        batch_size: default steps per `sample`.
        columns: which batch columns to store: ``None`` (every column of the
            first batch except ``new_obs``-style next columns, ``is_init``,
            ``infos`` and per-sequence columns), a list of names (dtype and
            shape from the first batch; other batch columns are ignored, which
            is how views such as a stored frame stack are left out), or
            ``{name: (dtype, shape)}``.
        views: ``{name: ViewRequirement or NStep}`` built by every `sample`
            besides the stored columns, added to the default views
            (``new_obs = obs@+1`` per ``next_obs`` entry, built when the added
            batches carry ``new_obs``); a view named as a default one
            replaces it.
        default_views: ``False`` builds only ``views`` (the default
            ``new_obs`` views left out; the final observations are still
            stored while ``next_obs`` names them).
        next_obs: ``{obs column: its next column}`` (default
            ``{"obs": "new_obs"}``): the next column is not stored, only each
            piece's final observation.

    Nested columns (a ``Dict`` / ``Tuple`` observation: leaves ``obs.image``,
    see `trajview.views.nest`) are stored leaf by leaf; a name in
    ``columns``, ``next_obs`` or a view's column that names a nested column
    means all its leaves, each view is built per leaf, and samples present
    the leaves nested again (``sample["obs"]["image"]``).
    """

    def __init__(
        self,
        capacity: int,
        *,
        sampler: Sampler | None = None,
        batch_size: int | None = None,
        columns: Iterable[str] | Mapping[str, Any] | None = None,
        views: Mapping[str, AnyView] | None = None,
        next_obs: Mapping[str, str] | None = None,
        default_views: bool = True,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        self._capacity = positive_int("capacity", capacity)
        if not isinstance(default_views, (bool, np.bool_)):
            raise TypeError(f"default_views must be a bool, got {type(default_views).__name__} {default_views!r}")
        if storage not in ("memory", "memmap"):
            raise ValueError(f"storage must be 'memory' or 'memmap', got {storage!r}")
        if storage == "memmap" and path is None:
            raise ValueError("storage='memmap' needs path= (a directory for the column files)")
        if storage == "memory" and path is not None:
            raise ValueError("path= is for storage='memmap' only")
        self._storage = storage
        self._path = None if path is None else Path(path)
        self._rings: list[np.ndarray] | None = None
        self._closed = False
        self._staging = False  # a load building its rings beside the live ones (persistence)
        #: storage="memmap": one owner per folder, for the buffer's lifetime (`close`).
        self._path_lock = None if self._path is None else _io.PathLock(self._path, "a memory-mapped ReplayBuffer")
        if self._path is not None:
            drop_leftover_staging(self._path)  # (a load killed midway in this folder left them)
        if sampler is None:
            sampler = RandomSampler()
        if not isinstance(sampler, Sampler):
            raise TypeError(
                f"sampler must be a trajview sampler (tv.RandomSampler, tv.SliceSampler, tv.PrioritizedSampler, ...), "
                f"got {type(sampler).__name__}"
            )
        check_max_capacity(type(sampler).__name__, getattr(sampler, "max_capacity", None), self._capacity)
        self.sampler = sampler
        self.batch_size = None if batch_size is None else positive_int("batch_size", batch_size)
        self._next_obs = dict(schema.DEFAULT_NEXT_OBS if next_obs is None else next_obs)
        self._explicit_columns: tuple[str, ...] | None = None
        self._specs: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        if isinstance(columns, Mapping):
            self._specs = column_specs(columns, spaces=False)  # a nested space: its leaves
            self._explicit_columns = tuple(self._specs)
        elif columns is not None:
            if isinstance(columns, str):
                raise TypeError(f"columns must be a list of names or a dict, got the str {columns!r}")
            self._explicit_columns = tuple(str(c) for c in columns)
            if not self._explicit_columns:
                raise ValueError("columns must name at least one column, got an empty list")
        if self._explicit_columns is not None:
            schema.check_explicit_columns(self._explicit_columns, self._next_obs)
        self._nsteps: dict[str, NStep] = {}
        self._views: dict[str, ViewRequirement] | None = None
        if views is not None:
            self._views, self._nsteps = schema.check_views(views)
        #: Whether the default views (``new_obs = obs@+1``) are among ``_views`` (``default_views``; a dump of an
        #: earlier trajview, whose given views replaced them, loads with False).
        self._default_views = bool(default_views)
        self._impl: _core._Replay | None = None
        self._has_next = False
        #: The writer side: trajectory keys, open trajectories, synthetic ids.
        self._traj_keys = TrajectoryKeys()
        self._lock = threading.Lock()
        #: `_view_specs` of the buffer's own views: (what they were made from, the specs, the `NStep` views).
        self._own_specs: tuple[tuple, list[schema.ViewSpec], dict[str, NStep]] | None = None
        #: `_selected`'s last answer: (the specs it selected from, (the names, the marks), the specs, the `NStep` views).
        self._selection: tuple[list[schema.ViewSpec], tuple, list[schema.ViewSpec], dict[str, NStep]] | None = None
        if self._specs is not None:
            self._create()

    # -- schema --------------------------------------------------------------

    def _create(self) -> None:
        assert self._specs is not None
        self._check_open()
        schema.check_specs(self._specs)
        schema.check_key_columns(self.sampler.traj_key, self.sampler.truncated_key, self._specs)
        self._next_obs = schema.next_obs_by_leaf(self._next_obs, self._specs)
        self._impl = _core._Replay(self._capacity, schema.store_columns(self._specs, self._next_obs), self._make_rings())
        if self.sampler.prioritized:
            self._impl.enable_priorities(self.sampler.alpha, self.sampler.eps)  # type: ignore[attr-defined]
        if self._default_views:  # the given views added to the defaults (a given name replaces its default)
            self._views = {**schema.default_views(self._next_obs, self._specs), **(self._views or {})}
        self._views = schema.expand_and_check(self._views or {}, self._specs)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the ReplayBuffer was closed (close()); make a new one")

    # -- writing -------------------------------------------------------------

    def add(self, batch: SampleBatch | Mapping[str, Any]) -> int:
        """Store a batch's steps (one or many trajectories, complete or cut). Returns the steps added.

        Every stored column must be present, with the stored per-step shape
        and a dtype that casts to the stored one without loss.
        """
        if isinstance(batch, MultiAgentBatch):
            raise TypeError("ReplayBuffer.add takes a SampleBatch; add each policy batch of a MultiAgentBatch separately")
        if not isinstance(batch, Mapping):
            raise TypeError(f"ReplayBuffer.add takes a SampleBatch, got {type(batch).__name__}")
        if not isinstance(batch, SampleBatch) and any(is_nested_value(v) for k, v in batch.items() if k != "infos"):
            batch = SampleBatch(batch)  # nested values: stored by leaf
        with self._lock:
            # The first add fixes the columns from its batch; one that is refused leaves the buffer without them.
            before = (self._specs, self._next_obs, self._views, self._rings) if self._impl is None else None
            try:
                return self._add_locked(batch)
            except BaseException:
                if before is not None:
                    self._specs, self._next_obs, self._views, self._rings = before
                    self._impl = None
                raise

    def _add_locked(self, batch: Mapping[str, Any]) -> int:
        """`add`'s work, under the buffer's lock."""
        if self._impl is None:
            self._specs = schema.infer_specs(batch, self._explicit_columns, self._next_obs)
            self._create()
        assert self._impl is not None and self._specs is not None
        n = len(batch) if isinstance(batch, SampleBatch) else None
        data: dict[str, np.ndarray] = {}
        for k, (dt, shape) in self._specs.items():
            if k not in batch:
                raise ValueError(f"add: missing column {k!r}; expected every stored column {list(self._specs)}")
            data[k] = schema.convert(k, batch[k], dt, shape, n)
            n = len(data[k])
        if self._explicit_columns is None:
            schema.check_unstored(batch, self._specs, self._next_obs)
        assert n is not None
        next_obs: dict[str, np.ndarray] = {}
        have = [o for o, nxt in self._next_obs.items() if o in self._specs and nxt in batch]
        want = [o for o in self._next_obs if o in self._specs]
        has_next = self._has_next
        if self._impl.rows_written() == 0 and not has_next:
            has_next = bool(want) and len(have) == len(want)
        if has_next:
            for o in want:
                nxt = self._next_obs[o]
                if nxt not in batch:
                    raise ValueError(f"add: missing column {nxt!r} (the next observations of {o!r}), "
                                     f"which earlier batches carried")
                dt, shape = self._specs[o]
                next_obs[o] = schema.convert(nxt, batch[nxt], dt, shape, n)
        s, tk = self.sampler, self._traj_keys
        keys, done = tk.keys(batch, n, s.traj_key, s.end_key)
        ends = int(done.sum())  # synthetic ids advance past every end of the batch, kept or not
        if n == 0:
            return 0
        t = None
        if "t" in batch:
            t = np.asarray(batch["t"])
            if t.shape != (n,) or not np.issubdtype(t.dtype, np.integer):
                raise ValueError(f"column 't' must be a 1-D int array of {n} rows, got shape {t.shape} dtype {t.dtype}")
        r = data.get("rewards")
        if r is not None:
            check_reward_array(r, r.shape, "add got")  # (the worker's and the runner's rule)
        uses_key = tk.uses_traj_key(batch, s.traj_key)
        if t is not None:
            tk.check_steps(keys, t, done, s.traj_key or "eps_id")
        open_after = tk.check_writers(keys, t, done, s.traj_key or "eps_id") if uses_key and t is not None else None
        first = tk.first_kept_row(keys, done, self._capacity, has_next)
        if first:  # one add larger than the buffer: the newest rows that fit, as TorchRL's extend
            data = {k: v[first:] for k, v in data.items()}
            keys, done = keys[first:], done[first:]
            t = None if t is None else t[first:]
            if has_next:
                next_obs = {k: v[first:] for k, v in next_obs.items()}
            n -= first
        # Set before the rows become visible: a sampler thread must never see rows with final observations
        # and build samples without the default new_obs view.
        was_next, self._has_next = self._has_next, has_next
        try:
            self._impl.add(data, next_obs, keys, t, done)
        except BaseException:
            self._has_next = was_next
            raise
        tk.commit(open_after, ends, uses_key)
        return n

    extend = add  # TorchRL's name

    # -- sampling ------------------------------------------------------------

    def _view_specs(self, views: Mapping[str, AnyView] | None) -> tuple[list[schema.ViewSpec], dict[str, NStep]]:
        """The C++ view specs of a sample (stored columns, views, the window views of each `NStep`) and its
        `NStep` views. The buffer's own (``views`` None) are made again only when what they are made from was
        replaced (the schema, the views, the next-observation pairs: set, never changed in place; a DQN update
        samples 128 times per iteration)."""
        made_from = (self._specs, self._views, self._nsteps, self._next_obs, self._has_next, self._default_views)
        specs, own_views, nsteps, next_obs, has_next, default_views = made_from
        assert specs is not None
        if views is None:
            own = self._own_specs
            if own is not None and all(a is b for a, b in zip(own[0][:4], made_from)) and own[0][4:] == made_from[4:]:
                return own[1], own[2]
            extra = own_views
        else:
            vrs, nsteps = schema.check_views(views)
            extra = expand_views(vrs, specs)
        assert extra is not None
        if views is None and default_views and not has_next:
            # The default new_obs views only when the added batches carried new_obs: never invented.
            nexts = set(next_obs.values())
            extra = {k: v for k, v in extra.items() if k not in nexts}
        out = schema.view_specs(specs, extra, nsteps, next_obs, has_next)
        if views is None:
            self._own_specs = (made_from, out, nsteps)
        return out, nsteps

    def _wrap(
        self, result: tuple, return_info: bool, request: _core.SliceRequest, nsteps: Mapping[str, NStep]
    ) -> SampleBatch | tuple[SampleBatch, dict[str, np.ndarray]]:
        """The `SampleBatch` (and info) of a C++ sample: `NStep` returns computed from their windows."""
        cols, index, slices, count, steps_left, weights = result
        schema.nstep_returns(cols, nsteps, steps_left)
        batch = SampleBatch._from_columns(cols, int(count), frozenset(), frozenset())
        if return_info:
            info: dict[str, np.ndarray] = {"index": index, "slices": slices}
            if request.mode == _core.SampleMode.PRIORITIZED:
                lengths = np.asarray(slices, dtype=np.int64).reshape(-1, 3)[:, 2]
                per_slice = np.full(len(lengths), request.slice_len, np.int64) if request.pad_output else lengths
                info["_weight"] = np.repeat(np.asarray(weights, dtype=np.float64), per_slice)
            return batch, info
        return batch

    def sample(
        self,
        batch_size: int | None = None,
        *,
        views: Mapping[str, AnyView] | None = None,
        columns: Iterable[str] | None = None,
        return_info: bool = False,
    ) -> SampleBatch | tuple[SampleBatch, dict[str, np.ndarray]]:
        """Sample steps or slices (as the buffer's sampler says) as one flat `SampleBatch`.

        The batch holds every stored column, each view (``views``, else the
        buffer's: `ViewRequirement` s and `NStep` returns), ``is_init`` and,
        with ``pad_output``, ``mask``; slices sit end to end (``num_slices``
        x up to ``slice_len`` rows; transitions are slices of one step).
        ``columns`` (names of stored columns, views, `NStep` s): only those
        are gathered, the same rows and values as without it, with
        ``is_init``, ``mask`` and the columns a slice sampler marks slice ends
        in (``truncated_key``, a stored ``dones``); a name the batch would
        not hold is a ValueError.
        Arrays are fresh, C++-owned (zero copy to torch with
        ``torch.from_numpy``). ``return_info=True`` also returns
        ``{"index": stored row of each output row (for `update_priority`),
        "slices": [num_slices, 3] (trajectory uid, start step, length)}``
        and, with a prioritized sampler, ``"_weight"``: each row's importance
        weight.
        """
        size = self.batch_size if batch_size is None else batch_size
        if size is None:
            raise ValueError("sample: batch_size is required (give it here or to ReplayBuffer(batch_size=...))")
        s = self.sampler
        num_slices, slice_len = s.slices(size)
        if self._impl is None:
            raise ValueError("sample: the replay buffer holds no steps")
        vs, nsteps = self._view_specs(views)
        if columns is not None:
            vs, nsteps = self._selected(vs, nsteps, columns)
        request = s.draw(self._impl, num_slices, slice_len)
        return self._wrap(self._impl.sample(request, vs), return_info, request, nsteps)

    def _selected(self, vs: list[schema.ViewSpec], nsteps: dict[str, NStep],
                  columns: Iterable[str]) -> tuple[list[schema.ViewSpec], dict[str, NStep]]:
        """`schema.selected_specs` of ``columns``; the last answer kept for the buffer's own specs (a DQN round asks
        the same each time)."""
        if isinstance(columns, str):
            raise TypeError(f"sample: columns must be a list of names, got the string {columns!r}")
        names = tuple(columns)
        marks = tuple(k for k in self.sampler._marks().values() if k is not None)
        kept = self._selection
        if kept is not None and kept[0] is vs and kept[1] == (names, marks):
            return kept[2], kept[3]
        out, out_nsteps = schema.selected_specs(vs, nsteps, names, marks)
        self._selection = (vs, (names, marks), out, out_nsteps)
        return out, out_nsteps

    def _gather(
        self,
        picks: Any,
        slice_len: int,
        *,
        pad_output: bool = False,
        views: Mapping[str, AnyView] | None = None,
    ) -> tuple[SampleBatch, dict[str, np.ndarray]]:
        """The batch of explicitly given slices ``[(uid, start, length), ...]`` (for tests)."""
        if self._impl is None:
            raise ValueError("gather: the replay buffer holds no steps")
        vs, nsteps = self._view_specs(views)
        request = self.sampler.given(picks, slice_len, pad_output=pad_output)
        return self._wrap(self._impl.sample(request, vs), True, request, nsteps)  # type: ignore[return-value]

    # -- priorities ----------------------------------------------------------

    def update_priority(self, index: Any, priority: Any) -> int:
        """Sets the priority of the steps at ``index`` (``info["index"]`` of a sample) to ``priority`` (a number
        or one per index), as TorchRL: leaf ``(priority + eps) ** alpha``, and the max priority (the default of
        new steps) grows to ``priority.max()``; a later entry for the same index wins. Any finite priority >= 0
        keeps the sampling distribution exact (no overflow, however large or small). Runs in C++ without the GIL.

        Raises ValueError naming the index, changing nothing, for a negative or non-finite priority and for an
        index that never held a step (never written, or a final-observation row). Steps overwritten since they
        were sampled (or whose trajectory was dropped) are skipped: returns how many, also counted in
        `skipped_priority_updates`.
        """
        if not self.sampler.prioritized:
            raise ValueError(f"update_priority: the buffer's sampler ({type(self.sampler).__name__}) is not "
                             f"prioritized; use tv.PrioritizedSampler or tv.PrioritizedSliceSampler")
        idx = np.asarray(_as_numpy(index))
        if idx.dtype.kind not in "iu":
            raise TypeError(f"update_priority: index must hold ints (info['index'] of a sample), got {idx.dtype}")
        idx = np.ascontiguousarray(idx.reshape(-1), dtype=np.int64)
        pr = np.asarray(_as_numpy(priority), dtype=np.float64)
        if pr.size == 1:
            pr = np.full(len(idx), float(pr.reshape(-1)[0]))
        elif pr.size != len(idx):
            raise ValueError(f"update_priority: priority must be a number or one per index ({len(idx)}), "
                             f"got shape {pr.shape}")
        pr = np.ascontiguousarray(pr.reshape(-1))
        if self._impl is None:
            if len(idx):
                raise ValueError(f"update_priority: index {int(idx[0])} never held a row (the buffer is empty)")
            return 0
        return int(self._impl.update_priority(idx, pr))

    @property
    def skipped_priority_updates(self) -> int:
        """Priority updates `update_priority` skipped because their step was overwritten since it was sampled
        (since the buffer was made or loaded)."""
        return 0 if self._impl is None or not self.sampler.prioritized else int(self._impl.skipped_priority_updates())

    def priorities(self, index: Any) -> np.ndarray:
        """The sum-tree leaf ``(priority + eps) ** alpha`` of each stored row in ``index`` as a float (0 where
        none; ``inf`` / 0 where the leaf is above / below a double's range: sampling and the importance weights
        still use it exactly)."""
        if self._impl is None or not self.sampler.prioritized:
            raise ValueError("priorities: the buffer holds no steps or is not prioritized")
        return self._impl.priority_leaves(np.ascontiguousarray(np.asarray(index).reshape(-1), dtype=np.int64))

    @property
    def max_priority(self) -> float:
        return 1.0 if self._impl is None or not self.sampler.prioritized else float(self._impl.max_priority())

    # -- storage and persistence -----------------------------------------------

    def _make_rings(self) -> list[np.ndarray] | None:
        """``storage="memmap"``: one memory-mapped file per column under ``path`` (`memmap.open_rings`),
        handed to the C++ store as its rows; ``None``: the store allocates them in RAM."""
        if self._storage != "memmap":
            return None
        self._rings = open_rings(self, staging=self._staging)
        return self._rings

    def state_dict(self) -> dict[str, Any]:
        """Everything the buffer holds, as plain data: ``{"state": JSON-able dict, "arrays": {name: numpy
        array}}`` (the stored rows in use, trajectories, priorities; settings, views, the sampler's state
        with its generator in ``state``). `load_state_dict` restores it exactly: the same samples follow. Adds
        wait while it runs."""
        return persistence.state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a `state_dict` (of a buffer with the same capacity and sampler type), checked as a file
        would be (`ValueError` naming the entry); a state that is refused changes nothing."""
        persistence.load_state_dict(self, state)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Writes the buffer to the folder ``path`` (TorchRL's name) as one committed unit (see
        `trajview.replay.persistence`): a kill or a full disk at any byte leaves the previous dump there whole.
        `loads` reads it back exactly. Adds wait while it runs."""
        persistence.dumps(self, path)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Reads a `dumps` folder into this buffer (same capacity and sampler type), verifying every file
        (`trajview.errors.FileIntegrityError` naming a damaged, truncated or mixed one); a load that raises
        changes nothing."""
        persistence.loads(self, path)

    def close(self) -> None:
        """Frees the rows and, with ``storage="memmap"``, the lock on ``path`` (also released when the buffer is
        garbage-collected). The buffer then holds nothing and takes no more adds."""
        with self._lock:
            self._impl = None
            self._rings = None
            if self._path_lock is not None:
                self._path_lock.release()
            self._closed = True

    def __getstate__(self) -> dict[str, Any]:
        """Pickling: the constructor's settings, the sampler and `state_dict` (a memory-mapped buffer unpickles
        as an in-memory one, so that it never writes over its files)."""
        return {"capacity": self._capacity, "sampler": self.sampler, "state": self.state_dict()}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(d["capacity"], sampler=d["sampler"])  # type: ignore[misc]
        self.load_state_dict(d["state"])

    @property
    def storage(self) -> str:
        """``"memory"`` or ``"memmap"``."""
        return self._storage

    # -- state ---------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def columns(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """``{name: (dtype, per-step shape)}`` of the stored columns (empty before the first add)."""
        return dict(self._specs or {})

    def __len__(self) -> int:
        """Steps in sampleable trajectories."""
        return 0 if self._impl is None else self._impl.num_steps()

    def num_trajectories(self) -> int:
        return 0 if self._impl is None else self._impl.num_trajectories()

    def rows_written(self) -> int:
        """Rows written since construction (steps and final-observation rows)."""
        return 0 if self._impl is None else self._impl.rows_written()

    def nbytes(self) -> int:
        """Bytes of row storage allocated (``capacity`` rows of every column)."""
        return 0 if self._impl is None else self._impl.nbytes()

    def trajectories(self) -> list[dict[str, Any]]:
        """The sampleable trajectories, oldest first: uid, key, steps, open, starts_episode,
        has_final_obs and rows (the absolute stored row of each step)."""
        return [] if self._impl is None else self._impl.trajectories()

    def __repr__(self) -> str:
        return f"ReplayBuffer(capacity={self._capacity}, steps={len(self)}, sampler={self.sampler!r})"
