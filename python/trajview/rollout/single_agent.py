"""`SingleAgentSampler`: the vectorized single-agent step loop (the fast path) over a `VectorEnvAdapter`.

Faults (docs/contract.md, Faults): a vector step stores every env's transition or none. If anything raises inside
``sample()`` (the policy, an env, a bad value, a callback, a KeyboardInterrupt), an env that the failed step may have
moved on has its episode cut at its last stored step (marked ``truncateds=True`` when emitted; no step is made up)
and is reset before the next step; every other env goes on where it was. Steps stored before the failure are kept,
and the next ``sample()`` returns exactly the batch size asked (a batch whose postprocessing or ``on_sample_end``
raised is handed out again: `env_sampler`).
"""

from __future__ import annotations

import functools
from typing import Any, NoReturn, cast

import numpy as np

from ..collect.collector import Collector
from ..envs.base import VectorEnvAdapter, empty_rows, set_rows, take_rows
from ..policy.policy import Policy
from ..views import SampleBatch, concat_samples
from .callbacks import DUMMY_AGENT_ID, Episode
from .config import RolloutConfig
from .emit import FlatSegments, InfoLog, cast_rewards, custom_postprocess, finish_segment, postprocess_segment
from .env_sampler import EnvSampler
from .filtering import filter_rows
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import PolicyColumns, eps_id_start, make_collector
from .runner import _Lane

__all__ = ["DEFAULT_POLICY_ID", "SingleAgentSampler"]

DEFAULT_POLICY_ID = "default_policy"

#: Observation rows of at least this many bytes are written by the envs straight into the store.
STAGE_OBS_BYTES = 1024

# Column names read on every step (module constants: no class attribute lookup per step).
_OBS, _ACTIONS, _REWARDS = SampleBatch.OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS
_TERMINATEDS, _TRUNCATEDS = SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS
#: `_flat_post`'s answer where the policy does not postprocess: the flat batch is handed out as it is.
_AS_IS = object()


class SingleAgentSampler(EnvSampler[SampleBatch]):
    """Steps ``adapter.num_envs`` envs with one policy; slot ``i`` of the collector is env ``i``.

    Each step: the policy's compute-actions views for every env (one C++
    call), one adapter step, one ``add_step`` of every column; episodes that
    ended are closed in the store and their envs reset. ``sample()`` then cuts
    the batch (RLlib's batch modes) and postprocesses it per episode segment.
    """

    def __init__(
        self, adapter: VectorEnvAdapter, policy: Policy, config: RolloutConfig, hooks: Hooks, metrics: EpisodeMetrics
    ) -> None:
        super().__init__(config, hooks, metrics)
        self.adapter = adapter
        self.policy = policy
        n = self.num_envs = adapter.num_envs
        self._false = np.zeros(n, dtype=bool)
        self._has_hooks = bool(hooks.active)
        # Settings read on every step (the config is frozen).
        self._horizon_len = config.horizon
        self._no_done = config.no_done_at_end
        self._isolate = config.restart_failed_sub_environments
        self._all = np.arange(n, dtype=np.int64)
        # Whether the episodes' lengths kept here (`_steps`, `_len0`) are read at each step (the horizon, callbacks);
        # else an ended episode's length is the store's.
        self._track_len = config.horizon is not None or bool(hooks.active & {"on_episode_step", "on_episode_end"})
        # Built by build(), before any use.
        self.collector: Collector = cast(Collector, None)
        self._columns: PolicyColumns = cast(PolicyColumns, None)
        self._next_obs_rows: Any = None
        self._filter: Any = None  # `filter`, as of the last build (filters are synced in place)
        #: The next step's compute-actions input, gathered with the step just stored (`Collector.step`: one C++
        #: call) when no episode ended in it; forgotten by anything else that changes the store (`_forget_inputs`).
        self._next_inputs: dict | None = None
        self._episodes: list[Episode | None] = [None] * n
        self._ended: dict[int, Episode] = {}
        self._infos: dict[int, InfoLog] = {}
        # Each running episode's length is ``_steps - _len0[slot]``: ``_steps`` counts the steps every slot took
        # (a Python int: no array op per step), ``_len0`` holds the count when the episode began, less the steps
        # its slot took alone (catching up).
        self._steps = 0
        self._len0 = np.zeros(n, dtype=np.int64)
        self._ep_ret = np.zeros(n, dtype=np.float64)
        self._timestep = 0
        #: Slots with no running episode: their envs reset before the next step.
        self._idle = np.ones(n, dtype=bool)
        self._any_idle = True
        self._reset_seed: int | None = None  # the first reset's seed, until it succeeds
        #: Steps every slot stored since the last batch, less `_deficit` (steps a slot missed when its env
        #: failed with restart_failed_sub_environments; it steps alone until it catches up).
        self._frag = 0
        self._deficit: dict[int, int] = {}
        #: eps_ids: this worker's range (`eps_id_start`); the next store continues where the last one stopped.
        self._eps_base = eps_id_start(config.worker_index, 0)
        self._next_eps_id = config.eps_id_offset

    @property
    def collectors(self) -> dict[str, Collector]:
        return {DEFAULT_POLICY_ID: self.collector} if self.collector is not None else {}

    @property
    def filter(self) -> Any:
        """The policy's observation filter (RLlib's ``observation_filter``), None for "NoFilter"."""
        return self.filters.get(DEFAULT_POLICY_ID)

    # -- set-up -------------------------------------------------------------------

    def build(self, rebuild: int) -> None:
        """A new store for the policy's current views; every env resets (seeded on the first build only)."""
        policy = self.policy
        self.collector = make_collector(policy, self.num_envs, self.config, self._eps_base + self._next_eps_id)
        self._columns = PolicyColumns(policy, self.config)
        self._agent_index_input = self._columns.agent_index_input
        self._filter = self.filter
        self._next_inputs = None
        # `_lane`'s: none made yet ([]), or None (a nested input dict: the input dict's way).
        self._lanes: list[_Lane] | None = None if self.collector.nested else []
        self._lane_at = 0
        # The episode's last_*_for() values when callbacks or postprocess_trajectory may read them.
        # Callbacks see the episode after every step: its last values are set each step. A policy that only
        # postprocesses sees it once per segment: they are set when its episode ends and before postprocessing
        # (`_lazy_last`), from the newest step's arrays, without a copy per step.
        self._track_last = self._has_hooks
        self._lazy_last = not self._has_hooks and custom_postprocess(policy)
        if self._track_last or self._lazy_last:
            self._track_len = True
        self._last_step: tuple | None = None  # (slots, new_obs, step columns, rewards, infos) of the newest step
        # Infos when the policy trains on them, or for the episode's last_info_for().
        self._want_infos = self._columns.need_infos or self._track_last or self._lazy_last
        # Big observations (images) go from env.step straight into the store's next rows: no copy in add_step.
        # Only for adapters that write observations in place, and when the stored column is the env's observation.
        # A nested observation: each big leaf the same way.
        obs_nest = self.adapter.obs_nest
        self._obs_flat = obs_nest.flat
        self._act_cols = [] if self._columns.action_nest.flat else self._columns.action_nest.names(SampleBatch.ACTIONS)
        self._staged_cols = []
        if self.adapter.writes_obs_in_place and self.filter is None:
            for c, spec in obs_nest.specs(SampleBatch.OBS).items():
                if self.collector.columns.get(c) == spec:
                    if spec[0].itemsize * int(np.prod(spec[1], dtype=np.int64)) >= STAGE_OBS_BYTES:
                        self._staged_cols.append(c)
        self._next_obs_rows = self.collector.staged_rows if self._staged_cols else None
        self._episodes = [None] * self.num_envs
        self._ended = {}
        self._infos = {}
        self._idle[:] = True
        self._any_idle = True
        self._frag = 0
        self._deficit = {}
        self._reset_emit()
        self._reset_seed = self.config.seed if rebuild == 0 else None
        self._start_idle()

    def _obs_row(self, obs: Any, j: int) -> Any:
        """Row ``j`` of ``obs`` (a copy), nested as the observation space."""
        if self._obs_flat:
            return np.array(obs[j], copy=True)
        return self.adapter.obs_nest.row(obs, SampleBatch.OBS, j)

    def _begin(self, ids: np.ndarray, obs: Any, infos: list, out: dict | None = None) -> list[Episode]:
        """Starts an episode in each slot of ``ids`` (store first); returns them for on_episode_start. ``out``: a lane's
        arrays, the next input gathered into them in the same store call (every other slot runs an episode)."""
        try:
            self._next_inputs = None  # (the store changes: a gathered input is stale)
            eps_ids = self.collector.begin_episodes(ids, {_OBS: obs} if self._obs_flat else obs, out)
        except (ValueError, TypeError) as e:
            raise type(e)(f"RolloutWorker: the env's reset observation does not fit the observation space: {e}") from e
        if out is not None:
            self._next_inputs = out
        eids = eps_ids.tolist()  # (Python ints: the loop below boxes no numpy scalars)
        if eids:
            self._next_eps_id = max(self._next_eps_id, max(eids) + 1 - self._eps_base)
        self._idle[ids] = False
        self._any_idle = bool(self._idle.any())
        self._len0[ids] = self._steps
        self._ep_ret[ids] = 0.0
        started = []
        for j, (i, eid, info) in enumerate(zip(np.asarray(ids).tolist(), eids, infos)):
            ep = Episode(eid, i, obs[j] if self._obs_flat else self._obs_row(obs, j), info)
            ep._policies[DUMMY_AGENT_ID] = DEFAULT_POLICY_ID
            self._episodes[i] = ep
            if self._columns.need_infos:
                self._infos[eid] = InfoLog()
            started.append(ep)
        return started

    def _reset(self, ids: np.ndarray, seed: int | None = None, again: Any = None) -> tuple[np.ndarray, Any, list]:
        """Resets the envs ``ids`` (all seeded, if ``seed``): (ids, first observations, infos). If that raises and
        restart_failed_sub_environments allows, they are recreated and the envs ``again()`` (default ``ids``) reset."""
        try:
            obs, infos = self.adapter.reset(seed=seed) if seed is not None else self.adapter.reset_envs(ids)
        except Exception:
            if not self.config.restart_failed_sub_environments:
                raise
            self._recreate(ids)
            ids = ids if again is None else again()
            obs, infos = self.adapter.reset_envs(ids)
        return ids, obs, infos

    def _start_idle(self) -> None:
        """Resets the envs of idle slots (recreating those that fail, if allowed) and begins their episodes."""
        ids = np.flatnonzero(self._idle)
        seed = self._reset_seed if len(ids) == self.num_envs else None
        ids, obs, infos = self._reset(ids, seed, again=lambda: np.flatnonzero(self._idle))
        self._reset_seed = None
        if self._filter is not None:
            obs = filter_rows(self._filter, obs, self.adapter.obs_nest, ids)
        for ep in self._begin(ids, obs, infos):
            self.hooks.episode_start(ep, ep.env_id)

    # -- sampling ---------------------------------------------------------------

    def _sample(self) -> SampleBatch:
        coll = self.collector
        cfg = self.config
        complete = cfg.complete_episodes
        if complete:
            target = cfg.rollout_fragment_length * self.num_envs
            while coll.num_complete_steps() < target:
                self._step()
        else:
            # Counted per slot in the store's terms: steps kept from a sample() that raised count too, and a
            # slot left behind by a failed env (restart_failed_sub_environments) steps alone until it catches up.
            while True:
                if self._deficit:
                    self._step(np.array(sorted(self._deficit), dtype=np.int64))
                elif self._frag < cfg.rollout_fragment_length:
                    if not self._common_steps(cfg.rollout_fragment_length):
                        self._step()
                else:
                    break
        return self._emit(complete)

    def _step(self, ids: np.ndarray | None = None) -> None:
        """One step of every env (or of the envs ``ids`` only, catching up: rows are then positions among them):
        `_act`, `_step_envs`, `_horizon`, `_store`, `_commit`, `_replace_failed`, `_restart`, then the hooks. A fault
        before the step is stored cuts the envs that moved on (see the faults section)."""
        if self._any_idle:
            self._start_idle()
        slots = self._all if ids is None else ids
        data, actions = self._act(slots, ids)
        self._after_envs(data, slots, ids, self._step_envs(actions, slots, ids))

    def _after_envs(self, data: dict, slots: np.ndarray, ids: np.ndarray | None, res: tuple) -> None:
        """The rest of a step once the envs stepped (``res``: `_step_envs`' answer): `_horizon`, `_store`,
        `_commit`, `_replace_failed`, `_restart`, then the hooks."""
        new_obs, rew, term, trunc, infos, any_done, failed, _ = res
        if failed is None:
            ok = self._all if ids is None else np.arange(len(slots))
        else:
            ok = np.setdiff1d(np.arange(len(slots)), failed)
            # A failed env's row holds nothing: it takes no part in this step.
            term, trunc = term.copy(), trunc.copy()
            term[failed] = trunc[failed] = False
        cut = (term | trunc) if any_done else None
        soft = None
        if self._horizon_len is not None:
            cut, soft, trunc = self._horizon(slots, ids, cut, trunc, failed)
        ends = soft is not None or (cut is not None and bool(cut.any()))
        self._store(data, slots, ids, ok, failed, new_obs, rew, term, trunc, ids is None and not ends)
        stepped = self._commit(slots, ids, ok, failed, data, new_obs, rew, infos, cut, soft)
        if failed is not None:
            self._replace_failed(slots[failed])
        ended, started, error = self._restart(slots, ids, cut, soft, new_obs) if ends else ([], [], None)
        if self._has_hooks:
            self._step_hooks(stepped, ended, started)
        if error is not None:
            raise error

    def _common_steps(self, limit: int) -> bool:
        """Steps of every env while each is the common step, until ``limit`` steps are stored since the last batch:
        `_step`'s work without its branches for what these steps cannot hold (no idle slot, no catching up, no
        horizon, no filter, no hooks, no infos kept per episode, the lanes in use): the same calls in the same order,
        in one frame (issue 25). Each step's input is in the other lane: gathered by the last step's store call, or
        here as `_act` would gather it (`_gather_next`: the first step after a batch or a fault, and after a step in
        which episodes ended). A step in which an episode ended or an env failed is finished by `_step`'s own code
        (`_after_envs`); where every ended episode began again the loop goes on, else (an env failed, a slot left
        idle) it ends there. False where it took no step (the next is not one of these: `_step` takes it)."""
        lanes = self._lanes
        if (not lanes or self._any_idle or self._has_hooks or self._horizon_len is not None or self._filter is not None
                or self._columns.need_infos):
            return False
        if self._next_inputs is None:  # (the first step after a batch, or after a fault)
            self._gather_next(lanes[1 - self._lane_at])
        adapter, policy, reward_keys = self.adapter, self.policy, self._columns.reward_input_keys
        n, all_, explore = self.num_envs, self._all, self.explore
        runs = [lane.run_as_is() or functools.partial(lane.run, None) for lane in lanes]
        check, act_cols = self._columns.check_outputs, self._act_cols
        store, staged, step_envs = self.collector.step_into(), self._next_obs_rows is not None, adapter.step
        want_infos, isolate, lazy_last = self._want_infos, self._isolate, self._lazy_last
        ep_ret = self._ep_ret
        stepped = False
        while self._frag < limit:
            k = 1 - self._lane_at
            lane = lanes[k]
            # (`_lane`'s rule, at every step: the lane usable for the policy and the rewards' dtype as they are now)
            if self._next_inputs is not lane.out or not lane.usable(policy, bool(adapter.saw_f32_rewards and reward_keys)):
                break
            stepped = True
            # `_act`
            self._next_inputs = None
            self._lane_at = k
            try:
                acts, state_outs, extra = runs[k](explore, self._timestep)
                data = check(acts, state_outs, extra, n)
            except Exception as e:
                PolicyColumns.note_nan_inputs(e, lane.fed)
                raise
            actions: Any = data[_ACTIONS] if not act_cols else {c: data[c] for c in act_cols}
            # `_step_envs`
            try:
                res = step_envs(actions, self._staged() if staged else None, want_infos, isolate)
            except BaseException:
                self._cut_moved_on()
                raise
            failed = res[6]
            if failed is not None and len(failed):  # an env failed: as `_step`, then `_sample` (the env catches up)
                self._after_envs(data, all_, None, res)
                break
            if res[5]:  # episodes ended: as `_step` (and the next input gathered), then the loop goes on
                self._restart_in_loop(data, res, lanes[1 - k].out)
                continue
            # `_store` and `_commit`
            new_obs, rew, infos = res[0], res[1], res[4]
            self._fill(data, new_obs, rew, res[2], res[3], None)
            try:
                self._next_inputs = store(data, None, lanes[1 - k].out)
            except BaseException as e:
                self._fail_store(all_, e)
            self._timestep += n
            self._frag += 1
            self._steps += 1
            ep_ret += rew
            if lazy_last:
                self._last_step = (None, new_obs, data, rew, infos)
        return stepped

    def _gather_next(self, lane: _Lane) -> None:
        """The next step's input dict gathered into ``lane``'s arrays (the gather `_lane` does for `_act`), as the
        next input."""
        self.collector.input_dict(None, lane.out)
        self._next_inputs = lane.out

    def _act(self, slots: np.ndarray, ids: np.ndarray | None) -> tuple[dict[str, Any], Any]:
        """The policy's outputs for the stepped slots, checked before any env steps (a bad output changes
        nothing): (the step's policy columns, the actions as the envs take them)."""
        n = len(slots)
        inputs, self._next_inputs = self._next_inputs, None
        lane = None
        if ids is None and self._lanes is not None:
            lane, inputs = self._lane(inputs)
        if lane is None:
            if inputs is None or ids is not None:
                inputs = self.collector.input_dict() if ids is None else self.collector.input_dict(ids)
            if self._agent_index_input:
                inputs[SampleBatch.AGENT_INDEX] = np.zeros(n, np.int64)
            if self.adapter.saw_f32_rewards and self._columns.reward_input_keys:
                cast_rewards(inputs, self._columns.reward_input_keys, self.adapter.reward_dtype)
        else:
            inputs = lane.fed  # (what the policy reads: the lane's arrays, with its reward casts and agent_index)
        try:
            if lane is None:
                actions, state_outs, extra = self.policy.compute_actions_from_input_dict(
                    inputs, explore=self.explore, timestep=self._timestep
                )
            else:
                actions, state_outs, extra = lane.run(None, self.explore, self._timestep)
            data = self._columns.check_outputs(actions, state_outs, extra, n)
        except Exception as e:
            PolicyColumns.note_nan_inputs(e, inputs)
            raise
        return data, (data[_ACTIONS] if not self._act_cols else {c: data[c] for c in self._act_cols})

    def _lane(self, inputs: dict[str, np.ndarray] | None) -> tuple[_Lane | None, dict[str, np.ndarray] | None]:
        """The lane whose arrays hold this step's input dict (``inputs``: gathered with the last step, or None), for
        the policy's function that reads them in place (`_Lane`, as `PolicyRunner`'s), and its arrays; (None, the
        input dict) where the policy has no such function (the input dict's way then, for the rest of this store) or
        where a ``compute_actions_from_input_dict`` set on its instance acts instead (for this step).
        Two lanes take turns: a step's outputs may be views of its inputs (an action computed in an input's array,
        a state passed through), and the step's columns are read after the next input dict is gathered
        (`_refresh_last`), which goes into the other lane."""
        lanes = cast(list, self._lanes)
        cast_ = bool(self.adapter.saw_f32_rewards and self._columns.reward_input_keys)
        if not lanes or not lanes[0].usable(self.policy, cast_):
            if inputs is None:
                inputs = self.collector.input_dict()
            made = [_Lane.make(self.policy, self._columns, self.num_envs, inputs, cast_) for _ in range(2)]
            if made[0] is None or made[1] is None:
                self._lanes = None
                return None, inputs
            self._lanes = lanes = cast(list, made)
            if not lanes[0].usable(self.policy, cast_):
                return None, inputs  # (a wrapper on the policy's instance: it acts, on the input dict)
        k = 1 - self._lane_at
        lane = lanes[k]
        if inputs is None:
            self.collector.input_dict(None, lane.out)
        elif inputs is not lane.out:
            for c, v in inputs.items():
                np.copyto(lane.out[c], v)
        self._lane_at = k
        return cast(_Lane, lane), lane.out

    def _step_envs(self, actions: Any, slots: np.ndarray, ids: np.ndarray | None) -> tuple:
        """The envs' step (big observations written straight into the store's next rows), filtered: a
        `VectorStep`'s 8 fields (new_obs, rewards, terminateds, truncateds, infos, any done, rows of envs that
        failed or None, their errors)."""
        staged = self._staged() if self._next_obs_rows is not None and ids is None else None
        try:
            if ids is None:
                res = self.adapter.step(actions, staged, self._want_infos, self._isolate)
            else:
                res = self.adapter.step(actions, None, self._want_infos, self._isolate, env_ids=ids)
        except BaseException:
            self._cut_moved_on()
            raise
        if res[6] is None and self._filter is None:
            return res  # the common step: no env failed, nothing to filter
        new_obs, rew, term, trunc, infos, any_done, failed = res[:7]
        failed = failed if failed is None or len(failed) else None
        if self._filter is not None:
            try:
                new_obs = filter_rows(self._filter, new_obs, self.adapter.obs_nest, slots, failed)
            except BaseException:  # (an observation refused) a fault after the envs moved on: none of it is stored
                self._cut(slots)
                if failed is not None:
                    self._replace_failed(slots[failed])
                raise
        return new_obs, rew, term, trunc, infos, any_done, failed, res[7]

    def _staged(self) -> Any:
        """The store's rows the next step's big observations go into (the leaves' rows, if nested), for the envs to
        write in place; None where the store cannot give them (`Collector.staged_rows`)."""
        if self._obs_flat:
            return self._next_obs_rows(_OBS)
        rows = {c: self._next_obs_rows(c) for c in self._staged_cols}
        return rows if all(r is not None for r in rows.values()) else None

    def _horizon(self, slots: np.ndarray, ids: Any, cut: Any, trunc: np.ndarray, failed: Any) -> tuple[Any, Any, Any]:
        """Episodes at the horizon: truncated and cut (a hard horizon) or ended without a reset (``soft``).
        Returns (cut, soft, truncateds)."""
        cfg = self.config
        horizon = cast(int, cfg.horizon)
        if cut is None:
            cut = self._false if ids is None else np.zeros(len(slots), dtype=bool)
        lens = ((self._steps - self._len0[slots]) if self._track_len else self.collector.episode_lengths()[slots]) + 1
        hit = (lens >= horizon) & ~cut
        if failed is not None:
            hit[failed] = False
        soft = None
        if hit.any():
            if cfg.soft_horizon:
                soft = hit
            else:
                trunc = trunc | hit
                cut = cut | hit
        return cut, soft, trunc

    def _store(self, data: dict, slots: np.ndarray, ids: Any, ok: np.ndarray, failed: Any, new_obs: Any,
               rew: np.ndarray, term: np.ndarray, trunc: np.ndarray, gather_next: bool) -> None:
        """Stores the step: the policy's columns and the envs' (``ok`` rows: every env's transition or none).
        ``gather_next`` (every env stepped, no episode ended): the next step's input is gathered in the same call."""
        self._fill(data, new_obs, rew, term, trunc, None if ids is None else len(slots))
        try:
            if failed is None:
                if gather_next:
                    lanes = self._lanes
                    self._next_inputs = (self.collector.step(data, None, lanes[1 - self._lane_at].out) if lanes
                                         else self.collector.step(data))
                else:
                    self.collector.add_step(data, env_ids=ids)
            else:
                self.collector.add_step({k: np.asarray(v)[ok] for k, v in data.items()}, env_ids=slots[ok])
        except BaseException as e:
            self._fail_store(slots, e)

    def _fill(self, data: dict, new_obs: Any, rew: np.ndarray, term: np.ndarray, trunc: np.ndarray,
              rows: int | None) -> None:
        """The envs' columns of a step into ``data`` (the policy's): observations, rewards and the flags, False
        with ``no_done_at_end`` (``rows``: how many, or None for every env)."""
        if self._no_done:
            term = trunc = self._false if rows is None else np.zeros(rows, dtype=bool)
        if self._obs_flat:
            data[_OBS] = new_obs
        else:
            data.update(new_obs)
        data[_REWARDS] = rew
        data[_TERMINATEDS] = term
        data[_TRUNCATEDS] = trunc

    def _commit(self, slots: np.ndarray, ids: Any, ok: np.ndarray, failed: Any, data: dict, new_obs: Any,
                rew: np.ndarray, infos: Any, cut: Any, soft: Any) -> list[tuple[int, int]]:
        """The step is stored: the Python side follows (step counters, episode lengths and returns, infos, the
        episodes' last values). Returns (slot, row) of each episode that stepped, for ``on_episode_step``."""
        self._timestep += len(slots)
        if failed is None and ids is None:  # the common step: every env stepped
            self._frag += 1
            self._steps += 1
            self._ep_ret += rew
        else:
            ok_slots = slots if failed is None else slots[ok]
            if ids is None:
                self._frag += 1
                for i in slots[failed].tolist():
                    self._deficit[i] = self._deficit.get(i, 0) + 1
            else:
                for i in ok_slots.tolist():
                    if self._deficit[i] == 1:
                        del self._deficit[i]
                    else:
                        self._deficit[i] -= 1
            self._len0[ok_slots] -= 1
            self._ep_ret[ok_slots] += rew[ok]
        if infos is not None and self._columns.need_infos:
            eps = self.collector.eps_ids()
            for j in ok.tolist():
                self._infos[int(eps[slots[j]])].infos.append(infos[j])
        stepped: list[tuple[int, int]] = [(int(slots[j]), j) for j in ok.tolist()] if self._track_last else []
        for i, j in stepped:
            self._set_last(cast(Episode, self._episodes[i]), i, j, new_obs, data, rew, infos)
        if self._lazy_last:
            if ids is None and failed is None:
                self._last_step = (None, new_obs, data, rew, infos)
                # Episodes that end now: their last values before the slot restarts, where the batch they go into
                # is postprocessed segment by segment, as the policy stands now (`_flat_post`: none else reads them).
                if (cut is not None or soft is not None) and self._flat_post() is None:
                    ending: np.ndarray = cast(np.ndarray, cut if soft is None else (soft if cut is None else cut | soft))
                    for j in np.flatnonzero(ending).tolist():
                        self._set_last(cast(Episode, self._episodes[j]), j, j, new_obs, data, rew, infos)
            else:  # a partial step (rare): every slot that stepped, now
                self._last_step = None
                for j in ok.tolist():
                    i = int(slots[j])
                    self._set_last(cast(Episode, self._episodes[i]), i, j, new_obs, data, rew, infos)
        return stepped

    def _restart(self, slots: np.ndarray, ids: Any, cut: Any, soft: Any, new_obs: Any) -> tuple[list, list, Any]:
        """Ends the episodes the step ended and begins new ones (`_end_and_restart`, one row per slot)."""
        if ids is None:
            return self._end_and_restart(self._false if cut is None else cut, soft, new_obs)
        cut_g = np.zeros(self.num_envs, dtype=bool)
        cut_g[slots] = False if cut is None else cut
        soft_g = None
        obs_g = empty_rows(new_obs, self.num_envs, zeros=True)
        set_rows(obs_g, slots, new_obs, slice(None))
        if soft is not None:
            soft_g = np.zeros(self.num_envs, dtype=bool)
            soft_g[slots] = soft
        return self._end_and_restart(cut_g, soft_g, obs_g)

    def _step_hooks(self, stepped: list[tuple[int, int]], ended: list[Episode], started: list[Episode]) -> None:
        for i, _ in stepped:
            self.hooks.episode_step(self._step_episode(i, ended), i)
        for ep in ended:
            self.hooks.episode_end(ep, ep.env_id)
        for ep in started:
            self.hooks.episode_start(ep, ep.env_id)

    # -- faults -------------------------------------------------------------------

    def _cut_moved_on(self) -> None:
        """The envs' step raised: the envs it may have moved on are cut (their steps are not stored)."""
        self._cut(self.adapter.moved_on())

    def _fail_store(self, slots: np.ndarray, e: BaseException) -> NoReturn:
        """The store refused the step: every env that stepped moved on, and none of their steps is stored."""
        self._cut(slots)
        if isinstance(e, (ValueError, TypeError)):
            raise type(e)(f"RolloutWorker: bad data from the env or the policy: {e}") from e
        raise e

    def _replace_failed(self, failed_slots: np.ndarray) -> None:
        """Envs that raised in the step (``restart_failed_sub_environments``): cut, then recreated."""
        self._cut(failed_slots)
        self._recreate(failed_slots)

    def _recreate(self, ids: np.ndarray) -> None:
        """Replaces failed envs; episodes still running in replaced envs (a whole VectorEnv) are cut first."""
        replaced = self.adapter.recreate(ids)
        self._cut(replaced)
        self.metrics.num_env_restarts += len(replaced)

    def _cut(self, ids: np.ndarray) -> None:
        """Ends the running episodes of ``ids`` where they are (a fault): no step is added or changed now. Their
        last stored step is marked truncated when emitted; the slots become idle (reset before the next step). No
        ``on_episode_end`` for a cut episode, nor its return in the metrics (it counts in ``num_faulty_episodes``)."""
        ids = np.asarray([i for i in np.asarray(ids, np.int64) if not self._idle[i]], dtype=np.int64)
        if not len(ids):
            return
        lengths = self.collector.episode_lengths()
        self._next_inputs = None
        self.collector.end_episodes(ids)
        for i in ids:
            ep = cast(Episode, self._episodes[i])
            unemitted = self._unemitted(int(i), int(lengths[i]))
            if unemitted > 0:
                self._ended[ep.episode_id] = ep
                self._note_cut(ep.episode_id, unemitted)
            else:
                self._infos.pop(ep.episode_id, None)
            self._episodes[i] = None
        self._idle[ids] = True
        self._any_idle = True
        self.metrics.num_faulty_episodes += len(ids)

    def _unemitted(self, i: int, length: int) -> int:
        """Steps of slot ``i``'s running episode (``length`` steps so far) that no batch holds yet."""
        if self.config.complete_episodes:
            return length  # running episodes are emitted whole, once finished
        return min(length, self._frag - self._deficit.get(i, 0))

    # -- episodes ----------------------------------------------------------------

    def _set_last(self, ep: Episode, i: int, j: int, new_obs: Any, data: dict, rew: np.ndarray, infos: Any) -> None:
        """Episode ``ep`` (slot ``i``) after its step in row ``j`` of this step: length, return, last values."""
        ep.length = self._steps - int(self._len0[i])
        ep.total_reward = float(self._ep_ret[i])
        if self._act_cols:
            ep._last_action = self._columns.action_nest.row(data, SampleBatch.ACTIONS, j)
        else:
            ep._last_action = np.array(data[SampleBatch.ACTIONS][j], copy=True)
        ep._last_reward = float(rew[j])
        ep._last_obs = self._obs_row(new_obs, j)
        if infos is not None:
            ep._last_info = infos[j]

    def _refresh_last(self) -> None:
        """Before postprocessing (`_lazy_last`): running episodes take their last values from the newest step."""
        last, self._last_step = self._last_step, None
        if last is None:
            return
        _, new_obs, data, rew, infos = last
        for i, ep in enumerate(self._episodes):
            if ep is not None and self._steps > self._len0[i]:  # (a length of 0: it began after the newest step)
                self._set_last(ep, i, i, new_obs, data, rew, infos)

    def _step_episode(self, i: int, ended: list[Episode]) -> Episode:
        """The episode slot ``i`` stepped in this step (it may have ended in it)."""
        for ep in ended:
            if ep.env_id == i:
                return ep
        return cast(Episode, self._episodes[i])

    def _end_and_restart(self, cut: np.ndarray, soft: Any, new_obs: Any) -> tuple[list, list, BaseException | None]:
        """Ends the episodes in `cut` (env reset) and `soft` (soft horizon: no reset), and begins new ones. Store
        and env state only; the caller runs the hooks. If the envs' reset raises (and may not be recreated), their
        slots stay idle (reset before the next step) and the exception is returned, raised after the hooks."""
        ends = np.flatnonzero(cut | soft) if soft is not None else np.flatnonzero(cut)
        if not self._track_len:
            self._len0[ends] = self._steps - self.collector.episode_lengths()[ends]
        self._next_inputs = None
        self.collector.end_episodes(ends)
        ended = self._ended_episodes(ends)
        if soft is None:  # (the common end: every slot resets, its first observation the reset's row in order)
            try:
                _, obs, r_infos = self._reset(ends)
                if self._filter is not None:  # (a first observation refused: as a failed reset)
                    obs = filter_rows(self._filter, obs, self.adapter.obs_nest, ends)
            except Exception as e:
                return ended, [], e  # (no slot was made ready: all stay idle, reset before the next step)
            return ended, self._begin(ends, obs, list(r_infos)), None
        # A soft horizon: its slots go on from their last observation, the others reset.
        resets = np.flatnonzero(cut)
        obs = empty_rows(new_obs, len(ends))
        infos: list = [{} for _ in ends]
        pos = {int(i): j for j, i in enumerate(ends)}
        for i in np.flatnonzero(soft).tolist():
            set_rows(obs, pos[i], new_obs, i)
        error: BaseException | None = None
        if len(resets):
            try:
                _, r_obs, r_infos = self._reset(resets)
                if self._filter is not None:  # (a first observation refused: as a failed reset)
                    r_obs = filter_rows(self._filter, r_obs, self.adapter.obs_nest, resets)
            except Exception as e:
                error = e
            else:
                for j, i in enumerate(resets.tolist()):
                    set_rows(obs, pos[i], r_obs, j)
                    infos[pos[i]] = r_infos[j]
                    self._idle[i] = False  # ready to begin
        if error is None:  # every env reset (or a soft restart): all begin
            return ended, self._begin(ends, obs, infos), None
        ready = np.array([j for j, i in enumerate(ends) if soft[i] or not self._idle[i]], np.int64)
        self._idle[ends] = True
        self._any_idle = True
        started = self._begin(ends[ready], take_rows(obs, ready), [infos[k] for k in ready]) if len(ready) else []
        return ended, started, error

    def _ended_episodes(self, ends: np.ndarray) -> list[Episode]:
        """The episodes of slots ``ends``, ended in the store: their lengths and returns set and recorded, the
        slots idle (their envs reset next). Returns them for on_episode_end."""
        ended = []
        steps, len0, ep_ret, episodes, record, kept = \
            self._steps, self._len0, self._ep_ret, self._episodes, self.metrics.record, self._ended
        for i in ends.tolist():
            ep = cast(Episode, episodes[i])
            ep.length = steps - int(len0[i])
            ep.total_reward = float(ep_ret[i])
            record(ep.total_reward, ep.length, ep)
            kept[ep.episode_id] = ep
            episodes[i] = None
            ended.append(ep)
        self._idle[ends] = True
        self._any_idle = True
        return ended

    def _restart_in_loop(self, data: dict, res: tuple, out: dict) -> None:
        """`_after_envs` then `_gather_next` for a step of `_common_steps` in which episodes ended (every env
        stepped, none failed; no horizon, hooks, filter or infos kept per episode): the same calls in the same
        order, with two store calls fewer: the step is stored and its episodes ended in one (`Collector.add_step`'s
        ``end``), and the next input is gathered into ``out`` as the new episodes begin (`Collector.begin_episodes`'
        ``out``). A reset that raises leaves the slots idle and raises, as `_after_envs` does with no hooks."""
        new_obs, rew, term, trunc, infos = res[0], res[1], res[2], res[3], res[4]
        cut = term | trunc
        ends = np.flatnonzero(cut)
        all_ = self._all
        if not len(ends):  # (an adapter that reported an end no row holds: `_after_envs` stores it as a common step)
            self._after_envs(data, all_, None, res)
            return
        # (`_end_and_restart`'s lengths from the store, where they are not kept here: read before the step)
        len0 = None if self._track_len else self._steps - self.collector.episode_lengths()[ends]
        self._fill(data, new_obs, rew, term, trunc, None)
        self._next_inputs = None
        try:
            self.collector.add_step(data, None, ends)
        except BaseException as e:
            self._fail_store(all_, e)
        self._commit(all_, None, all_, None, data, new_obs, rew, infos, cut, None)
        # `_end_and_restart`'s common end
        if len0 is not None:
            self._len0[ends] = len0
        self._ended_episodes(ends)
        _, obs, r_infos = self._reset(ends)
        self._begin(ends, obs, list(r_infos), out)

    # -- batches ----------------------------------------------------------------

    def _emit(self, complete: bool) -> SampleBatch:
        """Builds the batch and hands it out: postprocessed per episode segment, or, when nothing runs per
        episode, the store's flat batch as it is (no split, no concat)."""
        self._next_inputs = None
        need_infos = self._columns.need_infos
        post = self._flat_post()
        if post is _AS_IS:
            return self._hand_out(batch=self._flat_batch(complete))
        if post is not None:  # the policy's postprocessing of every segment in one pass, on the flat batch
            # (No episode's last values are read on this path. A running episode's are set by a later per-segment
            # emit's `_refresh_last` from the newest step, which this one leaves for it.)
            batch = self._flat_batch(complete)
            lengths = np.array([s["length"] for s in self.collector.last_segments], np.int64)
            return self._hand_out(segments=FlatSegments(batch, lengths, post))
        if self._lazy_last:
            self._refresh_last()
        segments = self.collector.build_batch(complete_only=complete)
        self._frag, self._deficit = 0, {}
        unroll = self._next_unroll_id()
        for seg in segments:
            eid = int(seg[SampleBatch.EPS_ID][0])
            if need_infos:
                self._infos[eid].attach(seg)
            # A build holds each episode in one segment at most: a finished one's segment ends with its last step.
            if self._was_cut(eid, eid in self._ended):
                seg[SampleBatch.TRUNCATEDS][-1] = True
            finish_segment(seg, self._columns, unroll, 0, self.adapter.reward_dtype)
        return self._hand_out(segments=segments)

    def _flat_post(self) -> Any:
        """How `_emit` postprocesses a batch as the worker stands now: `_AS_IS` (nothing runs per segment and the
        policy does not postprocess: the flat batch as it is), the policy's `Policy.flat_postprocessor` (every
        segment in one pass, on the flat batch), or None: segment by segment (infos kept per episode, an
        ``on_postprocess_trajectory`` hook, or a policy with no one-pass postprocessing), which alone reads the
        episodes' last values."""
        if self._columns.need_infos or "on_postprocess_trajectory" in self.hooks:
            return None
        if not custom_postprocess(self.policy):
            return _AS_IS
        return self.policy.flat_postprocessor()

    def _flat_batch(self, complete: bool) -> SampleBatch:
        batch = self.collector.build_flat_batch(complete_only=complete)
        self._frag, self._deficit = 0, {}
        for s in self.collector.last_segments:
            if s["finished"]:
                eid = int(s["eps_id"])
                self._ended.pop(eid, None)
                if self._was_cut(eid, True):
                    batch[SampleBatch.TRUNCATEDS][int(s["row_offset"]) + int(s["length"]) - 1] = True
        unroll = self._next_unroll_id()
        if not len(batch):
            return SampleBatch()
        finish_segment(batch, self._columns, unroll, 0, self.adapter.reward_dtype)
        return batch

    def _postprocess(self, segments: list[SampleBatch] | FlatSegments) -> SampleBatch:
        if isinstance(segments, FlatSegments):
            return segments.postprocess(self.policy)
        out = []
        with self.policy._postprocessing(segments):
            for seg in segments:
                eid = int(seg[SampleBatch.EPS_ID][0])
                ep = self._ended.get(eid)
                if ep is None:
                    ep = next(e for e in self._episodes if e is not None and e.episode_id == eid)
                out.append(postprocess_segment(self.policy, seg, None, ep, self.hooks, DUMMY_AGENT_ID,
                                               DEFAULT_POLICY_ID))
        batch = concat_samples(out) if out else SampleBatch()
        for seg in segments:
            eid = int(seg[SampleBatch.EPS_ID][0])
            if eid in self._ended:
                del self._ended[eid]
                self._infos.pop(eid, None)
        return batch
