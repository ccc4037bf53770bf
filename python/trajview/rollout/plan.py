"""From a policy to the `Collector` that stores what it reads: columns, views, initial rows, eps-id ranges."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _core
from ..collect.collector import BOUNDARY_COLUMNS, Collector
from ..policy.policy import Policy
from ..views.columns import PYTHON_COLUMNS
from ..views.nest import Nest, leaf_names
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement
from .config import MAX_WORKERS, RolloutConfig

__all__ = ["EPS_COUNTER_MASK", "SEQ_TWIN_PREFIX", "PolicyColumns", "eps_id_start", "make_collector", "view_snapshot"]

#: Per-step twins of a policy's per-sequence views (``batch_repeat_value > 1``, e.g. ``state_in_0``) are stored
#: under this prefix when the sampler may cut a segment inside a sequence (see `make_collector`'s ``seq_twins``).
SEQ_TWIN_PREFIX = "__seq_twin__"

#: eps_id = worker_index << 40 | policy_index << 32 | n, n counting up from 0 per worker and policy for as long as
#: the worker lives (across store rebuilds): unique across workers, policies and rebuilds.
EPS_WORKER_BITS = 40
EPS_POLICY_BITS = 32
#: The bits of an eps_id that count a worker's policy's trajectories.
EPS_COUNTER_MASK = (1 << EPS_POLICY_BITS) - 1
MAX_POLICIES = 1 << (EPS_WORKER_BITS - EPS_POLICY_BITS)


def eps_id_start(worker_index: int, policy_index: int, n: int = 0) -> int:
    """The eps_id of the ``n``-th trajectory of a worker's policy (see `EPS_WORKER_BITS`)."""
    if not 0 <= worker_index < MAX_WORKERS:
        raise ValueError(f"worker_index must be in [0, {MAX_WORKERS}), got {worker_index}")
    if not 0 <= policy_index < MAX_POLICIES:
        raise ValueError(f"a worker holds at most {MAX_POLICIES} policies, got policy index {policy_index}")
    if not 0 <= n < 1 << EPS_POLICY_BITS:
        raise ValueError(f"a worker's policy ran out of eps_ids (2**{EPS_POLICY_BITS} trajectories)")
    return worker_index << EPS_WORKER_BITS | policy_index << EPS_POLICY_BITS | n


def view_snapshot(vrs: dict[str, ViewRequirement]) -> dict:
    """What a collector was built from: compared before each sample to see whether the views changed."""
    return {
        k: (
            vr.data_col,
            tuple(vr.shift_arr.tolist()),
            vr.adds_axis,
            vr.padding,
            vr.batch_repeat_value,
            vr.used_for_compute_actions,
            vr.used_for_training,
        )
        for k, vr in vrs.items()
    }


def make_collector(
    policy: Policy, num_slots: int, config: RolloutConfig, first_eps_id: int, seq_twins: bool = False,
    slots_per_env: int = 1, inference_only: bool = False,
) -> Collector:
    """Runs the policy's view-pruning pass (once) and builds a collector of ``num_slots`` slots for its views.

    Episode ids count up from ``first_eps_id`` (see `eps_id_start`). ``seq_twins``: each training view with
    ``batch_repeat_value > 1`` also gets a per-step twin (`SEQ_TWIN_PREFIX` + its name: its value at every
    step), from which a sampler that cuts a built segment inside a sequence gives the new sequence its first
    row (the multi-agent agent-step hold-back); the sampler drops the twins before anyone sees the batch.
    ``slots_per_env``: slots of one env (a multi-agent store's, one per agent): ``env_id`` names the env.
    ``inference_only``: every view is built for compute actions only (``used_for_training=False`` on a copy; the
    policy's own views are unchanged): a `PolicyRunner`'s store, whose batches are only built to free old rows.
    """
    policy._initialize_view_requirements()
    specs = policy.column_specs()
    views = {}
    for key, vr in policy.view_requirements.items():
        col = vr.column(key)
        if col == SampleBatch.INFOS or col in PYTHON_COLUMNS:
            if col in PYTHON_COLUMNS and (key != col or vr.adds_axis or vr.shift_from != 0):
                raise ValueError(
                    f"view {key!r} reads {col!r} with shift {vr.shift!r}: {sorted(PYTHON_COLUMNS)} are computed "
                    f"when a batch is built and are views under their own name at shift 0 only"
                )
            continue
        if col in specs or col in BOUNDARY_COLUMNS or leaf_names(col, specs):
            if inference_only:
                vr = copy.copy(vr)
                vr.used_for_training = False
            views[key] = vr
            if seq_twins and vr.batch_repeat_value > 1 and vr.used_for_training:
                views[SEQ_TWIN_PREFIX + key] = ViewRequirement(
                    col, vr.space, vr.shift, padding=vr.padding, used_for_compute_actions=False
                )
        elif col not in policy.postprocessed_columns:
            raise ValueError(
                f"view {key!r} reads column {col!r}, which no one produces; known columns: "
                f"{sorted(specs) + list(BOUNDARY_COLUMNS)} (plus what postprocessing adds: "
                f"{sorted(policy.postprocessed_columns)})"
            )
    init = {f"state_out_{i}": np.asarray(s) for i, s in enumerate(policy.get_initial_state())}
    return Collector(
        num_slots,
        specs,
        views,
        initial_rows=init,
        chunk_rows=config.rollout_fragment_length,
        lazy_views=config.lazy_min_row_bytes,
        eps_id_start=first_eps_id,
        slots_per_env=slots_per_env,
    )


class PolicyColumns:
    """What a policy's compute-actions call must return, checked before any env steps.

    Actions must fit the action space's dtype (a safe cast) and shape, and
    Discrete / MultiDiscrete / MultiBinary actions its range (a ``Dict`` /
    ``Tuple`` action space: a nested structure of such arrays, each leaf
    checked against its leaf space and stored as ``actions.<leaf>``); ``state_outs``
    and extra fetches must be what the view-pruning pass saw (names, dtypes,
    per-row shapes). NaN in a float output is an error unless
    ``nan_outputs="allow"``. Errors name the column, expected and got.
    """

    def __init__(self, policy: Policy, config: RolloutConfig) -> None:
        self.policy_name = type(policy).__name__
        specs = policy.column_specs()
        self.action_space = policy.action_space
        self.action_nest = Nest.from_space(self.action_space, "action_space")
        #: A nested action space: per leaf, (column, spec, bounds, leaf space).
        self._action_leaves = [
            (c, specs[c], _action_bounds(leaf.space), leaf.space)
            for c, leaf in zip(self.action_nest.names(SampleBatch.ACTIONS), self.action_nest.leaves)
        ]
        self.action_spec = specs[SampleBatch.ACTIONS] if self.action_nest.flat else (np.dtype(np.bool_), ())
        self.state_keys = [f"state_out_{i}" for i in range(len(policy.get_initial_state()))]
        self.extra_keys = list(policy.extra_fetch_columns)
        self.specs = {k: specs[k] for k in self.state_keys + self.extra_keys if k in specs}
        infos_vr = policy.view_requirements.get(SampleBatch.INFOS)
        self.need_infos = infos_vr is not None and infos_vr.used_for_training
        #: The computed columns (dones, unroll_id, agent_index) the policy trains on: (key, column).
        self.python_columns = [
            (k, vr.column(k))
            for k, vr in policy.view_requirements.items()
            if vr.used_for_training and vr.column(k) in PYTHON_COLUMNS
        ]
        #: Views the pruning pass took out of training batches (their KeyError says so).
        self.pruned = frozenset(k for k, vr in policy.view_requirements.items() if not vr.used_for_training)
        #: Views of the rewards column (cast to float32 when the env's rewards are float32).
        self.reward_keys = [
            k for k, vr in policy.view_requirements.items() if vr.column(k) == SampleBatch.REWARDS and vr.used_for_training
        ]
        self.reward_input_keys = [
            k
            for k, vr in policy.view_requirements.items()
            if vr.column(k) == SampleBatch.REWARDS and vr.used_for_compute_actions
        ]
        agent_vr = policy.view_requirements.get(SampleBatch.AGENT_INDEX)
        #: Whether the compute-actions input carries ``agent_index``.
        self.agent_index_input = agent_vr is not None and agent_vr.used_for_compute_actions
        self.check_nan = config.nan_outputs == "raise"
        self._bounds = _action_bounds(self.action_space)
        self._scalar_bounds = self._bounds is not None and self._bounds[0].ndim == 0
        self._lo = int(self._bounds[0]) if self._scalar_bounds and self._bounds is not None else 0
        self._hi = int(self._bounds[1]) if self._scalar_bounds and self._bounds is not None else 0
        self._flat_actions = self.action_nest.flat
        #: Scalar bounds that int64 holds (`_core.any_outside` takes them).
        self._int64_bounds = self._scalar_bounds and -(2**63) <= self._lo and self._hi < 2**63
        self._no_rest = not self.state_keys and not self.extra_keys  # no state_outs, no extra fetches
        #: `_check_rest`'s common case: the state_out_i then the extra fetches as (key, spec), and per row count as
        #: (key, dtype, shape, NaN-checked); None where a column has no spec (the general checks run).
        rest = self.state_keys + self.extra_keys
        self._rest_specs = [(k, self.specs[k]) for k in rest] if all(k in self.specs for k in rest) else None
        self._rest_shapes: dict[int, list[tuple[str, Any, tuple[int, ...], bool]]] = {}
        #: `check_outputs`' common case in one C++ call (None where it has none: nested actions, a column without a
        #: spec, bounds that are not one int64 pair); it returns None for anything else, and the checks below run.
        self._fast_check = self._output_check()

    def _output_check(self) -> Any:
        if not self._flat_actions or self._rest_specs is None or (self._bounds is not None and not self._int64_bounds):
            return None

        def column(key: str, spec: tuple) -> tuple[str, np.dtype, tuple[int, ...], bool]:
            dtype, shape = spec
            return key, dtype, tuple(int(d) for d in shape), self.check_nan and dtype.kind in "fc"

        states = [column(k, spec) for k, spec in self._rest_specs if k in self.state_keys]
        extras = [column(k, spec) for k, spec in self._rest_specs if k not in self.state_keys]
        bounds = (self._lo, self._hi) if self._bounds is not None else None
        check = _core._OutputCheck(np.ndarray, column(SampleBatch.ACTIONS, self.action_spec), bounds, states, extras)
        return check._fast()  # (its call as a plain function of positional arguments: no pybind11 dispatch)

    def __bool__(self) -> bool:
        return bool(self.state_keys or self.extra_keys)

    def _array(self, name: str, value: Any, n: int, spec: tuple, floats: list | None = None) -> np.ndarray:
        """``value`` checked against ``spec`` (dtype, per-row shape) and for NaN; with ``floats``, a float array's
        NaN check is left to the caller (``(name, arr)`` appended: `_check_nans` of them all at once)."""
        arr = value if type(value) is np.ndarray else np.asarray(value)
        dtype, shape = spec
        if arr.dtype is dtype and arr.shape == (n, *shape):  # the common case: the dtype and shape expected
            if dtype.kind not in "fc" or not self.check_nan:
                return arr
            if floats is not None:
                floats.append((name, arr))
                return arr
            if not _has_nan(arr):
                return arr
        if arr.shape != (n, *shape):
            what = "leading dim" if arr.shape[:1] != (n,) else "per-row shape"
            raise ValueError(
                f"column {name!r}: compute_actions_from_input_dict must return one row per env, expected "
                f"{what} {n if what == 'leading dim' else shape} (shape {(n, *shape)}), got shape {arr.shape}"
            )
        if arr.dtype != dtype:
            if not np.can_cast(arr.dtype, dtype, "safe"):
                raise ValueError(
                    f"column {name!r}: expected dtype {dtype}, got {arr.dtype} (from compute_actions_from_input_dict; "
                    f"casting would lose data)"
                )
        if self.check_nan and arr.dtype.kind in "fc":
            if floats is not None:
                floats.append((name, arr))
            elif _has_nan(arr):
                raise _nan_error(name, arr, n)
        return arr

    @staticmethod
    def note_nan_inputs(e: BaseException, inputs: Mapping[str, Any] | None) -> None:
        """A failed action computation (its error ``e``: a NaN output, or the policy's own error, such as torch's
        "probability tensor contains ... nan") gets a note naming the float input columns holding NaN and their rows,
        if any: where the NaN came from (an env's observation, a reward), not only where it showed."""
        if inputs is None or not hasattr(e, "add_note"):
            return
        found = []
        for k, v in dict.items(inputs) if isinstance(inputs, dict) else inputs.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.ndim and _has_nan(v):
                rows = np.flatnonzero(np.isnan(v).reshape(len(v), -1).any(axis=1)).tolist()
                found.append(f"{k!r} (rows {rows[:8]}{' ...' if len(rows) > 8 else ''})")
        if not found:
            return
        cause = f"the policy's inputs hold NaN: {', '.join(found)} (an env's observation or reward?)"
        if isinstance(e, NanOutputError) and len(e.args) == 1:  # (ours: the cause comes first, in the message)
            e.args = (f"{cause}, and NaN in gives NaN out: {e.args[0]}",)
        else:
            e.add_note(f"{cause[0].upper()}{cause[1:]}; NaN in gives NaN out")

    @staticmethod
    def _check_nans(floats: list[tuple[str, np.ndarray]], n: int) -> None:
        """The NaN check of the float columns ``floats`` ((name, array) in column order): the first one holding NaN
        is the error. First all of them in one scan (`_core.any_nan`: float32 / float64 arrays, C-contiguous, as a
        torch policy returns them; one call, where numpy takes one per array or two for a concatenation). Where
        that finds NaN, each array is read on its own, in order, to name the first one holding it. Where it cannot
        scan an array: arrays of one value are read one by one; two or more larger ones are checked as one array
        (one reduction), each on its own only where that finds NaN."""
        found = _core.any_nan([a for _, a in floats])
        if found is False:
            return
        big = [a for _, a in floats if a.size > 1] if found is None else []  # (found: the scan already ran)
        if len(big) > 1:
            if not _has_nan(np.concatenate([a.reshape(-1) for a in big])):
                floats = [(k, a) for k, a in floats if a.size <= 1]
        for name, arr in floats:
            if _has_nan(arr):
                raise _nan_error(name, arr, n)

    def _check_nested_actions(self, actions: Any, n: int) -> dict[str, Any]:
        """The leaf columns of a nested action (``actions.<leaf>``), each checked like a flat one."""
        try:
            values = self.action_nest.leaf_values(actions, "actions")
        except ValueError as e:
            raise ValueError(f"column 'actions': compute_actions_from_input_dict returned actions that do not match "
                             f"the action space {self.action_space}: {e}") from None
        data: dict[str, Any] = {}
        for (col, spec, bounds, space), v in zip(self._action_leaves, values):
            arr = self._array(col, v, n, spec)
            if bounds is not None and n:
                low, high = bounds
                bad_rows = ((arr < low) | (arr > high)).reshape(n, -1).any(axis=1)
                if bad_rows.any():
                    bad = np.flatnonzero(bad_rows).tolist()
                    raise ValueError(
                        f"column {col!r}: compute_actions_from_input_dict returned actions outside the action space "
                        f"{space} (rows {bad}: {arr[bad].tolist()})"
                    )
            data[col] = arr
        return data

    def check_outputs(self, actions: Any, state_outs: Any, extra: Any, n: int) -> dict[str, Any]:
        """The step's policy columns (``actions``, ``state_out_i``, extra fetches), checked.

        A nested action space's actions come back as leaf columns (``actions.a``, ...), no ``actions`` key.
        """
        fast = self._fast_check
        if fast is not None:
            checked = fast(actions, state_outs, extra, n)
            if checked is not None:
                return checked  # type: ignore[no-any-return]
        if not self._flat_actions:
            return self._check_rest(self._check_nested_actions(actions, n), state_outs, extra, n)
        acts = actions if type(actions) is np.ndarray else np.asarray(actions)
        if not (self._scalar_bounds and acts.dtype is self.action_spec[0] and acts.shape == (n,)):
            acts = self._array("actions", acts, n, self.action_spec)  # else: a Discrete action per row, as expected
        data: dict[str, Any] = {SampleBatch.ACTIONS: acts}
        if self._bounds is not None and n:
            low, high = self._bounds
            if n == 1 and self._scalar_bounds:
                a = acts.item()
                out = a < self._lo or a > self._hi
            else:  # scalar bounds (Discrete) and int64 / int32 actions: one C++ pass (numpy takes two); else numpy
                found = _core.any_outside(acts, self._lo, self._hi) if self._int64_bounds else None
                out = bool((acts < low).any() or (acts > high).any()) if found is None else found
            if out:
                bad = np.flatnonzero(((acts < low) | (acts > high)).reshape(n, -1).any(axis=1)).tolist()
                raise ValueError(
                    f"column 'actions': compute_actions_from_input_dict returned actions outside the action space "
                    f"{self.action_space} (rows {bad}: {acts[bad].tolist()})"
                )
        if self._no_rest and type(state_outs) is list and not state_outs and type(extra) is dict and not extra:
            return data  # the common case: nothing else to check
        return self._check_rest(data, state_outs, extra, n)

    def _check_rest(self, data: dict[str, Any], state_outs: Any, extra: Any, n: int) -> dict[str, Any]:
        """Adds the checked ``state_out_i`` and extra-fetch columns to ``data``."""
        if not state_outs and not extra and not self.state_keys and not self.extra_keys:
            if type(state_outs) is list and type(extra) is dict:  # the common case: nothing else to check
                return data
        if (self._rest_specs is not None and type(state_outs) is list and type(extra) is dict
                and len(state_outs) == len(self.state_keys) and len(extra) == len(self.extra_keys)):
            # The common case: arrays of the dtypes and shapes expected, no NaN (one scan); anything else is
            # checked below, column by column, to name what is wrong.
            shapes = self._rest_shapes.get(n)
            if shapes is None:
                if len(self._rest_shapes) >= 64:  # (row counts vary in multi-agent calls: a bounded cache)
                    self._rest_shapes.clear()
                shapes = self._rest_shapes[n] = [(k, dt, (n, *shape), dt.kind in "fc" and self.check_nan)
                                                 for k, (dt, shape) in self._rest_specs]
            scan: list[np.ndarray] = []
            for (k, dt, shape, is_float), v in zip(shapes, [*state_outs, *map(extra.get, self.extra_keys)]):
                if type(v) is not np.ndarray or v.dtype is not dt or v.shape != shape:
                    break
                data[k] = v
                if is_float:
                    scan.append(v)
            else:
                if not scan or _core.any_nan(scan) is False:
                    return data
        if not isinstance(state_outs, (list, tuple)):
            raise ValueError(
                f"state_outs: compute_actions_from_input_dict must return a list of arrays (one per "
                f"get_initial_state() entry, [] if not recurrent), got {type(state_outs).__name__}"
            )
        if len(state_outs) != len(self.state_keys):
            raise ValueError(
                f"state_outs: compute_actions_from_input_dict returned {len(state_outs)} state_outs, expected "
                f"{len(self.state_keys)} (len(get_initial_state()))"
            )
        floats: list[tuple[str, np.ndarray]] = []  # checked for NaN at the end, together
        for k, s in zip(self.state_keys, state_outs):
            data[k] = self._array(k, s, n, self.specs[k], floats)
        if not isinstance(extra, Mapping):
            raise ValueError(
                f"extra_fetches: compute_actions_from_input_dict must return a dict of arrays ({{}} if none), got "
                f"{type(extra).__name__}"
            )
        for k in self.extra_keys:
            if k not in extra:
                raise ValueError(
                    f"column {k!r}: compute_actions_from_input_dict returned it in extra_fetches during the "
                    f"view-pruning pass, but not now; got extra fetches {sorted(extra)}"
                )
            data[k] = self._array(k, extra[k], n, self.specs[k], floats)
        if len(extra) != len(self.extra_keys):
            unknown = sorted(set(extra) - set(self.extra_keys))
            raise ValueError(
                f"compute_actions_from_input_dict returned extra fetches {unknown} that it did not return in the "
                f"view-pruning pass; known: {sorted(self.extra_keys)}"
            )
        if floats:
            self._check_nans(floats, n)
        return data


class NanOutputError(ValueError):
    """A float output of the policy holds NaN (`PolicyColumns.check_outputs`, ``nan_outputs="raise"``)."""


def _nan_error(name: str, arr: np.ndarray, n: int) -> ValueError:
    return NanOutputError(
        f"column {name!r}: compute_actions_from_input_dict returned NaN (rows "
        f"{np.flatnonzero(np.isnan(arr.reshape(n, -1)).any(axis=1)).tolist()}); nan_outputs='allow' (a "
        f"RolloutWorker's, a PolicyRunner's) stores NaN as it is"
    )


def _has_nan(arr: np.ndarray) -> bool:
    """Whether the float (or complex) array ``arr`` holds a NaN: one value read as a Python number; a real array's
    max (NaN wherever a value is; one reduction, no mask), which costs less than a NaN mask and its ``any`` on the
    few rows an action call returns."""
    if arr.size == 1:
        x = arr.item()
        return x != x
    if arr.dtype.kind == "f" and arr.size:
        m = arr.max()
        return bool(m != m)
    return bool(np.isnan(arr).any())


def _action_bounds(space: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(low, high) that integer actions of ``space`` must lie in, or None (e.g. Box: envs clip or check)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(space.start), np.asarray(space.start + space.n - 1)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.asarray(space.start), np.asarray(space.start + space.nvec - 1)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.zeros(space.shape, np.int64), np.ones(space.shape, np.int64)
    return None
