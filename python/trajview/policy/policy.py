"""`Policy`: the framework-free base and its view requirements (see docs/contract.md, Views and Pruning).

The view-pruning pass that trims those requirements is `prune_views` (in `policy.pruning`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..views.columns import ColumnSpec, column_spec_from_space
from ..views.nest import Nest
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement
from .pruning import NEVER_PRUNED, prune_views

__all__ = ["Policy", "ColumnSpec", "NEVER_PRUNED"]

#: The old name of `views.columns.column_spec_from_space` (``space_column_spec(space, what)``).
space_column_spec = column_spec_from_space


class Policy:
    """The framework-free policy base (RLlib's names and signatures).

    Subclasses implement ``compute_actions_from_input_dict`` and, to train,
    ``loss`` / ``learn_on_batch``. ``view_requirements`` is the authoritative
    dict of what the policy reads; change it in ``__init__`` (or later,
    before the next ``sample()``).

    ``keep_views``: names of views the view-pruning pass keeps in training
    batches though neither postprocessing nor the loss reads them (e.g.
    ``policy.keep_views = {"obs", "new_obs"}`` before the first sample, to
    log or replay them; docs/contract.md, Pruning).
    """

    keep_views: frozenset[str] | set[str] = frozenset()

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
            SampleBatch.DONES: VR(used_for_compute_actions=False),
            SampleBatch.INFOS: VR(used_for_compute_actions=False),
            SampleBatch.EPS_ID: VR(),
            SampleBatch.ENV_ID: VR(),
            SampleBatch.T: VR(),
            SampleBatch.UNROLL_ID: VR(used_for_compute_actions=False),
            SampleBatch.AGENT_INDEX: VR(),
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

    def compute_single_action(
        self,
        obs: Any = None,
        state: list | None = None,
        *,
        prev_action: Any = None,
        prev_reward: Any = None,
        info: Any = None,
        input_dict: Mapping[str, Any] | None = None,
        episode: Any = None,
        explore: bool | None = None,
        timestep: int | None = None,
        **kwargs: Any,
    ) -> tuple[Any, list, dict]:
        """RLlib's ``compute_single_action``: one observation (or one unbatched ``input_dict``) in, one action out.

        Builds a batch of one row (``obs``, ``state_in_i`` from ``state``,
        ``prev_actions`` / ``prev_rewards`` when given; or every key of
        ``input_dict``), calls `compute_actions_from_input_dict` and returns
        ``(action, state_outs, extra_fetches)`` without the batch axis. A policy
        whose views need an episode's history (a frame stack) needs
        ``input_dict`` with those views, as in RLlib.
        """
        if input_dict is None:
            input_dict = {SampleBatch.OBS: obs}
            for i, s in enumerate(state or []):
                input_dict[f"state_in_{i}"] = s
            if prev_action is not None:
                input_dict[SampleBatch.PREV_ACTIONS] = prev_action
            if prev_reward is not None:
                input_dict[SampleBatch.PREV_REWARDS] = prev_reward
            if info is not None:
                input_dict[SampleBatch.INFOS] = info
        batched = {k: _add_batch_axis(v) for k, v in input_dict.items()}
        actions, state_outs, extra = self.compute_actions_from_input_dict(
            SampleBatch(batched), explore=explore, timestep=timestep, episodes=[episode] if episode else None, **kwargs
        )
        return (
            _first_row(actions),
            [_first_row(s) for s in state_outs],
            {k: _first_row(v) for k, v in dict(extra).items()},
        )

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
        """Every column a collector stores for this policy (after the pruning pass).

        A nested observation or action space (``Dict`` / ``Tuple``) gives one
        column per leaf (``obs.image``, ``actions.0``; see `trajview.views.nest`).
        """
        specs: dict[str, ColumnSpec] = {
            **Nest.from_space(self.observation_space, "observation_space").specs(SampleBatch.OBS),
            **Nest.from_space(self.action_space, "action_space").specs(SampleBatch.ACTIONS),
            SampleBatch.REWARDS: (np.dtype(np.float64), ()),
            SampleBatch.TERMINATEDS: (np.dtype(np.bool_), ()),
            SampleBatch.TRUNCATEDS: (np.dtype(np.bool_), ()),
        }
        specs.update(self.state_columns)
        specs.update(self.extra_fetch_columns)
        return specs

    def _initialize_view_requirements(self) -> None:
        """The view-pruning pass (`prune_views`, see docs/contract.md, Pruning); runs once, before the first sample."""
        prune_views(self)


def _add_batch_axis(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _add_batch_axis(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_add_batch_axis(v) for v in value)
    if isinstance(value, dict) or value is None:
        return value
    arr = np.asarray(value)
    if arr.dtype == object:
        out = np.empty(1, dtype=object)
        out[0] = value
        return out
    return arr[None]


def _first_row(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _first_row(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_first_row(v) for v in value)
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)[0]
