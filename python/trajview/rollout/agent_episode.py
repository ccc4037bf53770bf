"""Multi-agent episodes: each agent's turn protocol (`AgentEpisode`) and every env's agents' lifecycle (`AgentEpisodes`).

As RLlib's ``MultiAgentEpisode`` owns turn-taking (``get_agents_to_act``),
an `AgentEpisode` owns one agent's: it acts (`AgentEpisode.act`) when it has
an observation and no step pending, and the env's next news of it
(`AgentEpisode.observe`) completes that step, or adds its reward to the step
still waiting for the agent's next observation. `AgentEpisodes` keeps every
env's running episode and its agents' trajectories in the policies' stores:
who acts now, whose steps this env step completes (checked, nothing stored),
what follows once they are stored (agents and env episodes end, join, begin),
and the faults' cuts. `MultiAgentSampler` steps the envs and assembles batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..collect.collector import Collector
from ..envs.base import MultiAgentEnvAdapter
from ..policy.policy import Policy
from ..views.nest import Nest
from ..views.sample_batch import SampleBatch
from .callbacks import Episode
from .config import RolloutConfig
from .emit import InfoLog
from .filtering import filter_observation
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .plan import EPS_WORKER_BITS, eps_id_start

__all__ = ["ALL", "AgentEpisode", "AgentEpisodes"]

ALL = "__all__"
_NO_FLAG = {ALL: False}  # a terminateds / truncateds dict that ends nothing

#: A completed agent step (what `AgentEpisode.observe` returns): (agent episode, its pending (columns, row,
#: action), its new observation, its reward since it acted, terminated, truncated, its info, done: its
#: trajectory ends with this step).
AgentStep = tuple


class AgentEpisode:
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

    def act(self, columns: dict, row: int, action: Any) -> None:
        """It acts: its step waits here, as (its policy's output columns, its row, its action), no copy, until
        the env observes it or ends it."""
        self.pending = (columns, row, action)

    def withdraw(self) -> None:
        """Its action was not stored (the env step failed): it has no step pending."""
        self.pending = None

    def observe(self, obs: Any, reward: Any, info: Any, te: bool = False, tr: bool = False, done: bool = False) -> Any:
        """The env's news of it after it acted: its completed step (`AgentStep`), or None while it waits.

        Observed or ended (``done``: terminated, truncated or a hard horizon;
        its last observation stands in if the env gave none), its step
        completes with every reward since it acted. Otherwise its ``reward``
        (None: none) adds up on the step still waiting for its next observation.
        Nothing else changes until the step is stored (`AgentEpisodes.commit`).
        """
        if obs is None:
            if not done:
                if reward is not None:
                    self.reward_acc += float(reward)
                return None
            obs = self.last_obs
        total = self.reward_acc + (0.0 if reward is None else float(reward))
        return (self, self.pending, obs, total, te, tr, info, done)


def mark_finished(completions: dict[str, list[AgentStep]], aes: set) -> None:
    """This step's completions of the agents ``aes`` become steps that end their trajectory (for the
    agent-step hold-back, `MultiAgentSampler._running`: carried, not held in the store, whose slot starts a new
    trajectory). For trajectories ended without a done flag (a soft horizon)."""
    for comps in completions.values():
        for k, c in enumerate(comps):
            if c[0] in aes and not c[7]:
                comps[k] = (*c[:7], True)


class AgentEpisodes:
    """Every env's running episode and its agents' trajectories, in the policies' stores.

    Slot ``env_index * len(possible_agents) + agent_index`` of a policy's
    collector holds that agent's running trajectory in that env. Agents act
    when they have an observation (the observation dict of their env's last
    reset or step), so they may act in turns, skip steps, join late or leave
    early. An env episode ends with ``"__all__"`` in the terminateds /
    truncateds dict, when no agent is left, or at the horizon.
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
        self.env_ep_counter = 0
        # eps_ids: each policy its own range of this worker's; a rebuilt store continues where the last stopped.
        self._next_eps = {pid: config.eps_id_offset for pid in policies}
        # What build() sets: the stores and what they take.
        self.collectors: dict[str, Collector] = {}
        self.need_infos: dict[str, bool] = {}
        #: Observation filters by policy (RLlib's MeanStdFilter); policies without one are not in it.
        self.filters: dict[str, Any] = {}
        self._note_cut: Callable = lambda key, unemitted: None
        #: Per policy, the leaves of its observation space (nested spaces: one column per leaf).
        self.obs_nest: dict[str, Nest] = {}
        self._clear()

    def build(
        self, collectors: dict[str, Collector], need_infos: dict[str, bool], filters: dict[str, Any], note_cut: Callable
    ) -> None:
        """Over new stores, nothing running (`start_idle` resets every env). ``need_infos``: the policies that
        train on infos. ``note_cut(key, unemitted)`` is told of each trajectory a fault cuts (the emit protocol
        marks its last step)."""
        self.collectors = collectors
        self.need_infos = need_infos
        self.filters = filters
        self._note_cut = note_cut
        self.obs_nest = {pid: Nest.from_space(p.observation_space, "observation_space") for pid, p in self.policies.items()}
        self._clear()

    def _clear(self) -> None:
        """Nothing running: every env waits for its reset."""
        self.live: list[dict[Any, AgentEpisode]] = [{} for _ in range(self.num_envs)]
        #: complete_episodes: agents done while their env episode goes on; their store episodes end with it.
        self.closing: list[list[AgentEpisode]] = [[] for _ in range(self.num_envs)]
        # Every env's running episode (None while the env waits for its reset).
        self.episodes: list[Episode | None] = [None] * self.num_envs
        self.by_eps: dict[tuple[str, int], AgentEpisode] = {}
        self.idle: set[int] = set(range(self.num_envs))  # envs to reset before the next step
        # complete_episodes: env and agent steps of the env episodes that ended since the last batch.
        self.done_env_steps = 0
        self.done_agent_steps = 0
        #: Per env, this step's observations of live agents, filtered (see `turns`).
        self._fobs: list[dict] = [{} for _ in range(self.num_envs)]
        #: Soft horizon: agents whose step stayed open at the horizon (waiting for their turn), see `_cut_held`.
        self._soft_held: set[AgentEpisode] = set()
        self._starts: list[int] = []  # envs whose soft-horizon episode began in this step (on_episode_start due)

    # -- env episodes and agents --------------------------------------------------------

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
                o = filter_observation(self.filters[pid], o, self.obs_nest[pid], i, agent)
            by_pid.setdefault(pid, []).append((agent, o))
        for k, ae in enumerate(self.closing[i]):
            if ae.agent_id in obs:  # a done agent is back in the same episode: its held trajectory ends now
                self.collectors[ae.policy_id].end_episodes(np.array([ae.slot], dtype=np.int64))
                del self.closing[i][k]
                break
        for pid, items in by_pid.items():
            slots = np.array([i * self.n_agents + self.agent_index[a] for a, _ in items], dtype=np.int64)
            try:
                obs_cols = self.obs_nest[pid].stack(SampleBatch.OBS, [o for _, o in items], f"env {i}'s observation")
                eps = self.collectors[pid].begin_episodes(slots, obs_cols)
            except (ValueError, TypeError) as e:
                raise type(e)(f"RolloutWorker: env {i}'s observation for policy {pid!r} does not fit: {e}") from e
            base = eps_id_start(self.config.worker_index, list(self.policies).index(pid))
            self._next_eps[pid] = max(self._next_eps[pid], int(eps.max()) + 1 - base)
            for (agent, o), slot, eid in zip(items, slots, eps):
                ae = AgentEpisode(ep, agent, self.agent_index[agent], i, pid, int(slot))
                ae.last_obs = o
                if isinstance(infos, dict):
                    ae.last_info = infos.get(agent)
                self.live[i][agent] = ae
                self.by_eps[(pid, int(eid))] = ae
                ep._agents[agent] = ae

    def next_eps_id(self, pid: str) -> int:
        """The eps_id counter a new store of policy ``pid`` starts from (this worker's policy's range)."""
        return self._next_eps[pid]

    def _reset_env(self, i: int, seed: int | None = None) -> None:
        """Resets env ``i`` and starts its episode (store first, then on_episode_start)."""
        self.idle.add(i)
        obs, infos = self.adapter.reset(i, seed=seed)
        ep = self._new_episode(i, infos)
        self.live[i] = {}
        self.closing[i] = []
        self._begin_agents(i, obs, infos)
        self.idle.discard(i)
        self.hooks.episode_start(ep, i)

    def start_idle(self, seed: int | None = None) -> None:
        """Resets the idle envs (env ``i`` seeded ``seed + i`` if ``seed`` is given) and begins their episodes."""
        for i in sorted(self.idle):
            self._reset_env(i, None if seed is None else seed + i)

    def _end_agents(self, i: int, cut: bool) -> None:
        """Ends env ``i``'s running agent trajectories in the stores (``cut``: by a fault, marked truncated)."""
        by_pid: dict[str, list[int]] = {}
        for ae in self.live[i].values():
            by_pid.setdefault(ae.policy_id, []).append(ae.slot)
            if cut and ae.unemitted > 0:
                self._note_cut((ae.policy_id, int(self.collectors[ae.policy_id].eps_ids()[ae.slot])), ae.unemitted)
        for ae in self.closing[i]:
            by_pid.setdefault(ae.policy_id, []).append(ae.slot)
        for pid, slots in by_pid.items():
            self.collectors[pid].end_episodes(np.array(slots, dtype=np.int64))
        self.live[i] = {}
        self.closing[i] = []

    def _count_done(self, ep: Episode) -> None:
        if self.config.complete_episodes:
            self.done_env_steps += ep.length
            self.done_agent_steps += ep._agent_steps

    def cut(self, envs: list[int]) -> None:
        """A fault: env episodes of ``envs`` end where their agents' trajectories are; those envs reset later."""
        for i in envs:
            if i in self.idle or self.episodes[i] is None:
                continue
            self._end_agents(i, cut=True)
            self._count_done(cast(Episode, self.episodes[i]))
            self.episodes[i] = None
            self.idle.add(i)
            self.metrics.num_faulty_episodes += 1

    def _end_env_episode(self, i: int) -> Episode:
        ep = cast(Episode, self.episodes[i])
        self._end_agents(i, cut=False)
        self._count_done(ep)
        self.metrics.record(ep.total_reward, ep.length, ep)
        return ep

    def is_live(self, ae: AgentEpisode) -> bool:
        return self.live[ae.env_index].get(ae.agent_id) is ae

    # -- the turn protocol --------------------------------------------------------------

    def agents_to_act(self) -> list[AgentEpisode]:
        """The agents that act now: those with no step pending (every live agent's step completes at its next
        observation, or it is done and gone), in env order, then the env's."""
        return [ae for live in self.live for ae in live.values() if ae.pending is None]

    def turns(self, results: list) -> tuple[dict[str, list[AgentStep]], tuple]:
        """The agent steps this env step completes, per policy (`AgentEpisode.observe`); every value checked,
        nothing stored. Also returns what `commit` applies to the agents that run on: (observed agents with no
        step, observed count per env).

        An agent's step is stored when the env gives it its next
        observation, or ends it (done, ``"__all__"``, a hard horizon: then its
        last observation stands in if the env gave none; a soft horizon ends
        no step: `_cut_held`). A reward given to an agent after its
        trajectory finished in this env episode is an error naming the agent.

        It changes one thing: the rewards of agents waiting for their next
        observation add up in their ``reward_acc`` here. That is safe before
        the step is stored: if anything after this fails (this function, or a
        store refusing the step), every env's agents are cut (`cut`), so no
        waiting agent's step is ever stored after a failed one.
        """
        cfg = self.config
        comps_by_pid: dict[str, list[AgentStep]] = {}
        observed: list[tuple[AgentEpisode, Any, Any]] = []  # (agent, obs, info) of agents observed with no step
        # (env, its live agents observed that run on) of the envs `commit` looks at: those where an agent or the
        # episode may end or an agent joins (the other observed agents); not those where every agent runs on.
        busy: list[tuple[int, int]] = []
        horizon = cfg.horizon
        soft_horizon = cfg.soft_horizon
        filters = self.filters
        episodes = self.episodes
        lives = self.live
        for i, (obs, rew, te, tr, infos) in enumerate(results):
            ep = episodes[i]
            if ep is None:
                continue
            live = lives[i]
            if len(ep._agents) != len(live) and not rew.keys() <= live.keys():  # (equal: no agent finished yet)
                _check_rewards(i, ep, live, rew)
            if filters:  # each live agent's new observation, filtered once, in the env's order
                fo = self._fobs[i] = {}
                for a, o in obs.items():
                    ae = live.get(a)
                    if ae is not None:
                        pid = ae.policy_id
                        fo[a] = filter_observation(filters[pid], o, self.obs_nest[pid], i, a) if pid in filters else o
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
                    if o is not None:
                        n_seen += 1
                    if ae.pending is None:
                        if o is not None:
                            observed.append((ae, o, info_dict.get(a)))
                        continue
                    step = ae.observe(o, rew.get(a), None if o is None else info_dict.get(a))
                    if step is not None:
                        comps = comps_by_pid.get(ae.policy_id)
                        if comps is None:  # (policies in the order of their first step: the agent-step hold-back's)
                            comps = comps_by_pid[ae.policy_id] = []
                        comps.append(step)
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
                if ae.pending is None:
                    if o is not None:
                        observed.append((ae, o, info_dict.get(a)))
                        n_seen += 1
                    continue
                a_te = all_te or (te_agents and bool(te.get(a, False)))
                a_tr = all_tr or (tr_agents and bool(tr.get(a, False)))
                done = a_te or a_tr or hard
                if o is not None and not done:
                    n_seen += 1
                if hard and not a_te:
                    a_tr = True
                # (at a soft horizon an agent not observed waits on: its step stays open, see `_cut_held`)
                step = ae.observe(o, rew.get(a), info_dict.get(a), a_te, a_tr, done)
                if step is not None:
                    comps = comps_by_pid.get(ae.policy_id)
                    if comps is None:
                        comps = comps_by_pid[ae.policy_id] = []
                    comps.append(step)
            busy.append((i, n_seen))
        return comps_by_pid, (observed, busy)

    def commit(self, completions: dict[str, list[AgentStep]], follow: tuple, results: list) -> int:
        """The step is stored: the agents follow, episodes end or begin, then the hooks. Returns its agent steps."""
        cfg = self.config
        for ep in self.episodes:
            if ep is not None:
                ep.length += 1
        agent_steps = 0
        complete = cfg.complete_episodes
        lives = self.live
        for pid, comps in completions.items():
            need_infos = self.need_infos[pid]
            ended_slots = []
            for ae, pending, obs, reward, _te, _tr, info, done in comps:  # its step is stored: its values follow
                ae.pending = None
                ae.reward_acc = 0.0
                ae.unemitted += 1
                ae.last_obs = obs
                ae.last_reward = reward
                ae.total_reward += reward
                ae.last_action = pending[2]
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
                    self._soft_restart(i, env_ep, obs, te, tr, infos, completions, ended)
                elif horizon_hit or all_done or (not live and not new):
                    ended.append(self._end_env_episode(i))
                    self._reset_later(i)
                elif new:
                    self._begin_agents(i, new, infos)
            except Exception as e:
                self.cut([i])
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
        if self.idle:
            self.start_idle()
        return agent_steps

    def _soft_restart(
        self, i: int, env_ep: Episode, obs: dict, te: dict, tr: dict, infos: Any, completions: dict, ended: list
    ) -> None:
        """Env ``i``'s episode ends at a soft horizon (no reset): the agents observed start new trajectories from
        that observation in a new episode."""
        cfg = self.config
        live = self.live[i]
        alive = {a: o for a, o in obs.items() if a != ALL and not te.get(a) and not tr.get(a)}
        # Agents waiting for their turn keep their step open: it and their trajectory go on into the new
        # episode until their next observation (`_cut_held`).
        held = [ae for ae in live.values() if ae.pending is not None]
        for ae in held:
            del live[ae.agent_id]
            if cfg.complete_episodes:
                env_ep._agent_steps -= ae.unemitted
        mark_finished(completions, set(live.values()))  # their trajectories end here
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
            self._starts.append(i)
        else:
            self._reset_later(i)

    def _cut_held(self, completions: dict, results: list) -> None:
        """Soft horizon: an agent that waited for its turn at the horizon kept its step open (see `commit`).
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
                self.done_agent_steps += ae.unemitted
                ae.episode._agent_steps -= ae.unemitted
            mark_finished(completions, {ae})
            infos = results[i][4]
            self._begin_agents(i, {ae.agent_id: ae.last_obs}, infos if isinstance(infos, dict) else {}, filtered=True)

    def _reset_later(self, i: int) -> None:
        self.episodes[i] = None
        self.idle.add(i)


def _check_rewards(i: int, ep: Episode, live: dict, rew: dict) -> None:
    """A reward for an agent whose trajectory finished in this env episode (terminated, truncated) is an error
    (RLlib raises too): it would belong to no step."""
    for a, r in rew.items():
        if a not in live and a in ep._agents:
            raise ValueError(
                f"env {i}: reward {r!r} for agent {a!r}, which already finished (terminated or truncated) in this "
                f"episode; an env may not reward an agent after its last step (give the reward with that step)"
            )
