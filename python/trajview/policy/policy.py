"""`Policy`: the framework-free base and its view requirements (see docs/contract.md, Views and Pruning).

The view-pruning pass that trims those requirements is `prune_views` (in `policy.pruning`).
"""

from __future__ import annotations

import contextlib
import copy

from collections.abc import Callable, Mapping
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

#: `compute_single_action`'s implicit episode: ``(policy, obs, reward, episode_start, explore, timestep) ->
#: (action, state_outs, extra_fetches)``, acting through a `PolicyRunner` of the policy. The runner lives in
#: `trajview.rollout` (a layer above: it drives the C++ store), which registers it here on import.
_single_action_runner: Callable[..., tuple[Any, list, dict]] | None = None


#: What a policy's ``_single_action_short`` (its implicit episode's short way, set by the runner) returns for a call
#: it does not take: the registered runner then takes it.
NOT_TAKEN: Any = object()


def register_single_action_runner(fn: Callable[..., tuple[Any, list, dict]]) -> None:
    """Sets what `Policy.compute_single_action` acts through when it keeps the episode (see `trajview.rollout`)."""
    global _single_action_runner
    _single_action_runner = fn


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

    def _reused_inputs(
        self, inputs: dict[str, np.ndarray]
    ) -> Callable[[bool | None, int | None], tuple[Any, list, dict]] | None:
        """For callers that refill the same input arrays before every call (`PolicyRunner`): a function
        ``run(explore, timestep)`` that computes actions from ``inputs`` as they stand when it is called, as
        ``compute_actions_from_input_dict(inputs, ...)`` would, or None (the default: call that instead).

        A framework overrides it when it can keep what it converts ``inputs`` to (e.g. tensors viewing the same
        memory) and so skip the conversion on every call.
        """
        return None

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
        episode_start: bool = False,
        **kwargs: Any,
    ) -> tuple[Any, list, dict]:
        """RLlib's ``compute_single_action``: one observation in, one action out (without the batch axis).

        Returns ``(action, state_outs, extra_fetches)``. Two ways:

        - **The policy keeps the episode** (``obs`` alone, optionally ``prev_reward``): each call is the
          next step of one implicit episode, and the policy reads exactly what a `RolloutWorker` would
          have built at that step: frame stacks (``prev_n_obs``), previous actions and rewards, recurrent
          state and attention memory, from the observations and its own earlier outputs. ``prev_reward``
          is what the previous action earned (needed when the policy reads rewards; ignored on an
          episode's first step). The episode lasts until a call with ``episode_start=True``, whose
          ``obs`` is the next episode's first observation (as SB3's ``episode_start``); the first call
          begins one. It acts through a one-episode `trajview.PolicyRunner` (for many episodes at once,
          make one yourself).
        - **The caller carries the history** (``input_dict``, ``state`` or ``prev_action`` given, as
          RLlib's stateless call): one row of ``obs``, ``state_in_i`` from ``state`` and
          ``prev_actions`` / ``prev_rewards`` / ``infos`` when given (or every key of the unbatched
          ``input_dict``) goes to `compute_actions_from_input_dict` as it is.
        """
        if input_dict is None and state is None and prev_action is None:
            short = self.__dict__.get("_single_action_short")
            if short is not None and episode_start is False and timestep is None and info is None and not kwargs and (
                    episode is None):
                out = short(obs, 0, prev_reward, explore, True)
                if out is not NOT_TAKEN:
                    return out  # type: ignore[no-any-return]
            if info is not None or kwargs or episode is not None:
                given = sorted([*kwargs, *(["info"] if info is not None else []),
                                *(["episode"] if episode is not None else [])])
                raise ValueError(
                    f"compute_single_action: {given} are only passed on when the caller carries the history "
                    f"(input_dict=, state= or prev_action=); the implicit episode takes obs, prev_reward, "
                    f"episode_start, explore and timestep"
                )
            if _single_action_runner is None:
                raise RuntimeError("compute_single_action: import trajview first (it registers the episode runner)")
            return _single_action_runner(self, obs, prev_reward, episode_start, explore, timestep)
        if episode_start:
            raise ValueError(
                "compute_single_action: episode_start is for the implicit episode; with input_dict=, state= or "
                "prev_action= the caller carries the history"
            )
        if input_dict is None:
            input_dict = {SampleBatch.OBS: obs}
            if state is not None:
                self._check_state(state)
            for i, s in enumerate(state or []):
                input_dict[f"state_in_{i}"] = s
            if prev_action is not None:
                input_dict[SampleBatch.PREV_ACTIONS] = prev_action
            if prev_reward is not None:
                input_dict[SampleBatch.PREV_REWARDS] = prev_reward
            if info is not None:
                input_dict[SampleBatch.INFOS] = info
        batched = {k: _add_batch_axis(v) for k, v in input_dict.items()}
        try:
            actions, state_outs, extra = self.compute_actions_from_input_dict(
                SampleBatch(batched), explore=explore, timestep=timestep, episodes=[episode] if episode else None,
                **kwargs
            )
        except KeyError as e:  # a view the policy reads that the call did not pass: say which, and how to pass it
            key = e.args[0] if len(e.args) == 1 else None
            if not (isinstance(key, str) and key not in batched and key in self.view_requirements):
                raise
            reads = self._views_read_to_act()
            raise ValueError(
                f"compute_single_action: the policy reads {key!r}, which this call did not pass. With input_dict=, "
                f"state= or prev_action= the caller carries the history: pass every view it reads to act, {reads}"
                + self._state_hint(reads) + f"; got {sorted(batched)}. Or pass obs alone (with prev_reward=) and "
                f"the policy builds them for one implicit episode"
            ) from None
        return (
            _first_row(actions),
            [_first_row(s) for s in state_outs],
            {k: _first_row(v) for k, v in dict(extra).items()},
        )

    def _check_state(self, state: Any) -> None:
        """``compute_single_action``'s ``state=``: at most as many arrays as `get_initial_state` gives, each of its
        shape (one step's state), or for a ``state_in_i`` view over several steps (attention memory) that many of
        them stacked; else a ValueError saying what was expected (the model would raise torch's own shape error)."""
        init = self.get_initial_state()
        if not init:
            if isinstance(state, (list, tuple)) and not state:
                return  # (RLlib's state=[] of a policy without state)
            if not any(k.startswith("state_in_") for k in self.view_requirements):
                given = f"{len(state)} arrays" if isinstance(state, (list, tuple)) else type(state).__name__
                raise ValueError(f"compute_single_action: this policy keeps no state (get_initial_state() is [], it "
                                 f"reads no state_in_i view): state= must be None or [], got {given}")
            return
        if isinstance(state, (str, bytes)) or not isinstance(state, (list, tuple)):
            raise ValueError(f"compute_single_action: state= must be a list of {len(init)} arrays "
                             f"(state_in_0..{len(init) - 1}), got {type(state).__name__}")
        if len(state) > len(init):  # (fewer: the view it lacks is named when the policy reads it)
            raise ValueError(f"compute_single_action: state= holds {len(state)} arrays, this policy's state has "
                             f"{len(init)} (state_in_0..{len(init) - 1}, as get_initial_state() gives)")
        for i, (s, s0) in enumerate(zip(state, init)):
            vr = self.view_requirements.get(f"state_in_{i}")
            steps = 1 if vr is None else len(vr.shift_arr)
            want = tuple(np.shape(s0)) if steps == 1 else (steps, *np.shape(s0))
            got = tuple(np.shape(s))
            if got != want:
                what = ("one step's state, as get_initial_state() gives, without a batch axis" if steps == 1 else
                        f"the last {steps} state_out_{i} rows stacked")
                raise ValueError(f"compute_single_action: state[{i}] (state_in_{i}) must have shape {want} ({what}), "
                                 f"got {got}")

    def _state_hint(self, reads: list[str]) -> str:
        """What ``state=`` must hold for the ``state_in_i`` views among ``reads`` (an error message's): a single row
        each (get_initial_state()'s, then the last state_out) or, for a view over several steps (attention memory),
        a window of that many state_out rows."""
        states = [k for k in reads if k.startswith("state_in_")]
        if not states:
            return ""
        sizes = {len(self.view_requirements[k].shift_arr) for k in states}
        if sizes == {1}:
            return f" (state=: a list of {len(states)} arrays, as get_initial_state() gives)"
        return (f" (state=: a list of {len(states)} arrays, each the last "
                f"{' / '.join(str(n) for n in sorted(sizes))} state_out rows of its index stacked, zeros before the "
                f"episode's first step: [steps, ...], not get_initial_state()'s single rows)")

    def _views_read_to_act(self) -> list[str]:
        """The views this policy's action computation reads (the pruning pass's finding, run on a copy when it has
        not run here: an error message's, which leaves the policy as it was)."""
        probe = self
        if not self._views_initialized:
            try:
                probe = copy.deepcopy(self)
                prune_views(probe)
            except Exception:  # (the pass itself fails: every view the policy declares)
                probe = self
        return [k for k, vr in probe.view_requirements.items() if vr.used_for_compute_actions]

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and copying leave out `compute_single_action`'s implicit episode (a C++ store): a copy
        begins its own."""
        state = dict(self.__dict__)
        state.pop("_single_action_runner", None)
        state.pop("_single_action_short", None)
        return state

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: dict | None = None, episode: Any = None
    ) -> SampleBatch:
        """Called on one episode's (one agent's) steps at a time; returns the batch to train on."""
        return sample_batch

    def _postprocessing(self, segments: list[SampleBatch]) -> contextlib.AbstractContextManager[Any]:
        """The context of the `postprocess_trajectory` calls on one batch's ``segments`` (a sampler's, each
        segment as it will be passed): a policy may compute there, at once, what each of those calls needs (e.g.
        `PPOPolicy`'s bootstrap values, in one forward call). Here: nothing."""
        return contextlib.nullcontext()

    def flat_postprocessor(self) -> Callable[[SampleBatch, np.ndarray], SampleBatch] | None:
        """A function that does the `postprocess_trajectory` of each episode segment of a batch in one pass, where
        the policy has one (None here, and where a subclass's `postprocess_trajectory` differs from the one it
        mirrors). It takes ``(batch, lengths)``: the segments' rows one after the other, ``lengths`` their row
        counts in order; it returns what concatenating each segment's `postprocess_trajectory` would give (``batch``
        itself, columns added, or a new batch), and leaves ``batch`` as it was if it raises. A sampler asks for it
        where nothing else runs per segment (no infos, no ``on_postprocess_trajectory``); None: segment by
        segment."""
        return None

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
