"""`MultiAgentSampler`: multi-agent envs (a `MultiAgentEnvAdapter`), every agent mapped to a policy, a collector per policy.

Faults follow the single-agent rules (see `single_agent`): a step of the
envs stores every agent's transition or none; an env the failed step may
have moved on has its agents' trajectories cut at their last stored step
(marked truncated when emitted) and is reset before the next step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..collect.collector import Collector
from ..envs.base import MultiAgentEnvAdapter
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from ..views.nest import Nest
from .callbacks import Episode
from .config import RolloutConfig
from .emit import InfoLog, postprocess_segment
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import EPS_WORKER_BITS, PolicyColumns, eps_id_start, make_collector

__all__ = ["MultiAgentSampler"]


class _AgentEpisode:
    """One agent's part of one env episode: its own trajectory, with its own eps_id in the store."""

    __slots__ = ("episode", "agent_id", "agent_index", "env_index", "policy_id", "slot", "infos", "unemitted")

    def __init__(self, episode: Episode, agent_id: Any, agent_index: int, env_index: int, policy_id: str, slot: int):
        self.episode = episode
        self.agent_id = agent_id
        self.agent_index = agent_index
        self.env_index = env_index
        self.policy_id = policy_id
        self.slot = slot
        self.infos = InfoLog()  # the agent's info after each step not emitted yet (if its policy trains on infos)
        self.unemitted = 0  # steps stored and not emitted yet


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
        # Every env's running episode (None while the env waits for its reset); build() fills it.
        self.episodes: list[Episode | None] = [None] * self.num_envs
        self.by_eps: dict[tuple[str, int], _AgentEpisode] = {}
        self.env_ep_counter = 0
        self.held = 0  # agent steps held back from the last sample
        self._timestep = 0
        # Steps stored since the last batch (kept across a sample() that raised).
        self._env_steps = 0
        self._agent_steps = 0
        self._idle: set[int] = set(range(self.num_envs))  # envs to reset before the next step
        self._reset_seed: int | None = None
        self._cut_eps: set[tuple[str, int]] = set()
        self._pending: tuple[str, Any] | None = None
        self._starts: list[int] = []  # envs whose soft-horizon episode began in this step (on_episode_start due)
        # eps_ids: each policy its own range of this worker's; a rebuilt store continues where the last stopped.
        self._next_eps = {pid: config.eps_id_offset for pid in policies}

    def build(self, rebuild: int) -> None:
        """New stores for the policies' current views; every env resets (seeded on the first build only)."""
        n_slots = self.num_envs * self.n_agents
        w = self.config.worker_index
        self.collectors = {
            pid: make_collector(p, n_slots, self.config, eps_id_start(w, k, self._next_eps[pid]))
            for k, (pid, p) in enumerate(self.policies.items())
        }
        self.columns = {pid: PolicyColumns(p, self.config) for pid, p in self.policies.items()}
        #: Per policy, the leaves of its observation space (nested spaces: one column per leaf).
        self._obs_nest = {pid: Nest.from_space(p.observation_space, "observation_space") for pid, p in self.policies.items()}
        self.by_eps = {}
        self.held = 0
        self._env_steps = self._agent_steps = 0
        self._cut_eps = set()
        self._pending = None
        self.live = [{} for _ in range(self.num_envs)]
        self.episodes = [None] * self.num_envs
        self._idle = set(range(self.num_envs))
        self._reset_seed = self.config.seed if rebuild == 0 else None
        self._start_idle()

    # -- episodes -----------------------------------------------------------------

    def _policy_for(self, agent: Any, episode: Episode) -> str:
        pid = self.mapping_fn(agent, episode)
        if pid not in self.policies:
            raise ValueError(f"policy_mapping_fn({agent!r}, episode) returned {pid!r}, not one of {sorted(self.policies)}")
        return pid

    def _new_episode(self, i: int, infos: Any) -> Episode:
        ep = Episode(self.config.worker_index << EPS_WORKER_BITS | self.env_ep_counter, i, None, infos)
        ep.user_data["agent_rewards"] = {}
        self.env_ep_counter += 1
        self.episodes[i] = ep
        return ep

    def _begin_agents(self, i: int, obs: dict, infos: dict) -> None:
        ep = cast(Episode, self.episodes[i])
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
                obs_cols = self._obs_nest[pid].stack(SampleBatch.OBS, [o for _, o in items], f"env {i}'s observation")
                eps = self.collectors[pid].begin_episodes(slots, obs_cols)
            except (ValueError, TypeError) as e:
                raise type(e)(f"RolloutWorker: env {i}'s observation for policy {pid!r} does not fit: {e}") from e
            base = eps_id_start(self.config.worker_index, list(self.policies).index(pid))
            self._next_eps[pid] = max(self._next_eps[pid], int(eps.max()) + 1 - base)
            for (agent, _), slot, eid in zip(items, slots, eps):
                ae = _AgentEpisode(ep, agent, self.agent_index[agent], i, pid, int(slot))
                self.live[i][agent] = ae
                self.by_eps[(pid, int(eid))] = ae

    def _reset_env(self, i: int, seed: int | None = None) -> None:
        """Resets env ``i`` and starts its episode (store first, then on_episode_start)."""
        self._idle.add(i)
        obs, infos = self.adapter.reset(i, seed=seed)
        ep = self._new_episode(i, infos)
        self.live[i] = {}
        self._begin_agents(i, obs, infos)
        self._idle.discard(i)
        self.hooks.episode_start(ep, i)

    def _start_idle(self) -> None:
        seed = self._reset_seed
        for i in sorted(self._idle):
            self._reset_env(i, None if seed is None else seed + i)
        self._reset_seed = None

    def _end_agents(self, i: int, cut: bool) -> None:
        """Ends env ``i``'s running agent trajectories in the stores (``cut``: by a fault, marked truncated)."""
        by_pid: dict[str, list[int]] = {}
        for ae in self.live[i].values():
            by_pid.setdefault(ae.policy_id, []).append(ae.slot)
            if cut and ae.unemitted > 0 and not self.config.no_done_at_end:
                eid = int(self.collectors[ae.policy_id].eps_ids()[ae.slot])
                self._cut_eps.add((ae.policy_id, eid))
        for pid, slots in by_pid.items():
            self.collectors[pid].end_episodes(np.array(slots, dtype=np.int64))
        self.live[i] = {}

    def _cut(self, envs: list[int]) -> None:
        """A fault: env episodes of ``envs`` end where their agents' trajectories are; those envs reset later."""
        for i in envs:
            if i in self._idle or self.episodes[i] is None:
                continue
            self._end_agents(i, cut=True)
            self.episodes[i] = None
            self._idle.add(i)
            self.metrics.num_faulty_episodes += 1

    def _end_env_episode(self, i: int) -> Episode:
        ep = cast(Episode, self.episodes[i])
        self._end_agents(i, cut=False)
        self.metrics.record(ep.total_reward, ep.length)
        return ep

    # -- stepping -----------------------------------------------------------------

    def _step(self) -> tuple[int, list[tuple[str, int]]]:
        """One step of every env. Returns (agent steps, [(policy, slot)] of agents that acted and run on)."""
        if self._idle:
            self._start_idle()
        cfg = self.config
        groups: dict[str, list[_AgentEpisode]] = {}
        for i in range(self.num_envs):
            for ae in self.live[i].values():
                groups.setdefault(ae.policy_id, []).append(ae)
        actions_by_env: list[dict] = [{} for _ in range(self.num_envs)]
        outputs = {}
        for pid, aes in groups.items():
            slots = np.array([ae.slot for ae in aes], dtype=np.int64)
            inputs = self.collectors[pid].input_dict(slots)
            if SampleBatch.ENV_ID in inputs:  # the env's index, as in the batch (the store knows only slots)
                inputs[SampleBatch.ENV_ID] = slots // self.n_agents
            acts, states, extra = self.policies[pid].compute_actions_from_input_dict(
                inputs, explore=True, timestep=self._timestep
            )
            try:  # checked before any env steps: a bad policy output changes nothing
                data = self.columns[pid].check_outputs(acts, states, extra, len(aes))
            except ValueError as e:
                raise ValueError(f"policy {pid!r}: {e}") from e
            outputs[pid] = (slots, aes, data)
            act_nest = self.columns[pid].action_nest
            if act_nest.flat:
                acts = data[SampleBatch.ACTIONS]
                as_py = acts.tolist() if acts.ndim == 1 else list(acts)
            else:  # each agent's action in the space's structure
                as_py = act_nest.split_rows(data, SampleBatch.ACTIONS, len(aes))
            for ae, a in zip(aes, as_py):
                actions_by_env[ae.env_index][ae.agent_id] = a
        try:
            results = self.adapter.step(actions_by_env)
        except BaseException:
            self._cut(self.adapter.moved_on())
            raise
        try:
            per_policy = self._step_data(outputs, results)
        except BaseException:
            self._cut(list(range(self.num_envs)))  # every env moved on; none of their steps is stored
            raise
        for pid, (slots, data, _done) in per_policy.items():
            try:
                self.collectors[pid].add_step(data, env_ids=slots)
            except BaseException as e:
                self._cut(list(range(self.num_envs)))
                if isinstance(e, (ValueError, TypeError)):
                    raise type(e)(f"RolloutWorker: bad data from the env or policy {pid!r}: {e}") from e
                raise

        # Stored: commit the Python side, end what ended, then the hooks.
        self._timestep += self.num_envs
        agent_steps = 0
        running: list[tuple[str, int]] = []
        for pid, (slots, aes, _data) in outputs.items():
            done = per_policy[pid][2]
            agent_steps += len(aes)
            for ae in aes:
                ae.unemitted += 1
            if done.any():
                self.collectors[pid].end_episodes(slots[done])
                for k in np.flatnonzero(done).tolist():
                    del self.live[aes[k].env_index][aes[k].agent_id]
            for k in np.flatnonzero(~done).tolist():
                running.append((pid, int(slots[k])))
        ended: list[Episode] = []
        error: BaseException | None = None
        stepped = list(self.episodes)
        for i, (obs, _r, te, tr, infos) in enumerate(results):
            ep = cast(Episode, self.episodes[i])
            # Agents that appear without having acted start their own trajectories.
            new = {a: o for a, o in obs.items() if a not in self.live[i] and not te.get(a) and not tr.get(a)}
            horizon_hit = cfg.horizon is not None and ep.length >= cfg.horizon
            try:
                if horizon_hit and cfg.soft_horizon:
                    ended.append(self._end_env_episode(i))
                    alive = {a: o for a, o in obs.items() if not te.get(a) and not tr.get(a)}
                    if alive:
                        self._new_episode(i, infos)
                        self._begin_agents(i, alive, infos)
                        self._pending_start(i)
                    else:
                        self._reset_later(i)
                elif horizon_hit or (not self.live[i] and not new):
                    ended.append(self._end_env_episode(i))
                    self._reset_later(i)
                elif new:
                    self._begin_agents(i, new, infos)
            except Exception as e:
                self._cut([i])
                error = error or e
        for i, stepped_ep in enumerate(stepped):
            if stepped_ep is not None:
                self.hooks.episode_step(stepped_ep, i)
        for ep in ended:
            self.hooks.episode_end(ep, ep.env_id)
        starts, self._starts = self._starts, []
        for i in starts:
            if self.episodes[i] is not None:
                self.hooks.episode_start(cast(Episode, self.episodes[i]), i)
        if error is not None:
            raise error
        # Envs whose episode ended reset now (their on_episode_start follows their reset).
        if self._idle:
            self._start_idle()
        return agent_steps, running

    def _reset_later(self, i: int) -> None:
        self.episodes[i] = None
        self._idle.add(i)

    def _pending_start(self, i: int) -> None:
        self._starts.append(i)

    def _step_data(self, outputs: dict, results: list) -> dict:
        """Per policy: (slots, the step's columns, done mask), every value checked; nothing stored yet."""
        cfg = self.config
        for ep in self.episodes:
            if ep is not None:
                ep.length += 1
        out = {}
        for pid, (slots, aes, data) in outputs.items():
            n = len(aes)
            new_obs, rew = [], np.empty(n, np.float64)
            term, trunc = np.empty(n, bool), np.empty(n, bool)
            columns = self.columns[pid]
            for j, ae in enumerate(aes):
                obs, r, te, tr, info = results[ae.env_index]
                if ae.agent_id not in obs:
                    raise ValueError(
                        f"env {ae.env_index}: agent {ae.agent_id!r} acted but the env returned no observation for it"
                    )
                new_obs.append(obs[ae.agent_id])
                rew[j] = r.get(ae.agent_id, 0.0)
                term[j] = bool(te.get(ae.agent_id, False))
                trunc[j] = bool(tr.get(ae.agent_id, False))
                ep = cast(Episode, self.episodes[ae.env_index])
                if cfg.horizon is not None and ep.length >= cfg.horizon and not cfg.soft_horizon and not term[j]:
                    trunc[j] = True
            try:
                obs_cols = self._obs_nest[pid].stack(SampleBatch.OBS, new_obs, "an agent's observation")
            except ValueError as e:
                raise ValueError(f"column 'obs': policy {pid!r}'s agents returned observations that do not fit: {e}") from e
            zeros = np.zeros(n, bool)
            data = dict(data)
            data.update(obs_cols)
            data[SampleBatch.REWARDS] = rew
            data[SampleBatch.TERMINATEDS] = zeros if cfg.no_done_at_end else term
            data[SampleBatch.TRUNCATEDS] = zeros if cfg.no_done_at_end else trunc
            out[pid] = (slots, data, term | trunc)
            # Nothing below can fail: the episode's Python side follows the stored step.
            for j, ae in enumerate(aes):
                obs, r, te, tr, info = results[ae.env_index]
                if columns.need_infos:
                    ae.infos.infos.append(info.get(ae.agent_id, {}) if isinstance(info, dict) else {})
                ep = ae.episode
                ep.total_reward += float(rew[j])
                key = (ae.agent_id, pid)
                ep.user_data["agent_rewards"][key] = ep.user_data["agent_rewards"].get(key, 0.0) + float(rew[j])
        return out

    # -- batches ----------------------------------------------------------------

    def sample(self) -> MultiAgentBatch:
        if self._pending is not None:
            return self._finish_emit()
        cfg = self.config
        target = cfg.rollout_fragment_length * self.num_envs
        by_agent = cfg.count_steps_by == "agent_steps"
        complete = cfg.complete_episodes
        running: list[tuple[str, int]] = []
        if not complete and by_agent and self.held:
            self._agent_steps += self.held
            self.held = 0
        while True:
            if complete:
                done_steps = sum(c.num_complete_steps() for c in self.collectors.values())
                if done_steps and ((by_agent and done_steps >= target) or (not by_agent and self._env_steps >= target)):
                    break
            elif (self._agent_steps if by_agent else self._env_steps) >= target:
                break
            n_agent, running = self._step()
            self._env_steps += self.num_envs
            self._agent_steps += n_agent
        holds = {pid: np.zeros(c.num_envs, np.int64) for pid, c in self.collectors.items()}
        if by_agent and not complete:
            surplus = self._agent_steps - target
            for pid, slot in running[:surplus]:
                holds[pid][slot] = 1
            self.held = min(surplus, len(running))
        env_steps = self._env_steps
        per_policy = {
            pid: coll.build_batch(complete_only=complete, hold=holds[pid]) for pid, coll in self.collectors.items()
        }
        self._env_steps = self._agent_steps = 0
        for pid, segments in per_policy.items():
            for seg in segments:
                key = (pid, int(seg[SampleBatch.EPS_ID][0]))
                ae = self.by_eps[key]
                n = len(seg)
                ae.unemitted = int(holds[pid][ae.slot]) if self._is_live(ae) else 0
                if self.columns[pid].need_infos:
                    ae.infos.attach(seg)  # the agent's infos of these steps (its entry of the env's info dict)
                seg[SampleBatch.ENV_ID] = np.full(n, ae.env_index, np.int64)
                seg[SampleBatch.AGENT_INDEX] = np.full(n, ae.agent_index, np.int64)
                if key in self._cut_eps and not self._is_live(ae):
                    self._cut_eps.discard(key)
                    seg[SampleBatch.TRUNCATEDS][-1] = True
        self._pending = ("segments", (per_policy, env_steps))
        return self._finish_emit()

    def _is_live(self, ae: _AgentEpisode) -> bool:
        return self.live[ae.env_index].get(ae.agent_id) is ae

    def _finish_emit(self) -> MultiAgentBatch:
        kind, value = cast("tuple[str, Any]", self._pending)
        if kind == "segments":
            per_policy, env_steps = value
            policy_batches = {}
            for pid, segments in per_policy.items():
                out = []
                for seg in segments:
                    ae = self.by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
                    others = {
                        o.agent_id: (self.policies[o.policy_id], s)
                        for p2, segs2 in per_policy.items()
                        for s in segs2
                        for o in [self.by_eps[(p2, int(s[SampleBatch.EPS_ID][0]))]]
                        if o.episode is ae.episode and o.agent_id != ae.agent_id
                    }
                    out.append(
                        postprocess_segment(self.policies[pid], seg, others, ae.episode, self.hooks, ae.agent_id, pid)
                    )
                if out:
                    policy_batches[pid] = concat_samples(out)
            # Forget agent episodes that are finished and fully emitted.
            live_eps = {(pid, int(e)) for pid, c in self.collectors.items() for e in c.eps_ids() if e >= 0}
            self.by_eps = {key: ae for key, ae in self.by_eps.items() if key in live_eps}
            self._pending = ("batch", MultiAgentBatch(policy_batches, env_steps))
        batch = cast(MultiAgentBatch, cast("tuple[str, Any]", self._pending)[1])
        self.hooks.sample_end(batch)
        self._pending = None
        return batch
