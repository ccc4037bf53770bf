"""`MultiAgentSampler`: multi-agent envs (a `MultiAgentEnvAdapter`), every agent mapped to a policy, a collector per policy.

Agents' turns and lifecycle live in `agent_episode` (`AgentEpisode`,
`AgentEpisodes`); this module acts, stores each env step and assembles
batches (sizes, the agent-step hold-back). Faults follow the single-agent rules (see `single_agent`): a
step of the envs stores every agent's transition or none; an env the failed
step may have moved on has its agents' trajectories cut at their last stored
step (marked truncated when emitted) and is reset before the next step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collect.collector import Collector
from ..views import MultiAgentBatch, SampleBatch, concat_samples
from .agent_episode import AgentEpisode, AgentEpisodes, AgentStep
from .emit import add_python_columns, cast_rewards, custom_postprocess, finish_segment, postprocess_segment
from .env_sampler import EnvSampler
from .plan import SEQ_TWIN_PREFIX, PolicyColumns, eps_id_start, make_collector

__all__ = ["MultiAgentSampler"]


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


def _drop_twins(seg: SampleBatch) -> SampleBatch:
    """``seg`` without the per-step twins of its per-sequence views (`SEQ_TWIN_PREFIX`), in place."""
    for k in [k for k in dict.keys(seg) if k.startswith(SEQ_TWIN_PREFIX)]:
        del seg[k]
    return seg


def _row_of(src: tuple) -> dict:
    """An agent's policy outputs as a row dict (``src``: its pending (columns, row, action))."""
    data, j, _action = src
    return {k: v[j] for k, v in data.items()}


class MultiAgentSampler(EnvSampler[MultiAgentBatch]):
    """Steps ``adapter.num_envs`` multi-agent envs; every agent maps to a policy, every policy has its own store.

    Slot ``env_index * len(possible_agents) + agent_index`` of a policy's
    collector holds that agent's running trajectory in that env (see
    `AgentEpisodes`, which decides who acts and whose step completes). Each
    agent's part of an env episode is one trajectory with its own ``eps_id``;
    batches also carry ``agent_index`` and ``env_id`` (the env's index, which
    the store computes from the slot).

    ``agent_eps`` holds the envs (its adapter), the policies and their mapping, the config, hooks and metrics.
    """

    def __init__(self, agent_eps: AgentEpisodes) -> None:
        super().__init__(agent_eps.config, agent_eps.hooks, agent_eps.metrics)
        self.adapter = adapter = agent_eps.adapter
        self.num_envs = adapter.num_envs
        self.n_agents = len(adapter.possible_agents)
        self.policies = agent_eps.policies
        self._collectors: dict[str, Collector] = {}
        self.columns: dict[str, PolicyColumns] = {}
        #: Every env's running episode and its agents (turns, lifecycle).
        self.agent_eps = agent_eps
        self.held = 0  # agent steps held back from the last sample
        self._timestep = 0
        # Steps stored since the last batch (kept across a sample() that raised).
        self._env_steps = 0
        self._agent_steps = 0
        self._reset_seed: int | None = None
        #: truncate_episodes by agent steps: last steps of finished trajectories held back for the next batch.
        self._carry: list[tuple[str, SampleBatch]] = []
        #: The newest step's completions per policy (`_running` lists them for the agent-step hold-back).
        self._last_comps: dict[str, list[AgentStep]] = {}
        self._false_rows: dict[int, np.ndarray] = {}  # `_falses`

    @property
    def collectors(self) -> dict[str, Collector]:
        return self._collectors

    def build(self, rebuild: int) -> None:
        """New stores for the policies' current views; every env resets (seeded on the first build only)."""
        n_slots = self.num_envs * self.n_agents
        w = self.config.worker_index
        # truncate_episodes by agent steps may cut a finished trajectory's segment inside a sequence (`sample`).
        twins = self.config.count_steps_by == "agent_steps" and not self.config.complete_episodes
        self._collectors = {
            pid: make_collector(
                p, n_slots, self.config, eps_id_start(w, k, self.agent_eps.next_eps_id(pid)), seq_twins=twins,
                slots_per_env=self.n_agents,
            )
            for k, (pid, p) in enumerate(self.policies.items())
        }
        self.columns = {pid: PolicyColumns(p, self.config) for pid, p in self.policies.items()}
        self.held = 0
        self._carry = []
        self._last_comps = {}
        self._env_steps = self._agent_steps = 0
        self._reset_emit()
        need_infos = {pid: c.need_infos for pid, c in self.columns.items()}
        self.agent_eps.build(self._collectors, need_infos, self.filters, self._note_cut)
        self._reset_seed = self.config.seed if rebuild == 0 else None
        self._start_idle()

    def _start_idle(self) -> None:
        self.agent_eps.start_idle(self._reset_seed)
        self._reset_seed = None

    # -- stepping -----------------------------------------------------------------

    def _step(self) -> tuple[int, dict[str, list[AgentStep]]]:
        """One step of every env. Returns (agent steps stored, the steps stored per policy: see `_running`)."""
        eps = self.agent_eps
        if eps.idle:
            self._start_idle()
        ready = eps.agents_to_act()
        groups: dict[str, list[AgentEpisode]] = {}
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
        acting: list[list[AgentEpisode]] = []  # the agents that act now (ready, so with no pending step)
        try:
            for pid, aes in groups.items():
                slots = np.array([ae.slot for ae in aes], dtype=np.int64)
                data, as_py = self._act(pid, slots)
                outputs[pid] = (slots, aes, data)
                acting.append(aes)
                for j, (ae, a) in enumerate(zip(aes, as_py)):
                    actions_by_env[ae.env_index][ae.agent_id] = a
                    ae.act(data, j, a)  # (withdrawn below if this step fails)
            try:
                results = self.adapter.step(actions_by_env)
            except BaseException:
                eps.cut(self.adapter.moved_on())
                raise
            try:
                completions, follow = eps.turns(results)
                per_policy = self._step_columns(outputs, completions)
            except BaseException:
                eps.cut(list(range(self.num_envs)))  # every env moved on; none of their steps is stored
                raise
            for pid, (slots, data) in per_policy.items():
                try:
                    self._collectors[pid].add_step(data, env_ids=slots)
                except BaseException as e:
                    eps.cut(list(range(self.num_envs)))
                    if isinstance(e, (ValueError, TypeError)):
                        raise type(e)(f"RolloutWorker: bad data from the env or policy {pid!r}: {e}") from e
                    raise
        except BaseException:
            for aes in acting:  # nothing of this step is stored: the agents that acted have no step pending
                for ae in aes:
                    ae.withdraw()
            raise
        self._timestep += self.num_envs
        return eps.commit(completions, follow, results), completions

    def _act(self, pid: str, slots: np.ndarray) -> tuple[dict[str, Any], list]:
        """Policy ``pid``'s outputs for its agents in ``slots``, checked before any env steps (a bad output
        changes nothing): (its output columns, each agent's action as the env takes it)."""
        cols = self.columns[pid]
        inputs = self._collectors[pid].input_dict(slots)
        if cols.agent_index_input:
            inputs[SampleBatch.AGENT_INDEX] = slots % self.n_agents
        if self.adapter.saw_f32_rewards and cols.reward_input_keys:
            cast_rewards(inputs, cols.reward_input_keys, self.adapter.reward_dtype)
        acts, states, extra = self.policies[pid].compute_actions_from_input_dict(
            inputs, explore=self.explore, timestep=self._timestep
        )
        try:
            data = cols.check_outputs(acts, states, extra, len(slots))
        except ValueError as e:
            raise ValueError(f"policy {pid!r}: {e}") from e
        if cols.action_nest.flat:
            acts = data[SampleBatch.ACTIONS]
            return data, (acts.tolist() if acts.ndim == 1 else list(acts))
        return data, cols.action_nest.split_rows(data, SampleBatch.ACTIONS, len(slots))  # each in the space's structure

    def _step_columns(self, outputs: dict, comps_by_pid: dict[str, list[AgentStep]]) -> dict[str, tuple]:
        """What this step stores, per policy: (slots, columns) of its completed agent steps; values checked."""
        cfg = self.config
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
                obs_cols = self.agent_eps.obs_nest[pid].stack(SampleBatch.OBS, obs_c, "an agent's observation")
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
            per_policy[pid] = (slots, data)
        return per_policy

    def _falses(self, n: int) -> np.ndarray:
        """A read-only bool[n] of False, made once per n (the store copies what it is given)."""
        z = self._false_rows.get(n)
        if z is None:
            z = self._false_rows[n] = np.zeros(n, bool)
            z.flags.writeable = False
        return z

    # -- batches ----------------------------------------------------------------

    def _sample(self) -> MultiAgentBatch:
        """One batch (docs/contract.md, Rollouts; SPEC: multi-agent batch sizes).

        ``truncate_episodes``: exactly ``rollout_fragment_length * num_envs``
        env steps (every env steps once per step) or agent steps (surplus
        steps held back for the next batch). ``complete_episodes``: whole env
        episodes only (an agent done early waits for its env episode to end),
        stopping as soon as the env or agent steps of the finished env
        episodes reach the target; ``env_steps()`` / ``agent_steps()`` count
        what the batch holds.
        """
        cfg = self.config
        eps = self.agent_eps
        target = cfg.rollout_fragment_length * self.num_envs
        by_agent = cfg.count_steps_by == "agent_steps"
        complete = cfg.complete_episodes
        last_comps = self._last_comps  # the newest step's (held back ones, if no step now)
        if not complete and by_agent and self.held:
            self._agent_steps += self.held
            self.held = 0
        while True:
            if complete:
                if (eps.done_agent_steps if by_agent else eps.done_env_steps) >= target:
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
        env_steps = eps.done_env_steps if complete else self._env_steps
        per_policy = {
            pid: coll.build_batch(complete_only=complete, hold=holds[pid]) for pid, coll in self.collectors.items()
        }
        self._env_steps = self._agent_steps = 0
        eps.done_env_steps = eps.done_agent_steps = 0
        unroll = self._next_unroll_id()
        for pid, segments in per_policy.items():
            cols = self.columns[pid]
            for seg in segments:
                key = (pid, int(seg[SampleBatch.EPS_ID][0]))
                ae = eps.by_eps[key]
                live = eps.is_live(ae)
                ae.unemitted = int(holds[pid][ae.slot]) if live else 0
                if cols.need_infos:
                    ae.infos.attach(seg)  # the agent's infos of these steps (its entry of the env's info dict)
                if self._was_cut(key, not live):
                    seg[SampleBatch.TRUNCATEDS][-1] = True
                finish_segment(seg, cols, unroll, ae.agent_index, self.adapter.reward_dtype)
        carried, self._carry = self._carry, []
        for pid, seg in carried:  # held back from the last batch: they belong to this one (its unroll_id)
            ae = eps.by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
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
        return self._hand_out(segments=(per_policy, env_steps))

    @staticmethod
    def _running(comps_by_pid: dict[str, list[AgentStep]]) -> list[tuple[str, Any]]:
        """The agent steps of one env step, in storing order: (policy, slot) of agents that run on, (policy, agent
        episode) of those done."""
        return [(pid, c[0] if c[7] else c[0].slot) for pid, comps in comps_by_pid.items() for c in comps]

    def _eps_id_of(self, pid: str, ae: AgentEpisode) -> int:
        for key, other in self.agent_eps.by_eps.items():
            if other is ae and key[0] == pid:
                return key[1]
        raise KeyError(ae.agent_id)

    def _postprocess(self, segments: tuple[dict[str, list[SampleBatch]], int]) -> MultiAgentBatch:
        per_policy, env_steps = segments
        by_eps = self.agent_eps.by_eps
        policy_batches = {}
        # Each episode's segments in this batch, for other_agent_batches (built only for a policy that
        # overrides postprocess_trajectory: the default one reads nothing).
        by_episode: dict[int, list[tuple[AgentEpisode, SampleBatch]]] = {}
        for p2, segs2 in per_policy.items():
            for s2 in segs2:
                o = by_eps[(p2, int(s2[SampleBatch.EPS_ID][0]))]
                by_episode.setdefault(id(o.episode), []).append((o, s2))
        for pid, segs in per_policy.items():
            policy = self.policies[pid]
            custom_post = custom_postprocess(policy)
            out = []
            with policy._postprocessing(segs):
                for seg in segs:
                    ae = by_eps[(pid, int(seg[SampleBatch.EPS_ID][0]))]
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
        live_eps = {(pid, int(e)) for pid, c in self._collectors.items() for e in c.eps_ids() if e >= 0}
        live_eps |= {(pid, int(s[SampleBatch.EPS_ID][0])) for pid, s in self._carry}
        self.agent_eps.by_eps = {key: ae for key, ae in by_eps.items() if key in live_eps}
        return MultiAgentBatch(policy_batches, env_steps)
