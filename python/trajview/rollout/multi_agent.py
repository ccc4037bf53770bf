"""`MultiAgentSampler`: multi-agent envs (a `MultiAgentEnvAdapter`), every agent mapped to a policy, a collector per policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..collect.collector import Collector
from ..envs.base import MultiAgentEnvAdapter
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from .callbacks import Episode
from .config import RolloutConfig
from .emit import InfoLog, postprocess_segment
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import PolicyColumns, make_collector

__all__ = ["MultiAgentSampler"]


class _AgentEpisode:
    """One agent's part of one env episode: its own trajectory, with its own eps_id in the store."""

    __slots__ = ("episode", "agent_id", "agent_index", "env_index", "policy_id", "slot", "infos")

    def __init__(self, episode: Episode, agent_id: Any, agent_index: int, env_index: int, policy_id: str, slot: int):
        self.episode = episode
        self.agent_id = agent_id
        self.agent_index = agent_index
        self.env_index = env_index
        self.policy_id = policy_id
        self.slot = slot
        self.infos = InfoLog()  # the agent's info after each step not emitted yet (if its policy trains on infos)


class MultiAgentSampler:
    """Steps ``adapter.num_envs`` multi-agent envs; every agent maps to a policy, every policy has its own store.

    Slot ``env_index * len(possible_agents) + agent_index`` of a policy's
    collector holds that agent's running trajectory in that env. Each agent's
    part of an env episode is one trajectory with its own ``eps_id``; batches
    also carry ``agent_index`` and ``env_id`` (the env's index).
    """

    def __init__(
        self,
        adapter: MultiAgentEnvAdapter,
        policies: dict[str, Policy],
        mapping_fn: Callable,
        config: RolloutConfig,
        hooks: Hooks,
        metrics: EpisodeMetrics,
    ) -> None:
        self.adapter = adapter
        self.num_envs = adapter.num_envs
        self.agents = list(adapter.possible_agents)
        self.agent_index = {a: k for k, a in enumerate(self.agents)}
        self.n_agents = len(self.agents)
        self.policies = policies
        self.mapping_fn = mapping_fn
        self.config = config
        self.hooks = hooks
        self.metrics = metrics
        self.collectors: dict[str, Collector] = {}
        self.columns: dict[str, PolicyColumns] = {}
        self.live: list[dict[Any, _AgentEpisode]] = [{} for _ in range(self.num_envs)]
        # Every env's running episode; build() fills it.
        self.episodes: list[Episode] = cast("list[Episode]", [None] * self.num_envs)
        self.by_eps: dict[tuple[str, int], _AgentEpisode] = {}
        self.env_ep_counter = 0
        self.held = 0  # agent steps held back from the last sample
        self._timestep = 0

    def build(self, rebuild: int) -> None:
        """New stores for the policies' current views; every env resets (seeded on the first build only)."""
        n_slots = self.num_envs * self.n_agents
        self.collectors = {
            pid: make_collector(p, n_slots, self.config, rebuild, k) for k, (pid, p) in enumerate(self.policies.items())
        }
        self.columns = {pid: PolicyColumns(p) for pid, p in self.policies.items()}
        self.by_eps = {}
        self.held = 0
        seed = self.config.seed
        for i in range(self.num_envs):
            self._reset_env(i, None if seed is None or rebuild else seed + i)

    # -- episodes -----------------------------------------------------------------

    def _policy_for(self, agent: Any, episode: Episode) -> str:
        pid = self.mapping_fn(agent, episode)
        if pid not in self.policies:
            raise ValueError(f"policy_mapping_fn({agent!r}, episode) returned {pid!r}, not one of {sorted(self.policies)}")
        return pid

    def _new_episode(self, i: int, infos: Any) -> Episode:
        ep = Episode(self.config.worker_index << 40 | self.env_ep_counter, i, None, infos)
        ep.user_data["agent_rewards"] = {}
        self.env_ep_counter += 1
        self.episodes[i] = ep
        return ep

    def _begin_agents(self, i: int, obs: dict, infos: dict) -> None:
        ep = self.episodes[i]
        by_pid: dict[str, list] = {}
        for agent, o in obs.items():
            if agent in self.live[i]:
                continue
            if agent not in self.agent_index:
                raise ValueError(f"env {i} returned agent {agent!r}, which is not in possible_agents {self.agents}")
            pid = self._policy_for(agent, ep)
            by_pid.setdefault(pid, []).append((agent, o))
        for pid, items in by_pid.items():
            slots = np.array([i * self.n_agents + self.agent_index[a] for a, _ in items], dtype=np.int64)
            try:
                obs_arr = np.stack([np.asarray(o) for _, o in items])
                eps = self.collectors[pid].begin_episodes(slots, {SampleBatch.OBS: obs_arr})
            except (ValueError, TypeError) as e:
                raise type(e)(f"RolloutWorker: env {i}'s observation for policy {pid!r} does not fit: {e}") from e
            for (agent, _), slot, eid in zip(items, slots, eps):
                ae = _AgentEpisode(ep, agent, self.agent_index[agent], i, pid, int(slot))
                self.live[i][agent] = ae
                self.by_eps[(pid, int(eid))] = ae

    def _reset_env(self, i: int, seed: int | None = None) -> None:
        obs, infos = self.adapter.reset(i, seed=seed)
        ep = self._new_episode(i, infos)
        self.live[i] = {}
        self._begin_agents(i, obs, infos)
        self.hooks.episode_start(ep, i)

    def _end_env_episode(self, i: int) -> None:
        ep = self.episodes[i]
        by_pid: dict[str, list[int]] = {}
        for ae in self.live[i].values():
            by_pid.setdefault(ae.policy_id, []).append(ae.slot)
        for pid, slots in by_pid.items():  # agents still running when the env episode is cut
            self.collectors[pid].end_episodes(np.array(slots, dtype=np.int64))
        self.live[i] = {}
        self.metrics.record(ep.total_reward, ep.length)
        self.hooks.episode_end(ep, i)

    def _soft_restart(self, i: int, obs: dict, te: dict, tr: dict, infos: dict) -> None:
        """Soft horizon: a new logical episode, no env reset, no done flags."""
        self._end_env_episode(i)
        ep = self._new_episode(i, infos)
        alive = {a: o for a, o in obs.items() if not te.get(a) and not tr.get(a)}
        if alive:
            self._begin_agents(i, alive, infos)
            self.hooks.episode_start(ep, i)
        else:
            self._reset_env(i)

    # -- stepping -----------------------------------------------------------------

    def _step(self) -> tuple[int, list[tuple[str, int]]]:
        """One step of every env. Returns (agent steps, [(policy, slot)] of agents that acted and run on)."""
        cfg = self.config
        groups: dict[str, list[_AgentEpisode]] = {}
        for i in range(self.num_envs):
            for ae in self.live[i].values():
                groups.setdefault(ae.policy_id, []).append(ae)
        actions_by_env: list[dict] = [{} for _ in range(self.num_envs)]
        outputs = {}
        for pid, aes in groups.items():
            slots = np.array([ae.slot for ae in aes], dtype=np.int64)
            policy = self.policies[pid]
            acts, states, extra = policy.compute_actions_from_input_dict(
                self.collectors[pid].input_dict(slots), explore=True, timestep=self._timestep
            )
            acts = np.asarray(acts)
            if acts.shape[:1] != (len(aes),):
                raise ValueError(
                    f"column 'actions': policy {pid!r} must return one action per agent, expected leading dim "
                    f"{len(aes)}, got shape {acts.shape}"
                )
            outputs[pid] = (slots, aes, acts, states, extra)
            as_py = acts.tolist() if acts.ndim == 1 else list(acts)
            for ae, a in zip(aes, as_py):
                actions_by_env[ae.env_index][ae.agent_id] = a
        results = self.adapter.step(actions_by_env)
        self._timestep += self.num_envs
        horizon_hit = [False] * self.num_envs
        for i in range(self.num_envs):
            ep = self.episodes[i]
            ep.length += 1
            if cfg.horizon is not None and ep.length >= cfg.horizon:
                horizon_hit[i] = True

        agent_steps = 0
        running: list[tuple[str, int]] = []
        for pid, (slots, aes, acts, states, extra) in outputs.items():
            n = len(aes)
            new_obs, rew = [], np.empty(n, np.float64)
            term, trunc = np.empty(n, bool), np.empty(n, bool)
            columns = self.columns[pid]
            for j, ae in enumerate(aes):
                obs, r, te, tr, info = results[ae.env_index]
                if columns.need_infos:
                    ae.infos.infos.append(info.get(ae.agent_id, {}) if isinstance(info, dict) else {})
                if ae.agent_id not in obs:
                    raise ValueError(
                        f"env {ae.env_index}: agent {ae.agent_id!r} acted but the env returned no observation for it"
                    )
                new_obs.append(np.asarray(obs[ae.agent_id]))
                rew[j] = r.get(ae.agent_id, 0.0)
                term[j] = bool(te.get(ae.agent_id, False))
                trunc[j] = bool(tr.get(ae.agent_id, False))
                if horizon_hit[ae.env_index] and not cfg.soft_horizon and not term[j]:
                    trunc[j] = True
                ep = ae.episode
                ep.total_reward += float(rew[j])
                key = (ae.agent_id, pid)
                ep.user_data["agent_rewards"][key] = ep.user_data["agent_rewards"].get(key, 0.0) + float(rew[j])
            zeros = np.zeros(n, bool)
            data = {
                SampleBatch.OBS: np.stack(new_obs),
                SampleBatch.ACTIONS: acts,
                SampleBatch.REWARDS: rew,
                SampleBatch.TERMINATEDS: zeros if cfg.no_done_at_end else term,
                SampleBatch.TRUNCATEDS: zeros if cfg.no_done_at_end else trunc,
            }
            if columns or states or extra:
                columns.add_to(data, states, extra)
            try:
                self.collectors[pid].add_step(data, env_ids=slots)
            except (ValueError, TypeError) as e:
                raise type(e)(f"RolloutWorker: bad data from the env or policy {pid!r}: {e}") from e
            agent_steps += n
            done = np.flatnonzero(term | trunc)
            if len(done):
                self.collectors[pid].end_episodes(slots[done])
                for d in done:
                    del self.live[aes[d].env_index][aes[d].agent_id]
            for d in np.flatnonzero(~(term | trunc)):
                running.append((pid, int(slots[d])))

        for i, (obs, _r, te, tr, infos) in enumerate(results):
            self.hooks.episode_step(self.episodes[i], i)
            # Agents that appear without having acted start their own trajectories.
            new = {a: o for a, o in obs.items() if a not in self.live[i] and not te.get(a) and not tr.get(a)}
            if horizon_hit[i] and cfg.soft_horizon:
                self._soft_restart(i, obs, te, tr, infos)
            elif horizon_hit[i] or (not self.live[i] and not new):
                self._end_env_episode(i)
                self._reset_env(i)
            elif new:
                self._begin_agents(i, new, infos)
        return agent_steps, running

    # -- batches ----------------------------------------------------------------

    def sample(self) -> MultiAgentBatch:
        cfg = self.config
        target = cfg.rollout_fragment_length * self.num_envs
        by_agent = cfg.count_steps_by == "agent_steps"
        complete = cfg.complete_episodes
        env_steps = 0
        agent_steps = self.held if by_agent and not complete else 0
        running: list[tuple[str, int]] = []
        while True:
            n_agent, running = self._step()
            env_steps += self.num_envs
            agent_steps += n_agent
            if complete:
                done_steps = sum(c.num_complete_steps() for c in self.collectors.values())
                if (by_agent and done_steps >= target) or (not by_agent and done_steps and env_steps >= target):
                    break
            elif (agent_steps if by_agent else env_steps) >= target:
                break
        holds = {pid: np.zeros(c.num_envs, np.int64) for pid, c in self.collectors.items()}
        self.held = 0
        if by_agent and not complete:
            surplus = agent_steps - target
            for pid, slot in running[:surplus]:
                holds[pid][slot] = 1
            self.held = min(surplus, len(running))
        per_policy = {
            pid: coll.build_batch(complete_only=complete, hold=holds[pid]) for pid, coll in self.collectors.items()
        }
        policy_batches = {}
        for pid, segments in per_policy.items():
            out = []
            for seg in segments:
                ae = self.by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
                n = len(seg)
                if self.columns[pid].need_infos:
                    ae.infos.attach(seg)  # the agent's infos of these steps (its entry of the env's info dict)
                seg[SampleBatch.ENV_ID] = np.full(n, ae.env_index, np.int64)
                seg[SampleBatch.AGENT_INDEX] = np.full(n, ae.agent_index, np.int64)
                others = {
                    o.agent_id: (self.policies[o.policy_id], s)
                    for p2, segs2 in per_policy.items()
                    for s in segs2
                    for o in [self.by_eps[(p2, int(s[SampleBatch.EPS_ID][0]))]]
                    if o.episode is ae.episode and o.agent_id != ae.agent_id
                }
                out.append(postprocess_segment(self.policies[pid], seg, others, ae.episode, self.hooks, ae.agent_id, pid))
            if out:
                policy_batches[pid] = concat_samples(out)
        # Forget agent episodes that are finished and fully emitted.
        live_eps = {(pid, int(e)) for pid, c in self.collectors.items() for e in c.eps_ids() if e >= 0}
        self.by_eps = {key: ae for key, ae in self.by_eps.items() if key in live_eps}
        batch = MultiAgentBatch(policy_batches, env_steps)
        self.hooks.sample_end(batch)
        return batch
