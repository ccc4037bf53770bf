"""`SingleAgentSampler`: the vectorized single-agent step loop (the fast path) over a `VectorEnvAdapter`."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..collect.collector import Collector
from ..envs.base import VectorEnvAdapter, obs_spec
from ..policy.policy import Policy
from ..views import SampleBatch, concat_samples
from .callbacks import Episode
from .config import RolloutConfig
from .emit import InfoLog, postprocess_segment
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import PolicyColumns, make_collector

__all__ = ["DEFAULT_POLICY_ID", "SingleAgentSampler"]

DEFAULT_POLICY_ID = "default_policy"

#: Observation rows of at least this many bytes are written by the envs straight into the store.
STAGE_OBS_BYTES = 1024


class SingleAgentSampler:
    """Steps ``adapter.num_envs`` envs with one policy; slot ``i`` of the collector is env ``i``.

    Each step: the policy's compute-actions views for every env (one C++
    call), one adapter step, one ``add_step`` of every column; episodes that
    ended are closed in the store and their envs reset. ``sample()`` then cuts
    the batch (RLlib's batch modes) and postprocesses it per episode segment.
    """

    def __init__(
        self, adapter: VectorEnvAdapter, policy: Policy, config: RolloutConfig, hooks: Hooks, metrics: EpisodeMetrics
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.config = config
        self.hooks = hooks
        self.metrics = metrics
        n = self.num_envs = adapter.num_envs
        self._false = np.zeros(n, dtype=bool)
        # Per-slot episode lengths in Python only when the horizon or callbacks need them each step.
        self._track_len = config.horizon is not None or bool(hooks.active & {"on_episode_step", "on_episode_end"})
        # Built by build(), before any use.
        self.collector: Collector = cast(Collector, None)
        self._columns: PolicyColumns = cast(PolicyColumns, None)
        self._next_obs_rows: Any = None
        self._episodes: list[Episode | None] = [None] * n
        self._ended: dict[int, Episode] = {}
        self._infos: dict[int, InfoLog] = {}
        self._ep_len = np.zeros(n, dtype=np.int64)
        self._ep_ret = np.zeros(n, dtype=np.float64)
        self._timestep = 0

    # -- set-up -------------------------------------------------------------------

    def build(self, rebuild: int) -> None:
        """A new store for the policy's current views; every env resets (seeded on the first build only)."""
        policy = self.policy
        self.collector = make_collector(policy, self.num_envs, self.config, rebuild)
        self._columns = PolicyColumns(policy)
        # Big observations (images) go from env.step straight into the store's next rows: no copy in add_step.
        # Only for adapters that write observations in place, and when the stored column is the env's observation.
        spec = self.collector.columns.get(SampleBatch.OBS)
        big = False
        if spec is not None and self.adapter.writes_obs_in_place and spec == obs_spec(self.adapter.observation_space):
            big = spec[0].itemsize * int(np.prod(spec[1], dtype=np.int64)) >= STAGE_OBS_BYTES
        self._next_obs_rows = self.collector.staged_rows if big else None
        self._episodes = [None] * self.num_envs
        self._ended = {}
        self._infos = {}
        seed = self.config.seed if rebuild == 0 else None
        obs, infos = self.adapter.reset(seed=seed)
        self._begin(np.arange(self.num_envs), obs, infos)

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
            if self._columns.need_infos:
                self._infos[int(eid)] = InfoLog()
            self.hooks.episode_start(ep, int(i))

    # -- sampling ---------------------------------------------------------------

    def sample(self) -> SampleBatch:
        coll = self.collector
        cfg = self.config
        complete = cfg.complete_episodes
        if complete:
            target = cfg.rollout_fragment_length * self.num_envs
            while coll.num_complete_steps() < target:
                self._step()
        else:
            for _ in range(cfg.rollout_fragment_length):
                self._step()
        return self._emit(complete)

    def _step(self) -> None:
        coll = self.collector
        cfg = self.config
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
        staged = self._next_obs_rows(SampleBatch.OBS) if self._next_obs_rows is not None else None
        new_obs, rew, term, trunc, infos, any_done = self.adapter.step(actions, staged, self._columns.need_infos)
        self._timestep += n
        if self._track_len:
            self._ep_len += 1
        self._ep_ret += rew
        cut = (term | trunc) if any_done else None
        soft = None
        if cfg.horizon is not None:
            if cut is None:
                cut = self._false
            hit = (self._ep_len >= cfg.horizon) & ~cut
            if hit.any():
                if cfg.soft_horizon:
                    soft = hit
                else:
                    trunc = trunc | hit
                    cut = cut | hit
        if cfg.no_done_at_end:
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
        if self._columns or state_outs or extra:
            self._columns.add_to(data, state_outs, extra)
        try:
            coll.add_step(data)
        except (ValueError, TypeError) as e:
            raise type(e)(f"RolloutWorker: bad data from the env or the policy: {e}") from e

        if infos is not None:
            for eid, info in zip(coll.eps_ids().tolist(), infos):
                self._infos[eid].infos.append(info)
        hooks = self.hooks
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
                hooks.episode_step(ep, i)
        if soft is not None or (cut is not None and cut.any()):
            self._end_and_restart(self._false if cut is None else cut, soft, new_obs)

    def _end_and_restart(self, cut: np.ndarray, soft: np.ndarray | None, new_obs: np.ndarray) -> None:
        """Ends the episodes in `cut` (env reset) and `soft` (soft horizon: no reset), and begins new ones."""
        ends = np.flatnonzero(cut | soft) if soft is not None else np.flatnonzero(cut)
        if not self._track_len:
            self._ep_len[ends] = self.collector.episode_lengths()[ends]
        self.collector.end_episodes(ends)
        for i in ends:
            ep = cast(Episode, self._episodes[i])
            ep.length = int(self._ep_len[i])
            ep.total_reward = float(self._ep_ret[i])
            self.metrics.record(ep.total_reward, ep.length)
            self._ended[ep.episode_id] = ep
            self._episodes[i] = None
            self.hooks.episode_end(ep, int(i))
        resets = np.flatnonzero(cut)
        obs = np.empty((len(ends),) + new_obs.shape[1:], dtype=new_obs.dtype)
        infos: list = [{} for _ in ends]
        pos = {int(i): j for j, i in enumerate(ends)}
        if len(resets):
            r_obs, r_infos = self.adapter.reset_envs(resets)
            for j, i in enumerate(resets):
                obs[pos[int(i)]] = r_obs[j]
                infos[pos[int(i)]] = r_infos[j]
        if soft is not None:
            for i in np.flatnonzero(soft):
                obs[pos[int(i)]] = new_obs[i]
        self._begin(ends, obs, infos)

    def _emit(self, complete: bool) -> SampleBatch:
        policy = self.policy
        hooks = self.hooks
        need_infos = self._columns.need_infos
        post = getattr(policy.postprocess_trajectory, "__func__", None)
        if post is Policy.postprocess_trajectory and not need_infos and "on_postprocess_trajectory" not in hooks:
            # Nothing to run per episode: the batch is the store's flat batch as it is (no split, no concat).
            batch = self.collector.build_flat_batch(complete_only=complete)
            for s in self.collector.last_segments:
                if s["finished"]:
                    self._ended.pop(int(s["eps_id"]), None)
            if not len(batch):
                batch = SampleBatch()
            hooks.sample_end(batch)
            return batch
        segments = self.collector.build_batch(complete_only=complete)
        out = []
        for seg in segments:
            eid = int(seg[SampleBatch.EPS_ID][0])
            ep = self._ended.get(eid)
            if ep is None:
                ep = next(e for e in self._episodes if e is not None and e.episode_id == eid)
            if need_infos:
                self._infos[eid].attach(seg)
            out.append(postprocess_segment(policy, seg, None, ep, hooks, 0, DEFAULT_POLICY_ID))
            if eid in self._ended:
                del self._ended[eid]
                self._infos.pop(eid, None)
        batch = concat_samples(out) if out else SampleBatch()
        hooks.sample_end(batch)
        return batch
