"""`Policy`: the framework-free base, its view requirements and the view-pruning pass (SPEC section 5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement

__all__ = ["Policy", "ColumnSpec", "NEVER_PRUNED"]

#: (dtype, per-step shape) of a stored column.
ColumnSpec = tuple[np.dtype, tuple[int, ...]]

#: Training views the pruning pass never removes (SPEC section 5).
NEVER_PRUNED = frozenset(
    {SampleBatch.REWARDS, SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS, SampleBatch.EPS_ID, SampleBatch.T}
)

# Columns whose values the collector computes (not stored).
_BOUNDARY = ("eps_id", "env_id", "t", "is_init")
_DUMMY_B = 2  # rows of the dummy compute-actions input
_DUMMY_T = 6  # steps of the dummy trajectory


def space_column_spec(space: Any, what: str) -> ColumnSpec:
    """The (dtype, shape) of one sample of a gymnasium space."""
    dtype = getattr(space, "dtype", None)
    shape = getattr(space, "shape", None)
    if dtype is None or shape is None:
        raise ValueError(f"{what}: space {space!r} has no fixed dtype and shape; trajview stores fixed-shape arrays")
    return np.dtype(dtype), tuple(int(d) for d in shape)


class Policy:
    """The framework-free policy base (RLlib's names and signatures).

    Subclasses implement ``compute_actions_from_input_dict`` and, to train,
    ``loss`` / ``learn_on_batch``. ``view_requirements`` is the authoritative
    dict of what the policy reads; change it in ``__init__`` (or later,
    before the next ``sample()``).
    """

    def __init__(self, observation_space: Any, action_space: Any, config: dict | None = None) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config: dict = dict(config or {})
        self.view_requirements: dict[str, ViewRequirement] = self._get_default_view_requirements()
        #: Set by the pruning pass: the columns the policy itself produces.
        self.state_columns: dict[str, ColumnSpec] = {}
        self.extra_fetch_columns: dict[str, ColumnSpec] = {}
        #: Columns postprocessing adds (never stored by the collector).
        self.postprocessed_columns: set[str] = set()
        self._views_initialized = False

    # -- what the policy reads ---------------------------------------------------

    def _get_default_view_requirements(self) -> dict[str, ViewRequirement]:
        VR = ViewRequirement
        obs, act = self.observation_space, self.action_space
        return {
            SampleBatch.OBS: VR(space=obs),
            SampleBatch.NEXT_OBS: VR(SampleBatch.OBS, space=obs, shift=1, used_for_compute_actions=False),
            SampleBatch.ACTIONS: VR(space=act, used_for_compute_actions=False),
            SampleBatch.PREV_ACTIONS: VR(SampleBatch.ACTIONS, space=act, shift=-1),
            SampleBatch.REWARDS: VR(),
            SampleBatch.PREV_REWARDS: VR(SampleBatch.REWARDS, shift=-1),
            SampleBatch.TERMINATEDS: VR(),
            SampleBatch.TRUNCATEDS: VR(),
            SampleBatch.INFOS: VR(used_for_compute_actions=False),
            SampleBatch.EPS_ID: VR(),
            SampleBatch.ENV_ID: VR(),
            SampleBatch.T: VR(),
        }

    def get_initial_state(self) -> list[np.ndarray]:
        """The recurrent state at t=0, one array per ``state_in_i`` ([] if not recurrent)."""
        return []

    # -- what subclasses implement ---------------------------------------------

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Returns (actions [B, ...], state_outs [per state: B, ...], extra_fetches {name: [B, ...]})."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute_actions_from_input_dict")

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: dict | None = None, episode: Any = None
    ) -> SampleBatch:
        """Called on one episode's (one agent's) steps at a time; returns the batch to train on."""
        return sample_batch

    def get_weights(self) -> dict[str, Any]:
        """The policy's weights as ``{name: numpy array}`` (none here: ``{}``); see `set_weights`."""
        return {}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Loads weights from `get_weights` (e.g. a learner's, into rollout workers)."""
        if weights:
            raise NotImplementedError(
                f"{type(self).__name__} has no weights to set (got {sorted(weights)}); override set_weights"
            )

    def loss(self, train_batch: SampleBatch) -> Any:
        raise NotImplementedError

    def learn_on_batch(self, train_batch: SampleBatch) -> dict:
        raise NotImplementedError(f"{type(self).__name__} does not learn (no learn_on_batch)")

    # -- the view-pruning pass ---------------------------------------------------

    def _run_loss_for_pruning(self, batch: SampleBatch) -> None:
        """Calls the loss on a dummy batch (frameworks convert it first)."""
        self.loss(batch)

    def column_specs(self) -> dict[str, ColumnSpec]:
        """Every column a collector stores for this policy (after the pruning pass)."""
        specs: dict[str, ColumnSpec] = {
            SampleBatch.OBS: space_column_spec(self.observation_space, "observation_space"),
            SampleBatch.ACTIONS: space_column_spec(self.action_space, "action_space"),
            SampleBatch.REWARDS: (np.dtype(np.float64), ()),
            SampleBatch.TERMINATEDS: (np.dtype(np.bool_), ()),
            SampleBatch.TRUNCATEDS: (np.dtype(np.bool_), ()),
        }
        specs.update(self.state_columns)
        specs.update(self.extra_fetch_columns)
        return specs

    def _dummy_column(self, col: str, specs: dict[str, ColumnSpec], vr: ViewRequirement | None) -> ColumnSpec:
        if col in specs:
            return specs[col]
        if col in _BOUNDARY:
            return (np.dtype(np.bool_), ()) if col == "is_init" else (np.dtype(np.int64), ())
        if vr is not None and vr.space is not None:
            return space_column_spec(vr.space, f"view {col!r}")
        raise ValueError(
            f"view requirement reads column {col!r}, which no one produces (not an env column, a state_out, "
            f"an extra fetch of compute_actions_from_input_dict, nor a column that postprocessing adds); "
            f"known columns: {sorted(specs)}"
        )

    def _dummy_view(self, key: str, vr: ViewRequirement, specs: dict[str, ColumnSpec], n: int) -> np.ndarray:
        dtype, shape = self._dummy_column(vr.column(key), specs, vr)
        lead = (n, len(vr.shift_arr)) if vr.adds_axis else (n,)
        return np.zeros(lead + shape, dtype=dtype)

    def _initialize_view_requirements(self) -> None:
        """The view-pruning pass (SPEC section 5); runs once, before the first sample.

        Sends dummy batches through ``compute_actions_from_input_dict``,
        ``postprocess_trajectory`` and ``loss``, records which keys each reads,
        adds or deletes, and marks views that none reads as unused. Also learns
        the dtype and shape of the ``state_out_i`` and extra-fetch columns.
        """
        if self._views_initialized:
            return
        VR = ViewRequirement
        init = [np.asarray(s) for s in self.get_initial_state()]
        specs = self.column_specs()
        for i, s in enumerate(init):
            specs[f"state_out_{i}"] = (s.dtype, s.shape)
        vrs = self.view_requirements

        # 1. Action computation.
        obs_cols = {SampleBatch.OBS}
        inputs = {}
        for key, vr in vrs.items():
            col = vr.column(key)
            if not vr.used_for_compute_actions or col == SampleBatch.INFOS:
                continue
            knowable = vr.shift_to <= (0 if col in obs_cols else -1)
            if col in _BOUNDARY:
                knowable = True
            if knowable:
                inputs[key] = self._dummy_view(key, vr, specs, _DUMMY_B)
        input_batch = SampleBatch(inputs)
        input_batch.enable_access_tracking()
        out = self.compute_actions_from_input_dict(input_batch, explore=False, timestep=0)
        if not isinstance(out, tuple) or len(out) != 3:
            raise TypeError(
                f"{type(self).__name__}.compute_actions_from_input_dict must return (actions, state_outs, "
                f"extra_fetches), got {type(out).__name__}"
            )
        actions, state_outs, extra = out
        read_for_actions = set(input_batch.accessed_keys)

        # Learn the policy's own columns from what it returned.
        self.state_columns = {}
        if len(state_outs) != len(init):
            raise ValueError(
                f"{type(self).__name__}: compute_actions_from_input_dict returned {len(state_outs)} state_outs, "
                f"but get_initial_state() has {len(init)}"
            )
        for i, (s, s0) in enumerate(zip(state_outs, init)):
            s = np.asarray(s)
            if s.shape[1:] != s0.shape:
                raise ValueError(
                    f"state_out_{i}: compute_actions_from_input_dict returned per-row shape {s.shape[1:]}, "
                    f"get_initial_state()[{i}] has shape {s0.shape}"
                )
            self.state_columns[f"state_out_{i}"] = (s0.dtype, s0.shape)
        self.extra_fetch_columns = {}
        for k, v in dict(extra).items():
            v = np.asarray(v)
            if v.ndim < 1 or v.shape[0] != _DUMMY_B:
                raise ValueError(
                    f"extra fetch {k!r}: expected one row per input row (leading dim {_DUMMY_B}), got shape {v.shape}"
                )
            if k in specs and k not in self.extra_fetch_columns:
                raise ValueError(f"extra fetch {k!r} has the name of a column the env produces")
            self.extra_fetch_columns[k] = (v.dtype, tuple(v.shape[1:]))
        for i in range(len(init)):
            vrs.setdefault(f"state_in_{i}", VR(f"state_out_{i}", shift=-1))
            vrs.setdefault(f"state_out_{i}", VR(used_for_compute_actions=False))
        for k in self.extra_fetch_columns:
            vrs.setdefault(k, VR(used_for_compute_actions=False))
        specs = self.column_specs()
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
            if col not in specs and col not in _BOUNDARY and vr.space is None:
                continue  # a column that postprocessing adds: see below
            rows = _DUMMY_T if vr.batch_repeat_value == 1 else -(-_DUMMY_T // vr.batch_repeat_value)
            train[key] = self._dummy_view(key, vr, specs, rows)
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
        pre.enable_access_tracking()
        post = self.postprocess_trajectory(pre)
        if not isinstance(post, SampleBatch):
            raise TypeError(
                f"{type(self).__name__}.postprocess_trajectory must return a SampleBatch, got {type(post).__name__}"
            )
        read_in_post = set(pre.accessed_keys)
        self.postprocessed_columns = set(post.keys()) - set(train.keys())

        # 3. The loss, on the postprocessed batch.
        loss_batch = SampleBatch(dict(post), seq_keys=seq_keys)
        loss_batch.enable_access_tracking()
        has_loss = True
        try:
            self._run_loss_for_pruning(loss_batch)
        except NotImplementedError:
            has_loss = False
        read_in_loss = set(loss_batch.accessed_keys)

        # 4. Prune.
        for key, vr in vrs.items():
            if vr.used_for_compute_actions and key not in read_for_actions:
                vr.used_for_compute_actions = False
            if has_loss and vr.used_for_training and key not in NEVER_PRUNED:
                if key not in read_in_post and key not in read_in_loss:
                    vr.used_for_training = False
        for key in self.postprocessed_columns:
            if key in read_in_loss and key not in vrs:
                vrs[key] = VR(used_for_compute_actions=False)
        self._views_initialized = True
