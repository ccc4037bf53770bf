"""`Collector`: the Python face of the C++ trajectory store (see docs/collector.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .. import _core
from .._validate import lazy_row_bytes, positive_int
from ..views.columns import BOUNDARY_COLUMNS, column_spec_from_space, column_specs
from ..views.lazy_view import LazyView
from ..views.nest import SEP, expand_views, flatten_columns, flatten_value, is_nested_value, leaf_names, space_specs
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement

__all__ = ["Collector", "BOUNDARY_COLUMNS", "column_spec_from_space"]

class Collector:
    """Stores each env step once, in C++, and builds every view from that copy.

    Args:
        num_envs: number of env slots (``B``).
        columns: ``{name: (dtype, shape)}`` (or ``{name: gymnasium space}``)
            for every stored column. A column that only a view's ``space``
            describes is added from that space. A nested space (``Dict`` /
            ``Tuple``) is stored one column per leaf (``obs.image``, see
            `trajview.views.nest`), and every view of it reads leaf by leaf;
            data for it may be given nested (``{"obs": {"image": ...}}``) or
            by leaf name, and input dicts present it nested again.
        view_requirements: ``{view name: ViewRequirement}``.
        obs_columns: the columns with ``T + 1`` rows per episode (a nested
            one: each of its leaves).
        initial_rows: ``{column: row}`` read before an episode's start instead
            of zeros (e.g. ``state_out_0`` -> the policy's initial state).
        chunk_rows: steps per env that one storage block holds (besides the
            rows that views look back at). Set it to the steps collected
            between ``build_batch`` calls (the rollout fragment length): a
            fragment then fits in one block and nothing else is allocated.
        eps_id_start: the first episode id; ids count up from it.
        lazy_views: batches hold the training views of columns whose rows
            have at least this many bytes as `LazyView` s: each stored row
            once per batch plus an index per view, materialized when read
            (``True`` = 1024 bytes, e.g. image frames; ``False``/``0`` = never).
            The values are the same either way.
        slots_per_env: ``env_id`` (in input dicts and batches) is the slot
            divided by this: a multi-agent store whose slots are
            ``env_index * agents + agent_index`` names the env. It must
            divide ``num_envs``; 1 (default): ``env_id`` is the slot.
    """

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
        positive_int("slots_per_env", slots_per_env)
        positive_int("chunk_rows", chunk_rows)
        lazy_min_row_bytes = lazy_row_bytes(lazy_views)
        specs = column_specs(columns)
        # A column that only a view's space describes (nested: one per leaf).
        for name, vr in view_requirements.items():
            if isinstance(vr, ViewRequirement) and vr.space is not None:
                col = vr.column(name)
                if col not in specs and col not in BOUNDARY_COLUMNS and not leaf_names(col, specs):
                    specs.update(space_specs(col, vr.space) or {col: column_spec_from_space(vr.space)})
        obs_leaves: list[str] = []
        for c in obs_columns:
            leaves = [c] if c in specs else leaf_names(c, specs)
            if not leaves:
                raise ValueError(f"obs_columns names {c!r}, which is not in columns {sorted(specs)}")
            obs_leaves += leaves
        obs_columns = tuple(obs_leaves)
        for name, vr in view_requirements.items():
            if not isinstance(vr, ViewRequirement):
                raise TypeError(f"view_requirements[{name!r}] must be a ViewRequirement, got {type(vr).__name__}")
        #: Whether any column is a leaf of a nested one (then nested data is flattened and input dicts nested).
        self.nested = any(SEP in c for c in specs)
        user_views = dict(view_requirements)
        view_requirements = expand_views(view_requirements, specs) if self.nested else user_views

        views: list[tuple] = []
        inference_boundary: list[str] = []
        emit_env_id = True
        for name, vr in view_requirements.items():
            col = vr.column(name)
            if col in BOUNDARY_COLUMNS:
                if name != col or vr.adds_axis or vr.shift_from != 0:
                    raise ValueError(
                        f"view {name!r} reads boundary column {col!r} with shift {vr.shift!r}: boundary columns "
                        f"({', '.join(BOUNDARY_COLUMNS)}) are always in batches under their own name, at shift 0"
                    )
                if vr.used_for_compute_actions and col != "is_init":
                    inference_boundary.append(col)
                if col == "env_id" and not vr.used_for_training:
                    emit_env_id = False
                continue
            views.append(
                (
                    name,
                    col,
                    [int(s) for s in vr.shift_arr],
                    vr.adds_axis,
                    # A column with initial rows (a policy's state_out_i: its initial state) reads them before the
                    # episode's start under either padding (docs/contract.md, Views, Pre-buffer).
                    "zero" if initial_rows and col in initial_rows else vr.padding,
                    vr.batch_repeat_value,
                    vr.used_for_compute_actions,
                    vr.used_for_training,
                )
            )

        self.view_requirements: dict[str, ViewRequirement] = user_views
        #: Batch columns built as views of another column or at another shift (frame stacks, new_obs, previous
        #: actions, recurrent state read back): batches name them in ``SampleBatch.view_columns``.
        self._view_columns = frozenset(
            name
            for name, vr in view_requirements.items()
            if vr.column(name) not in BOUNDARY_COLUMNS and (vr.column(name) != name or vr.adds_axis or vr.shift_from != 0)
        )
        initial_rows = dict(initial_rows or {})
        col_list = []
        for name, (dt, shape) in specs.items():
            pad = None
            if name in initial_rows:
                row = np.asarray(initial_rows.pop(name))
                if row.shape != shape:
                    raise ValueError(f"initial_rows[{name!r}]: expected shape {shape}, got {row.shape}")
                if row.dtype != dt and not np.can_cast(row.dtype, dt, "safe"):
                    raise ValueError(f"initial_rows[{name!r}]: expected dtype {dt}, got {row.dtype} (casting would lose data)")
                pad = np.ascontiguousarray(row, dtype=dt).tobytes()
            col_list.append((name, dt.name, list(shape), name in obs_columns, pad))
        if initial_rows:
            raise ValueError(f"initial_rows names unknown columns {sorted(initial_rows)}; known: {sorted(specs)}")

        self.num_envs = int(num_envs)
        self.columns: dict[str, tuple[np.dtype, tuple[int, ...]]] = specs
        self.obs_columns = obs_columns
        self._impl = _core._TrajectoryStore(
            int(num_envs),
            col_list,
            views,
            int(chunk_rows),
            int(eps_id_start),
            inference_boundary,
            emit_env_id,
            lazy_min_row_bytes,
            int(slots_per_env),
        )
        self.lazy_min_row_bytes = lazy_min_row_bytes
        #: The segments of the last batch built (see `build_flat_batch`).
        self.last_segments: list[dict[str, Any]] = []
        # The per-step calls go straight to C++ (no Python frame on the hot path);
        # the methods below document them.
        # Nested columns take the Python methods below (flatten nested data, present input dicts nested).
        if not self.nested:
            self.add_step = self._impl.add_step  # type: ignore[method-assign]
            self.step = self._impl.step  # type: ignore[method-assign]
            self.input_dict = self._impl.input_dict  # type: ignore[method-assign]
        self.staged_rows = self._impl._next_rows  # type: ignore[method-assign]

    # -- episodes and steps -------------------------------------------------

    def _flat(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with nested values (``{"obs": {"image": ...}}``) given by leaf (``obs.image``)."""
        if not self.nested:
            return dict(data)
        return flatten_columns(data, self._leaves_of)

    def _leaves_of(self, k: str, v: Any) -> dict[str, Any] | None:
        """``{leaf column: leaf}`` of a nested value of ``data`` (`flatten_columns`); None for a column's own."""
        return flatten_value(k, v) if is_nested_value(v) and k not in self.columns else None

    @staticmethod
    def as_input_dict(d: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """The input dict ``d`` (of ``n`` rows, flat keys: e.g. arrays written by ``out=``) as `input_dict` returns
        it: a batch whose nested views read as their structure (``d["obs"]["image"]``)."""
        return SampleBatch._from_columns(d, n, frozenset(), frozenset())

    def begin_episodes(
        self, env_ids: Any, obs: Mapping[str, Any], out: dict[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """Starts an episode in each slot of ``env_ids`` with its first observation rows; returns their ids.

        ``out``: as `input_dict`'s, for every slot: the input dict gathered into it in the same call, once the
        episodes began (every other slot must have an episode in progress; that and ``out`` are checked before the
        store changes).
        """
        return np.asarray(self._impl.begin_episodes(env_ids, self._flat(obs), out), dtype=np.int64)

    def add_step(self, data: Mapping[str, Any], env_ids: Any = None, end: Any = None) -> None:
        """Appends one step (every column, ``[n, *shape]``) to each slot's episode.

        ``end``: slots whose episodes end with this step (`end_episodes` in the same call, after the step; each must
        have an episode in progress, checked before anything is stored).
        """
        self._impl.add_step(self._flat(data), env_ids, end)

    def end_episodes(self, env_ids: Any) -> None:
        """Marks the episodes in those slots finished; the slots become idle."""
        self._impl.end_episodes(env_ids)

    def input_dict(self, env_ids: Any = None, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The compute-actions views for ``env_ids`` (all slots if None).

        ``t``, ``eps_id`` and ``env_id`` are in it when ``view_requirements``
        has a view of that name used for compute actions.

        ``out``: a plain dict of arrays to write the views into instead of new
        ones (exactly the input dict's flat columns, each writeable, C-contiguous,
        of its dtype and shape for these slots: e.g. a copy of an earlier input
        dict of as many rows); it is returned as it is (flat keys). Anything else
        is refused, naming the column, before the store changes.
        """
        if out is not None:
            return self._impl.input_dict(env_ids, out)
        d = self._impl.input_dict(env_ids)
        return self.as_input_dict(d, self.num_envs if env_ids is None else len(env_ids))

    def step(
        self, data: Mapping[str, Any], env_ids: Any = None, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """``add_step`` then ``input_dict`` for the same slots, in one C++ call (``out``: as `input_dict`'s, checked
        before the step is stored)."""
        if out is not None:
            return self._impl.step(self._flat(data), env_ids, out)
        d = self._impl.step(self._flat(data), env_ids)
        return self.as_input_dict(d, self.num_envs if env_ids is None else len(env_ids))

    def step_into(self) -> Callable[[dict[str, Any], Any, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """``step(data, env_ids, out)`` as one function of those three, for a caller that passes a new dict as
        ``data`` at every call and always an ``out`` (the store's own method where no column is nested, as a plain
        function of positional arguments: it reads ``data`` without keeping it). Private to trajview's `PolicyRunner`."""
        if self.nested:
            return lambda data, env_ids, out: self._impl.step(self._flat(data), env_ids, out)
        return self._impl._fast_step()  # type: ignore[no-any-return]  # (positional arguments: no pybind11 dispatch)

    def staged_rows(self, column: str) -> np.ndarray | None:
        """The rows the next ``add_step`` will store ``column`` in, ``[num_envs, *shape]``; None if it cannot.

        For callers that write a step's big rows (image observations) there
        and pass this same array to ``add_step``, which then copies nothing.
        Only while every slot has an episode in progress and all stand at the
        same position (else None). The array is a view of the store's memory
        that does not keep it alive: it reads the rows stored through it until
        the next ``build_batch`` (which may free them), and must not be used
        after that. Private to trajview's samplers.
        """
        return self._impl._next_rows(column)

    # -- batches ----------------------------------------------------------------

    def build_batch(self, complete_only: bool = False, hold: Any = None) -> list[SampleBatch]:
        """Every step not emitted before, one ``SampleBatch`` per episode segment.

        Segments are zero-copy slices of one C++-owned flat buffer per column;
        ``tv.concat_samples`` of untouched consecutive segments is a view too.
        ``hold`` (one int per slot) keeps that many of each slot's newest steps
        of its ongoing episode back for the next batch.
        """
        cols, _, keys, num_seqs = self._build(complete_only, hold)
        out = []
        for s in self.last_segments:
            rows = (s["row_offset"], s["row_offset"] + s["length"])
            seqs = (s["seq_offset"], s["seq_offset"] + s["num_seqs"]) if num_seqs else None
            out.append(SampleBatch._segment(cols, rows, seqs, keys))
            out[-1].view_columns = self._view_columns.intersection(cols)
        return out

    def build_flat_batch(self, complete_only: bool = False, hold: Any = None) -> SampleBatch:
        """The same steps as `build_batch`, as one batch: ``concat_samples(build_batch(...))`` without the split.

        ``last_segments`` then describes its episode segments (``eps_id``,
        ``env_id``, ``t_start``, ``length``, ``row_offset``, ``finished``, ...).
        """
        cols, count, keys, num_seqs = self._build(complete_only, hold)
        out = SampleBatch._segment(cols, (0, count), (0, num_seqs) if num_seqs else None, keys)
        out.view_columns = self._view_columns.intersection(cols)
        return out

    def _build(self, complete_only: Any, hold: Any) -> tuple[dict, int, frozenset, int]:
        """The store's batch: (its columns, its rows, the per-sequence columns, its sequences); its segments in
        ``last_segments``."""
        raw, segs, seq_keys, count, num_seqs = self._impl.build_batch(bool(complete_only), hold)
        cols: dict[str, Any] = raw  # arrays; LazyViews replace the (base rows, index) pairs below
        for k, v in cols.items():
            if type(v) is tuple:  # (base rows, index): a lazy column
                cols[k] = LazyView._trusted(*v)
        self.last_segments = segs
        return cols, int(count), frozenset(seq_keys), num_seqs

    def discard_steps(self) -> None:
        """Drops every step not emitted yet, as `build_batch` would after emitting them, without building the batch:
        the store keeps only the rows its views can still read (for steps nobody trains on, e.g. `PolicyRunner`'s)."""
        self._impl.discard_steps()

    # -- introspection ----------------------------------------------------------

    def num_steps(self) -> int:
        """Steps stored and not yet emitted."""
        return int(self._impl.num_steps())

    def num_complete_steps(self) -> int:
        """Steps of finished episodes not yet emitted."""
        return int(self._impl.num_complete_steps())

    def nbytes(self) -> int:
        """Bytes of row storage the store has allocated (held rows, block slack, idle blocks kept for reuse)."""
        return int(self._impl.nbytes())

    def held_nbytes(self) -> int:
        """Bytes of the rows the store still needs: unemitted steps, their look-back rows, first observations."""
        return int(self._impl.held_nbytes())

    def eps_ids(self) -> np.ndarray:
        """Per slot, the running episode's id (-1 where idle)."""
        return self._impl.eps_ids()

    def episode_lengths(self) -> np.ndarray:
        """Per slot, the running episode's steps so far (-1 where idle)."""
        return self._impl.episode_lengths()

    @property
    def inference_keys(self) -> list[str]:
        """Stored-column views in ``input_dict`` (besides ``t`` / ``eps_id`` / ``env_id``)."""
        return list(self._impl.inference_keys())

    @property
    def training_keys(self) -> list[str]:
        """Views in every batch (besides the boundary columns)."""
        return list(self._impl.training_keys())
