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
from ..errors import NonFiniteObservationError
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from ..views.nest import Nest
from .callbacks import Episode
from .config import RolloutConfig
from .emit import InfoLog, add_python_columns, cast_rewards, postprocess_segment
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import EPS_WORKER_BITS, SEQ_TWIN_PREFIX, PolicyColumns, eps_id_start, make_collector

__all__ = ["MultiAgentSampler"]


class _AgentEpisode:
    """One agent's part of one env episode: its own trajectory, with its own eps_id in the store.

    Turn-based envs: an agent acts only when it has an observation and no
    step pending. Its step (action and policy outputs, in ``pending``) is
    stored when the env next gives it an observation or ends it; rewards
    given to it in between add up on that step (``reward_acc``), as RLlib does.
    """

    __slots__ = (
        "episode",
        "agent_id",
        "agent_index",
        "env_index",
        "policy_id",
        "slot",
        "infos",
        "unemitted",
        "pending",
        "reward_acc",
        "last_obs",
        "last_action",
        "last_reward",
        "last_info",
        "total_reward",
    )

    def __init__(self, episode: Episode, agent_id: Any, agent_index: int, env_index: int, policy_id: str, slot: int):
        self.episode = episode
        self.agent_id = agent_id
        self.agent_index = agent_index
        self.env_index = env_index
        self.policy_id = policy_id
        self.slot = slot
        self.infos = InfoLog()  # the agent's info after each step not emitted yet (if its policy trains on infos)
        self.unemitted = 0  # steps stored and not emitted yet
        #: Its policy outputs of a step not stored yet (waiting for its next obs): (columns, row, action).
        self.pending: Any = None
        self.reward_acc = 0.0  # rewards given to it since it acted
        self.last_obs: Any = None  # its newest observation (Episode.last_observation_for)
        self.last_action: Any = None
        self.last_reward: float | None = None  # its last step's reward (the sum since it acted before)
        self.last_info: Any = None
        self.total_reward = 0.0


ALL = "__all__"
_NO_FLAG = {ALL: False}  # a terminateds / truncateds dict that ends nothing


def _split_last(seg: SampleBatch) -> tuple[SampleBatch | None, SampleBatch]:
    """``seg`` without its last row (None if that was all), and its last row (the agent-step hold-back's carry).

    With sequences (``seq_lens``) whose last one is longer than a row, that row first becomes a sequence of
    its own, its per-sequence rows (``state_in_i``) the per-step twins' values at that row (`SEQ_TWIN_PREFIX`,
    stored for this by `make_collector`): the state after the trajectory's previous step.
    """
    n = len(seg)
    seq_lens = dict.get(seg, SampleBatch.SEQ_LENS)
    if seq_lens is not None and int(seq_lens[-1]) > 1:
        cols = dict(dict.items(seg))
        for k in seg._seq_keys:
            v = cols[k]
            if k == SampleBatch.SEQ_LENS:
                cols[k] = np.concatenate([v[:-1], np.array([v[-1] - 1, 1], dtype=v.dtype)])
            else:
                cols[k] = np.concatenate([v, np.asarray(seg[SEQ_TWIN_PREFIX + k])[n - 1 : n]])
        split = SampleBatch._from_columns(cols, n, seg._seq_keys, seg._extra_seq_keys)
        split._pruned = seg._pruned
        split.view_columns = seg.view_columns
        seg = split
    return (seg[: n - 1] if n > 1 else None), seg[n - 1 :]


def _mark_finished(completions: dict[str, list[tuple]], aes: set) -> None:
    """This step's completions of the agents ``aes`` become steps that end their trajectory (for the
    agent-step hold-back, `MultiAgentSampler._running`: carried, not held in the store, whose slot starts a new
    trajectory). For trajectories ended without a done flag (a soft horizon)."""
    for comps in completions.values():
        for k, c in enumerate(comps):
            if c[0] in aes and not c[7]:
                comps[k] = (*c[:7], True)


def _drop_twins(seg: SampleBatch) -> SampleBatch:
    """``seg`` without the per-step twins of its per-sequence views (`SEQ_TWIN_PREFIX`), in place."""
    for k in [k for k in dict.keys(seg) if k.startswith(SEQ_TWIN_PREFIX)]:
        del seg[k]
    return seg


def _row_of(src: tuple) -> dict:
    """An agent's policy outputs as a row dict (``src``: its pending (columns, row, action))."""
    data, j, _action = src
    return {k: v[j] for k, v in data.items()}


class MultiAgentSampler:
    """Steps ``adapter.num_envs`` multi-agent envs; every agent maps to a policy, every policy has its own store.

    Slot ``env_index * len(possible_agents) + agent_index`` of a policy's
    collector holds that agent's running trajectory in that env. Each agent's
    part of an env episode is one trajectory with its own ``eps_id``; batches
    also carry ``agent_index`` and ``env_id`` (the env's index).

    Agents act when they have an observation (the observation dict of their
    env's last reset or step), so they may act in turns, skip steps, join
    late or leave early. An env episode ends with ``"__all__"`` in the
    terminateds / truncateds dict, when no agent is left, or at the horizon.
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
        #: complete_episodes: agents done while their env episode goes on; their store episodes end with it.
        self.closing: list[list[_AgentEpisode]] = [[] for _ in range(self.num_envs)]
        # Every env's running episode (None while the env waits for its reset); build() fills it.
        self.episodes: list[Episode | None] = [None] * self.num_envs
        self.by_eps: dict[tuple[str, int], _AgentEpisode] = {}
        self.env_ep_counter = 0
        self.held = 0  # agent steps held back from the last sample
        self._timestep = 0
        self.explore: Any = True
        # Steps stored since the last batch (kept across a sample() that raised).
        self._env_steps = 0
        self._agent_steps = 0
        # complete_episodes: env and agent steps of the env episodes that ended since the last batch.
        self._done_env_steps = 0
        self._done_agent_steps = 0
        self._idle: set[int] = set(range(self.num_envs))  # envs to reset before the next step
        self._reset_seed: int | None = None
        self._cut_eps: set[tuple[str, int]] = set()
        self._pending: tuple[str, Any] | None = None
        self._starts: list[int] = []  # envs whose soft-horizon episode began in this step (on_episode_start due)
        # eps_ids: each policy its own range of this worker's; a rebuilt store continues where the last stopped.
        self._next_eps = {pid: config.eps_id_offset for pid in policies}
        self._unroll_id = 0
        #: Observation filters by policy (RLlib's MeanStdFilter); policies without one are not in it.
        self.filters: dict[str, Any] = {}
        #: Per env, this step's observations of live agents, filtered (see `_step_data`).
        self._fobs: list[dict] = [{} for _ in range(self.num_envs)]
        #: truncate_episodes by agent steps: last steps of finished trajectories held back for the next batch.
        self._carry: list[tuple[str, SampleBatch]] = []
        #: Soft horizon: agents whose step stayed open at the horizon (waiting for their turn), see `_cut_held`.
        self._soft_held: set[_AgentEpisode] = set()
        #: The newest step's completions per policy (`_running` lists them for the agent-step hold-back).
        self._last_comps: dict[str, list[tuple]] = {}
        self._false_rows: dict[int, np.ndarray] = {}  # `_falses`

    def build(self, rebuild: int) -> None:
        """New stores for the policies' current views; every env resets (seeded on the first build only)."""
        n_slots = self.num_envs * self.n_agents
        w = self.config.worker_index
        # truncate_episodes by agent steps may cut a finished trajectory's segment inside a sequence (`sample`).
        twins = self.config.count_steps_by == "agent_steps" and not self.config.complete_episodes
        self.collectors = {
            pid: make_collector(p, n_slots, self.config, eps_id_start(w, k, self._next_eps[pid]), seq_twins=twins)
            for k, (pid, p) in enumerate(self.policies.items())
        }
        self.columns = {pid: PolicyColumns(p, self.config) for pid, p in self.policies.items()}
        #: Per policy, the leaves of its observation space (nested spaces: one column per leaf).
        self._obs_nest = {pid: Nest.from_space(p.observation_space, "observation_space") for pid, p in self.policies.items()}
        self.by_eps = {}
        self.held = 0
        self._carry = []
        self._soft_held = set()
        self._last_comps = {}
        self._env_steps = self._agent_steps = 0
        self._done_env_steps = self._done_agent_steps = 0
        self._cut_eps = set()
        self._pending = None
        self.live = [{} for _ in range(self.num_envs)]
        self.closing = [[] for _ in range(self.num_envs)]
        self.episodes = [None] * self.num_envs
        self._idle = set(range(self.num_envs))
        self._reset_seed = self.config.seed if rebuild == 0 else None
        self._start_idle()

    # -- episodes -----------------------------------------------------------------

    def _policy_for(self, agent: Any, episode: Episode) -> str:
        pid = episode._policies.get(agent)
        if pid is not None:
            return pid
        pid = self.mapping_fn(agent, episode)
        if pid not in self.policies:
            raise ValueError(f"policy_mapping_fn({agent!r}, episode) returned {pid!r}, not one of {sorted(self.policies)}")
        episode._policies[agent] = pid
        return pid

    def _new_episode(self, i: int, infos: Any) -> Episode:
        ep = Episode(self.config.worker_index << EPS_WORKER_BITS | self.env_ep_counter, i, None, infos, multi_agent=True)
        self.env_ep_counter += 1
        self.episodes[i] = ep
        return ep

    def _begin_agents(self, i: int, obs: dict, infos: dict, filtered: bool = False) -> None:
        ep = cast(Episode, self.episodes[i])
        by_pid: dict[str, list] = {}
        for agent, o in obs.items():
            if agent in self.live[i] or agent == ALL:
                continue
            if agent not in self.agent_index:
                raise ValueError(f"env {i} returned agent {agent!r}, which is not in possible_agents {self.agents}")
            pid = self._policy_for(agent, ep)
            if not filtered and pid in self.filters:
                o = self._filter(pid, o, i, agent)
            by_pid.setdefault(pid, []).append((agent, o))
        for k, ae in enumerate(self.closing[i]):
            if ae.agent_id in obs:  # a done agent is back in the same episode: its held trajectory ends now
                self.collectors[ae.policy_id].end_episodes(np.array([ae.slot], dtype=np.int64))
                del self.closing[i][k]
                break
        for pid, items in by_pid.items():
            slots = np.array([i * self.n_agents + self.agent_index[a] for a, _ in items], dtype=np.int64)
            try:
                obs_cols = self._obs_nest[pid].stack(SampleBatch.OBS, [o for _, o in items], f"env {i}'s observation")
                eps = self.collectors[pid].begin_episodes(slots, obs_cols)
            except (ValueError, TypeError) as e:
                raise type(e)(f"RolloutWorker: env {i}'s observation for policy {pid!r} does not fit: {e}") from e
            base = eps_id_start(self.config.worker_index, list(self.policies).index(pid))
            self._next_eps[pid] = max(self._next_eps[pid], int(eps.max()) + 1 - base)
            for (agent, o), slot, eid in zip(items, slots, eps):
                ae = _AgentEpisode(ep, agent, self.agent_index[agent], i, pid, int(slot))
                ae.last_obs = o
                if isinstance(infos, dict):
                    ae.last_info = infos.get(agent)
                self.live[i][agent] = ae
                self.by_eps[(pid, int(eid))] = ae
                ep._agents[agent] = ae

    def _filter(self, pid: str, o: Any, i: int, agent: Any) -> Any:
        """Agent ``agent`` of env ``i``'s observation, filtered (a non-finite one refused names them)."""
        try:
            if not self._obs_nest[pid].flat:  # a nested observation: the filter keeps each leaf's dtype
                return self.filters[pid](o)
            dtype = np.asarray(o).dtype
            return np.asarray(self.filters[pid](o), dtype=dtype)
        except NonFiniteObservationError as e:
            raise e.at_env(i, agent) from None

    def _reset_env(self, i: int, seed: int | None = None) -> None:
        """Resets env ``i`` and starts its episode (store first, then on_episode_start)."""
        self._idle.add(i)
        obs, infos = self.adapter.reset(i, seed=seed)
        ep = self._new_episode(i, infos)
        self.live[i] = {}
        self.closing[i] = []
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
        for ae in self.closing[i]:
            by_pid.setdefault(ae.policy_id, []).append(ae.slot)
        for pid, slots in by_pid.items():
            self.collectors[pid].end_episodes(np.array(slots, dtype=np.int64))
        self.live[i] = {}
        self.closing[i] = []

    def _count_done(self, ep: Episode) -> None:
        if self.config.complete_episodes:
            self._done_env_steps += ep.length
            self._done_agent_steps += ep._agent_steps

    def _cut(self, envs: list[int]) -> None:
        """A fault: env episodes of ``envs`` end where their agents' trajectories are; those envs reset later."""
        for i in envs:
            if i in self._idle or self.episodes[i] is None:
                continue
            self._end_agents(i, cut=True)
            self._count_done(cast(Episode, self.episodes[i]))
            self.episodes[i] = None
            self._idle.add(i)
            self.metrics.num_faulty_episodes += 1

    def _end_env_episode(self, i: int) -> Episode:
        ep = cast(Episode, self.episodes[i])
        self._end_agents(i, cut=False)
        self._count_done(ep)
        self.metrics.record(ep.total_reward, ep.length, ep)
        return ep

    # -- stepping -----------------------------------------------------------------

    def _step(self) -> tuple[int, dict[str, list[tuple]]]:
        """One step of every env. Returns (agent steps stored, the steps stored per policy: see `_running`)."""
        if self._idle:
            self._start_idle()
        # The agents that act: those with no step pending (every live agent's step completes at its next
        # observation, or it is done and gone), in env order, then the env's.
        ready = [ae for live in self.live for ae in live.values() if ae.pending is None]
        groups: dict[str, list[_AgentEpisode]] = {}
        if len(self.policies) == 1:
            if ready:
                groups[ready[0].policy_id] = ready
        else:
            for ae in ready:
                g = groups.get(ae.policy_id)
                if g is None:
                    groups[ae.policy_id] = [ae]
                else:
                    g.append(ae)
        actions_by_env: list[dict] = [{} for _ in range(self.num_envs)]
        outputs = {}
        acting: list[list[_AgentEpisode]] = []  # the agents that act now (ready, so with no pending step)
        try:
            for pid, aes in groups.items():
                slots = np.array([ae.slot for ae in aes], dtype=np.int64)
                inputs = self.collectors[pid].input_dict(slots)
                if SampleBatch.ENV_ID in inputs:  # the env's index, as in the batch (the store knows only slots)
                    inputs[SampleBatch.ENV_ID] = slots // self.n_agents
                if self.columns[pid].agent_index_input:
                    inputs[SampleBatch.AGENT_INDEX] = slots % self.n_agents
                if self.adapter.saw_f32_rewards and self.columns[pid].reward_input_keys:
                    cast_rewards(inputs, self.columns[pid].reward_input_keys, self.adapter.reward_dtype)
                acts, states, extra = self.policies[pid].compute_actions_from_input_dict(
                    inputs, explore=self.explore, timestep=self._timestep
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
                acting.append(aes)
                for j, (ae, a) in enumerate(zip(aes, as_py)):
                    actions_by_env[ae.env_index][ae.agent_id] = a
                    # Its step waits here until the env observes or ends it: (its policy's output columns, its row,
                    # its action), no copy. (Undone below if this step fails.)
                    ae.pending = (data, j, a)
            try:
                results = self.adapter.step(actions_by_env)
            except BaseException:
                self._cut(self.adapter.moved_on())
                raise
            try:
                per_policy, completions, follow = self._step_data(outputs, results)
            except BaseException:
                self._cut(list(range(self.num_envs)))  # every env moved on; none of their steps is stored
                raise
            for pid, (slots, data, _comps) in per_policy.items():
                try:
                    self.collectors[pid].add_step(data, env_ids=slots)
                except BaseException as e:
                    self._cut(list(range(self.num_envs)))
                    if isinstance(e, (ValueError, TypeError)):
                        raise type(e)(f"RolloutWorker: bad data from the env or policy {pid!r}: {e}") from e
                    raise
        except BaseException:
            for aes in acting:  # nothing of this step is stored: the agents that acted have no step pending
                for ae in aes:
                    ae.pending = None
            raise
        return self._commit(per_policy, completions, follow, results)

    def _commit(self, per_policy: dict, completions: dict, follow: tuple, results: list) -> tuple[int, dict]:
        """The step is stored: the Python side follows, episodes end or begin, then the hooks."""
        cfg = self.config
        self._timestep += self.num_envs
        for ep in self.episodes:
            if ep is not None:
                ep.length += 1
        agent_steps = 0
        complete = cfg.complete_episodes
        lives = self.live
        for pid, (slots, _data, comps) in per_policy.items():
            need_infos = self.columns[pid].need_infos
            ended_slots = []
            for ae, row, obs, reward, _te, _tr, info, done in comps:
                ae.pending = None
                ae.reward_acc = 0.0
                ae.unemitted += 1
                ae.last_obs = obs
                ae.last_reward = reward
                ae.total_reward += reward
                ae.last_action = row[2]  # (row: the pending (columns, row, action) of its step)
                if info is not None:
                    ae.last_info = info
                ep = ae.episode
                ep._agent_steps += 1
                ep.total_reward += reward
                if need_infos:
                    ae.infos.infos.append(info if info is not None else {})
                if done:
                    del lives[ae.env_index][ae.agent_id]
                    if complete:
                        self.closing[ae.env_index].append(ae)
                    else:
                        ended_slots.append(ae.slot)
            agent_steps += len(comps)
            if ended_slots:
                self.collectors[pid].end_episodes(np.array(ended_slots, dtype=np.int64))
        observed, busy = follow
        for ae, o, info in observed:
            ae.last_obs = o
            if info is not None:
                ae.last_info = info
        ended: list[Episode] = []
        error: BaseException | None = None
        stepped: list[Episode | None] = list(self.episodes) if "on_episode_step" in self.hooks else []
        episodes = self.episodes
        horizon = cfg.horizon
        for i, seen in busy:  # (seen: its observed agents that are live; the others join)
            obs, rew, te, tr, infos = results[i]
            env_ep: Episode = episodes[i]  # type: ignore[assignment]  # (every env was stepped: none is idle)
            live = self.live[i]
            if self.filters:
                obs = {**obs, **self._fobs[i]}
                self._fobs[i] = {}
            all_done = bool(te.get(ALL, False) or tr.get(ALL, False))
            new = (
                {}
                if all_done or seen == len(obs)
                else {a: o for a, o in obs.items() if a not in live and a != ALL and not te.get(a) and not tr.get(a)}
            )
            horizon_hit = horizon is not None and env_ep.length >= horizon
            try:
                if horizon_hit and cfg.soft_horizon and not all_done:
                    alive = {a: o for a, o in obs.items() if a != ALL and not te.get(a) and not tr.get(a)}
                    # Agents waiting for their turn keep their step open: it and their trajectory go on into the
                    # new episode until their next observation (`_cut_held`).
                    held = [ae for ae in live.values() if ae.pending is not None]
                    for ae in held:
                        del live[ae.agent_id]
                        if cfg.complete_episodes:
                            env_ep._agent_steps -= ae.unemitted
                    _mark_finished(completions, set(live.values()))  # their trajectories end here
                    ended.append(self._end_env_episode(i))
                    if alive or held:
                        new_ep = self._new_episode(i, infos)
                        self._begin_agents(i, alive, infos, filtered=bool(self.filters))
                        for ae in held:
                            ae.episode = new_ep
                            new_ep._agents[ae.agent_id] = ae
                            if cfg.complete_episodes:
                                new_ep._agent_steps += ae.unemitted
                            self.live[i][ae.agent_id] = ae
                        self._soft_held.update(held)
                        self._pending_start(i)
                    else:
                        self._reset_later(i)
                elif horizon_hit or all_done or (not live and not new):
                    ended.append(self._end_env_episode(i))
                    self._reset_later(i)
                elif new:
                    self._begin_agents(i, new, infos)
            except Exception as e:
                self._cut([i])
                error = error or e
        if self._soft_held:
            try:
                self._cut_held(completions, results)
            except Exception as e:
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
        return agent_steps, completions

    def _cut_held(self, completions: dict, results: list) -> None:
        """Soft horizon: an agent that waited for its turn at the horizon kept its step open (see `_commit`).
        Once that step is stored (its next observation came, with every reward since it acted), its trajectory
        ends there and a new one (new eps_id, t = 0) starts from that observation, as for the agents observed at
        the horizon. (Only while such agents exist: nothing on other steps.)"""
        for ae in list(self._soft_held):
            i = ae.env_index
            if self.live[i].get(ae.agent_id) is not ae:  # it ended meanwhile (done, the episode's end, a fault)
                self._soft_held.discard(ae)
                continue
            if ae.pending is not None:  # still waiting
                continue
            self._soft_held.discard(ae)
            del self.live[i][ae.agent_id]
            self.collectors[ae.policy_id].end_episodes(np.array([ae.slot], dtype=np.int64))
            if self.config.complete_episodes:  # its rows are emitted with the next batch: counted now
                self._done_agent_steps += ae.unemitted
                ae.episode._agent_steps -= ae.unemitted
            _mark_finished(completions, {ae})
            infos = results[i][4]
            self._begin_agents(i, {ae.agent_id: ae.last_obs}, infos if isinstance(infos, dict) else {}, filtered=True)

    def _reset_later(self, i: int) -> None:
        self.episodes[i] = None
        self._idle.add(i)

    def _pending_start(self, i: int) -> None:
        self._starts.append(i)

    def _step_data(self, outputs: dict, results: list) -> tuple[dict, dict, tuple]:
        """What this step stores, per policy: (slots, columns, completions); every value checked, nothing stored.

        An agent's step is stored when the env gives it its next observation,
        or ends it (done, ``"__all__"``, a hard horizon: then its last observation
        stands in if the env gave none; a soft horizon ends no step: `_cut_held`); until then its policy outputs wait in
        its ``pending`` (``(columns, row, action)``). Also returns what
        `_commit` applies to the agents that run on: (observed agents with no
        step, observed count per env).

        It changes one thing: the rewards of agents waiting for their next
        observation add up in their ``reward_acc`` here. That is safe before
        the step is stored: if anything after this fails (this function, or a
        store refusing the step), every env's agents are cut (`_cut`), so no
        waiting agent's step is ever stored after a failed one.
        """
        cfg = self.config
        comps_by_pid: dict[str, list[tuple]] = {}
        observed: list[tuple[_AgentEpisode, Any, Any]] = []  # (agent, obs, info) of agents observed with no step
        # (env, its live agents observed that run on) of the envs `_commit` looks at: those where an agent or the
        # episode may end or an agent joins (the other observed agents); not those where every agent runs on.
        busy: list[tuple[int, int]] = []
        adapter = self.adapter
        horizon = cfg.horizon
        soft_horizon = cfg.soft_horizon
        filters = self.filters
        episodes = self.episodes
        lives = self.live
        note_rewards = not adapter.saw_other_rewards
        for i, (obs, rew, te, tr, infos) in enumerate(results):
            ep = episodes[i]
            if ep is None:
                continue
            if note_rewards and not adapter.saw_other_rewards:  # (once set, the rewards' dtype is float64 for good)
                for r in rew.values():
                    adapter.note_reward(r)
            live = lives[i]
            if filters:  # each live agent's new observation, filtered once, in the env's order
                fo = self._fobs[i] = {}
                for a, o in obs.items():
                    ae = live.get(a)
                    if ae is not None:
                        fo[a] = self._filter(ae.policy_id, o, i, a) if ae.policy_id in filters else o
                obs = {**obs, **fo}
            info_dict = infos if type(infos) is dict or isinstance(infos, dict) else {}
            n_seen = 0
            if (
                (not te or te == _NO_FLAG)  # (flags are bools: checked by the adapter)
                and (not tr or tr == _NO_FLAG)
                and (horizon is None or ep.length + 1 < horizon)
            ):
                # The common step (no flag, no horizon): an agent's step completes iff it has a step and is observed.
                for a, ae in live.items():
                    o = obs.get(a)
                    row = ae.pending
                    if o is None:
                        if row is not None:
                            r = rew.get(a)  # waits for its next observation; its rewards add up
                            if r is not None:
                                ae.reward_acc += float(r)  # (before the step is stored: see the docstring)
                        continue
                    n_seen += 1
                    if row is None:
                        observed.append((ae, o, info_dict.get(a)))
                        continue
                    comps = comps_by_pid.get(ae.policy_id)
                    if comps is None:  # (policies in the order of their first step: the agent-step hold-back's)
                        comps = comps_by_pid[ae.policy_id] = []
                    comps.append((ae, row, o, ae.reward_acc + float(rew.get(a, 0.0)), False, False, info_dict.get(a), False))
                if n_seen != len(obs) or not live or filters:
                    busy.append((i, n_seen))
                continue
            all_te = ALL in te and bool(te[ALL])
            all_tr = ALL in tr and bool(tr[ALL])
            at_h = horizon is not None and ep.length + 1 >= horizon
            hard = at_h and not soft_horizon
            te_agents = len(te) > (ALL in te)  # flags of single agents to look up (else only "__all__")
            tr_agents = len(tr) > (ALL in tr)
            for a, ae in live.items():
                o = obs.get(a)
                row = ae.pending
                if row is None:
                    if o is not None:
                        observed.append((ae, o, info_dict.get(a)))
                        n_seen += 1
                    continue
                a_te = all_te or (te_agents and bool(te.get(a, False)))
                a_tr = all_tr or (tr_agents and bool(tr.get(a, False)))
                done = a_te or a_tr or hard
                if o is None:
                    if not done:  # (at a soft horizon too: its step stays open, see `_cut_held`)
                        r = rew.get(a)  # waits for its next observation; its rewards add up
                        if r is not None:
                            ae.reward_acc += float(r)
                        continue
                    o = ae.last_obs
                elif not done:
                    n_seen += 1
                if hard and not a_te:
                    a_tr = True
                comps = comps_by_pid.get(ae.policy_id)
                if comps is None:
                    comps = comps_by_pid[ae.policy_id] = []
                comps.append((ae, row, o, ae.reward_acc + float(rew.get(a, 0.0)), a_te, a_tr, info_dict.get(a), done))
            busy.append((i, n_seen))
        per_policy = {}
        for pid, comps in comps_by_pid.items():
            n = len(comps)
            aes_c, rows, obs_c, rews_c, te_c, tr_c = list(zip(*comps))[:6]
            out = outputs.get(pid)
            same = out is not None and list(aes_c) == out[1]  # (agent episodes compare by identity)
            if same and out is not None:
                data = dict(out[2])  # every agent that acted got its next observation now: the policy's arrays
            else:
                src = rows[0][0]  # (rows: the pending (columns, row, action) of each step)
                if [id(r[0]) for r in rows].count(id(src)) == n:
                    # Every step comes from one earlier compute-actions call (turns): one gather per column.
                    idx = np.array([r[1] for r in rows], dtype=np.int64)
                    data = {k: v[idx] for k, v in src.items()}
                else:
                    row_dicts = [_row_of(r) for r in rows]
                    data = {k: np.stack([r[k] for r in row_dicts]) for k in row_dicts[0]}
            try:
                obs_cols = self._obs_nest[pid].stack(SampleBatch.OBS, obs_c, "an agent's observation")
            except ValueError as e:
                raise ValueError(f"column 'obs': policy {pid!r}'s agents returned observations that do not fit: {e}") from e
            data.update(obs_cols)
            data[SampleBatch.REWARDS] = np.array(rews_c, np.float64)
            if cfg.no_done_at_end:
                data[SampleBatch.TERMINATEDS] = data[SampleBatch.TRUNCATEDS] = np.zeros(n, bool)
            else:
                data[SampleBatch.TERMINATEDS] = np.array(te_c, bool) if any(te_c) else self._falses(n)
                data[SampleBatch.TRUNCATEDS] = np.array(tr_c, bool) if any(tr_c) else self._falses(n)
            slots = out[0] if same and out is not None else np.array([ae.slot for ae in aes_c], dtype=np.int64)
            per_policy[pid] = (slots, data, comps)
        return per_policy, comps_by_pid, (observed, busy)

    def _falses(self, n: int) -> np.ndarray:
        """A read-only bool[n] of False, made once per n (the store copies what it is given)."""
        z = self._false_rows.get(n)
        if z is None:
            z = self._false_rows[n] = np.zeros(n, bool)
            z.flags.writeable = False
        return z

    # -- batches ----------------------------------------------------------------

    def sample(self) -> MultiAgentBatch:
        """One batch (docs/contract.md, Rollouts; SPEC: multi-agent batch sizes).

        ``truncate_episodes``: exactly ``rollout_fragment_length * num_envs``
        env steps (every env steps once per step) or agent steps (surplus
        steps held back for the next batch). ``complete_episodes``: whole env
        episodes only (an agent done early waits for its env episode to end),
        stopping as soon as the env or agent steps of the finished env
        episodes reach the target; ``env_steps()`` / ``agent_steps()`` count
        what the batch holds.
        """
        if self._pending is not None:
            return self._finish_emit()
        cfg = self.config
        target = cfg.rollout_fragment_length * self.num_envs
        by_agent = cfg.count_steps_by == "agent_steps"
        complete = cfg.complete_episodes
        last_comps = self._last_comps  # the newest step's (held back ones, if no step now)
        if not complete and by_agent and self.held:
            self._agent_steps += self.held
            self.held = 0
        while True:
            if complete:
                if (self._done_agent_steps if by_agent else self._done_env_steps) >= target:
                    break
            elif (self._agent_steps if by_agent else self._env_steps) >= target:
                break
            n_agent, last_comps = self._step()
            self._last_comps = last_comps
            self._env_steps += self.num_envs
            self._agent_steps += n_agent
        holds = {pid: np.zeros(c.num_envs, np.int64) for pid, c in self.collectors.items()}
        carry: set[tuple[str, int]] = set()  # (policy, eps_id): the last step of a finished trajectory, held back
        if by_agent and not complete:
            # Exactly `target` agent steps: the surplus (steps of the last env step) waits for the next batch,
            # in the store for agents that run on, cut off the built segment for agents that are done.
            surplus = self._agent_steps - target
            live_first = sorted(self._running(last_comps), key=lambda r: not isinstance(r[1], int))
            for pid, x in live_first[:surplus]:
                if isinstance(x, int):
                    holds[pid][x] = 1
                else:
                    carry.add((pid, self._eps_id_of(pid, x)))
            self.held = surplus
        env_steps = self._done_env_steps if complete else self._env_steps
        per_policy = {
            pid: coll.build_batch(complete_only=complete, hold=holds[pid]) for pid, coll in self.collectors.items()
        }
        self._env_steps = self._agent_steps = 0
        self._done_env_steps = self._done_agent_steps = 0
        unroll = self._unroll_id
        self._unroll_id += 1
        for pid, segments in per_policy.items():
            py_cols = self.columns[pid].python_columns
            for seg in segments:
                key = (pid, int(seg[SampleBatch.EPS_ID][0]))
                ae = self.by_eps[key]
                n = len(seg)
                ae.unemitted = int(holds[pid][ae.slot]) if self._is_live(ae) else 0
                if self.columns[pid].need_infos:
                    ae.infos.attach(seg)  # the agent's infos of these steps (its entry of the env's info dict)
                if SampleBatch.ENV_ID in seg:
                    seg[SampleBatch.ENV_ID] = np.full(n, ae.env_index, np.int64)
                if key in self._cut_eps and not self._is_live(ae):
                    self._cut_eps.discard(key)
                    seg[SampleBatch.TRUNCATEDS][-1] = True
                add_python_columns(seg, py_cols, unroll, ae.agent_index)
                cast_rewards(seg, self.columns[pid].reward_keys, self.adapter.reward_dtype)
                seg._pruned = self.columns[pid].pruned
        carried, self._carry = self._carry, []
        for pid, seg in carried:  # held back from the last batch: they belong to this one (its unroll_id)
            ae = self.by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
            add_python_columns(seg, self.columns[pid].python_columns, unroll, ae.agent_index)
        for pid, segments in per_policy.items():
            kept = []
            for seg in [s for p2, s in carried if p2 == pid] + segments:
                if (pid, int(seg[SampleBatch.EPS_ID][0])) in carry:
                    head, last = _split_last(seg)
                    if head is not None:
                        kept.append(_drop_twins(head))
                    self._carry.append((pid, _drop_twins(last)))
                else:
                    kept.append(_drop_twins(seg))
            per_policy[pid] = kept
        self._pending = ("segments", (per_policy, env_steps))
        return self._finish_emit()

    @staticmethod
    def _running(comps_by_pid: dict[str, list[tuple]]) -> list[tuple[str, Any]]:
        """The agent steps of one env step, in storing order: (policy, slot) of agents that run on, (policy, agent
        episode) of those done."""
        return [(pid, c[0] if c[7] else c[0].slot) for pid, comps in comps_by_pid.items() for c in comps]

    def _eps_id_of(self, pid: str, ae: _AgentEpisode) -> int:
        for key, other in self.by_eps.items():
            if other is ae and key[0] == pid:
                return key[1]
        raise KeyError(ae.agent_id)

    def _is_live(self, ae: _AgentEpisode) -> bool:
        return self.live[ae.env_index].get(ae.agent_id) is ae

    def _finish_emit(self) -> MultiAgentBatch:
        kind, value = cast("tuple[str, Any]", self._pending)
        if kind == "segments":
            per_policy, env_steps = value
            policy_batches = {}
            # Each episode's segments in this batch, for other_agent_batches (built only for a policy that
            # overrides postprocess_trajectory: the default one reads nothing).
            by_episode: dict[int, list[tuple[_AgentEpisode, SampleBatch]]] = {}
            for p2, segs2 in per_policy.items():
                for s2 in segs2:
                    o = self.by_eps[(p2, int(s2[SampleBatch.EPS_ID][0]))]
                    by_episode.setdefault(id(o.episode), []).append((o, s2))
            for pid, segments in per_policy.items():
                policy = self.policies[pid]
                custom_post = getattr(policy.postprocess_trajectory, "__func__", None) is not Policy.postprocess_trajectory
                out = []
                for seg in segments:
                    ae = self.by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
                    others = None
                    if custom_post:
                        others = {
                            o.agent_id: (o.policy_id, self.policies[o.policy_id], s2)
                            for o, s2 in by_episode[id(ae.episode)]
                            if o.agent_id != ae.agent_id
                        }
                    out.append(postprocess_segment(policy, seg, others, ae.episode, self.hooks, ae.agent_id, pid))
                if out:
                    policy_batches[pid] = concat_samples(out)
            # Forget agent episodes that are finished and fully emitted.
            live_eps = {(pid, int(e)) for pid, c in self.collectors.items() for e in c.eps_ids() if e >= 0}
            live_eps |= {(pid, int(s[SampleBatch.EPS_ID][0])) for pid, s in self._carry}
            self.by_eps = {key: ae for key, ae in self.by_eps.items() if key in live_eps}
            self._pending = ("batch", MultiAgentBatch(policy_batches, env_steps))
        batch = cast(MultiAgentBatch, cast("tuple[str, Any]", self._pending)[1])
        self.hooks.sample_end(batch)
        self._pending = None
        return batch
