"""`ReferenceCollector`: a small, obviously correct, pure-Python collector.

It has exactly the API of `tv.Collector` (docs/collector.md) and is the oracle
that the property tests compare the C++ collector against. It is written for
readability, not speed: per env slot it keeps the running episode as python
lists of rows (one list per column), in the spirit of RLlib's
``SimpleListCollector``, and builds every view from the literal definition
in docs/contract.md, Views:

* the value of a view at timestep ``t`` is ``data_col[t + s]`` for each
  offset ``s``;
* an index before row 0 reads the column's pad row (zeros of its dtype and
  shape, or ``initial_rows[col]``), or the episode's row 0 with
  ``padding="reset"`` (refused on step columns for compute-actions views:
  row 0 is not known before the first action), except that a column with
  ``initial_rows`` (a policy's ``state_out_i``) reads them under either padding;
* an index past the last stored row reads zeros.

The boundary columns ``eps_id``, ``env_id``, ``t``, ``is_init`` are in every
batch (``env_id`` unless its view has ``used_for_training=False``); ``t``,
``eps_id``, ``env_id`` are in the input dict only when a view of that name
asks for them.

Observation columns hold ``T + 1`` rows per episode of ``T`` steps, step
columns ``T``. Nothing of an ongoing episode is ever freed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np

from .._validate import lazy_row_bytes, positive_int
from ..views.columns import BOUNDARY_COLUMNS, column_spec
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement

__all__ = ["ReferenceCollector"]


class _Episode:
    """One episode of one env slot: a python list of rows per column."""

    def __init__(self, eps_id: int, env_id: int, columns: Iterable[str]) -> None:
        self.eps_id = eps_id
        self.env_id = env_id
        self.rows: dict[str, list[np.ndarray]] = {c: [] for c in columns}
        self.num_steps = 0  # T: steps added so far
        self.emitted = 0  # steps already handed out by build_batch

    def unemitted(self) -> int:
        return self.num_steps - self.emitted


class ReferenceCollector:
    """Pure-Python twin of `tv.Collector` (same constructor, same methods)."""

    def __init__(
        self,
        num_envs: int,
        columns: Mapping[str, Any],
        view_requirements: Mapping[str, ViewRequirement],
        *,
        obs_columns: Iterable[str] = ("obs",),
        initial_rows: Mapping[str, Any] | None = None,
        chunk_rows: int = 256,
        eps_id_start: int = 0,
        lazy_views: bool | int = False,
        slots_per_env: int = 1,
    ) -> None:
        positive_int("num_envs", num_envs)
        positive_int("chunk_rows", chunk_rows)
        positive_int("slots_per_env", slots_per_env)
        if num_envs % slots_per_env:
            raise ValueError(f"slots_per_env must be >= 1 and divide num_envs ({num_envs}), got {slots_per_env}")
        #: env_id of slot i is i // slots_per_env (a multi-agent store's slots: one per agent of an env).
        self.slots_per_env = int(slots_per_env)
        #: Columns with initial rows: they read them before the episode's start under either padding.
        self._initial = frozenset(initial_rows or ())
        # How batches hold big columns; the values are the same, so the reference ignores it.
        lazy_row_bytes(lazy_views)
        self.num_envs = int(num_envs)

        self.dtypes: dict[str, np.dtype] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for name, spec in columns.items():
            if name in BOUNDARY_COLUMNS or name == "seq_lens":
                raise ValueError(f"column {name!r} is a boundary column that the collector computes; it cannot be stored")
            self._add_column(name, spec)

        self.obs_columns = tuple(obs_columns)
        for c in self.obs_columns:
            if c not in self.dtypes:
                raise ValueError(f"obs_columns names {c!r}, which is not in columns {sorted(self.dtypes)}")

        # Views of stored columns, and the boundary columns that input_dict holds.
        self.view_requirements: dict[str, ViewRequirement] = {}
        self.inference_boundary: list[str] = []
        self.emit_env_id = True
        for key, vr in view_requirements.items():
            col = vr.column(key)
            if col in BOUNDARY_COLUMNS:
                if key != col or vr.adds_axis or vr.shift_from != 0:
                    raise ValueError(f"view {key!r} reads boundary column {col!r}: only under its own name, at shift 0")
                if vr.used_for_compute_actions and col != "is_init":
                    self.inference_boundary.append(col)
                if col == "env_id" and not vr.used_for_training:
                    self.emit_env_id = False  # the only boundary column that can be pruned
                continue
            if col not in self.dtypes and vr.space is not None:
                self._add_column(col, vr.space)
            if key == "seq_lens":
                raise ValueError("a view cannot be named 'seq_lens': the collector computes that column")
            if col not in self.dtypes:
                raise ValueError(f"view {key!r} reads column {col!r}, which is not in columns {sorted(self.dtypes)}")
            inference = vr.used_for_compute_actions and self._known_before_action(key, vr)
            if vr.padding == "reset" and inference and not self._is_obs(col) and col not in self._initial:
                # Row 0 of a step column is not known before the first action: the view
                # would read one value at inference and another in training.
                raise ValueError(f"view {key!r}: padding='reset' on step column {col!r} cannot be used for compute actions")
            self.view_requirements[key] = vr
        # batch_repeat_value matters in training batches only; there every repeated view shares it.
        repeat = {vr.batch_repeat_value for vr in self.view_requirements.values() if vr.used_for_training}
        repeat.discard(1)
        if len(repeat) > 1:
            raise ValueError(f"all training views with batch_repeat_value > 1 must share it, got {sorted(repeat)}")
        self.seq_len = repeat.pop() if repeat else 1

        # Pad row of each column: what an index before row 0 reads.
        self.pad_rows: dict[str, np.ndarray] = {c: self._zeros(c) for c in self.dtypes}
        for c, row in (initial_rows or {}).items():
            if c not in self.dtypes:
                raise ValueError(f"initial_rows names {c!r}, which is not in columns {sorted(self.dtypes)}")
            arr = np.asarray(row)
            if arr.shape != self.shapes[c]:
                raise ValueError(f"initial_rows[{c!r}]: expected shape {self.shapes[c]}, got {arr.shape}")
            if not np.can_cast(arr.dtype, self.dtypes[c], "safe"):
                raise ValueError(f"initial_rows[{c!r}]: expected dtype {self.dtypes[c]}, got {arr.dtype}")
            self.pad_rows[c] = arr.astype(self.dtypes[c])

        self.next_eps_id = int(eps_id_start)
        self.ongoing: list[_Episode | None] = [None] * self.num_envs
        self.finished: list[_Episode] = []  # in the order they finished

    def _add_column(self, name: str, spec: Any) -> None:
        """``spec``: ``(dtype, shape)`` (an int shape means ``(shape,)``) or a space with ``.dtype``, ``.shape``."""
        self.dtypes[name], self.shapes[name] = column_spec(name, spec)

    # ------------------------------------------------------------------ helpers

    def _zeros(self, col: str) -> np.ndarray:
        return np.zeros(self.shapes[col], dtype=self.dtypes[col])

    def _is_obs(self, col: str) -> bool:
        return col in self.obs_columns

    def _env_ids(self, env_ids: Any) -> list[int]:
        """Check ``env_ids`` (None: every slot) and return them as python ints."""
        if env_ids is None:
            return list(range(self.num_envs))
        arr = np.asarray(env_ids)
        if arr.ndim != 1:
            raise ValueError(f"env_ids must be a 1-D int array, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"env_ids must be a 1-D int array, got dtype {arr.dtype}")
        ids = [int(i) for i in arr]
        for i in ids:
            if not 0 <= i < self.num_envs:
                raise ValueError(f"env_ids must lie in [0, {self.num_envs}), got {i}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct, got {ids}")
        return ids

    def _running(self, env_ids: Any) -> list[int]:
        ids = self._env_ids(env_ids)
        for i in ids:
            if self.ongoing[i] is None:
                raise ValueError(f"env_ids: slot {i} has no episode in progress")
        return ids

    def _check_data(self, data: Mapping[str, Any], names: Iterable[str], n: int) -> dict[str, np.ndarray]:
        """Check that ``data`` holds exactly ``names``, each ``[n, *shape]`` and safely castable."""
        names = list(names)
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown column(s) {unknown}, expected exactly {sorted(names)}")
        missing = sorted(set(names) - set(data))
        if missing:
            raise ValueError(f"missing column(s) {missing}, expected exactly {sorted(names)}")
        out = {}
        for c in names:
            arr = np.asarray(data[c])
            want = (n, *self.shapes[c])
            if arr.shape != want:
                raise ValueError(f"column {c!r}: expected shape {want}, got {arr.shape}")
            if not np.can_cast(arr.dtype, self.dtypes[c], "safe"):
                raise ValueError(f"column {c!r}: expected dtype {self.dtypes[c]}, got {arr.dtype}")
            out[c] = arr.astype(self.dtypes[c])  # a copy: later changes to the caller's array do not leak in
        return out

    def _row(self, ep: _Episode, col: str, i: int, padding: str) -> np.ndarray:
        """Row ``i`` of ``col`` in ``ep``, with the padding rules of docs/contract.md, Views."""
        rows = ep.rows[col]
        if i < 0:
            if padding == "reset" and col not in self._initial:
                return self._row(ep, col, 0, "zero")  # the episode's row 0
            return self.pad_rows[col]  # (initial_rows[col] under either padding)
        if i >= len(rows):
            return self._zeros(col)
        return rows[i]

    def _view(self, key: str, vr: ViewRequirement, at: Iterable[tuple[_Episode, int]]) -> np.ndarray:
        """The view ``key`` at each ``(episode, t)`` of ``at``: ``[n, *shape]`` or ``[n, len(shift), *shape]``."""
        col = vr.column(key)
        out = []
        for ep, t in at:
            vals = [self._row(ep, col, t + int(s), vr.padding) for s in vr.shift_arr]
            out.append(np.stack(vals) if vr.adds_axis else vals[0])
        shape = (len(vr.shift_arr),) if vr.adds_axis else ()
        return np.array(out, dtype=self.dtypes[col]).reshape((len(out), *shape, *self.shapes[col]))

    def _known_before_action(self, key: str, vr: ViewRequirement) -> bool:
        limit = 0 if self._is_obs(vr.column(key)) else -1
        return vr.shift_to <= limit

    # --------------------------------------------------------------------- API

    def begin_episodes(self, env_ids: Any, data: Mapping[str, Any]) -> np.ndarray:
        """Start a new episode in each slot of ``env_ids``; ``data`` holds the first observations."""
        ids = self._env_ids(env_ids)
        for i in ids:
            if (running := self.ongoing[i]) is not None:
                raise ValueError(f"env_ids: slot {i} already has an episode in progress (eps_id {running.eps_id})")
        rows = self._check_data(data, self.obs_columns, len(ids))
        eps_ids = []
        for k, i in enumerate(ids):
            ep = _Episode(self.next_eps_id, i // self.slots_per_env, self.dtypes)
            self.next_eps_id += 1
            for c in self.obs_columns:
                ep.rows[c].append(rows[c][k])
            self.ongoing[i] = ep
            eps_ids.append(ep.eps_id)
        return np.array(eps_ids, dtype=np.int64)

    def add_step(self, data: Mapping[str, Any], env_ids: Any = None) -> None:
        """Append one step (every column) to the episode of each slot in ``env_ids``."""
        ids = self._running(env_ids)
        rows = self._check_data(data, self.dtypes, len(ids))
        for k, i in enumerate(ids):
            ep = cast(_Episode, self.ongoing[i])  # _running checked
            for c in self.dtypes:
                ep.rows[c].append(rows[c][k])
            ep.num_steps += 1

    def end_episodes(self, env_ids: Any) -> None:
        """Mark the episodes of ``env_ids`` finished; their slots become idle."""
        ids = self._running(env_ids)
        for i in ids:
            self.finished.append(cast(_Episode, self.ongoing[i]))  # _running checked
            self.ongoing[i] = None

    def input_dict(self, env_ids: Any = None) -> dict[str, np.ndarray]:
        """The compute-actions views at each slot's current timestep, rows in ``env_ids`` order."""
        ids = self._running(env_ids)
        eps = [cast(_Episode, self.ongoing[i]) for i in ids]  # _running checked
        out = {}
        for key, vr in self.view_requirements.items():
            if vr.used_for_compute_actions and self._known_before_action(key, vr):
                out[key] = self._view(key, vr, [(ep, ep.num_steps) for ep in eps])
        boundary = {
            "t": [ep.num_steps for ep in eps],
            "eps_id": [ep.eps_id for ep in eps],
            "env_id": [ep.env_id for ep in eps],
        }
        for col in self.inference_boundary:
            out[col] = np.array(boundary[col], dtype=np.int64)
        return out

    def step(self, data: Mapping[str, Any], env_ids: Any = None) -> dict[str, np.ndarray]:
        """`add_step` then `input_dict`."""
        self.add_step(data, env_ids)
        return self.input_dict(env_ids)

    def _segment(self, ep: _Episode, upto: int) -> SampleBatch:
        """Steps [emitted, upto) of ``ep``, as one SampleBatch; marks them emitted."""
        ts = list(range(ep.emitted, upto))
        seq_starts = ts[:: self.seq_len]
        cols: dict[str, np.ndarray] = {}
        seq_keys = []
        for key, vr in self.view_requirements.items():
            if not vr.used_for_training:
                continue
            if vr.batch_repeat_value > 1:
                cols[key] = self._view(key, vr, [(ep, t) for t in seq_starts])
                seq_keys.append(key)
            else:
                cols[key] = self._view(key, vr, [(ep, t) for t in ts])
        cols["eps_id"] = np.full(len(ts), ep.eps_id, dtype=np.int64)
        if self.emit_env_id:
            cols["env_id"] = np.full(len(ts), ep.env_id, dtype=np.int64)
        cols["t"] = np.array(ts, dtype=np.int64)
        cols["is_init"] = cols["t"] == 0
        if seq_keys:
            cols["seq_lens"] = np.array([min(self.seq_len, upto - s) for s in seq_starts], dtype=np.int32)
        ep.emitted = upto
        return SampleBatch(cols, seq_keys=seq_keys)

    def build_batch(self, complete_only: bool = False, hold=None) -> list[SampleBatch]:
        """Every step not emitted before, one segment per episode: finished episodes
        (in the order they finished), then, unless ``complete_only``, ongoing ones by slot.
        ``hold[slot]`` newest steps of a slot's ongoing episode stay for the next batch."""
        hold = [0] * self.num_envs if hold is None else [int(h) for h in hold]
        if len(hold) != self.num_envs:
            raise ValueError(f"build_batch: hold must have one count per env slot ({self.num_envs}), got {len(hold)}")
        for slot, ep in enumerate(self.ongoing):
            if ep is not None and not 0 <= hold[slot] <= ep.unemitted():
                raise ValueError(
                    f"build_batch: hold[{slot}] must be in [0, {ep.unemitted()}] (its unemitted steps), got {hold[slot]}"
                )
        out = [self._segment(ep, ep.num_steps) for ep in self.finished if ep.unemitted() > 0]
        self.finished = []
        if not complete_only:
            for slot, ep in enumerate(self.ongoing):
                if ep is not None and ep.unemitted() - hold[slot] > 0:
                    out.append(self._segment(ep, ep.num_steps - hold[slot]))
        return out

    def num_steps(self) -> int:
        """Steps stored and not yet emitted."""
        return self.num_complete_steps() + sum(ep.unemitted() for ep in self.ongoing if ep is not None)

    def num_complete_steps(self) -> int:
        """Steps in finished episodes that are not yet emitted."""
        return sum(ep.unemitted() for ep in self.finished)

    def nbytes(self) -> int:
        """Bytes of the rows held (every row of every ongoing or unemitted episode)."""
        eps = self.finished + [ep for ep in self.ongoing if ep is not None]
        return sum(row.nbytes for ep in eps for rows in ep.rows.values() for row in rows)

    def eps_ids(self) -> np.ndarray:
        """Per slot, the eps_id of its episode, -1 where idle."""
        return np.array([-1 if ep is None else ep.eps_id for ep in self.ongoing], dtype=np.int64)

    def episode_lengths(self) -> np.ndarray:
        """Per slot, the steps of its episode so far, -1 where idle."""
        return np.array([-1 if ep is None else ep.num_steps for ep in self.ongoing], dtype=np.int64)
