"""`ReplayBuffer`: TorchRL-style replay in the flat layout (see docs/contract.md, Replay).

The buffer stores flat env steps in C++ circular storage, each observation
once: ``new_obs`` is ``obs`` read at ``+1`` within a trajectory, and each
trajectory piece's final observation is kept in one extra row after it.
Samples are slices of trajectories (which ones: the buffer's sampler, e.g.
`SliceSampler`) with any view (frame stacks, previous actions, ``new_obs``)
built in C++ at sample time, without the GIL, into fresh arrays (zero copy
to numpy and, with ``torch.from_numpy``, to torch).

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
from .._validate import positive_int
from ..views import MultiAgentBatch, SampleBatch, ViewRequirement
from ..views.columns import (
    cast_exactly,
    DONES,
    EPS_ID,
    IS_INIT,
    NEXT_OBS,
    OBS,
    STATE_IN_PREFIX,
    TERMINATEDS,
    TRUNCATEDS,
    column_specs,
)
from ..views.nest import SEP, expand_views, is_nested_value, leaf_names
from . import persistence
from .memmap import open_rings
from .nstep import NStep
from .samplers import RandomSampler, Sampler

__all__ = ["ReplayBuffer"]

#: A view of `ReplayBuffer.sample`: a `ViewRequirement`, or an `NStep` return.
AnyView = ViewRequirement | NStep
#: Prefix of the window views an `NStep` reads (dropped from the sample).
_NSTEP_TMP = "__nstep__"

#: Columns computed at sample time, never stored.
_COMPUTED = (IS_INIT, "mask")
_DEFAULT_NEXT_OBS = {OBS: NEXT_OBS}
_END_FLAGS = (TERMINATEDS, TRUNCATEDS, DONES)
#: Trajectory-id columns tried in order when the sampler names no ``traj_key``.
_TRAJ_KEYS = (EPS_ID, "traj_ids")


def _as_numpy(x: Any) -> Any:
    """A torch tensor (detached, on the CPU) or anything array-like, for np.asarray."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


def _view_columns(batch: Mapping[str, Any]) -> frozenset[str]:
    """The batch's columns that are views of other columns, as its collector named them
    (`SampleBatch.view_columns`). (Whether a column is held as a `LazyView` says nothing: a worker's ``obs``
    column is one too.)"""
    return batch.view_columns if isinstance(batch, SampleBatch) else frozenset()


def _stored_by_default(
    key: str, next_columns: set[str], seq_keys: frozenset[str], views: frozenset[str] = frozenset()
) -> bool:
    """Whether a batch column is stored when the buffer is not told which: not a next-observation column
    (nor a leaf of one), not a view of another column (a frame stack, previous actions: `_view_columns`),
    nothing computed at sample time, no ``infos``, nothing per-sequence."""
    return (
        key not in views
        and key.split(SEP, 1)[0] not in views
        and key not in next_columns
        and key.split(SEP, 1)[0] not in next_columns
        and key not in _COMPUTED
        and key != SampleBatch.INFOS
        and key not in seq_keys
        and key != SampleBatch.SEQ_LENS
        and not key.startswith(STATE_IN_PREFIX)
    )


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
        views: ``{name: ViewRequirement}`` built by every `sample` besides the
            stored columns (default: ``new_obs = obs@+1`` when batches carry
            ``new_obs``).
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
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        self._capacity = positive_int("capacity", capacity)
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
        if sampler is None:
            sampler = RandomSampler()
        if not isinstance(sampler, Sampler):
            raise TypeError(
                f"sampler must be a trajview sampler (tv.RandomSampler, tv.SliceSampler, tv.PrioritizedSampler, ...), "
                f"got {type(sampler).__name__}"
            )
        cap = getattr(sampler, "max_capacity", None)
        if cap is not None and cap != self._capacity:
            raise ValueError(f"{type(sampler).__name__}: max_capacity={cap} differs from the buffer's capacity "
                             f"{self._capacity}; pass max_capacity=None or the same value")
        self.sampler = sampler
        self.batch_size = None if batch_size is None else positive_int("batch_size", batch_size)
        self._next_obs = dict(_DEFAULT_NEXT_OBS if next_obs is None else next_obs)
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
            for c in self._explicit_columns:
                if c in _COMPUTED or c in self._next_obs.values():
                    raise ValueError(f"column {c!r} is computed at sample time; it cannot be stored")
        self._nsteps: dict[str, NStep] = {}
        self._views: dict[str, ViewRequirement] | None = None
        if views is not None:
            self._views, self._nsteps = self._check_views(views)
        self._default_views = views is None
        self._impl: _core._Replay | None = None
        self._has_next = False
        self._traj_key: str | None = None
        self._end_keys: tuple[str, ...] = ()
        self._fallback_key = 0  # next synthetic trajectory id (no traj_key column)
        #: Trajectories not ended yet: key -> (first t, last t) (to refuse ids reused by two writers).
        self._open: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()
        if self._specs is not None:
            self._create()

    # -- schema --------------------------------------------------------------

    @staticmethod
    def _check_views(views: Mapping[str, AnyView]) -> tuple[dict[str, ViewRequirement], dict[str, NStep]]:
        out: dict[str, ViewRequirement] = {}
        nsteps: dict[str, NStep] = {}
        for name, vr in views.items():
            if isinstance(vr, NStep):
                if str(name).startswith(_NSTEP_TMP):
                    raise ValueError(f"views[{name!r}]: names starting with {_NSTEP_TMP!r} are reserved")
                nsteps[str(name)] = vr
                continue
            if not isinstance(vr, ViewRequirement):
                raise TypeError(f"views[{name!r}] must be a tv.ViewRequirement or a tv.NStep, got {type(vr).__name__}")
            if vr.batch_repeat_value != 1:
                raise ValueError(
                    f"views[{name!r}]: batch_repeat_value must be 1 for replay samples, got {vr.batch_repeat_value}"
                )
            if name in _COMPUTED:
                raise ValueError(f"views[{name!r}]: {name!r} is computed by the sampler; use another name")
            out[str(name)] = vr
        return out, nsteps

    def _create(self) -> None:
        assert self._specs is not None
        if self._closed:
            raise ValueError("the ReplayBuffer was closed (close()); make a new one")
        for name, (dt, shape) in self._specs.items():
            if not dt.isnative or dt.kind not in "biuf" or dt.itemsize > 8:
                raise ValueError(
                    f"column {name!r}: replay stores bool, int and float columns only, got dtype {dt}; "
                    f"leave it out with columns=[...]"
                )
            if any(d < 0 for d in shape):
                raise ValueError(f"column {name!r}: shape must have dims >= 0, got {shape}")
        # next_obs of a nested column: leaf by leaf (obs.image -> new_obs.image)
        for o, nxt in list(self._next_obs.items()):
            if o not in self._specs and leaf_names(o, self._specs):
                del self._next_obs[o]
                for leaf in leaf_names(o, self._specs):
                    self._next_obs[leaf] = nxt + leaf[len(o):]
        obs = set(self._next_obs)
        spec = [(n, np.dtype(dt).name, list(shape), n in obs) for n, (dt, shape) in self._specs.items()]
        self._impl = _core._Replay(self._capacity, spec, self._make_rings())
        if self.sampler.prioritized:
            self._impl.enable_priorities(self.sampler.alpha, self.sampler.eps)  # type: ignore[attr-defined]
        if self._views is None:
            self._views = {
                nxt: ViewRequirement(o, shift=1) for o, nxt in self._next_obs.items() if o in self._specs
            }
        self._views = expand_views(self._views, self._specs)
        for name, vr in self._views.items():
            col = vr.column(name)
            if col not in self._specs:
                raise ValueError(f"views[{name!r}] reads column {col!r}, which is not stored; stored: {list(self._specs)}")
            if name in self._specs:
                raise ValueError(f"views[{name!r}]: {name!r} is a stored column; give the view another name")

    def _infer(self, batch: Mapping[str, Any]) -> None:
        seq = batch.seq_keys if isinstance(batch, SampleBatch) else frozenset()
        nexts = set(self._next_obs.values())
        names = self._explicit_columns
        if names is None:
            vcols = _view_columns(batch)
            names = tuple(k for k in batch if _stored_by_default(k, nexts, seq, vcols))
            if not names:
                raise ValueError(f"add: the batch has no column to store, got columns {list(batch)}")
        specs = {}
        keys = list(batch)
        names = tuple(c for k in names for c in ([k] if k in keys else leaf_names(k, keys) or [k]))
        for k in names:
            if k not in batch:
                raise ValueError(f"add: missing column {k!r}; expected every column of {list(names)}")
            if k in seq:
                raise ValueError(f"column {k!r} has one row per sequence; replay stores per-step columns only")
            arr = np.asarray(batch[k])
            specs[k] = (arr.dtype, tuple(arr.shape[1:]))
        self._specs = specs
        self._create()

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
            if self._impl is None:
                self._infer(batch)
            assert self._impl is not None and self._specs is not None
            n = len(batch) if isinstance(batch, SampleBatch) else None
            data: dict[str, np.ndarray] = {}
            for k, (dt, shape) in self._specs.items():
                if k not in batch:
                    raise ValueError(f"add: missing column {k!r}; expected every stored column {list(self._specs)}")
                data[k] = self._convert(k, batch[k], dt, shape, n)
                n = len(data[k])
            if self._explicit_columns is None:
                nexts = set(self._next_obs.values())
                seq = batch.seq_keys if isinstance(batch, SampleBatch) else frozenset()
                vcols = _view_columns(batch)
                for k in batch:
                    if k not in self._specs and _stored_by_default(k, nexts, seq, vcols):
                        raise ValueError(
                            f"add: column {k!r} is not stored (stored: {list(self._specs)}); "
                            f"pass columns=[...] to choose what the buffer keeps"
                        )
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
                    next_obs[o] = self._convert(nxt, batch[nxt], dt, shape, n)
            keys, done = self._keys(batch, n)
            ends = int(done.sum())  # synthetic ids advance past every end of the batch, kept or not
            if n == 0:
                return 0
            t = None
            if "t" in batch:
                t = np.asarray(batch["t"])
                if t.shape != (n,) or not np.issubdtype(t.dtype, np.integer):
                    raise ValueError(f"column 't' must be a 1-D int array of {n} rows, got shape {t.shape} dtype {t.dtype}")
            uses_key = self._uses_traj_key(batch)
            open_after = self._check_writers(keys, t, done) if uses_key and t is not None else None
            first = self._first_kept_row(keys, done, n, has_next)
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
            if open_after is not None:
                self._open = open_after
            if not uses_key:
                self._fallback_key += ends
            return n

    @staticmethod
    def _pieces(keys: np.ndarray, done: np.ndarray) -> np.ndarray:
        """The first row of each trajectory piece of a batch (a new key, or the row after an end flag)."""
        starts = np.ones(len(keys), dtype=bool)
        starts[1:] = (keys[1:] != keys[:-1]) | done[:-1].astype(bool)
        return np.flatnonzero(starts)

    def _first_kept_row(self, keys: np.ndarray, done: np.ndarray, n: int, has_next: bool) -> int:
        """0, or where to start a batch that does not fit in ``capacity`` rows (each piece adds a final row)."""
        if n + (len(self._pieces(keys, done)) if has_next else 0) <= self._capacity:
            return 0
        first = max(0, n - self._capacity)
        while first < n:
            pieces = len(self._pieces(keys[first:], done[first:])) if has_next else 0
            if n - first + pieces <= self._capacity:
                return first
            first += 1
        return n

    def _check_writers(self, keys: np.ndarray, t: np.ndarray, done: np.ndarray) -> dict[int, tuple[int, int]]:
        """Refuses a trajectory id that two writers use at once (their steps would be glued into one trajectory).

        One writer's ``t`` only grows along a trajectory id: a piece whose key is the key of a trajectory that
        has not ended, but whose ``t`` overlaps that trajectory's stored steps (from its first ``t`` to its
        last), means two trajectories share an id (e.g. two workers left at ``worker_index=0``). A piece that
        skips ahead (``t`` > last + 1: steps missing) or that ends before the open trajectory's first ``t`` (an
        earlier fragment arriving late) is a fragment of the same episode that is not contiguous with what is
        stored: it starts a trajectory of its own (and the open one is not continued any more). Returns the open
        trajectories (key -> (first ``t``, last ``t``)) after this batch, kept once the add succeeds.
        """
        state = dict(self._open)
        starts = self._pieces(keys, done)
        ends = np.r_[starts[1:], len(keys)] - 1
        for s, e in zip(starts.tolist(), ends.tolist()):
            k = int(keys[s])
            first, last = state.get(k, (None, None))
            if last is not None and first is not None and int(t[s]) <= last and int(t[e]) >= first:
                raise ValueError(
                    f"add: trajectory id {k} (column {self.sampler.traj_key or 'eps_id'!r}) is reused: a piece "
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

    def _uses_traj_key(self, batch: Mapping[str, Any]) -> bool:
        return self.sampler.traj_key is not None or any(k in batch for k in _TRAJ_KEYS)

    extend = add  # TorchRL's name

    @staticmethod
    def _convert(name: str, value: Any, dt: np.dtype, shape: tuple[int, ...], n: int | None) -> np.ndarray:
        arr = cast_exactly(name, np.asarray(value), dt)
        if arr.ndim == 0 or tuple(arr.shape[1:]) != shape:
            raise ValueError(f"column {name!r}: expected per-step shape {shape}, got {tuple(arr.shape[1:])}")
        if n is not None and len(arr) != n:
            raise ValueError(f"column {name!r}: expected {n} rows, got {len(arr)}")
        return np.ascontiguousarray(arr)

    def _keys(self, batch: Mapping[str, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row: trajectory key (int64) and end flag (uint8)."""
        s = self.sampler
        end_keys = (s.end_key,) if s.end_key is not None else tuple(k for k in _END_FLAGS if k in batch)
        if s.end_key is not None and s.end_key not in batch:
            raise ValueError(f"add: missing end_key column {s.end_key!r}")
        done = np.zeros(n, dtype=bool)
        for k in end_keys:
            f = np.asarray(batch[k])
            if f.shape[:1] != (n,):
                raise ValueError(f"column {k!r}: expected {n} rows, got shape {f.shape}")
            done |= f.reshape(n, int(np.prod(f.shape[1:], dtype=np.int64))).astype(bool).any(axis=1)
        traj_key = s.traj_key
        if traj_key is None:
            traj_key = next((k for k in _TRAJ_KEYS if k in batch), None)
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
                    f"({', '.join(repr(k) for k in _END_FLAGS)}), so its trajectories are unknown; "
                    f"got columns {list(batch)}"
                )
            # Synthetic ids: a new one after each end flag, carried across batches.
            # (The caller advances self._fallback_key once the add succeeded.)
            ends_before = (np.cumsum(done) - done).astype(np.int64)
            keys = self._fallback_key + ends_before
        return np.ascontiguousarray(keys, dtype=np.int64), done.view(np.uint8)

    # -- sampling ------------------------------------------------------------

    def _view_specs(
        self, views: Mapping[str, AnyView] | None
    ) -> tuple[list[tuple[str, str, list[int], bool, str]], dict[str, NStep]]:
        """The C++ view specs of a sample (stored columns, views, the window views of each `NStep`) and its
        `NStep` views."""
        assert self._specs is not None
        if views is None:
            extra, nsteps = self._views, self._nsteps
        else:
            vrs, nsteps = self._check_views(views)
            extra = expand_views(vrs, self._specs)
        assert extra is not None
        if views is None and self._default_views and not self._has_next:
            # The default new_obs views only when the added batches carried new_obs: never invented.
            nexts = set(self._next_obs.values())
            extra = {k: v for k, v in extra.items() if k not in nexts}
        extra = dict(extra)
        for name, ns in nsteps.items():
            extra.update(self._nstep_views(name, ns))
        out = [(k, k, [0], False, "zero") for k in self._specs]
        for name, vr in extra.items():
            col = vr.column(name)
            if col not in self._specs:
                raise ValueError(f"views[{name!r}] reads column {col!r}, which is not stored; stored: {list(self._specs)}")
            if name in self._specs:
                raise ValueError(f"views[{name!r}]: {name!r} is a stored column; give the view another name")
            out.append((name, col, [int(s) for s in vr.shift_arr], vr.adds_axis, vr.padding))
        return out, nsteps

    def _nstep_views(self, name: str, ns: NStep) -> dict[str, ViewRequirement]:
        """The window views one `NStep` reads: rewards and flags at ``0 .. n-1``, observations at ``1 .. n``."""
        assert self._specs is not None
        if not self._has_next:
            raise ValueError(
                f"views[{name!r}]: NStep bootstraps from the observation after each window, so the added batches "
                f"must carry next observations (new_obs); these did not"
            )
        if ns.reward_key not in self._specs:
            raise ValueError(f"views[{name!r}]: NStep reads column {ns.reward_key!r}, which is not stored")
        obs = [ns.obs_key] if ns.obs_key in self._specs else leaf_names(ns.obs_key, self._specs)
        if not obs or not all(o in self._next_obs for o in obs):
            raise ValueError(
                f"views[{name!r}]: NStep reads observation column {ns.obs_key!r}, which is not a stored observation "
                f"column with next observations; stored: {list(self._specs)}"
            )
        n = ns.n
        tmp = f"{_NSTEP_TMP}{name}"
        out = {f"{tmp}|r": ViewRequirement(ns.reward_key, shift=list(range(n)))}
        for o in obs:
            out[f"{tmp}|o{o[len(ns.obs_key):]}"] = ViewRequirement(o, shift=list(range(1, n + 1)))
        for flag, key in (("term", ns.terminated_key), ("trunc", ns.truncated_key)):
            if key in self._specs:
                out[f"{tmp}|{flag}"] = ViewRequirement(key, shift=list(range(n)))
        return out

    def _wrap(
        self, result: tuple, return_info: bool, request: _core.SliceRequest, nsteps: Mapping[str, NStep]
    ) -> SampleBatch | tuple[SampleBatch, dict[str, np.ndarray]]:
        """The `SampleBatch` (and info) of a C++ sample: `NStep` returns computed from their windows."""
        cols, index, slices, count, steps_left, weights = result
        for name, ns in nsteps.items():
            tmp = f"{_NSTEP_TMP}{name}|"
            obs = {k[len(tmp) + 1:]: cols.pop(k) for k in [k for k in cols if k.startswith(tmp + "o")]}
            res = ns.compute(cols.pop(tmp + "r"), obs, cols.pop(tmp + "term", None), cols.pop(tmp + "trunc", None),
                             steps_left)
            for k, v in res.items():
                cols[f"{name}{SEP}{k}"] = v
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
        return_info: bool = False,
    ) -> SampleBatch | tuple[SampleBatch, dict[str, np.ndarray]]:
        """Sample steps or slices (as the buffer's sampler says) as one flat `SampleBatch`.

        The batch holds every stored column, each view (``views``, else the
        buffer's: `ViewRequirement` s and `NStep` returns), ``is_init`` and,
        with ``pad_output``, ``mask``; slices sit end to end (``num_slices``
        x up to ``slice_len`` rows; transitions are slices of one step).
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
        request = s.draw(self._impl, num_slices, slice_len)
        return self._wrap(self._impl.sample(request, vs), return_info, request, nsteps)

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
