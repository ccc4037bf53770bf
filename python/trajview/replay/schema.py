"""The replay buffer's schema: which batch columns are stored (and with which dtype and shape), how an added
column is checked and converted, and the views a sample builds (`ViewRequirement` s, the window views of each
`NStep`) as the C++ store's view specs. Functions of plain data: `ReplayBuffer` holds the state."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..views import SampleBatch, ViewRequirement
from ..views.columns import (
    DONES,
    EPS_ID,
    IS_INIT,
    NEXT_OBS,
    OBS,
    STATE_IN_PREFIX,
    TERMINATEDS,
    TRUNCATEDS,
    cast_exactly,
)
from ..views.nest import SEP, expand_views, leaf_names
from .nstep import NStep

#: A view of `ReplayBuffer.sample`: a `ViewRequirement`, or an `NStep` return.
AnyView = ViewRequirement | NStep
#: ``{name: (dtype, per-step shape)}`` of the stored columns.
Specs = dict[str, tuple[np.dtype, tuple[int, ...]]]
#: One view as the C++ store builds it: (output name, stored column, shifts, adds an axis, padding).
ViewSpec = tuple[str, str, list[int], bool, str]
#: Prefix of the window views an `NStep` reads (dropped from the sample).
NSTEP_TMP = "__nstep__"
#: Columns computed at sample time, never stored.
COMPUTED = (IS_INIT, "mask")
DEFAULT_NEXT_OBS = {OBS: NEXT_OBS}
END_FLAGS = (TERMINATEDS, TRUNCATEDS, DONES)
#: Trajectory-id columns tried in order when the sampler names no ``traj_key``.
TRAJ_KEYS = (EPS_ID, "traj_ids")


def view_columns(batch: Mapping[str, Any]) -> frozenset[str]:
    """The batch's columns that are views of other columns, as its collector named them
    (`SampleBatch.view_columns`). (Whether a column is held as a `LazyView` says nothing: a worker's ``obs``
    column is one too.)"""
    return batch.view_columns if isinstance(batch, SampleBatch) else frozenset()


def stored_by_default(
    key: str, next_columns: set[str], seq_keys: frozenset[str], views: frozenset[str] = frozenset()
) -> bool:
    """Whether a batch column is stored when the buffer is not told which: not a next-observation column
    (nor a leaf of one), not a view of another column (a frame stack, previous actions: `view_columns`),
    nothing computed at sample time, no ``infos``, nothing per-sequence."""
    return (
        key not in views
        and key.split(SEP, 1)[0] not in views
        and key not in next_columns
        and key.split(SEP, 1)[0] not in next_columns
        and key not in COMPUTED
        and key != SampleBatch.INFOS
        and key not in seq_keys
        and key != SampleBatch.SEQ_LENS
        and not key.startswith(STATE_IN_PREFIX)
    )


def check_explicit_columns(columns: tuple[str, ...], next_obs: Mapping[str, str]) -> None:
    for c in columns:
        if c in COMPUTED or c in next_obs.values():
            raise ValueError(f"column {c!r} is computed at sample time; it cannot be stored")


def check_views(views: Mapping[str, AnyView]) -> tuple[dict[str, ViewRequirement], dict[str, NStep]]:
    """A sample's views split into its `ViewRequirement` s and its `NStep` returns, each checked."""
    out: dict[str, ViewRequirement] = {}
    nsteps: dict[str, NStep] = {}
    for name, vr in views.items():
        if isinstance(vr, NStep):
            if str(name).startswith(NSTEP_TMP):
                raise ValueError(f"views[{name!r}]: names starting with {NSTEP_TMP!r} are reserved")
            nsteps[str(name)] = vr
            continue
        if not isinstance(vr, ViewRequirement):
            raise TypeError(f"views[{name!r}] must be a tv.ViewRequirement or a tv.NStep, got {type(vr).__name__}")
        if vr.batch_repeat_value != 1:
            raise ValueError(
                f"views[{name!r}]: batch_repeat_value must be 1 for replay samples, got {vr.batch_repeat_value}"
            )
        if name in COMPUTED:
            raise ValueError(f"views[{name!r}]: {name!r} is computed by the sampler; use another name")
        out[str(name)] = vr
    return out, nsteps


def check_specs(specs: Specs, hint: str = "leave it out with columns=[...]") -> None:
    """Refuses a column the C++ store cannot hold (``hint``: what the caller can do about it)."""
    for name, (dt, shape) in specs.items():
        if not dt.isnative or dt.kind not in "biuf" or dt.itemsize > 8:
            raise ValueError(
                f"column {name!r}: replay stores bool, int and float columns only, got dtype {dt}; {hint}"
            )
        if any(d < 0 for d in shape):
            raise ValueError(f"column {name!r}: shape must have dims >= 0, got {shape}")


def next_obs_by_leaf(next_obs: Mapping[str, str], specs: Specs) -> dict[str, str]:
    """``next_obs`` with each nested column replaced by its leaves (obs.image -> new_obs.image)."""
    out = dict(next_obs)
    for o, nxt in next_obs.items():
        if o not in specs and leaf_names(o, specs):
            del out[o]
            out.update((leaf, nxt + leaf[len(o):]) for leaf in leaf_names(o, specs))
    return out


def store_columns(specs: Specs, next_obs: Mapping[str, str]) -> list[tuple[str, str, list[int], bool]]:
    """The C++ store's column list: (name, dtype name, shape, whether it is an observation column)."""
    return [(n, np.dtype(dt).name, list(shape), n in next_obs) for n, (dt, shape) in specs.items()]


def default_views(next_obs: Mapping[str, str], specs: Specs) -> dict[str, ViewRequirement]:
    """The views built when the buffer is given none: ``new_obs = obs@+1`` per stored observation column."""
    return {nxt: ViewRequirement(o, shift=1) for o, nxt in next_obs.items() if o in specs}


def view_column(name: str, vr: ViewRequirement, specs: Specs) -> str:
    """The stored column a view reads (refusing a view of an unstored column or named as a stored one)."""
    col = vr.column(name)
    if col not in specs:
        raise ValueError(f"views[{name!r}] reads column {col!r}, which is not stored; stored: {list(specs)}")
    if name in specs:
        raise ValueError(f"views[{name!r}]: {name!r} is a stored column; give the view another name")
    return col


def expand_and_check(views: Mapping[str, ViewRequirement], specs: Specs) -> dict[str, ViewRequirement]:
    """``views`` leaf by leaf, each checked against the stored columns (`view_column`)."""
    out = expand_views(views, specs)
    for name, vr in out.items():
        view_column(name, vr, specs)
    return out


def infer_specs(batch: Mapping[str, Any], explicit: tuple[str, ...] | None, next_obs: Mapping[str, str]) -> Specs:
    """The stored columns of a buffer whose first batch this is: ``explicit`` (a nested name: its leaves), or
    every column `stored_by_default`; dtype and shape from the batch."""
    seq = batch.seq_keys if isinstance(batch, SampleBatch) else frozenset()
    names = explicit
    if names is None:
        vcols = view_columns(batch)
        names = tuple(k for k in batch if stored_by_default(k, set(next_obs.values()), seq, vcols))
        if not names:
            raise ValueError(f"add: the batch has no column to store, got columns {list(batch)}")
    specs: Specs = {}
    keys = list(batch)
    names = tuple(c for k in names for c in ([k] if k in keys else leaf_names(k, keys) or [k]))
    for k in names:
        if k not in batch:
            raise ValueError(f"add: missing column {k!r}; expected every column of {list(names)}")
        if k in seq:
            raise ValueError(f"column {k!r} has one row per sequence; replay stores per-step columns only")
        arr = np.asarray(batch[k])
        specs[k] = (arr.dtype, tuple(arr.shape[1:]))
    return specs


def check_unstored(batch: Mapping[str, Any], specs: Specs, next_obs: Mapping[str, str]) -> None:
    """Refuses a batch with a column that would be stored by default but is not (the buffer inferred its
    columns from an earlier batch)."""
    nexts = set(next_obs.values())
    seq = batch.seq_keys if isinstance(batch, SampleBatch) else frozenset()
    vcols = view_columns(batch)
    for k in batch:
        if k not in specs and stored_by_default(k, nexts, seq, vcols):
            raise ValueError(
                f"add: column {k!r} is not stored (stored: {list(specs)}); "
                f"pass columns=[...] to choose what the buffer keeps"
            )


def convert(name: str, value: Any, dt: np.dtype, shape: tuple[int, ...], n: int | None) -> np.ndarray:
    """A column as the store holds it: cast without loss to ``dt``, per-step ``shape``, ``n`` rows."""
    arr = cast_exactly(name, np.asarray(value), dt)
    if arr.ndim == 0 or tuple(arr.shape[1:]) != shape:
        raise ValueError(f"column {name!r}: expected per-step shape {shape}, got {tuple(arr.shape[1:])}")
    if n is not None and len(arr) != n:
        raise ValueError(f"column {name!r}: expected {n} rows, got {len(arr)}")
    return np.ascontiguousarray(arr)


def nstep_views(name: str, ns: NStep, specs: Specs, next_obs: Mapping[str, str], has_next: bool) -> dict[str, ViewRequirement]:
    """The window views one `NStep` reads: rewards and flags at ``0 .. n-1``, observations at ``1 .. n``."""
    if not has_next:
        raise ValueError(
            f"views[{name!r}]: NStep bootstraps from the observation after each window, so the added batches "
            f"must carry next observations (new_obs); these did not"
        )
    if ns.reward_key not in specs:
        raise ValueError(f"views[{name!r}]: NStep reads column {ns.reward_key!r}, which is not stored")
    obs = [ns.obs_key] if ns.obs_key in specs else leaf_names(ns.obs_key, specs)
    if not obs or not all(o in next_obs for o in obs):
        raise ValueError(
            f"views[{name!r}]: NStep reads observation column {ns.obs_key!r}, which is not a stored observation "
            f"column with next observations; stored: {list(specs)}"
        )
    n = ns.n
    tmp = f"{NSTEP_TMP}{name}"
    out = {f"{tmp}|r": ViewRequirement(ns.reward_key, shift=list(range(n)))}
    for o in obs:
        out[f"{tmp}|o{o[len(ns.obs_key):]}"] = ViewRequirement(o, shift=list(range(1, n + 1)))
    for flag, key in (("term", ns.terminated_key), ("trunc", ns.truncated_key)):
        if key in specs:
            out[f"{tmp}|{flag}"] = ViewRequirement(key, shift=list(range(n)))
    return out


def view_specs(
    specs: Specs,
    extra: Mapping[str, ViewRequirement],
    nsteps: Mapping[str, NStep],
    next_obs: Mapping[str, str],
    has_next: bool,
) -> list[ViewSpec]:
    """The C++ view specs of a sample: each stored column, each view of ``extra`` and the window views of
    each `NStep`."""
    views = dict(extra)
    for name, ns in nsteps.items():
        views.update(nstep_views(name, ns, specs, next_obs, has_next))
    out: list[ViewSpec] = [(k, k, [0], False, "zero") for k in specs]
    for name, vr in views.items():
        col = view_column(name, vr, specs)
        out.append((name, col, [int(s) for s in vr.shift_arr], vr.adds_axis, vr.padding))
    return out


def selected_specs(
    specs: list[ViewSpec], nsteps: Mapping[str, NStep], columns: tuple[str, ...], marks: tuple[str, ...] = ()
) -> tuple[list[ViewSpec], dict[str, NStep]]:
    """The view specs (and `NStep` views) of a sample that returns ``columns`` only (stored columns, views, `NStep`
    names; the `COMPUTED` columns come anyway): an `NStep` keeps its window views, and the columns ``marks`` that the
    sampler marks slice ends in (its ``truncated_key``, a stored ``dones``) stay where stored, so that the marks
    are OR-ed into their stored values as in a whole sample (the store's rule; one not stored is computed anyway).
    A name the sample does not hold is a `ValueError` listing those it holds."""
    wanted = set(columns)
    held = {spec[0] for spec in specs if not spec[0].startswith(NSTEP_TMP)} | set(nsteps)
    unknown = [c for c in columns if c not in held and c not in COMPUTED]
    if unknown:
        raise ValueError(f"sample: columns {unknown} are not in the buffer's samples (its columns: {sorted(held)}, "
                         f"and {list(COMPUTED)})")
    wanted.update(marks)
    windows = tuple(f"{NSTEP_TMP}{name}|" for name in nsteps if name in wanted)
    out = [spec for spec in specs if spec[0] in wanted or (windows and spec[0].startswith(windows))]
    return out, {name: ns for name, ns in nsteps.items() if name in wanted}


def nstep_returns(cols: dict[str, np.ndarray], nsteps: Mapping[str, NStep], steps_left: np.ndarray) -> None:
    """Replaces each `NStep`'s window views in a sample's columns by its returns (``name.<field>``)."""
    for name, ns in nsteps.items():
        tmp = f"{NSTEP_TMP}{name}|"
        obs = {k[len(tmp) + 1:]: cols.pop(k) for k in [k for k in cols if k.startswith(tmp + "o")]}
        res = ns.compute(cols.pop(tmp + "r"), obs, cols.pop(tmp + "term", None), cols.pop(tmp + "trunc", None),
                         steps_left)
        for k, v in res.items():
            cols[f"{name}{SEP}{k}"] = v


def check_key_columns(traj_key: str | None, truncated_key: str | None,
                      specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
    """The sampler's key columns against the stored ones: a stored ``traj_key`` column must hold one int per
    step (the trajectory ids), a stored ``truncated_key`` column bools (the store marks slice ends in it). A
    `ValueError` naming the column, the setting, what it must be and what it is."""
    if traj_key is not None and traj_key in specs:
        dt, shape = specs[traj_key]
        if np.dtype(dt).kind not in "iu" or tuple(shape) != ():
            raise ValueError(f"column {traj_key!r} is the sampler's traj_key (the trajectory ids), so it must hold "
                             f"one int per step, got {np.dtype(dt)} of per-step shape {tuple(shape)}")
    if truncated_key is not None and truncated_key in specs:
        dt, shape = specs[truncated_key]
        if np.dtype(dt).kind != "b":
            raise ValueError(f"column {truncated_key!r} is the sampler's truncated_key (it marks slice ends), so it "
                             f"must be bool, got {np.dtype(dt)}")


#: A dtype string as numpy writes one (``dtype.str``: byte order, kind, item size, a datetime unit): nothing else
#: is handed to numpy's dtype parser (which evaluates comma-separated and tuple forms).
_DTYPE_STR = re.compile(r"[<>|=]?[A-Za-z?][0-9]{0,4}(\[[0-9]{0,4}[A-Za-z]{1,3}\])?")


def dtype_from_str(s: Any) -> np.dtype | None:
    """The numpy dtype whose ``.str`` is ``s`` (read from a file or a socket), or None: ``s`` is checked to be such
    a plain dtype string before numpy parses it, and must come back unchanged."""
    if not isinstance(s, str) or _DTYPE_STR.fullmatch(s) is None:
        return None
    try:
        with warnings.catch_warnings():  # (numpy warns of deprecated aliases: refused below)
            warnings.simplefilter("ignore")
            dt = np.dtype(s)
    except (TypeError, ValueError):
        return None
    return dt if dt.str == s else None
