"""`PolicyRunner`: a trained policy acting outside a `RolloutWorker`, its views built as the worker builds them.

A runner holds one C++ `Collector` slot per running episode (made by `make_collector`, the worker's own
path from a policy to its store) and drives it with the worker's per-step protocol: an episode's first
observation begins it (``begin_episodes``), every later observation is stored with the previous action, state
outputs, extra fetches and reward (``add_step``, or ``step``: the step and the next input dict in one C++
call), and the policy reads the store's compute-actions input dict (``input_dict``). Frame stacks, previous
actions and rewards, recurrent state and attention memory are therefore exactly the worker's. Outputs are
checked by the worker's `PolicyColumns`. Every 32 calls the store drops its steps (`Collector.discard_steps`),
keeping the rows the views look back at.

`Policy.compute_single_action` without an explicit history (no ``input_dict``, ``state`` nor
``prev_action``) acts through a one-episode runner of the policy (`implicit_single_action`).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _core
from .._validate import int_at_least
from ..collect.collector import Collector
from ..envs.checks import check_reward_array
from ..policy import policy as _policy_module
from ..policy.policy import Policy, _first_row
from ..views.columns import cast_exactly
from ..views.nest import Nest
from ..views.sample_batch import SampleBatch
from .config import RolloutConfig
from .emit import F32, cast_rewards
from .plan import PolicyColumns, make_collector

__all__ = ["PolicyRunner"]


@dataclass(frozen=True)
class _Names:
    """How a runner's errors name the call the user made: `PolicyRunner`'s own methods, or `compute_single_action`
    (whose implicit episode a runner keeps)."""

    name: str  # the prefix of the errors of every call
    act: str  # of one observation's errors
    batch_hint: str  # after "no batch axis" in a shape error
    reward_hint: str  # how to pass the reward the policy reads
    reset_note: str  # the note of an error after which the call's episodes were forgotten ({} : their keys)


_RUNNER = _Names("PolicyRunner", "PolicyRunner.act", "; act_many takes a batch",
                 "pass the reward that each episode's previous action earned (act(..., reward=r) / act_many(..., "
                 "rewards=[...]))", "PolicyRunner: the episodes of this call were reset: {}")
_SINGLE = _Names("compute_single_action", "compute_single_action", "",
                 "pass the reward the previous action earned (compute_single_action(obs, prev_reward=r))",
                 "compute_single_action: its episode was reset (the next call begins a new one)")

_OBS, _REWARDS, _ACTIONS = SampleBatch.OBS, SampleBatch.REWARDS, SampleBatch.ACTIONS
_TERMINATEDS, _TRUNCATEDS = SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS


class PolicyRunner:
    """Acts with ``policy`` in many concurrent episodes, each keeping the history its views read.

    Each episode is named by a key of your choice (any hashable but None: an env index, ``(episode_id,
    agent_id)``).
    An episode begins on the first `act` / `act_many` with its key (or with ``episode_start=True``) and lasts
    until `reset` forgets it. Each later call with the key is the next step of that episode: its observation
    is the one the previous action led to, and ``reward`` is what that action earned. The policy then sees
    what a `RolloutWorker` would have built at that step: ``prev_n_obs`` frame stacks, ``prev_actions`` /
    ``prev_rewards``, ``state_in_i`` (recurrent state, attention memory) from its own earlier outputs, ``t``.

    Args:
        policy: any `Policy` (its view-pruning pass runs first, as in a worker).
        max_episodes: episodes that may run at once (the store's slots); a new one beyond that is a
            ValueError until `reset` frees a slot.
        explore: the default of every call's ``explore`` (None: the policy's own default, e.g.
            ``PPOPolicy``'s ``config["explore"]``; pass False for the deterministic action).
        nan_outputs: as `RolloutWorker`'s: "raise" (NaN in a float output is a ValueError) or "allow".

    Multi-agent: one runner per policy, keyed by ``(episode, agent)``, with ``agent_index=`` the agent's
    index when the policy reads ``agent_index``; an agent's ``reward`` is what it earned since it last acted
    (as a multi-agent worker stores it).

    Rewards must be real numbers (ints float64 holds exactly, or floats; not NaN, bools or strings: a
    worker's rule for what an env returns), ``agent_index`` non-negative ints, ``explore`` a bool or None.
    A call that raises before the policy runs (a bad argument, a full runner, an observation the store
    refuses: wrong shape, or a dtype it cannot take without loss) changes nothing, except that the episodes
    it was asked to restart (``episode_start``) are forgotten, whatever refused the call: a retry need not
    pass ``episode_start`` again. If the policy (or the check of its outputs,
    the worker's) raises, the call's episodes are forgotten (as `reset`): their stored step has no action.
    The error's note says so.

    Input arrays are reused: a `TorchPolicy` (whose ``compute_actions_from_input_dict`` is its class's own) is
    called on tensors made once per row count, which the store refills in place at every call; a model must
    therefore not keep its input tensors past a call (copy what it keeps). A ``compute_actions_from_input_dict``
    set on the policy instance (a wrapper) is called instead, with new arrays at every call. The outputs the
    policy returns (actions, ``state_out_i``, extra fetches) are kept as they are until each episode's next call
    stores them with its step, as a worker keeps them until the env has stepped: a policy must return arrays of
    its own each call, not buffers it fills again (another runner or `compute_single_action` on the same policy
    would overwrite them in between).

    The views are built for the policy's ``view_requirements`` when the runner is made (after the pruning
    pass); a runner does not follow later changes to them (make a new one). Observation filters are not
    applied: pass observations as the policy saw them in training (e.g. through ``worker.filters["default_policy"](obs,
    update=False)``, the worker's own filter, not updated).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        max_episodes: int = 64,
        explore: bool | None = None,
        nan_outputs: str = "raise",
    ) -> None:
        if not isinstance(policy, Policy):
            raise TypeError(f"PolicyRunner: policy must be a trajview Policy, got {type(policy).__name__}")
        # A worker's settings, by the worker's own checks; the store's blocks hold `_CHUNK` steps per episode.
        config = RolloutConfig.validated(
            batch_mode="truncate_episodes", rollout_fragment_length=_CHUNK, count_steps_by="env_steps",
            horizon=None, soft_horizon=False, no_done_at_end=False, seed=None, worker_index=0, lazy_views=False,
            nan_outputs=nan_outputs,
        )
        if isinstance(max_episodes, bool) or not isinstance(max_episodes, (int, np.integer)) or max_episodes < 1:
            raise ValueError(f"PolicyRunner: max_episodes must be a positive int, got {max_episodes!r}")
        _check_explore(explore)
        self.policy = policy
        self.max_episodes = int(max_episodes)
        self.explore = None if explore is None else bool(explore)
        self._collector: Collector = make_collector(policy, self.max_episodes, config, 0, inference_only=True)
        self._step_into = self._collector.step_into()
        self._columns = PolicyColumns(policy, config)
        self._obs_nest = Nest.from_space(policy.observation_space, "observation_space")
        self._nested_actions = not self._columns.action_nest.flat
        self._flat_obs = self._obs_nest.flat
        specs = policy.column_specs()
        #: Each observation column's shape without the batch axis (what `act` takes).
        self._obs_shapes = {c: tuple(specs[c][1]) for c in self._obs_nest.names(_OBS) if c in specs}
        self._obs_dtypes = {c: np.dtype(specs[c][0]) for c in self._obs_shapes}
        # `_single_obs`'s common case (a flat space: None, else no ndarray matches it).
        self._obs_shape = self._obs_shapes.get(_OBS) if self._flat_obs else None
        self._obs_dtype = self._obs_dtypes.get(_OBS) if self._flat_obs else None
        # What an episode's next step stores besides the observation, reward and ends: the policy's outputs (actions,
        # state_out_i, extra fetches) of its previous step, per slot.
        env_columns = {*self._obs_nest.names(_OBS), _REWARDS, _TERMINATEDS, _TRUNCATEDS}
        n = self.max_episodes
        self._pending = {
            k: np.zeros((n, *shape), dtype=dt)
            for k, (dt, shape) in specs.items()
            if k not in env_columns
        }
        self._false = np.zeros(n, dtype=bool)
        self._zeros = np.zeros(n)  # the rewards stored when none are given (the policy does not read them)
        self._all = np.arange(n, dtype=np.int64)
        #: The last call's episodes, slots (None: all, in order) and outputs: the next call with the same episodes
        #: stores those outputs as they are; anything else first writes them into `_pending` (`_write_back`).
        self._last_keys: list[Hashable] | None = None
        self._last_slots = self._all
        self._last_ids: np.ndarray | None = None
        self._last_data: dict[str, np.ndarray] = {}
        self._slots: dict[Hashable, int] = {}
        self._free = list(range(n - 1, -1, -1))  # pop() hands out the lowest slot first
        #: The calls counted: the timestep (rows acted on: the policy's ``timestep``), and every `_CHUNK` calls the
        #: store's steps dropped (`Collector.discard_steps`, which keeps the rows the views look back at).
        self._counts = _core._ActCounts(_CHUNK, self._collector.discard_steps)
        #: Input arrays reused call after call, by row count (`_Lane`); None once the policy cannot reuse them.
        self._lanes: dict[int, _Lane] | None = {}
        # The rewards given so far were float32 (or float16) / of another dtype: reward inputs are float32 when
        # every one was (the rule of `EnvAdapter.reward_dtype`, which a worker's inputs follow).
        self._saw_f32 = False
        self._saw_other = False
        self._names = _RUNNER  # (`implicit_single_action`'s runner: `_SINGLE`)
        #: The next call's short way (`_act_hot`), while its episodes are the last call's (``_hot.keys is
        #: _last_keys``) and that call ran on a lane; None where the space or the actions are nested.
        self._hot: _Hot | None = None
        self._hot_ok = self._flat_obs and not self._nested_actions and self._obs_shape is not None
        #: The short way's output check: the checks' common case (`_core._OutputCheck`), where it sets exactly the
        #: outputs stored with the next step; and its single calls' reward arrays.
        outputs = {_ACTIONS, *self._columns.state_keys, *self._columns.extra_keys}
        self._hot_check = self._columns._fast_check if set(self._pending) == outputs else None
        self._r64, self._r32 = np.zeros(1), np.zeros(1, np.float32)
        #: The output keys besides the actions, as tuples (`_single_outputs`, which reads them at every call).
        self._state_keys, self._extra_keys = tuple(self._columns.state_keys), tuple(self._columns.extra_keys)
        #: Whether every output (the actions, state_out_i, extra fetches) is one number per row (`_single_outputs`).
        self._scalar_rows = not self._nested_actions and all(
            k in specs and tuple(specs[k][1]) == ()
            for k in [SampleBatch.ACTIONS, *self._columns.state_keys, *self._columns.extra_keys]
        )

    # -- episodes ---------------------------------------------------------------

    @property
    def episodes(self) -> list[Hashable]:
        """The keys of the running episodes, in the order they first acted."""
        return list(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, episode: object) -> bool:
        return episode in self._slots

    def reset(self, episode: Hashable | None = None) -> None:
        """Forgets ``episode`` (every episode if None): its next `act` begins a new one. An unknown key is a
        KeyError naming the running ones."""
        if episode is None:
            self._end(list(self._slots))
            return
        _check_keys([episode], "PolicyRunner.reset")
        if episode not in self._slots:
            raise KeyError(f"PolicyRunner.reset: no running episode {episode!r}; running: {self.episodes}")
        self._end([episode])

    def _end(self, keys: Sequence[Hashable]) -> None:
        """Forgets the episodes ``keys``: ended in the store, their slots free."""
        self._write_back()
        slots = [self._slots.pop(k) for k in keys]
        self._end_slots(slots)
        self._free.extend(sorted(slots, reverse=True))

    # -- acting -----------------------------------------------------------------

    def act(
        self,
        obs: Any,
        episode: Hashable = 0,
        *,
        reward: Any = None,
        episode_start: bool = False,
        agent_index: int = 0,
        explore: bool | None = None,
        timestep: int | None = None,
        full_fetch: bool = False,
    ) -> Any:
        """One episode's next action for observation ``obs`` (unbatched, as the env returns it).

        ``reward``: what the previous action of this episode earned (ignored on its first step; needed when the
        policy reads rewards, e.g. ``prev_rewards``). ``episode_start=True``: ``obs`` is a new episode's first
        observation (the old one under this key is forgotten first; SB3's ``episode_start``). ``full_fetch``:
        return ``(action, state_outs, extra_fetches)`` instead of the action alone.
        """
        if episode_start is False and timestep is None and type(agent_index) is int and agent_index == 0:
            out = _act_one(self, obs, episode, reward, explore, full_fetch)
            if out is not _MISS:
                return out
        keys = [episode]
        starts = [episode_start] if type(episode_start) is bool else _starts(episode_start, 1, self._names.act)
        try:
            if type(obs) is np.ndarray and obs.dtype is self._obs_dtype and obs.shape == self._obs_shape:
                obs_cols = {_OBS: obs[None]}  # the common case: one observation of the flat space's dtype and shape
            else:
                obs_cols = self._single_obs(obs)
            rewards = None if reward is None else _single_reward(reward, self._names.act)
            # agent_index as an array unless it is the default (then zeros, where the policy reads it).
            idx = None if type(agent_index) is int and agent_index == 0 else _agent_indices(agent_index, 1, "act")
            actions, data = self._act_columns(obs_cols, keys, rewards, starts, idx, explore, timestep)
        except BaseException:
            self._forget_restarts(keys, starts)
            raise
        return self._single_outputs(data, actions, full_fetch)

    def _single_outputs(self, data: dict[str, Any], actions: Any, full_fetch: bool) -> Any:
        """`act`'s return: copies of row 0 of the checked outputs ``data`` (the arrays the policy returned are stored
        with the episode's next step); a nested action from ``actions``, as the policy returned them."""
        if self._scalar_rows:  # (each output a number per row: row 0 is a numpy scalar, immutable)
            action = data[_ACTIONS][0]
            if not full_fetch:
                return action
            states = []
            for k in self._state_keys:
                states.append(data[k][0])
            extra = {}
            for k in self._extra_keys:
                extra[k] = data[k][0]
            return action, states, extra
        cols = self._columns
        action = _copied(_first_row(actions)) if self._nested_actions else _row(data[SampleBatch.ACTIONS])
        if not full_fetch:
            return action
        return action, [_row(data[k]) for k in cols.state_keys], {k: _row(data[k]) for k in cols.extra_keys}

    def act_many(
        self,
        obs: Any,
        episodes: Sequence[Hashable],
        *,
        rewards: Any = None,
        episode_start: Any = None,
        agent_index: Any = None,
        explore: bool | None = None,
        timestep: int | None = None,
        full_fetch: bool = False,
    ) -> Any:
        """The next action of each episode in ``episodes``, from one batched call of the policy.

        ``obs``: ``[n, ...]`` rows (a nested space: its structure of such arrays, as a VectorEnv returns it),
        row ``i`` the observation of ``episodes[i]``. ``rewards``: ``[n]``, what each episode's previous action
        earned (rows of episodes that begin are ignored). ``episode_start``: ``[n]`` bools (SB3's): those rows
        begin a new episode. ``agent_index``: an int or ``[n]`` ints (multi-agent). Returns the actions ``[n,
        ...]`` (a nested action space: its structure of such arrays), or with ``full_fetch`` ``(actions,
        state_outs, extra_fetches)``.
        """
        t = type(episodes)
        if t is list or t is tuple or t is range:
            out = self._act_many_hot(obs, episodes, rewards, episode_start, agent_index, explore, timestep, full_fetch)
            if out is not _MISS:
                return out
        if isinstance(episodes, (str, bytes)) or not isinstance(episodes, Iterable):
            raise TypeError(
                f"PolicyRunner.act_many: episodes must be a sequence of episode keys (one per row of obs), got "
                f"{type(episodes).__name__} {episodes!r}"
            )
        keys = list(episodes)
        n = len(keys)
        if not n:
            raise ValueError("PolicyRunner.act_many: episodes is empty; pass at least one episode key")
        starts = [False] * n if episode_start is None else _starts(episode_start, n, "PolicyRunner.act_many")
        try:
            if self._flat_obs:
                obs_cols = {_OBS: np.asarray(obs)}
            else:
                obs_cols = {c: np.asarray(v) for c, v in self._obs_nest.columns(_OBS, obs, "obs").items()}
            for c, v in obs_cols.items():
                if v.shape[:1] != (n,):
                    raise ValueError(
                        f"PolicyRunner.act_many: obs column {c!r} must have one row per episode (leading dim {n}), "
                        f"got shape {v.shape}"
                    )
                expected = self._obs_shapes.get(c)
                if expected is not None and v.shape[1:] != expected:
                    raise ValueError(
                        f"PolicyRunner.act_many: obs column {c!r}: expected {n} observations of shape {expected} "
                        f"(shape {(n, *expected)}), got shape {v.shape}"
                    )
                obs_cols[c] = self._exact_obs(c, v, "PolicyRunner.act_many")
            r = None if rewards is None else np.asarray(rewards)
            if r is not None:
                if r.shape != (n,):
                    raise ValueError(f"PolicyRunner.act_many: rewards must have shape ({n},), got {r.shape}")
                check_reward_array(r, (n,), "PolicyRunner.act_many got")
            idx = None if agent_index is None else _agent_indices(agent_index, n, "act_many")
            actions, data = self._act_columns(obs_cols, keys, r, starts, idx, explore, timestep)
        except BaseException:
            self._forget_restarts(keys, starts)
            raise
        return self._many_outputs(data, full_fetch, actions)

    def _act_many_hot(self, obs: Any, episodes: Sequence[Hashable], rewards: Any, episode_start: Any, agent_index: Any,
                      explore: bool | None, timestep: int | None, full_fetch: bool) -> Any:
        """`act_many`'s common call by the short way (`_act_hot`): the last call's episodes (a list, tuple or range),
        each one step on (``episode_start`` None, False or all-False bools; the default agent_index and timestep),
        an observation array of the space's dtype and shape, rewards of the right shape that `check_reward_array`
        takes (or none, the policy not reading rewards). Returns `act_many`'s return, or `_MISS` (nothing changed)
        for any other call: `act_many`'s general way then takes it."""
        hot = self._hot
        if (hot is None or hot.keys is not self._last_keys or agent_index is not None or timestep is not None
                or not (explore is None or type(explore) is bool) or type(obs) is not np.ndarray
                or obs.dtype is not self._obs_dtype or obs.shape != hot.obs_shape):
            return _MISS
        n = hot.n
        if not (episode_start is None or episode_start is False or (
                type(episode_start) is np.ndarray and episode_start.dtype.type is np.bool_
                and episode_start.shape == (n,) and episode_start.tobytes() == hot.no_starts)):  # (none set: 10x .any())
            return _MISS
        try:
            if (episodes if type(episodes) is list else list(episodes)) != hot.keys:
                return _MISS
        except (TypeError, ValueError):  # (a key whose == is not a bool, e.g. holding an array: the general way's)
            return _MISS
        if rewards is None:
            if self._columns.reward_input_keys:
                return _MISS
            r = None
        else:
            r = rewards if type(rewards) is np.ndarray else np.asarray(rewards)
            if r.shape != (n,):
                return _MISS
            check_reward_array(r, (n,), "PolicyRunner.act_many got")
        return self._act_hot(hot, obs, r, explore, _ROWS_FETCH if full_fetch else _ROWS)

    def _many_outputs(self, data: dict[str, Any], full_fetch: bool, actions: Any = None) -> Any:
        """`act_many`'s return: copies of the checked outputs ``data`` (the arrays the policy returned are stored with
        the episodes' next steps); a nested action from ``actions``, as the policy returned them."""
        acts = _copied(actions) if self._nested_actions else np.array(data[SampleBatch.ACTIONS], copy=True)
        if not full_fetch:
            return acts
        cols = self._columns
        return (acts, [np.array(data[k], copy=True) for k in cols.state_keys],
                {k: np.array(data[k], copy=True) for k in cols.extra_keys})

    def _act_columns(
        self,
        obs_cols: dict[str, np.ndarray],
        keys: list[Hashable],
        rewards: np.ndarray | None,
        starts: list[bool],
        agent_index: np.ndarray | None,
        explore: bool | None,
        timestep: int | None,
    ) -> tuple[Any, dict[str, Any]]:
        """Stores the call's step, calls the policy and checks its outputs: (the actions as the policy returned
        them, the checked output columns: ``actions`` (or its leaves), ``state_out_i``, extra fetches). ``agent_index``:
        ``[n]``, or None for zeros."""
        n = len(keys)
        if explore is not None and type(explore) is not bool:
            _check_explore(explore, self._names.name)
        if timestep is not None and (type(timestep) is not int or timestep < 0):
            timestep = int_at_least(f"{self._names.name}: timestep (None or an int)", timestep, 0)
        _check_keys(keys, "PolicyRunner")
        fast = keys == self._last_keys and not any(starts)
        if not fast and len(set(keys)) != n:
            dup = sorted({repr(k) for k in keys if keys.count(k) > 1})
            raise ValueError(f"PolicyRunner: each episode may act once per call; repeated: {', '.join(dup)}")
        # Whether an episode steps (a call that begins every one of its episodes has no reward to store).
        stepped = fast or any(not starts[j] and keys[j] in self._slots for j in range(n))
        if rewards is None and self._columns.reward_input_keys:
            if stepped:
                raise ValueError(
                    f"{self._names.name}: the policy reads rewards (views {self._columns.reward_input_keys}): "
                    f"{self._names.reward_hint}"
                )
        coll = self._collector
        lanes = self._lanes
        lane = None if lanes is None else lanes.get(n)
        out = None if lane is None else lane.out  # the store writes the input dict into the lane's arrays
        inputs: dict[str, Any] | None
        if fast:
            # The episodes of the last call, each one step on: the step stores the last call's outputs as they are.
            slots, c_slots = self._last_slots, self._last_ids
            data = dict(self._last_data)
            data.update(obs_cols)
            data[_REWARDS] = self._zeros[:n] if rewards is None else rewards
            data[_TERMINATEDS] = data[_TRUNCATEDS] = self._false if n == self.max_episodes else self._false[:n]
            # (the store writes nothing when it refuses a step)
            inputs = coll.step(data, env_ids=c_slots) if out is None else self._step_into(data, c_slots, out)
        else:
            self._write_back()
            slots, inputs = self._store_step(obs_cols, keys, rewards, starts, out)
            c_slots = None if n == self.max_episodes and bool((slots == self._all).all()) else slots
        saw = self._saw_f32, self._saw_other  # (put back when the call fails: it leaves the runner as it was)
        if rewards is not None and stepped:
            self._saw_f32, self._saw_other = self._reward_flags(rewards.dtype.type)
        try:
            if inputs is None:
                inputs = coll.input_dict(c_slots, out=out)
            cast = self._saw_f32 and not self._saw_other  # float32 rewards only: inputs as a worker gives them
            ts = self._counts.timestep if timestep is None else timestep
            explore = self.explore if explore is None else explore
            if lane is not None and lane.usable(self.policy, cast):
                actions, state_outs, extra = lane.run(agent_index, explore, ts)
            else:
                gathered = dict.copy(inputs)  # (the store's flat columns, before the additions below)
                if lane is not None:  # the rewards' dtype changed, or the policy's method was replaced
                    inputs = coll.as_input_dict(dict(gathered), n)  # (the input dict a worker hands the policy)
                    del lanes[n]  # type: ignore[union-attr]
                    lane = None
                if self._columns.agent_index_input:
                    inputs[SampleBatch.AGENT_INDEX] = np.zeros(n, np.int64) if agent_index is None else agent_index
                if cast:
                    cast_rewards(inputs, self._columns.reward_input_keys, F32)
                actions, state_outs, extra = self.policy.compute_actions_from_input_dict(
                    inputs, explore=explore, timestep=ts
                )
            data = self._columns.check_outputs(actions, state_outs, extra, n)
        except BaseException as e:
            self._last_keys = None
            self._saw_f32, self._saw_other = saw
            PolicyColumns.note_nan_inputs(e, lane.fed if lane is not None else inputs)
            self._fail(keys, e)
            raise
        if lane is None and self._lanes is not None and _CAFID not in self.policy.__dict__:
            self._add_lane(n, gathered, cast)
        # The outputs are stored with each episode's next step (kept here until the episodes change).
        self._last_keys, self._last_slots, self._last_ids = keys, slots, c_slots
        self._last_data = {k: data[k] for k in self._pending}
        lane = None if self._lanes is None or not self._hot_ok else self._lanes.get(n)
        self._hot = None if lane is None else _Hot(self, keys, lane)
        self._counts.count(n)
        return actions, data

    def _act_hot(self, hot: _Hot, obs: np.ndarray, rewards: np.ndarray | None, explore: bool | None,
                 mode: int) -> Any:
        """`_act_columns` for the common call, which `act` / `act_many` checked: the last call's episodes, each one step
        on (no restart, the default agent_index and timestep), an observation array of the space's dtype and shape,
        real rewards (or none, the policy not reading them), a lane usable. Returns the call's return (``mode``:
        `_ROW`, `_ROW_FETCH`, `_ROWS` or `_ROWS_FETCH`: `_single_outputs` / `_many_outputs`), or `_MISS` (nothing
        changed) where the lane is not usable: the general way then runs.

        Where the rewards' dtype is the last call's (the reward flags stay as they are) and the output checks have
        their C++ common case, the whole call is one C++ call (`_core._HotAct`: the store's step, the policy's
        function, the check, the count and the return, as below: `_fused`); `_act_one` makes that call itself, and
        comes here for the rest."""
        t = None if rewards is None else rewards.dtype.type
        if hot.act is not None:
            # (where the rewards' dtype is the last call's by this way, the reward flags stay as they are)
            out = _fused(self, hot, obs, rewards, t, explore, mode)
            if out is not _MISS:
                return out
        n = hot.n
        if t is hot.reward_type:
            flags, cast = None, hot.cast
        else:
            flags = self._reward_flags(t)
            cast = flags[0] and not flags[1]
        lane = hot.lane
        if not lane.usable(self.policy, cast):
            return _MISS
        explore = self.explore if explore is None else explore
        data = hot.data
        data[_OBS] = obs
        data[_REWARDS] = hot.zeros if rewards is None else rewards
        self._step_into(data, hot.ids, lane.out)  # (the store writes nothing when it refuses a step)
        saw = None  # (the reward flags before this call, where it changes them: put back when it fails)
        if flags is not None:
            saw = self._saw_f32, self._saw_other
            self._saw_f32, self._saw_other = flags
        try:
            actions, state_outs, extra = hot.run(explore, self._counts.timestep)
            # The outputs are stored with the episodes' next step: set in the step's data by the checks' common case
            # (`_core._OutputCheck`), else checked by the general ones, then set.
            out = None if hot.check is None else hot.check(actions, state_outs, extra, n, data)
            if out is None:
                out = self._columns.check_outputs(actions, state_outs, extra, n)
                for k in self._pending:
                    data[k] = out[k]
        except BaseException as e:
            self._hot_failed(hot, e, saw)
            raise
        hot.reward_type, hot.cast = t, cast
        self._counts.count(n)
        return self._hot_outputs(out, mode)

    def _fused_failed(self, hot: _Hot, e: BaseException) -> None:
        """A `_core._HotAct` call raised ``e`` (its caller raises it on): where the policy or the check raised (stage
        1), the call's episodes are forgotten, as `_hot_failed` says. At stage 0 the store refused the step and
        nothing changed; at stage 2 the outputs were stored and the count's free of the store's steps raised, after
        which the general way too goes on."""
        if hot.act.stage == 1:  # type: ignore[union-attr]
            self._hot_failed(hot, e, None)

    def _unchecked(self, hot: _Hot, mode: int) -> Any:
        """The rest of a `_core._HotAct` call whose check declined the policy's outputs: the general checks (which
        accept what is acceptable and name what is wrong), the outputs set in the step's data, the count, the
        return."""
        actions, state_outs, extra = hot.act.take_unchecked()  # type: ignore[union-attr]
        try:
            out = self._columns.check_outputs(actions, state_outs, extra, hot.n)
            for k in self._pending:
                hot.data[k] = out[k]
        except BaseException as e:
            self._hot_failed(hot, e, None)
            raise
        self._counts.count(hot.n)
        return self._hot_outputs(out, mode)

    def _hot_outputs(self, out: dict[str, Any], mode: int) -> Any:
        """`act`'s / `act_many`'s return (``mode``) from the checked outputs ``out``."""
        if mode < _ROWS:
            return self._single_outputs(out, None, mode == _ROW_FETCH)
        return self._many_outputs(out, mode == _ROWS_FETCH)

    def _hot_failed(self, hot: _Hot, e: BaseException, saw: tuple[bool, bool] | None) -> None:
        """The short way's call failed after the policy was called: the reward flags as they were (``saw``, where the
        call changed them), the call's episodes forgotten (see the class doc), the error's notes."""
        self._last_keys = None
        if saw is not None:
            self._saw_f32, self._saw_other = saw
        PolicyColumns.note_nan_inputs(e, hot.lane.fed)
        self._fail(hot.keys, e)

    def _reward_flags(self, t: Any) -> tuple[bool, bool]:
        """The reward flags (``_saw_f32``, ``_saw_other``) after a step's rewards of dtype type ``t`` (None: none
        given, the flags as they are): the adapters' rule (`EnvAdapter.reward_dtype`), by which reward inputs are
        float32 where every reward given was float32 (or float16)."""
        if t is None:
            return self._saw_f32, self._saw_other
        if t is np.float32 or t is np.float16:
            return True, self._saw_other
        return self._saw_f32, True

    def _add_lane(self, n: int, gathered: dict[str, np.ndarray], cast: bool) -> None:
        """Input arrays for the next calls of ``n`` rows, shaped as ``gathered`` (a call's input dict from the store),
        if the policy can reuse them (`Policy._reused_inputs`); else no call makes lanes again."""
        lanes = self._lanes
        assert lanes is not None
        lane = _Lane.make(self.policy, self._columns, n, gathered, cast)
        if lane is None:
            self._lanes = None
            return
        if len(lanes) >= _LANES:
            del lanes[next(iter(lanes))]  # the oldest row count
        lanes[n] = lane

    def _single_obs(self, obs: Any) -> dict[str, np.ndarray]:
        """``act``'s observation as batch-of-one columns; a shape other than the space's is a ValueError (in the
        shapes the caller passed, without the batch axis). (`act` takes the common case itself.)"""
        cols = {_OBS: obs} if self._flat_obs else self._obs_nest.columns(_OBS, obs, "obs")
        out = {}
        for c, v in cols.items():
            a = np.asarray(v)
            expected = self._obs_shapes.get(c)
            if expected is not None and a.shape != expected:
                raise ValueError(
                    f"{self._names.act}: column {c!r}: expected one observation of shape {expected} (no batch axis"
                    f"{self._names.batch_hint}), got shape {a.shape}"
                )
            want = self._obs_dtypes.get(c)
            if want is not None and not isinstance(v, np.ndarray) and not np.can_cast(a.dtype, want, "safe"):
                raise ValueError(
                    f"{self._names.act}: column {c!r}: got a {type(v).__name__}, which numpy reads as {a.dtype}; the "
                    f"observation space's dtype is {want}, and a cast that could change values is not made: pass "
                    f"np.asarray(obs, np.{want.name})"
                )
            out[c] = self._exact_obs(c, a, self._names.act)[None]
        return out

    def _exact_obs(self, c: str, v: np.ndarray, where: str) -> np.ndarray:
        """Observation column ``c`` in the space's dtype, by the store's rule (`cast_exactly`: a cast that could change
        a value is refused), the refusal naming ``where`` and the call that fixes it."""
        want = self._obs_dtypes.get(c)
        if want is None or v.dtype == want:
            return v
        try:
            return cast_exactly(c, v, want)
        except ValueError as e:
            raise ValueError(f"{where}: {e}; the observation space's dtype is {want}: pass "
                             f"np.asarray(obs, np.{want.name})") from None

    def _forget_restarts(self, keys: list[Any], starts: list[bool]) -> None:
        """A call that raised forgets the running episodes it was asked to restart (``episode_start``), whatever
        refused it (the class doc); the others stay as they were."""
        mine: list[Hashable] = []
        for k, start in zip(keys, starts):
            if start:
                try:
                    if k in self._slots and k not in mine:
                        mine.append(k)
                except TypeError:  # (an unhashable key: not running)
                    pass
        if mine:
            self._end(mine)

    def _store_step(
        self,
        obs_cols: dict[str, np.ndarray],
        keys: list[Hashable],
        rewards: np.ndarray | None,
        starts: list[bool],
        out: dict[str, np.ndarray] | None,
    ) -> tuple[np.ndarray, dict | None]:
        """Begins or steps each episode of the call in the store (the general case: new, restarted, other
        episodes than the last call's). Returns (their slots, the input dict if gathered with the step, into
        ``out`` if given)."""
        n = len(keys)
        # Everything checked before anything changes (the keys' repeats: `_act_columns`).
        slots_of = self._slots
        begin = [j for j in range(n) if starts[j] or keys[j] not in slots_of]
        restarted = [keys[j] for j in begin if keys[j] in slots_of]
        if len(begin) - len(restarted) > len(self._free):
            raise ValueError(
                f"PolicyRunner: {len(begin) - len(restarted)} new episode(s), but only {len(self._free)} of "
                f"max_episodes={self.max_episodes} slots are free; reset(episode) the ones that ended, or make the "
                f"runner with a larger max_episodes"
            )
        # Slots: restarted episodes keep theirs (the old episode under the key ends); new ones take free ones.
        if restarted:
            self._end_slots([slots_of[k] for k in restarted])
        for j in begin:
            k = keys[j]
            if k not in slots_of:
                slots_of[k] = self._free.pop()
        slots = np.fromiter((slots_of[k] for k in keys), np.int64, n)
        coll = self._collector
        fresh = [keys[j] for j in begin]
        try:  # the store writes nothing when it refuses a call
            if begin:
                b = np.asarray(begin, np.int64)
                coll.begin_episodes(slots[b], {col: v[b] for col, v in obs_cols.items()})
            if len(begin) < n:
                begun = set(begin)
                c = np.asarray([j for j in range(n) if j not in begun], np.int64) if begin else None
                cs = slots if c is None else slots[c]
                data: dict[str, Any] = {k: v[cs] for k, v in self._pending.items()}
                for col, v in obs_cols.items():
                    data[col] = v if c is None else v[c]
                data[_REWARDS] = self._zeros[: len(cs)] if rewards is None else (rewards if c is None else rewards[c])
                data[_TERMINATEDS] = data[_TRUNCATEDS] = self._false[: len(cs)]
                if c is None:
                    return slots, (coll.step(data, env_ids=slots) if out is None else self._step_into(data, slots, out))
                coll.add_step(data, env_ids=cs)
        except BaseException:
            self._end(fresh)  # the episodes this call began (or restarted) are not kept
            raise
        return slots, None

    def _write_back(self) -> None:
        """The last call's outputs into the per-slot table (before the episodes acting change)."""
        if self._last_keys is not None:
            slots = self._last_slots
            for k, v in self._pending.items():
                v[slots] = self._last_data[k]
            self._last_keys = None

    def _end_slots(self, slots: list[int]) -> None:
        """Ends the running episodes in ``slots`` in the store (the keys keep their slots)."""
        running = self._collector.eps_ids()
        live = np.asarray([s for s in slots if running[s] >= 0], dtype=np.int64)
        if len(live):
            self._collector.end_episodes(live)

    def _fail(self, keys: list[Hashable], e: BaseException) -> None:
        """A call failed after it may have changed the store: its episodes are forgotten (see the class doc)."""
        mine = [k for k in keys if k in self._slots]
        self._end(mine)
        if hasattr(e, "add_note"):
            e.add_note(self._names.reset_note.format(repr(mine)))


#: `_Hot.reward_type` before its first call.
_UNSET = object()
#: What `_core._HotAct` returns where the output checks' common case declined (the outputs: its ``take_unchecked``).
_UNCHECKED = object()
#: `_act_hot`'s ``mode``: what the call returns: row 0 of the actions (`act`), with the state outputs and extra
#: fetches (``full_fetch``), every row's actions (`act_many`), with the state outputs and extra fetches.
_ROW, _ROW_FETCH, _ROWS, _ROWS_FETCH = 0, 1, 2, 3
#: `_act_one`'s "not taken": the general way runs (the policy module's, which compute_single_action reads).
_MISS = _policy_module.NOT_TAKEN

#: ``_act_one(runner, obs, episode, reward, explore, full_fetch)``: `PolicyRunner.act`'s common call by the short way
#: (`PolicyRunner._act_hot`), and `compute_single_action`'s once per env step: the last call's one episode, one step on
#: (no restart, the default agent_index and timestep: `act` checks these), an observation array of the space's dtype
#: object and shape, an explore of None or a bool, the episode's key (the same object, or an int / str of the same type
#: and value: the general way compares any other), a real reward (a float, numpy float64 or float32, not NaN), or none
#: where the policy does not read rewards. The reward goes into the `_Hot`'s array of its dtype (``r64`` / ``r32``);
#: then the call is the short way's C++ call (`_core._HotAct`, as `_act_hot` makes it, with `_fused_failed` and
#: `_unchecked`) where the reward's dtype is the last call's and the lane is usable (`_Lane.usable`), else `_act_hot`.
#: Returns `act`'s return, or `_MISS` (nothing changed) for any other call: the general way then takes it. The rule runs
#: in C++ (`_core._ActOne`, which reads these attributes of the runner and of its `_Hot` at each call, and holds nothing
#: of them): in Python it was about a quarter of what the runner added to the model's time (issue 26).
_ACT_ONE = _core._ActOne(_MISS, np.float32, np.float64)
_act_one = _ACT_ONE._fast()
#: ``_fused(runner, hot, obs, rewards, t, explore, mode)``: `PolicyRunner._act_hot`'s C++ call (`_core._HotAct`) where it
#: applies (``hot.act`` made, ``t``, the rewards' dtype type or None, ``hot.reward_type``, the lane usable), with
#: `_fused_failed` and `_unchecked`; else `_MISS` (nothing changed). `_act_one` makes it the same way, in C++.
_fused = _ACT_ONE._fused()
#: Calls between two frees of a runner's emitted rows (and the store's block size, in steps per episode).
_CHUNK = 32
#: Row counts a runner keeps input arrays for (`_Lane`).
_LANES = 4
#: A policy whose instance holds its own ``compute_actions_from_input_dict`` (a wrapper) is called through it: no lane.
_CAFID = "compute_actions_from_input_dict"


class _Lane:
    """Input arrays that every call of ``n`` rows refills in place, and the policy's function that reads them
    (`Policy._reused_inputs`: e.g. a `TorchPolicy`'s tensors viewing them, made once): the store gathers the
    input dict into ``out``; the policy reads ``fed``, which holds the same arrays, except float32 copies of the
    reward views when ``cast`` (a worker's rule: see `cast_rewards`) and ``agent_index`` where the policy reads
    it."""

    __slots__ = ("out", "fed", "cast", "_casts", "_agent_index", "_run", "_method")

    def __init__(self) -> None:
        self.out: dict[str, np.ndarray] = {}
        self.fed: dict[str, np.ndarray] = {}
        self.cast = False
        self._casts: tuple[str, ...] = ()
        self._agent_index: np.ndarray | None = None
        self._run: Any = None
        self._method: Any = None

    @classmethod
    def make(
        cls, policy: Policy, columns: PolicyColumns, n: int, gathered: dict[str, np.ndarray], cast: bool
    ) -> _Lane | None:
        lane = cls()
        lane.out = {k: np.empty(v.shape, v.dtype) for k, v in gathered.items()}
        fed = dict(lane.out)
        if cast:
            lane._casts = tuple(k for k in columns.reward_input_keys if k in fed)
            for k in lane._casts:
                fed[k] = np.empty(fed[k].shape, F32)
        if columns.agent_index_input:
            fed[SampleBatch.AGENT_INDEX] = lane._agent_index = np.zeros(n, np.int64)
        lane.fed, lane.cast = fed, cast
        lane._method = getattr(type(policy), _CAFID)
        lane._run = policy._reused_inputs(fed)
        return None if lane._run is None else lane

    def usable(self, policy: Policy, cast: bool) -> bool:
        """Whether this call may run the policy on the lane: the rewards' dtype as when it was made, and the policy's
        ``compute_actions_from_input_dict`` still its class's own then (no wrapper on the instance, no patch of the
        class since: either is called instead)."""
        return self.cast == cast and _CAFID not in policy.__dict__ and getattr(type(policy), _CAFID) is self._method

    def run_as_is(self) -> Any:
        """The policy's function on the lane's arrays where `run` adds nothing to it (no reward casts, no
        agent_index), else None."""
        return self._run if not self._casts and self._agent_index is None else None

    def run(self, agent_index: np.ndarray | None, explore: bool | None, timestep: int) -> tuple[Any, list, dict]:
        """The policy on the refilled arrays (``agent_index``: ``[n]``, or None for zeros)."""
        fed = self.fed
        for k in self._casts:
            np.copyto(fed[k], self.out[k], casting="same_kind")
        if self._agent_index is not None:
            self._agent_index[:] = 0 if agent_index is None else agent_index
        return self._run(explore, timestep)  # type: ignore[no-any-return]


class _Hot:
    """What `PolicyRunner._act_hot` needs for the next call of the last call's episodes (``keys``), which ran on
    ``lane``: the store's step data (the runner's ``_last_data``, the outputs stored with the next step, plus the
    observations, rewards and ends set at each call), the store's slots, and reward arrays for single calls."""

    __slots__ = ("keys", "key", "lane", "run", "check", "n", "ids", "data", "zeros", "obs_shape", "r64", "r32",
                 "reward_type", "cast", "act", "no_starts")

    def __init__(self, runner: PolicyRunner, keys: list[Hashable], lane: _Lane) -> None:
        n = len(keys)
        self.keys, self.lane, self.n, self.ids = keys, lane, n, runner._last_ids
        self.key = keys[0]  # (`_act_one`'s episode, where n is 1)
        self.no_starts = bytes(n)  # (the bytes of ``n`` False bools: `_act_many_hot`'s episode_start without a start)
        # `_Lane.run` for the default agent_index; the policy's function itself where the lane adds nothing to it.
        self.run = lane.run_as_is() or functools.partial(lane.run, None)
        self.data = runner._last_data
        self.data[_TERMINATEDS] = self.data[_TRUNCATEDS] = (runner._false if n == runner.max_episodes
                                                              else runner._false[:n])
        self.zeros = runner._zeros[:n]
        self.obs_shape = (n, *runner._obs_shape) if runner._obs_shape is not None else None
        self.r64, self.r32 = runner._r64, runner._r32
        # The rewards' dtype type (None: none given) of the last call by the short way, and the reward inputs' cast
        # then (`_act_hot`: the same dtype again leaves the runner's reward flags as they are).
        self.reward_type: Any = _UNSET
        self.cast = False
        self.check = runner._hot_check
        #: `_act_hot`'s call in C++ where the checks have their common case (`_core._HotAct`, called by `_fused`).
        self.act = None if self.check is None else _core._HotAct(
            runner._step_into, self.check, self.data, self.ids, lane.out, n, self.zeros, runner._counts,
            list(runner._state_keys), list(runner._extra_keys), _UNCHECKED)


def _check_explore(explore: Any, where: str = "PolicyRunner") -> None:
    if explore is not None and not isinstance(explore, (bool, np.bool_)):
        raise ValueError(f"{where}: explore must be a bool or None, got {type(explore).__name__} {explore!r}")


def _check_keys(keys: list[Any], where: str) -> None:
    """Episode keys must be hashable (tuples: every element too) and not None (``reset(None)`` means every
    episode); else a TypeError / ValueError naming the key."""
    try:
        hash(tuple(keys))
    except TypeError:
        bad = next(k for k in keys if not _hashable(k))
        raise TypeError(f"{where}: an episode key must be hashable, got {type(bad).__name__} {bad!r}") from None
    if None in keys:
        raise ValueError(f"{where}: None cannot be an episode key (reset(None) forgets every episode); use another key")


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _single_reward(reward: Any, where: str) -> np.ndarray:
    """``act``'s reward as a batch of one, if it is one real number (`check_reward_array`'s rule)."""
    r = np.asarray(reward)
    t = type(reward)
    if not ((t is float or t is np.float64 or t is np.float32) and reward == reward):  # (else nothing to check)
        check_reward_array(r, (), f"{where} got")
    return r[None]


def _agent_indices(value: Any, n: int, where: str) -> np.ndarray:
    """``agent_index`` (one non-negative int for every episode, or ``[n]`` of them) as ``[n]`` int64; anything else
    (bools, floats, strings, negatives) is a ValueError naming it."""
    arr = np.asarray(value)
    if (
        arr.dtype.kind not in "iu"
        or arr.ndim > 1
        or (arr.ndim == 1 and len(arr) != n)
        or (arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int64).max))
    ):
        many = f" or {n} of them (one per episode)" if n > 1 else ""
        raise ValueError(f"PolicyRunner.{where}: agent_index must be a non-negative int{many}, got {value!r}")
    return np.full(n, arr, np.int64) if arr.ndim == 0 else arr.astype(np.int64)


def _starts(value: Any, n: int, where: str) -> list[bool]:
    """``episode_start`` (one for every episode, or ``[n]``) as a list of ``n`` bools. Only bools are read as bools
    (numpy's too), and ints 0 / 1 (a done flag held as an int): anything else is a ValueError naming it, since
    ``bool("no")`` would restart the episode."""
    arr = np.asarray(value)
    if arr.dtype.type is not np.bool_ and not (
        arr.dtype.kind in "iu" and (not arr.size or (int(arr.min()) >= 0 and int(arr.max()) <= 1))
    ):
        raise ValueError(f"{where}: episode_start must be a bool{' or one per episode' if n > 1 else ''} (or an int "
                         f"0 / 1), got {type(value).__name__} {value!r:.80}")
    if arr.ndim > 1 or (arr.ndim == 1 and len(arr) != n):
        raise ValueError(f"{where}: episode_start must be one value or {n} values (one per episode), got shape "
                         f"{arr.shape}")
    return [bool(arr)] * n if arr.ndim == 0 else arr.astype(bool, copy=False).tolist()


def _row(column: np.ndarray) -> Any:
    """Row 0 of a checked output column: a numpy scalar, or a copy of the row."""
    r = column[0]
    return r.copy() if isinstance(r, np.ndarray) else r


def _copied(value: Any) -> Any:
    """``value`` (an array, or a dict / tuple of them: a nested action) copied."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    if isinstance(value, np.generic):
        return value  # a scalar (immutable)
    return np.array(value, copy=True)

def implicit_single_action(policy: Policy, obs: Any, reward: Any, episode_start: bool, explore: bool | None,
                           timestep: int | None) -> tuple[Any, list, dict]:
    """`Policy.compute_single_action`'s implicit episode: a one-episode `PolicyRunner` kept on the policy."""
    runner = getattr(policy, "_single_action_runner", None)
    if runner is None:
        runner = PolicyRunner(policy, max_episodes=1)
        runner._names = _SINGLE
        policy._single_action_runner = runner  # type: ignore[attr-defined]
        # (the policy calls it first: `_act_one`'s C++ function itself, on this runner)
        policy._single_action_short = functools.partial(_act_one, runner)  # type: ignore[attr-defined]
    return runner.act(obs, 0, reward=reward, episode_start=episode_start, explore=explore, timestep=timestep,
                      full_fetch=True)


_policy_module.register_single_action_runner(implicit_single_action)
