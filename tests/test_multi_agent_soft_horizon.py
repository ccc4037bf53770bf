"""Soft horizons with turn-based agents: an agent waiting for its turn at the horizon keeps its step open until
its next observation (its new_obs is that observation, its reward every reward given to it since it acted), then
its trajectory is cut and a new one (new eps_id, t = 0) starts from that observation. No reward is lost: each
agent's rows tile its timeline, one row's new_obs the next row's obs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pettingzoo")

import trajview as tv  # noqa: E402
from ma_envs import Script, ScriptedEnv  # noqa: E402
from test_multi_agent_turns import RefPolicy, rllib_mapping, setups  # noqa: E402


def make_worker(scripts, n_agents, num_envs, **kw):
    it = iter(range(1000))
    return tv.RolloutWorker(lambda cfg: ScriptedEnv(scripts, n_agents, next(it)),
                            {"even": RefPolicy, "odd": RefPolicy}, num_envs=num_envs,
                            policy_mapping_fn=rllib_mapping, **kw)


def env_reward(a, s0, s1):
    """What ScriptedEnv gives agent a over env steps s0+1 .. s1."""
    return sum((a + 1) + 0.5 * s for s in range(s0 + 1, s1 + 1))


def rows_of(batches):
    """Per uid, the rows (obs_s, new_obs_s, reward, eps_id, t, done) of all batches, by obs_s."""
    out: dict[int, list[tuple]] = {}
    for b in batches:
        for pb in b.policy_batches.values():
            for j in range(len(pb)):
                uid = int(pb["obs"][j, 0])
                out.setdefault(uid, []).append((float(pb["obs"][j, 1]), float(pb["new_obs"][j, 1]),
                                                float(pb["rewards"][j]), int(pb["eps_id"][j]), int(pb["t"][j]),
                                                bool(pb["terminateds"][j] or pb["truncateds"][j])))
    return {u: sorted(r) for u, r in out.items()}


def check_no_reward_lost(batches, scripts):
    horizon_cuts = 0
    for uid, rows in rows_of(batches).items():
        a = uid % 10
        k = (uid // 10) % 10_000
        length = scripts[k % len(scripts)].length
        for j, (s0, s1, r, eps, t, done) in enumerate(rows):
            if s1 > s0:
                assert r == pytest.approx(env_reward(a, int(s0), int(s1))), (uid, s0, s1)
            else:  # no next observation: only at the env episode's end (its last obs stands in)
                assert done, (uid, s0, s1, "a made-up new_obs before the end")
                assert r == pytest.approx(env_reward(a, int(s0), length)), (uid, s0)
            if j:
                assert rows[j - 1][1] == s0, (uid, "a gap between rows: rewards between them lost")
                if rows[j - 1][3] != eps:  # a new trajectory (the soft horizon) starts at t = 0
                    assert t == 0
                    horizon_cuts += 1
                else:
                    assert t == rows[j - 1][4] + 1
    return horizon_cuts


def test_waiting_agent_keeps_its_step_across_a_soft_horizon():
    # a1 is observed on even steps only; the horizon (3) falls on step 3, where a1 waits for its turn. Its step
    # from s=2 ends at s=4 with both rewards (s=3, s=4); its new trajectory starts from the obs of s=4.
    sc = Script(100, [0, 0], [None, None], [True, True], [0b11, 0b01])
    w = make_worker([sc], 2, 1, rollout_fragment_length=12, horizon=3, soft_horizon=True)
    batches = [w.sample() for _ in range(2)]
    assert check_no_reward_lost(batches, [sc]) > 0
    a1 = rows_of(batches)[1]
    s2 = [r for r in a1 if r[0] == 2.0][0]
    assert s2[1] == 4.0 and s2[2] == pytest.approx(env_reward(1, 2, 4)) and not s2[5]
    s4 = [r for r in a1 if r[0] == 4.0][0]
    assert s4[3] != s2[3] and s4[4] == 0  # a new trajectory from the observation of s=4
    ms = w.get_metrics()
    assert len(ms["episode_lengths"]) >= 2 and set(ms["episode_lengths"]) == {3}


@st.composite
def soft_setups(draw):
    n_agents = draw(st.integers(1, 3))
    scripts = []
    for _ in range(draw(st.integers(1, 2))):
        length = draw(st.integers(3, 12))
        turns = draw(st.lists(st.integers(0, 2**n_agents - 1), min_size=1, max_size=3))
        join = [0] + [draw(st.integers(0, length - 1)) for _ in range(n_agents - 1)]
        scripts.append(Script(length, join, [None] * n_agents, [True] * n_agents, turns,
                              end_obs=draw(st.booleans())))
    return dict(scripts=scripts, n_agents=n_agents, num_envs=draw(st.integers(1, 2)),
                fragment=draw(st.integers(1, 6)), horizon=draw(st.integers(2, 5)),
                batch_mode=draw(st.sampled_from(["truncate_episodes", "complete_episodes"])),
                count=draw(st.sampled_from(["env_steps", "agent_steps"])))


@settings(max_examples=80, deadline=None)
@given(soft_setups())
def test_soft_horizon_loses_no_reward(s):
    w = make_worker(s["scripts"], s["n_agents"], s["num_envs"], rollout_fragment_length=s["fragment"],
                    horizon=s["horizon"], soft_horizon=True, batch_mode=s["batch_mode"], count_steps_by=s["count"])
    batches = [w.sample() for _ in range(3)]
    target = s["fragment"] * s["num_envs"]
    for b in batches:
        n = sum(len(pb) for pb in b.policy_batches.values())
        assert b.agent_steps() == n
        if s["batch_mode"] == "truncate_episodes":
            assert (b.agent_steps() if s["count"] == "agent_steps" else b.env_steps()) == target
    check_no_reward_lost(batches, s["scripts"])


@settings(max_examples=60, deadline=None)
@given(setups())
def test_soft_horizon_with_joins_and_deaths(s):
    # Agents that join late, leave (with or without a last observation) and act in turns, with a soft horizon:
    # every row once across batches, the batch sizes of SPEC section 6.
    horizon = s["horizon"] or 3
    w = make_worker(s["scripts"], s["n_agents"], s["num_envs"], rollout_fragment_length=s["fragment"],
                    horizon=horizon, soft_horizon=True, batch_mode=s["batch_mode"], count_steps_by=s["count"])
    target = s["fragment"] * s["num_envs"]
    seen = set()
    for _ in range(3):
        b = w.sample()
        if s["batch_mode"] == "truncate_episodes":
            assert (b.agent_steps() if s["count"] == "agent_steps" else b.env_steps()) == target
        for pb in b.policy_batches.values():
            for uid, obs_s in pb["obs"].astype(np.int64).tolist():  # (t restarts at a soft horizon: not a key)
                assert (uid, obs_s) not in seen, f"row {(uid, obs_s)} twice"
                seen.add((uid, obs_s))
