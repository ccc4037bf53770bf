"""`RolloutWorker`: steps envs with a policy and returns batches of exactly the views the policy asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from .callbacks import Callbacks, Episode
from .._validate import lazy_row_bytes, positive_int
from ..collect.collector import BOUNDARY_COLUMNS, Collector
from .multi_agent import MultiAgentSampler, is_parallel_env
from ..policy.policy import Policy
from ..views.sample_batch import MultiAgentBatch, SampleBatch, concat_samples

__all__ = ["RolloutWorker"]

_BATCH_MODES = ("truncate_episodes", "complete_episodes")
_COUNT_BY = ("env_steps", "agent_steps")
_HOOKS = ("on_episode_start", "on_episode_step", "on_episode_end", "on_postprocess_trajectory", "on_sample_end")
DEFAULT_POLICY_ID = "default_policy"


def _view_snapshot(vrs: dict) -> dict:
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


#: Observation rows of at least this many bytes are written by the envs straight into the store.
_STAGE_OBS_BYTES = 1024


class RolloutWorker:
    """Collects experience from gymnasium envs (SPEC section 6).

    ``env_creator(env_config)`` returns a ``gymnasium.Env`` (the worker makes
    ``num_envs`` of them and steps them together), a
    ``gymnasium.vector.VectorEnv`` (any autoreset mode; its ``num_envs`` is
    used), or a PettingZoo ``ParallelEnv`` (multi-agent: ``policy`` is then a
    dict ``policy_id -> Policy`` with ``policy_mapping_fn(agent_id, episode)``,
    and ``sample()`` returns a `MultiAgentBatch`). Every step is stored once
    in a C++ `Collector` (one per policy); ``sample()`` returns a
    `SampleBatch` with the policy's training views, postprocessed one episode
    segment at a time.

    The first ``sample()`` runs the policy's view-pruning pass. If the
    policy's ``view_requirements`` change between ``sample()`` calls, the next
    call builds a new store and restarts every episode (so that each view
    holds from t = 0); episodes in progress are dropped without
    ``on_episode_end``.

    ``lazy_views`` (default ``True``: columns with rows of 1 KiB or more, e.g.
    image frames) makes the views of big columns `LazyView` s in the returned
    batch: each frame once plus an index, so a 4-frame stack and ``new_obs``
    add no copies; reading a column materializes it, ``TorchPolicy`` gathers on
    its device. ``False`` copies every view out (see `Collector`).
    """

    def __init__(
        self,
        env_creator: Callable[[dict], Any],
        policy: Policy | type[Policy],
        *,
        num_envs: int = 1,
        batch_mode: str = "truncate_episodes",
        rollout_fragment_length: int = 200,
        count_steps_by: str = "env_steps",
        horizon: int | None = None,
        soft_horizon: bool = False,
        no_done_at_end: bool = False,
        callbacks: Callbacks | None = None,
        env_config: dict | None = None,
        policy_mapping_fn: Callable | None = None,
        seed: int | None = None,
        worker_index: int = 0,
        lazy_views: bool | int = True,
    ) -> None:
        if batch_mode not in _BATCH_MODES:
            raise ValueError(f"batch_mode must be one of {_BATCH_MODES}, got {batch_mode!r}")
        if count_steps_by not in _COUNT_BY:
            raise ValueError(f"count_steps_by must be one of {_COUNT_BY}, got {count_steps_by!r}")
        self.rollout_fragment_length = positive_int("rollout_fragment_length", rollout_fragment_length)
        num_envs = positive_int("num_envs", num_envs)
        if horizon is not None:
            horizon = positive_int("horizon", horizon)
        if soft_horizon and horizon is None:
            raise ValueError("soft_horizon=True needs a horizon, got horizon=None")
        if callbacks is not None and not isinstance(callbacks, Callbacks):
            raise TypeError(f"callbacks must be a tv.Callbacks instance, got {type(callbacks).__name__}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        self.batch_mode = batch_mode
        self.count_steps_by = count_steps_by
        self.horizon = horizon
        self.soft_horizon = bool(soft_horizon)
        self.no_done_at_end = bool(no_done_at_end)
        self.callbacks = callbacks if callbacks is not None else Callbacks()
        self.env_config = dict(env_config or {})
        self.seed = None if seed is None else int(seed)
        self.worker_index = int(worker_index)
        self.policy_mapping_fn = policy_mapping_fn
        self.lazy_views = lazy_row_bytes(lazy_views)

        first = env_creator(self.env_config)
        self.multi_agent: MultiAgentSampler | None = None
        if is_parallel_env(first):
            envs = [first] + [env_creator(self.env_config) for _ in range(num_envs - 1)]
            self.num_envs = num_envs
            self.vector_env: gym.vector.VectorEnv | None = None
            self.envs: list[Any] = envs  # gymnasium Envs, or PettingZoo ParallelEnvs
            self.base_env: Any = envs
            self._autoreset = None
            policies = policy if isinstance(policy, dict) else {DEFAULT_POLICY_ID: policy}
            if policy_mapping_fn is None:
                if len(policies) != 1:
                    raise ValueError(
                        f"policy_mapping_fn is required with {len(policies)} policies ({sorted(policies)})"
                    )
                only = next(iter(policies))
                policy_mapping_fn = lambda agent_id, episode, **kw: only  # noqa: E731
            built = {}
            for pid, p in policies.items():
                if isinstance(p, type) and issubclass(p, Policy):
                    agent = next(
                        (a for a in first.possible_agents if policy_mapping_fn(a, None) == pid), first.possible_agents[0]
                    )
                    p = p(first.observation_space(agent), first.action_space(agent), {})
                if not isinstance(p, Policy):
                    raise TypeError(f"policy {pid!r} must be a tv.Policy instance or subclass, got {type(p).__name__}")
                built[pid] = p
            self.policy_map = built
            self.policy = next(iter(built.values()))
            self.policy_mapping_fn = policy_mapping_fn
            obs_space, act_space = self.policy.observation_space, self.policy.action_space
        elif isinstance(first, gym.vector.VectorEnv):
            if num_envs not in (1, first.num_envs):
                raise ValueError(f"num_envs={num_envs} but env_creator returned a VectorEnv of {first.num_envs} envs")
            self.vector_env = first
            self.envs = []
            self.num_envs = int(first.num_envs)
            obs_space, act_space = first.single_observation_space, first.single_action_space
            self._autoreset = first.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
            self.base_env = first
        elif isinstance(first, gym.Env):
            self.vector_env = None
            self.envs = [first] + [env_creator(self.env_config) for _ in range(num_envs - 1)]
            self.num_envs = num_envs
            obs_space, act_space = first.observation_space, first.action_space
            self._autoreset = None
            self.base_env = self.envs
        else:
            raise TypeError(
                "env_creator must return a gymnasium.Env, a gymnasium.vector.VectorEnv or a PettingZoo "
                f"ParallelEnv, got {type(first).__name__}"
            )
        if not is_parallel_env(first):
            if isinstance(policy, dict):
                raise TypeError("a dict of policies needs a multi-agent (PettingZoo ParallelEnv) env")
            if isinstance(policy, type) and issubclass(policy, Policy):
                policy = policy(obs_space, act_space, {})
            if not isinstance(policy, Policy):
                raise TypeError(f"policy must be a tv.Policy instance or subclass, got {type(policy).__name__}")
            self.policy = policy
            self.policy_map = {DEFAULT_POLICY_ID: policy}
        self._discrete = isinstance(act_space, gym.spaces.Discrete)
        self._obs_dtype = np.dtype(obs_space.dtype)
        self._obs_shape = tuple(obs_space.shape)
        self._false = np.zeros(self.num_envs, dtype=bool)
        self._bufs = (
            np.empty((self.num_envs,) + self._obs_shape, dtype=self._obs_dtype),
            np.empty(self.num_envs, dtype=np.float64),
            np.empty(self.num_envs, dtype=bool),
            np.empty(self.num_envs, dtype=bool),
        )
        overridden = {h for h in _HOOKS if getattr(type(self.callbacks), h) is not getattr(Callbacks, h)}
        self._hooks = overridden
        # Per-slot episode lengths in Python only when the horizon or callbacks need them each step.
        self._track_len = horizon is not None or bool(overridden & {"on_episode_step", "on_episode_end"})

        # Built by the first sample() (_build_collector), before any use; None until then.
        self.collector: Collector = cast(Collector, None)
        self._snapshot: dict | None = None
        self._episodes: list[Episode | None] = [None] * self.num_envs
        self._ended: dict[int, Episode] = {}
        self._infos: dict[int, tuple[int, list]] = {}
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._ep_ret = np.zeros(self.num_envs, dtype=np.float64)
        self._timestep = 0
        self._resets = 0
        self._episode_returns: list[float] = []
        self._episode_lengths: list[int] = []
        self.collectors: dict[str, Collector] = {}

    # -- set-up -------------------------------------------------------------------

    def _make_collector(self, policy: Policy, num_slots: int, policy_index: int = 0) -> Collector:
        policy._initialize_view_requirements()
        specs = policy.column_specs()
        views = {}
        for key, vr in policy.view_requirements.items():
            col = vr.column(key)
            if col == SampleBatch.INFOS:
                continue
            if col in specs or col in BOUNDARY_COLUMNS:
                views[key] = vr
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
            chunk_rows=self.rollout_fragment_length,
            lazy_views=self.lazy_views,
            # Unique across workers, store rebuilds and policies (2**24 trajectories each).
            eps_id_start=self.worker_index << 40 | (self._resets & 0xFF) << 32 | policy_index << 24,
        )

    def _build_collector(self) -> None:
        if self.multi_agent is not None or is_parallel_env(self.envs[0] if self.envs else None):
            self._build_multi_agent()
            return
        policy = self.policy
        self.collector = self._make_collector(policy, self.num_envs)
        self.collectors = {DEFAULT_POLICY_ID: self.collector}
        # Big observations (images) go from env.step straight into the store's next rows: no copy in add_step.
        obs_spec = self.collector.columns.get(SampleBatch.OBS)
        big = obs_spec is not None and obs_spec == (self._obs_dtype, self._obs_shape)
        big = big and self._obs_dtype.itemsize * int(np.prod(self._obs_shape, dtype=np.int64)) >= _STAGE_OBS_BYTES
        self._next_obs_rows = self.collector._impl._next_rows if big else None
        infos_vr = policy.view_requirements.get(SampleBatch.INFOS)
        self._need_infos = infos_vr is not None and infos_vr.used_for_training
        # Lists here; dicts policy_id -> list with a multi-agent env (_build_multi_agent).
        self._state_keys: list[str] | dict[str, list[str]] = [
            f"state_out_{i}" for i in range(len(policy.get_initial_state()))
        ]
        self._extra_keys: list[str] | dict[str, list[str]] = list(policy.extra_fetch_columns)
        self._snapshot = _view_snapshot(policy.view_requirements)
        self._episodes = [None] * self.num_envs
        self._ended = {}
        self._infos = {}
        self._resets += 1
        self._reset_all()

    def _build_multi_agent(self) -> None:
        n_slots = self.num_envs * len(self.envs[0].possible_agents)
        self.collectors = {
            pid: self._make_collector(p, n_slots, k) for k, (pid, p) in enumerate(self.policy_map.items())
        }
        self._state_keys = {
            pid: [f"state_out_{i}" for i in range(len(p.get_initial_state()))] for pid, p in self.policy_map.items()
        }
        self._extra_keys = {pid: list(p.extra_fetch_columns) for pid, p in self.policy_map.items()}
        self._snapshot = {pid: _view_snapshot(p.view_requirements) for pid, p in self.policy_map.items()}
        self._need_infos_by_pid = {
            pid: (vr := p.view_requirements.get(SampleBatch.INFOS)) is not None and vr.used_for_training
            for pid, p in self.policy_map.items()
        }
        first = self.multi_agent is None
        self.multi_agent = MultiAgentSampler(self, self.envs, self.policy_map, self.policy_mapping_fn)
        self._resets += 1
        self.multi_agent.reset_all(first)

    def _reset_all(self) -> None:
        ids = np.arange(self.num_envs)
        if self.vector_env is not None:
            seed = None if self.seed is None or self._resets > 1 else self.seed
            obs, info = self.vector_env.reset(seed=seed)
            infos = [self._vector_info(info, i) for i in ids]
        else:
            pairs = [
                env.reset(seed=None if self.seed is None or self._resets > 1 else self.seed + i)
                for i, env in enumerate(self.envs)
            ]
            obs = np.stack([p[0] for p in pairs])
            infos = [p[1] for p in pairs]
        self._begin(ids, obs, infos)

    @staticmethod
    def _vector_info(info: dict, i: int | np.integer) -> dict:
        out = {}
        for k, v in info.items():
            if k.startswith("_"):
                continue
            mask = info.get("_" + k)
            if mask is None or mask[i]:
                out[k] = v[i] if isinstance(v, np.ndarray) else v
        return out

    def _begin(self, ids: np.ndarray, obs: np.ndarray, infos: list) -> None:
        try:
            eps_ids = self.collector.begin_episodes(ids, {SampleBatch.OBS: obs})
        except (ValueError, TypeError) as e:
            raise type(e)(f"RolloutWorker: the env's reset observation does not fit the observation space: {e}") from e
        self._ep_len[ids] = 0
        self._ep_ret[ids] = 0.0
        for j, (i, eid, info) in enumerate(zip(ids, eps_ids, infos)):
            ep = Episode(int(eid), int(i), obs[j], info)
            self._episodes[i] = ep
            if self._need_infos:
                self._infos[int(eid)] = (0, [])
            if "on_episode_start" in self._hooks:
                self.callbacks.on_episode_start(
                    worker=self, base_env=self.base_env, policies=self.policy_map, episode=ep, env_index=int(i)
                )

    # -- sampling ---------------------------------------------------------------

    def sample(self) -> SampleBatch | MultiAgentBatch:
        """Runs the envs and returns one batch (SPEC section 6 for its size)."""
        if self._views_changed():
            # First call, or views were added or changed: new stores, and
            # every episode restarts so that each view holds from t = 0.
            self._build_collector()
        if self.multi_agent is not None:
            batch = self.multi_agent.sample()
            if "on_sample_end" in self._hooks:
                self.callbacks.on_sample_end(worker=self, samples=batch)
            return batch
        coll = self.collector
        target = self.rollout_fragment_length * self.num_envs
        complete = self.batch_mode == "complete_episodes"
        if complete:
            while coll.num_complete_steps() < target:
                self._step()
        else:
            for _ in range(self.rollout_fragment_length):
                self._step()
        return self._emit(complete)

    def _views_changed(self) -> bool:
        if not self.collectors:
            return True
        if self.multi_agent is not None:
            snapshot = cast(dict, self._snapshot)  # set by _build_multi_agent
            return any(_view_snapshot(p.view_requirements) != snapshot[pid] for pid, p in self.policy_map.items())
        return _view_snapshot(self.policy.view_requirements) != self._snapshot

    def get_metrics(self) -> dict:
        """Returns of the episodes finished since the last call (and forgets them)."""
        out = {"episode_returns": self._episode_returns, "episode_lengths": self._episode_lengths}
        self._episode_returns, self._episode_lengths = [], []
        return out

    def _env_obs_error(self, i: int, o: Any) -> Exception:
        a = np.asarray(o)
        return ValueError(
            f"column 'obs': env {i} returned an observation of dtype {a.dtype} and shape {a.shape}, expected "
            f"dtype {self._obs_dtype} and shape {self._obs_shape} (the observation space; casting would lose data)"
        )

    def _step_envs(self, actions: np.ndarray) -> tuple:
        """Steps every env once: (new_obs, rewards, terminateds, truncateds, infos, reset_obs, any_done)."""
        n = self.num_envs
        if self.vector_env is not None:
            obs, rew, term, trunc, info = self.vector_env.step(actions)
            term = np.asarray(term, dtype=bool)
            trunc = np.asarray(trunc, dtype=bool)
            new_obs, reset_obs = obs, None
            if self._autoreset == gym.vector.AutoresetMode.SAME_STEP and (term.any() or trunc.any()):
                new_obs = obs.copy()
                for k in np.flatnonzero(term | trunc):
                    new_obs[k] = info["final_obs"][k]
                reset_obs = obs  # the env already reset those
            infos = [self._vector_info(info, i) for i in range(n)] if self._need_infos else None
            return new_obs, np.asarray(rew), term, trunc, infos, reset_obs, bool(term.any() or trunc.any())
        obs_dtype, obs_shape = self._obs_dtype, self._obs_shape
        # Reused every step: the collector copies them in add_step, and nothing
        # else keeps them past the step (callbacks get copies).
        new_obs, rew, term, trunc = self._bufs
        if self._next_obs_rows is not None:
            staged = self._next_obs_rows(SampleBatch.OBS)
            if staged is not None:  # every env writes its new obs where add_step would copy it
                new_obs = staged
        infos = [] if self._need_infos else None
        acts = actions.tolist() if self._discrete else actions
        any_done = False
        for i, env in enumerate(self.envs):
            o, r, te, tr, info = env.step(acts[i])
            if type(o) is not np.ndarray or (o.dtype is not obs_dtype and o.dtype != obs_dtype) or o.shape != obs_shape:
                a = np.asarray(o)
                if a.shape != obs_shape or not np.can_cast(a.dtype, obs_dtype, "safe"):
                    raise self._env_obs_error(i, o)
                o = a
            new_obs[i] = o
            rew[i] = r
            term[i] = te
            trunc[i] = tr
            if te or tr:
                any_done = True
            if infos is not None:
                infos.append(info)
        return new_obs, rew, term, trunc, infos, None, any_done

    def _step(self) -> None:
        coll = self.collector
        n = self.num_envs
        actions, state_outs, extra = self.policy.compute_actions_from_input_dict(
            coll.input_dict(), explore=True, timestep=self._timestep
        )
        if type(actions) is not np.ndarray:
            actions = np.asarray(actions)
        if actions.shape[:1] != (n,):
            raise ValueError(
                f"column 'actions': compute_actions_from_input_dict must return one action per env, "
                f"expected leading dim {n}, got shape {actions.shape}"
            )
        new_obs, rew, term, trunc, infos, reset_obs, any_done = self._step_envs(actions)
        self._timestep += n
        if self._track_len:
            self._ep_len += 1
        self._ep_ret += rew
        cut = (term | trunc) if any_done else None
        soft = None
        if self.horizon is not None:
            if cut is None:
                cut = self._false
            hit = (self._ep_len >= self.horizon) & ~cut
            if hit.any():
                if self.soft_horizon:
                    soft = hit
                else:
                    trunc = trunc | hit
                    cut = cut | hit
        if self.no_done_at_end:
            term_s = trunc_s = self._false
        else:
            term_s, trunc_s = term, trunc
        data = {
            SampleBatch.OBS: new_obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: rew,
            SampleBatch.TERMINATEDS: term_s,
            SampleBatch.TRUNCATEDS: trunc_s,
        }
        if self._state_keys or self._extra_keys or state_outs or extra:
            self._add_policy_columns(data, state_outs, extra)
        try:
            coll.add_step(data)
        except (ValueError, TypeError) as e:
            raise type(e)(f"RolloutWorker: bad data from the env or the policy: {e}") from e

        if infos is not None:
            for eid, info in zip(coll.eps_ids().tolist(), infos):
                self._infos[eid][1].append(info)
        hooks = self._hooks
        if hooks:
            for i in range(n):
                ep = cast(Episode, self._episodes[i])  # every slot has a running episode
                ep.length = int(self._ep_len[i])
                ep.total_reward = float(self._ep_ret[i])
                ep._last_action = actions[i].copy()
                ep._last_reward = float(rew[i])
                ep._last_obs = new_obs[i].copy()
                if infos is not None:
                    ep._last_info = infos[i]
                if "on_episode_step" in hooks:
                    self.callbacks.on_episode_step(
                        worker=self, base_env=self.base_env, policies=self.policy_map, episode=ep, env_index=i
                    )
        if soft is not None or (cut is not None and cut.any()):
            self._end_and_restart(self._false if cut is None else cut, soft, new_obs, reset_obs)

    def _add_policy_columns(self, data: dict, state_outs: list, extra: dict) -> None:
        if len(state_outs) != len(self._state_keys):
            raise ValueError(
                f"compute_actions_from_input_dict returned {len(state_outs)} state_outs, expected "
                f"{len(self._state_keys)} (len(get_initial_state()))"
            )
        for k, s in zip(self._state_keys, state_outs):
            data[k] = s
        for k in self._extra_keys:
            if k not in extra:
                raise ValueError(
                    f"column {k!r}: compute_actions_from_input_dict returned it in extra_fetches during the "
                    f"view-pruning pass, but not now; got extra fetches {sorted(extra)}"
                )
            data[k] = extra[k]
        if len(extra) != len(self._extra_keys):
            unknown = sorted(set(extra) - set(self._extra_keys))
            raise ValueError(
                f"compute_actions_from_input_dict returned extra fetches {unknown} that it did not return in the "
                f"view-pruning pass; known: {sorted(self._extra_keys)}"
            )

    def _end_and_restart(self, cut: np.ndarray, soft: np.ndarray | None, new_obs: np.ndarray, reset_obs: Any) -> None:
        """Ends the episodes in `cut` (env reset) and `soft` (soft horizon: no reset), and begins new ones."""
        ends = np.flatnonzero(cut | soft) if soft is not None else np.flatnonzero(cut)
        if not self._track_len:
            self._ep_len[ends] = self.collector.episode_lengths()[ends]
        self.collector.end_episodes(ends)
        for i in ends:
            ep = cast(Episode, self._episodes[i])
            ep.length = int(self._ep_len[i])
            ep.total_reward = float(self._ep_ret[i])
            self._episode_returns.append(ep.total_reward)
            self._episode_lengths.append(ep.length)
            self._ended[ep.episode_id] = ep
            self._episodes[i] = None
            if "on_episode_end" in self._hooks:
                self.callbacks.on_episode_end(
                    worker=self, base_env=self.base_env, policies=self.policy_map, episode=ep, env_index=int(i)
                )
        resets = np.flatnonzero(cut)
        obs = np.empty((len(ends),) + new_obs.shape[1:], dtype=new_obs.dtype)
        infos: list = [{} for _ in ends]
        pos = {int(i): j for j, i in enumerate(ends)}
        if len(resets):
            if self.vector_env is not None:
                if reset_obs is not None:  # SAME_STEP: the env already reset them
                    r_obs = reset_obs
                else:
                    mask = np.zeros(self.num_envs, dtype=bool)
                    mask[resets] = True
                    r_obs, r_info = self.vector_env.reset(options={"reset_mask": mask})
                    for i in resets:
                        infos[pos[int(i)]] = self._vector_info(r_info, int(i))
                for i in resets:
                    obs[pos[int(i)]] = r_obs[i]
            else:
                for i in resets:
                    o, info = self.envs[i].reset()
                    obs[pos[int(i)]] = o
                    infos[pos[int(i)]] = info
        if soft is not None:
            for i in np.flatnonzero(soft):
                obs[pos[int(i)]] = new_obs[i]
        self._begin(ends, obs, infos)

    def _emit(self, complete: bool) -> SampleBatch:
        policy = self.policy
        post = getattr(policy.postprocess_trajectory, "__func__", None)
        if post is Policy.postprocess_trajectory and not self._need_infos and "on_postprocess_trajectory" not in self._hooks:
            # Nothing to run per episode: the batch is the store's flat batch as it is (no split, no concat).
            batch = self.collector.build_flat_batch(complete_only=complete)
            for s in self.collector.last_segments:
                if s["finished"]:
                    self._ended.pop(int(s["eps_id"]), None)
            if not len(batch):
                batch = SampleBatch()
            if "on_sample_end" in self._hooks:
                self.callbacks.on_sample_end(worker=self, samples=batch)
            return batch
        segments = self.collector.build_batch(complete_only=complete)
        out = []
        for seg in segments:
            eid = int(seg[SampleBatch.EPS_ID][0])
            ep = self._ended.get(eid)
            if ep is None:
                ep = next(e for e in self._episodes if e is not None and e.episode_id == eid)
            if self._need_infos:
                start, infos = self._infos[eid]
                t0 = int(seg[SampleBatch.T][0])
                arr = np.empty(len(seg), dtype=object)
                arr[:] = infos[t0 - start : t0 - start + len(seg)]
                seg[SampleBatch.INFOS] = arr
                self._infos[eid] = (t0 + len(seg), infos[t0 - start + len(seg) :])
            post = policy.postprocess_trajectory(seg, None, ep)
            if not isinstance(post, SampleBatch):
                raise TypeError(
                    f"{type(policy).__name__}.postprocess_trajectory must return a SampleBatch, got {type(post).__name__}"
                )
            if "on_postprocess_trajectory" in self._hooks:
                self.callbacks.on_postprocess_trajectory(
                    worker=self,
                    episode=ep,
                    agent_id=0,
                    policy_id=DEFAULT_POLICY_ID,
                    policies=self.policy_map,
                    postprocessed_batch=post,
                    original_batches={0: (policy, seg)},
                )
            out.append(post)
            if eid in self._ended:
                del self._ended[eid]
                self._infos.pop(eid, None)
        batch = concat_samples(out) if out else SampleBatch()
        if "on_sample_end" in self._hooks:
            self.callbacks.on_sample_end(worker=self, samples=batch)
        return batch

    # -- misc -------------------------------------------------------------------

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        return self.policy_map[policy_id]

    def stop(self) -> None:
        """Closes the envs."""
        if self.vector_env is not None:
            self.vector_env.close()
        for env in self.envs:
            env.close()
