"""A small pure-Python reference of multi-agent sampling (RLlib's semantics), for `ScriptedEnv` s.

`reference_log` steps ``num_envs`` envs in lock step with a deterministic action function and records, per
step, the agent steps that complete (an agent's step completes when the env next observes it or ends it;
rewards given meanwhile add up on it) and the env episodes that end. `expected_batches` cuts that log into
batches by SPEC section 6 (both batch modes, both step counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    uid: int  # env * 100_000 + episode * 10 + agent
    t: int
    obs_s: float  # env step at which obs was observed
    action: int
    reward: float
    term: bool
    trunc: bool
    new_obs_s: float
    prev_action: int
    prev_reward: float


@dataclass
class Traj:
    uid: int
    rows: list = field(default_factory=list)
    obs: list | None = None  # the observation it acts on next ([uid, s])
    last_obs: list | None = None
    pending: tuple | None = None  # (obs, action)
    acc: float = 0.0


@dataclass
class StepLog:
    rows: list  # Rows completed in this step
    ended: list  # (env length, agent steps, episode key env * 10_000 + k) of env episodes that ended in this step


def action_fn(obs):
    return int(obs[0] + obs[1]) % 7


def reference_log(make_env, num_envs, n_steps, horizon=None):
    envs = [make_env(i) for i in range(num_envs)]
    state = []

    def reset(i):
        obs, _ = envs[i].reset()
        trajs = {}
        for a, o in obs.items():
            o = [float(x) for x in o]
            trajs[a] = Traj(int(o[0]), obs=o, last_obs=o)
        state[i] = {"trajs": trajs, "length": 0, "agent_steps": 0}

    state = [None] * num_envs
    for i in range(num_envs):
        reset(i)
    log = []
    for _ in range(n_steps):
        rows, ended = [], []
        for i, env in enumerate(envs):
            st = state[i]
            trajs = st["trajs"]
            acts = {}
            for a, tr in trajs.items():
                if tr.obs is not None:
                    acts[a] = action_fn(tr.obs)
                    tr.pending = (tr.obs, acts[a])
                    tr.obs = None
            obs, rew, te, trn, _ = env.step(acts)
            st["length"] += 1
            all_done = te.get("__all__", False) or trn.get("__all__", False)
            hard = horizon is not None and st["length"] >= horizon
            for a, tr in list(trajs.items()):
                if tr.pending is None:
                    continue
                a_te = bool(te.get(a, False)) or bool(te.get("__all__", False))
                a_tr = bool(trn.get(a, False)) or bool(trn.get("__all__", False))
                done = a_te or a_tr or hard
                tr.acc += rew.get(a, 0.0)
                if a not in obs and not done:
                    continue
                o_new = [float(x) for x in obs[a]] if a in obs else tr.last_obs
                o, act = tr.pending
                prev = tr.rows[-1] if tr.rows else None
                row = Row(tr.uid, len(tr.rows), o[1], act, tr.acc, a_te, a_tr or (hard and not a_te), o_new[1],
                          prev.action if prev else 0, prev.reward if prev else 0.0)
                tr.rows.append(row)
                rows.append(row)
                st["agent_steps"] += 1
                tr.pending, tr.acc, tr.last_obs = None, 0.0, o_new
                if done:
                    del trajs[a]
                elif a in obs:
                    tr.obs = o_new
            # agents observed for the first time join
            for a, o in obs.items():
                if a not in trajs and not te.get(a) and not trn.get(a) and not all_done and not hard:
                    o = [float(x) for x in o]
                    trajs[a] = Traj(int(o[0]), obs=o, last_obs=o)
            if all_done or hard or not trajs:
                ended.append((st["length"], st["agent_steps"], env.env_index * 10_000 + env.k))
                reset(i)
        log.append(StepLog(rows, ended))
    return log


def expected_complete(log, target, by_agent):
    """complete_episodes: per batch, (episode keys it holds, env steps, agent steps)."""
    out = []
    keys, env_steps, agent_steps = set(), 0, 0
    for step in log:
        for length, n, key in step.ended:
            env_steps += length
            agent_steps += n
            keys.add(key)
        if (agent_steps if by_agent else env_steps) >= target:
            out.append((keys, env_steps, agent_steps))
            keys, env_steps, agent_steps = set(), 0, 0
    return out
