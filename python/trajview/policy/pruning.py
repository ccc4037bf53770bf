"""The view-pruning pass: `prune_views(policy)` finds which views a policy really reads (see docs/contract.md, Pruning).

Dummy batches built from the view requirements (valid samples of the spaces) go through
``compute_actions_from_input_dict``, ``postprocess_trajectory`` and the
loss; views that none of them reads are marked unused, so collectors never
build or store them. As in RLlib, the pass is the policy's concern: it runs
once per policy, before its first sample (`Policy._initialize_view_requirements`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from ..views.columns import (
    BOUNDARY_COLUMNS,
    PYTHON_COLUMNS,
    STATE_IN_PREFIX,
    STATE_OUT_PREFIX,
    ColumnSpec,
    column_spec_from_space,
)
from ..views.nest import SEP, Nest, leaf_names
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement

__all__ = ["NEVER_PRUNED", "MASK_LEAF", "PrunablePolicy", "ViewPruningError", "is_action_mask", "prune_views"]

#: The name of an action-mask leaf in an observation (PettingZoo's classic games).
MASK_LEAF = "action_mask"


class ViewPruningError(RuntimeError):
    """The policy raised while the view-pruning pass ran it on a dummy batch (for an exception class that cannot
    be raised again with the pass's message); its ``__cause__`` is the policy's exception."""

#: Training views the pruning pass never removes (see docs/contract.md, Pruning).
NEVER_PRUNED = frozenset(
    {SampleBatch.REWARDS, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS, SampleBatch.EPS_ID, SampleBatch.T}
)

_DUMMY_B = 2  # rows of the dummy compute-actions input
_DUMMY_T = 6  # steps of the dummy trajectory


class PrunablePolicy(Protocol):
    """What the pass reads and writes of a policy: `tv.Policy` and its subclasses have all of it."""

    view_requirements: dict[str, ViewRequirement]
    state_columns: dict[str, ColumnSpec]
    extra_fetch_columns: dict[str, ColumnSpec]
    postprocessed_columns: set[str]
    _views_initialized: bool

    def get_initial_state(self) -> list[np.ndarray]: ...

    def column_specs(self) -> dict[str, ColumnSpec]: ...

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]: ...

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: dict | None = None, episode: Any = None
    ) -> SampleBatch: ...

    def _run_loss_for_pruning(self, batch: SampleBatch) -> None: ...


def _dummy_column(col: str, specs: dict[str, ColumnSpec], vr: ViewRequirement | None) -> ColumnSpec:
    if col in specs:
        return specs[col]
    if col in BOUNDARY_COLUMNS:
        return (np.dtype(np.bool_), ()) if col == SampleBatch.IS_INIT else (np.dtype(np.int64), ())
    if col in PYTHON_COLUMNS:
        return (PYTHON_COLUMNS[col], ())
    if vr is not None and vr.space is not None:
        return column_spec_from_space(vr.space, f"view {col!r}")
    raise ValueError(
        f"view requirement reads column {col!r}, which nothing produces before the first action (not an env "
        f"column, nor a state_out of get_initial_state(): its shape and dtype are unknown); known columns: "
        f"{sorted(specs)}. If {col!r} is an extra fetch of compute_actions_from_input_dict (or a column "
        f"postprocessing adds) and the view is used for compute actions, give the view space= (e.g. "
        f"gym.spaces.Box(-inf, inf, (), np.float32)), or set used_for_compute_actions=False"
    )


def is_action_mask(column: str) -> bool:
    """Whether a leaf column holds an action mask (1 = legal): its last name part is ``action_mask`` (PettingZoo's
    classic games: ``obs.action_mask``) or ends with ``_action_mask``."""
    last = column.rsplit(SEP, 1)[-1]
    return last == MASK_LEAF or last.endswith("_" + MASK_LEAF)


class _Samples:
    """Valid values of the observation and action spaces' leaves for the dummy batches: ``space.sample()`` of a
    copy of each leaf space, seeded (the pass gives the same batches every time and leaves the policy's spaces'
    RNGs alone); an action mask has at least one legal action in every row. Each column is one series of
    samples that every view of it reads at its offsets (row r at offset s reads the series at r + s), so two
    views of one column agree where they overlap (``prev_n_obs[:, -1]`` is ``obs``)."""

    def __init__(self, policy: PrunablePolicy, vrs: Mapping[str, ViewRequirement]) -> None:
        self.spaces: dict[str, Any] = {}
        for base, space, what in ((SampleBatch.OBS, getattr(policy, "observation_space", None), "observation_space"),
                                  (SampleBatch.ACTIONS, getattr(policy, "action_space", None), "action_space")):
            if space is None:
                continue
            try:
                nest = Nest.from_space(space, what)
            except (ValueError, TypeError):
                continue  # column_specs names the space's problem
            for name, leaf in zip(nest.names(base), nest.leaves):
                self.spaces[name] = leaf.space
        #: Per column read by a view (its base name): the lowest and highest offset any view reads.
        self.bounds: dict[str, tuple[int, int]] = {}
        for key, vr in vrs.items():
            col = vr.column(key).split(SEP, 1)[0]
            lo, hi = self.bounds.get(col, (0, 0))
            self.bounds[col] = (min(lo, vr.shift_from), max(hi, vr.shift_to))
        self._series: dict[tuple[str, int], np.ndarray] = {}

    def _sample_series(self, col: str, space: Any, dtype: np.dtype, shape: tuple[int, ...], count: int) -> np.ndarray:
        seed = len(self._series)
        try:
            space = copy.deepcopy(space)
            space.seed(seed)
            values = np.asarray([np.asarray(space.sample()) for _ in range(count)], dtype=dtype)
            values = values.reshape((count,) + shape)
        except Exception:  # noqa: BLE001  (a custom space that cannot copy, seed or sample: zeros, as before)
            values = np.zeros((count,) + shape, dtype=dtype)
        if is_action_mask(col) and values.size:
            rows = values.reshape(count, -1)
            empty = ~rows.any(axis=1)
            legal = np.random.default_rng(seed).integers(0, rows.shape[1], count)
            rows[np.flatnonzero(empty), legal[empty]] = 1
        return values

    def view(self, col: str, vr: ViewRequirement, dtype: np.dtype, shape: tuple[int, ...], n: int) -> np.ndarray:
        """The values of ``n`` rows of a view of ``col`` (a leaf column)."""
        lead = (n, len(vr.shift_arr)) if vr.adds_axis else (n,)
        space = self.spaces.get(col)
        if space is None:
            return np.zeros(lead + shape, dtype=dtype)
        lo, hi = self.bounds.get(col.split(SEP, 1)[0], (0, 0))
        lo, hi = min(lo, vr.shift_from), max(hi, vr.shift_to)
        series = self._series.get((col, n))
        if series is None or len(series) < n + hi - lo:
            series = self._series[(col, n)] = self._sample_series(col, space, dtype, shape, n + hi - lo)
        rows = np.arange(n)[:, None] + vr.shift_arr[None, :] - lo
        out = series[rows]  # [n, offsets, ...]
        return out if vr.adds_axis else out[:, 0]


def _dummy_view(key: str, vr: ViewRequirement, specs: dict[str, ColumnSpec], n: int, samples: _Samples) -> Any:
    """Valid values of the view's shape (`_Samples`: samples of the spaces for observation and action columns,
    zeros for the others); a view of a nested column gives ``{leaf: values}`` (a SampleBatch stores the leaves)."""
    col = vr.column(key)
    if col not in specs:
        leaves = leaf_names(col, specs)
        if leaves:
            from ..views.nest import assemble

            values = {c: samples.view(c, vr, specs[c][0], specs[c][1], n) for c in leaves}
            return assemble(col, list(values), values.__getitem__)
    dtype, shape = _dummy_column(col, specs, vr)
    return samples.view(col, vr, dtype, shape, n)


def _raised_in(e: Exception, where: str, views: Any) -> Exception:
    """``e`` (the policy's exception) again, its message saying which call of the pass raised and on which views:
    the same type when it takes one message, else `ViewPruningError`; raised ``from e``."""
    msg = (f"the view-pruning pass (before the first sample; docs/contract.md, Pruning) called {where} on a dummy "
           f"batch of the views {sorted(views)} (samples of the spaces, action masks with a legal action) and it "
           f"raised {type(e).__name__}: {e}")
    try:
        new = type(e)(msg)
    except Exception:  # noqa: BLE001  (an exception class that needs other arguments)
        new = ViewPruningError(msg)
    if not isinstance(new, type(e)) or str(new) == "":
        new = ViewPruningError(msg)
    return new


def _read(key: str, keys: set[str]) -> bool:
    """Whether ``key`` (or, for a nested view, one of its leaves ``key.x``) is among ``keys``."""
    return key in keys or any(k.startswith(key + SEP) for k in keys)


def _keep_views(policy: Any) -> frozenset[str]:
    """``policy.keep_views`` (the views the pass must not prune for training), checked: a set of names (that each
    is a view: `_check_kept`, once the pass knows the extra fetches)."""
    keep = getattr(policy, "keep_views", ())
    if isinstance(keep, str) or not isinstance(keep, Iterable):
        raise TypeError(f"{type(policy).__name__}.keep_views must be a set of view names, got {keep!r}")
    return frozenset(keep)


def _check_kept(policy: Any, keep: frozenset[str], vrs: Mapping[str, ViewRequirement], extra: Mapping) -> None:
    """Each name in ``keep`` is a view of the policy: one of ``vrs`` or an extra fetch (``extra``: which the pass
    makes views next); else a ValueError naming it and the views there are."""
    unknown = sorted(k for k in keep if k not in vrs and k not in extra)
    if unknown:
        raise ValueError(f"{type(policy).__name__}.keep_views names {unknown}, which are not views of the policy "
                         f"(its views: {sorted({*vrs, *extra})})")


def prune_views(policy: PrunablePolicy) -> None:
    """Runs the view-pruning pass on ``policy`` once (later calls return at once).

    Sends dummy batches through ``compute_actions_from_input_dict``, ``postprocess_trajectory`` and the loss,
    records which keys each reads, adds or deletes, and marks views that none reads as unused
    (``used_for_compute_actions`` / ``used_for_training`` set to ``False``; `NEVER_PRUNED` views and those
    named in ``policy.keep_views`` keep training). The dummy batches hold valid values: seeded samples of the
    observation and action spaces, with at least one legal action in an action mask (a leaf named
    ``action_mask``); zeros for the other columns. When the policy raises on them, the error (the same type
    where it can be, chained to the policy's) names the call and its views. Also learns the dtype and shape of
    the ``state_out_i`` and extra-fetch columns (``policy.state_columns``, ``policy.extra_fetch_columns``) and
    the columns postprocessing adds (``policy.postprocessed_columns``).
    """
    if policy._views_initialized:
        return
    VR = ViewRequirement
    init = [np.asarray(s) for s in policy.get_initial_state()]
    specs = policy.column_specs()
    for i, s in enumerate(init):
        specs[f"{STATE_OUT_PREFIX}{i}"] = (s.dtype, s.shape)
    vrs = policy.view_requirements
    keep = _keep_views(policy)
    samples = _Samples(policy, vrs)
    # The recurrent-state views come from get_initial_state() before anything runs (as RLlib does), so that
    # the dummy compute-actions input already holds state_in_i.
    for i in range(len(init)):
        vrs.setdefault(f"{STATE_IN_PREFIX}{i}", VR(f"{STATE_OUT_PREFIX}{i}", shift=-1))
        vrs.setdefault(f"{STATE_OUT_PREFIX}{i}", VR(used_for_compute_actions=False))

    # 1. Action computation.
    obs_cols = {SampleBatch.OBS}
    inputs = {}
    for key, vr in vrs.items():
        col = vr.column(key)
        if not vr.used_for_compute_actions or col == SampleBatch.INFOS:
            continue
        knowable = vr.shift_to <= (0 if col in obs_cols else -1)
        if col in BOUNDARY_COLUMNS or col == SampleBatch.AGENT_INDEX:
            knowable = True
        elif col in PYTHON_COLUMNS:
            knowable = False
        if knowable:
            inputs[key] = _dummy_view(key, vr, specs, _DUMMY_B, samples)
    input_batch = SampleBatch(inputs)
    input_batch.enable_access_tracking()
    try:
        out = policy.compute_actions_from_input_dict(input_batch, explore=False, timestep=0)
    except Exception as e:
        raise _raised_in(e, f"{type(policy).__name__}.compute_actions_from_input_dict", inputs) from e
    if not isinstance(out, tuple) or len(out) != 3:
        raise TypeError(
            f"{type(policy).__name__}.compute_actions_from_input_dict must return (actions, state_outs, "
            f"extra_fetches), got {type(out).__name__}"
        )
    actions, state_outs, extra = out
    read_for_actions = set(input_batch.accessed_keys)
    name = type(policy).__name__
    if not isinstance(state_outs, (list, tuple)):
        raise ValueError(
            f"state_outs: {name}.compute_actions_from_input_dict must return a list of arrays (one per "
            f"get_initial_state() entry, [] if not recurrent), got {type(state_outs).__name__}"
        )
    if not isinstance(extra, Mapping):
        raise ValueError(
            f"extra_fetches: {name}.compute_actions_from_input_dict must return a dict of arrays ({{}} if none), "
            f"got {type(extra).__name__}"
        )

    # Learn the policy's own columns from what it returned.
    policy.state_columns = {}
    if len(state_outs) != len(init):
        raise ValueError(
            f"{type(policy).__name__}: compute_actions_from_input_dict returned {len(state_outs)} state_outs, "
            f"but get_initial_state() has {len(init)}"
        )
    for i, (s, s0) in enumerate(zip(state_outs, init)):
        s = np.asarray(s)
        _check_storable(f"{STATE_OUT_PREFIX}{i}", s0.dtype, "get_initial_state()")
        if s.shape[1:] != s0.shape:
            raise ValueError(
                f"state_out_{i}: compute_actions_from_input_dict returned per-row shape {s.shape[1:]}, "
                f"get_initial_state()[{i}] has shape {s0.shape}"
            )
        policy.state_columns[f"{STATE_OUT_PREFIX}{i}"] = (s0.dtype, s0.shape)
    policy.extra_fetch_columns = {}
    for k, v in dict(extra).items():
        v = np.asarray(v)
        if v.ndim < 1 or v.shape[0] != _DUMMY_B:
            raise ValueError(
                f"extra fetch {k!r}: expected one row per input row (leading dim {_DUMMY_B}), got shape {v.shape}"
            )
        if k in specs and k not in policy.extra_fetch_columns:
            raise ValueError(f"extra fetch {k!r} has the name of a column the env produces")
        _check_extra_name(k, vrs)
        _check_storable(f"extra fetch {k!r}", v.dtype, "compute_actions_from_input_dict")
        policy.extra_fetch_columns[k] = (v.dtype, tuple(v.shape[1:]))
    _check_kept(policy, keep, vrs, policy.extra_fetch_columns)
    for i in range(len(init)):
        vrs.setdefault(f"{STATE_IN_PREFIX}{i}", VR(f"{STATE_OUT_PREFIX}{i}", shift=-1))
        vrs.setdefault(f"{STATE_OUT_PREFIX}{i}", VR(used_for_compute_actions=False))
    for k in policy.extra_fetch_columns:
        vrs.setdefault(k, VR(used_for_compute_actions=False))
    specs = policy.column_specs()
    del actions

    # 2. Postprocessing, on one dummy trajectory with every training view.
    train = {}
    for key, vr in vrs.items():
        if not vr.used_for_training:
            continue
        col = vr.column(key)
        if col == SampleBatch.INFOS:
            train[key] = np.array([{} for _ in range(_DUMMY_T)], dtype=object)
            continue
        if (
            col not in specs
            and col not in BOUNDARY_COLUMNS
            and col not in PYTHON_COLUMNS
            and vr.space is None
            and not leaf_names(col, specs)
        ):
            continue  # a column that postprocessing adds: see below
        rows = _DUMMY_T if vr.batch_repeat_value == 1 else -(-_DUMMY_T // vr.batch_repeat_value)
        train[key] = _dummy_view(key, vr, specs, rows, samples)
    train[SampleBatch.EPS_ID] = np.zeros(_DUMMY_T, np.int64)
    train[SampleBatch.ENV_ID] = np.zeros(_DUMMY_T, np.int64)
    train[SampleBatch.T] = np.arange(_DUMMY_T, dtype=np.int64)
    train[SampleBatch.IS_INIT] = np.arange(_DUMMY_T) == 0
    repeats = {vr.batch_repeat_value for vr in vrs.values() if vr.batch_repeat_value > 1}
    seq_keys = [k for k, vr in vrs.items() if vr.batch_repeat_value > 1 and k in train]
    if repeats:
        rep = max(repeats)
        n_seq = -(-_DUMMY_T // rep)
        train[SampleBatch.SEQ_LENS] = np.array([min(rep, _DUMMY_T - q * rep) for q in range(n_seq)], np.int32)
    pre = SampleBatch(train, seq_keys=seq_keys)
    pre_keys = list(dict.keys(pre))  # nested views by leaf
    pre.enable_access_tracking()
    try:
        post = policy.postprocess_trajectory(pre)
    except Exception as e:
        raise _raised_in(e, f"{type(policy).__name__}.postprocess_trajectory", pre_keys) from e
    if not isinstance(post, SampleBatch):
        raise TypeError(
            f"{type(policy).__name__}.postprocess_trajectory must return a SampleBatch, got {type(post).__name__}"
        )
    read_in_post = set(pre.accessed_keys)
    policy.postprocessed_columns = set(post.keys()) - set(pre_keys)

    # 3. The loss, on the postprocessed batch.
    loss_batch = SampleBatch(dict(post), seq_keys=seq_keys)
    loss_batch.enable_access_tracking()
    has_loss = True
    try:
        policy._run_loss_for_pruning(loss_batch)
    except NotImplementedError:
        has_loss = False
    except Exception as e:
        raise _raised_in(e, f"{type(policy).__name__}.loss", dict.keys(loss_batch)) from e
    read_in_loss = set(loss_batch.accessed_keys)

    # 4. Prune.
    for key, vr in vrs.items():
        if vr.used_for_compute_actions and not _read(key, read_for_actions):
            vr.used_for_compute_actions = False
        if has_loss and vr.used_for_training and key not in NEVER_PRUNED and key not in keep:
            if not _read(key, read_in_post) and not _read(key, read_in_loss):
                vr.used_for_training = False
    for key in policy.postprocessed_columns:
        if key in read_in_loss and key not in vrs:
            vrs[key] = VR(used_for_compute_actions=False)
    policy._views_initialized = True


#: Names an extra fetch may not take: views the collector builds itself (an extra fetch of that name would be
#: silently shadowed by the view, or shadow it), the boundary columns and the recurrent-state names.
RESERVED_FETCH_NAMES = frozenset(
    {
        SampleBatch.NEXT_OBS,
        SampleBatch.PREV_ACTIONS,
        SampleBatch.PREV_REWARDS,
        SampleBatch.INFOS,
        SampleBatch.SEQ_LENS,
        SampleBatch.DONES,
        SampleBatch.UNROLL_ID,
        SampleBatch.AGENT_INDEX,
        *BOUNDARY_COLUMNS,
    }
)

#: dtype kinds a store keeps: bool, unsigned and signed ints, floats (see trajview._core).
_STORABLE_KINDS = "buif"


def _check_extra_name(key: str, vrs: Mapping[str, ViewRequirement]) -> None:
    reserved = key in RESERVED_FETCH_NAMES or key.startswith((STATE_IN_PREFIX, STATE_OUT_PREFIX))
    vr = vrs.get(key)
    # A view of that name reading another column or offset (e.g. prev_actions = actions@-1) would hide the fetch.
    shadowed = vr is not None and (vr.column(key) != key or vr.adds_axis or vr.shift_from != 0)
    if reserved or shadowed:
        what = "a name trajview reserves for a view or column it builds" if reserved else f"the name of the view {vr!r}"
        raise ValueError(
            f"extra fetch {key!r}: compute_actions_from_input_dict returned an extra fetch with {what}; "
            f"rename the fetch (reserved: {sorted(RESERVED_FETCH_NAMES)} and the state_in_*/state_out_* names)"
        )


def _check_storable(what: str, dtype: np.dtype, source: str) -> None:
    if dtype.kind not in _STORABLE_KINDS or dtype.itemsize > 8:
        raise ValueError(
            f"{what}: {source} returned dtype {dtype}, which a trajectory store cannot hold; expected a bool, "
            f"int or float dtype (e.g. float32, int64)"
        )
