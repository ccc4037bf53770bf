"""Faults inside sample(): the worker never hands out a transition that did not happen, none twice, no gaps.

A hypothesis property test injects faults at random points (an env's step or
reset raises or returns a bad value, the policy raises, a callback raises,
postprocessing raises, a KeyboardInterrupt), retries, and checks every batch
against the envs' own log of what they did. The scripted envs make every
row self-describing: obs = (uid, t), reward t + 1 after step t.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from rollout_helpers import ObsActionPolicy, ScriptedEnv

import trajview as tv

FAULTS = ["raise", "interrupt", "bad_reward", "bad_flag", "bad_obs", "reset_raise"]


class Injected(RuntimeError):
    pass


class FaultyEnv(ScriptedEnv):
    """A ScriptedEnv that logs every step it completes and fails where ``faults`` says.

    ``faults``: {call number: kind}, counted over this env's step() calls
    (reset faults over its reset() calls).
    """

    def __init__(self, lengths, env_index, faults, log, truncate=False):
        super().__init__(lengths, env_index, truncate)
        self.faults = faults
        self.log = log
        self.calls = 0
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.faults.get(("reset", self.resets)) == "reset_raise":
            raise Injected(f"injected reset fault in env {self.env_index}")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.calls += 1
        kind = self.faults.get(("step", self.calls))
        if kind == "raise":
            raise Injected(f"injected step fault in env {self.env_index}")
        if kind == "interrupt":
            raise KeyboardInterrupt
        uid, t = self.uid, self.t
        o, r, te, tr, info = super().step(action)
        self.log[(uid, t)] = int(action)  # the env did this step (whatever it returns next)
        if kind == "bad_reward":
            return o, None, te, tr, info
        if kind == "bad_flag":
            return o, r, "False", tr, info
        if kind == "bad_obs":
            return np.zeros(3, np.float32), r, te, tr, info
        return o, r, te, tr, info


class FaultyPolicy(ObsActionPolicy):
    """Raises at the compute-actions calls and postprocessing calls the test names (postprocessing: if overridden)."""

    act_faults: set[int] = set()
    post_faults: set[int] = set()

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["prev_actions"] = tv.ViewRequirement("actions", shift=-1)
        self.act_calls = 0
        self.post_calls = 0

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        if explore:  # not the pruning pass
            self.act_calls += 1
            if self.act_calls in self.act_faults:
                raise Injected("injected policy fault")
        return super().compute_actions_from_input_dict(input_dict, explore, timestep, **kwargs)


class PostprocessingPolicy(FaultyPolicy):
    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        if episode is not None:
            self.post_calls += 1
            if self.post_calls in self.post_faults:
                raise Injected("injected postprocessing fault")
        return sample_batch


class FaultyCallbacks(tv.Callbacks):
    def __init__(self, faults):
        self.faults = faults
        self.calls = 0

    def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        self.calls += 1
        if self.calls in self.faults:
            raise Injected("injected callback fault")


fault_sets = st.dictionaries(
    st.tuples(st.sampled_from(["step", "reset"]), st.integers(1, 40)), st.sampled_from(FAULTS), max_size=4
)


@settings(max_examples=300, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    truncate=st.booleans(),
    fragment=st.integers(1, 6),
    batch_mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    vector=st.booleans(),
    env_faults=st.lists(fault_sets, min_size=3, max_size=3),
    act_faults=st.sets(st.integers(1, 30), max_size=3),
    post_faults=st.sets(st.integers(1, 10), max_size=2),
    callback_faults=st.sets(st.integers(1, 40), max_size=2),
    postprocess=st.booleans(),
    restart=st.booleans(),
    samples=st.integers(2, 6),
)
def test_faults_never_give_a_wrong_row(
    num_envs, lengths, truncate, fragment, batch_mode, vector, env_faults, act_faults, post_faults, callback_faults,
    postprocess, restart, samples,
):
    log: dict[tuple[int, int], int] = {}
    made = []

    def new_env(cfg=None):
        i = len(made)
        # Envs made later (recreated after a fault) get fresh indices, so their uids are new too.
        env = FaultyEnv(lengths, i, env_faults[i] if i < len(env_faults) else {}, log, truncate)
        made.append(env)
        return env

    if vector:
        def creator(cfg):
            envs = [new_env() for _ in range(num_envs)]
            return gym.vector.SyncVectorEnv([lambda e=e: e for e in envs])
    else:
        creator = new_env
    policy_cls = type("P", (PostprocessingPolicy if postprocess else FaultyPolicy,),
                      {"act_faults": act_faults, "post_faults": post_faults})
    w = tv.RolloutWorker(
        creator, policy_cls, num_envs=1 if vector else num_envs, batch_mode=batch_mode,
        rollout_fragment_length=fragment, callbacks=FaultyCallbacks(callback_faults),
        restart_failed_sub_environments=restart,
    )
    target = fragment * num_envs
    seen: dict[tuple[int, int], int] = {}
    batches = []
    attempts = 0
    while len(batches) < samples and attempts < samples + 15:
        attempts += 1
        try:
            b = w.sample()
        except (Injected, KeyboardInterrupt) as e:
            event(f"sample() raised {type(e).__name__}")
            continue
        except ValueError as e:
            # trajview's checks name the column; a VectorEnv may fail on a bad observation itself first.
            assert vector or any(c in str(e) for c in ("'rewards'", "'terminateds'", "'obs'")), e
            event("sample() raised ValueError")
            continue
        batches.append(b)
        if batch_mode == "truncate_episodes":
            assert len(b) == target, "a sample returns exactly the batch size, faults or not"
        else:
            assert len(b) >= target
    for b in batches:
        if not len(b):
            continue
        uid = b["obs"][:, 0].astype(int)
        t = b["obs"][:, 1].astype(int)
        for r in range(len(b)):
            key = (int(uid[r]), int(t[r]))
            assert key in log, f"row {key} is a transition no env made"
            assert key not in seen, f"transition {key} emitted twice"
            seen[key] = int(b["eps_id"][r])
            assert b["actions"][r] == log[key], "the stored action is the one the env got"
            assert b["new_obs"][r].tolist() == [uid[r], t[r] + 1]
            assert b["rewards"][r] == t[r] + 1
        for ep in b.split_by_episode():
            et = ep["obs"][:, 1].astype(int)
            assert len(set(ep["obs"][:, 0].astype(int))) == 1 and (np.diff(et) == 1).all()
            assert (np.diff(ep["t"]) == 1).all() and (ep["t"] == et).all()
            # No flag inside an episode segment, except on its last row.
            assert not (ep["terminateds"][:-1].any() or ep["truncateds"][:-1].any())
            assert ep["prev_actions"].tolist() == [log.get((int(ep["obs"][0, 0]), s - 1), 0) if s else 0 for s in et]
    # Per episode, the transitions handed out are a prefix: nothing missing inside an episode.
    by_uid: dict[int, set[int]] = {}
    for u, t in seen:
        by_uid.setdefault(u, set()).add(t)
    for u, ts in by_uid.items():
        assert ts == set(range(len(ts))), f"episode {u} has a gap: {sorted(ts)}"
        assert len({seen[(u, t)] for t in ts}) == 1, "one eps_id per episode"
    # Flags: where the env ended the episode, its flag; an episode that goes on in a later row has none there.
    for b in batches:
        if not len(b):
            continue
        for ep in b.split_by_episode():
            u, last_t = int(ep["obs"][-1, 0]), int(ep["obs"][-1, 1])
            flagged = bool(ep["terminateds"][-1] or ep["truncateds"][-1])
            if (u, last_t + 1) in seen:
                assert not flagged, "an episode that goes on has no flag"
            length = lengths[(u % 10_000) % len(lengths)]
            if last_t + 1 == length:
                assert (ep["truncateds"] if truncate else ep["terminateds"])[-1], "the env's own end is flagged"


def test_an_env_that_raises_cuts_its_episode_and_the_next_sample_is_exact():
    log: dict = {}
    envs = [FaultyEnv((10,), 0, {}, log), FaultyEnv((10,), 1, {("step", 3): "raise"}, log), FaultyEnv((10,), 2, {}, log)]
    it = iter(envs)
    w = tv.RolloutWorker(lambda cfg: next(it), FaultyPolicy, num_envs=3, rollout_fragment_length=4)
    with pytest.raises(Injected):
        w.sample()  # the third vector step: env 0 stepped, env 1 raised, env 2 not stepped yet
    b = w.sample()
    assert len(b) == 12
    rows = {(int(u), int(t)): (bool(te), bool(tr)) for (u, t), te, tr in zip(b["obs"], b["terminateds"], b["truncateds"])}
    # Envs 0 and 1: steps 0 and 1 stored, the episode cut there (marked truncated, nothing made up), a new one begun.
    for env in (0, 1):
        uid = env * 10_000
        assert rows[(uid, 0)] == (False, False) and rows[(uid, 1)] == (False, True) and (uid, 2) not in rows
        assert {(uid + 1, 0), (uid + 1, 1)} <= set(rows)
    assert (0, 2) in log, "env 0 did make that step: all-or-nothing left it out"
    # Env 2 never stepped in the failed step: its episode goes on, 4 steps in a row.
    assert [t for (u, t) in sorted(rows) if u == 20_000] == [0, 1, 2, 3]
    assert w.get_metrics()["num_faulty_episodes"] == 2


def _first_env_fails_at_step_3() -> tuple[list[FaultyEnv], Any]:
    """An env creator whose first env raises in its third step (episodes of 10 steps), and the envs it made."""
    log: dict = {}
    made: list[FaultyEnv] = []

    def creator(cfg):
        env = FaultyEnv((10,), len(made), {("step", 3): "raise"} if not made else {}, log)
        made.append(env)
        return env

    return made, creator


def test_restart_failed_sub_environments_recreates_the_env_and_the_others_go_on():
    made, creator = _first_env_fails_at_step_3()
    w = tv.RolloutWorker(creator, FaultyPolicy, num_envs=2, rollout_fragment_length=5,
                         restart_failed_sub_environments=True)
    b = w.sample()
    assert len(b) == 10
    env1 = b["obs"][b["obs"][:, 0] // 10_000 == 1]
    assert env1[:, 1].tolist() == list(range(5)), "the env that did not fail goes on, step after step"
    m = w.get_metrics()
    assert m["num_env_restarts"] == 1 and m["num_faulty_episodes"] == 1
    assert len(made) == 3


@pytest.mark.parametrize("horizon", [None, 4])
def test_a_slot_catching_up_after_its_env_failed_counts_its_episodes_steps(horizon):
    """With restart_failed_sub_environments, the recreated env's slot steps alone until it catches up: its episode's
    length (what the callbacks see, and the horizon's count) counts those steps as any other, and each episode's
    lengths go 1, 2, 3, ... as its env's own step counter does (``obs[1]``: its step index)."""
    _, creator = _first_env_fails_at_step_3()
    steps: dict[int, list[tuple[int, int]]] = {}
    ended: dict[int, int] = {}

    class Lengths(tv.Callbacks):
        def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kwargs):
            steps.setdefault(episode.episode_id, []).append((episode.length, int(episode.last_observation_for()[1])))

        def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
            ended[episode.episode_id] = episode.length

    w = tv.RolloutWorker(creator, FaultyPolicy, num_envs=2, rollout_fragment_length=6, horizon=horizon,
                         restart_failed_sub_environments=True, callbacks=Lengths())
    batches = [w.sample() for _ in range(3)]
    assert w.get_metrics()["num_env_restarts"] == 1
    assert len(steps) >= 3
    for eid, seen in steps.items():
        lengths = [n for n, _ in seen]
        assert lengths == list(range(1, len(seen) + 1)), f"episode {eid}: lengths {lengths}"
        assert [t for _, t in seen] == lengths, f"episode {eid}: its env's steps {seen}"
        if horizon is not None:
            assert len(seen) <= horizon
        if eid in ended:
            assert ended[eid] == len(seen)
    rows = {}
    for b in batches:
        for eid in b["eps_id"].tolist():
            rows[eid] = rows.get(eid, 0) + 1
    assert all(rows[eid] == n for eid, n in ended.items() if eid in rows), (rows, ended)


def test_bad_reward_and_flag_values_are_errors_naming_the_column():
    for kind, pattern in [("bad_reward", r"column 'rewards': env 0 returned a reward of type NoneType"),
                          ("bad_flag", r"column 'terminateds': env 0 returned 'False' of type str, expected a bool")]:
        env = FaultyEnv((10,), 0, {("step", 2): kind}, {})
        w = tv.RolloutWorker(lambda cfg: env, FaultyPolicy, rollout_fragment_length=4)
        with pytest.raises(ValueError, match=pattern):
            w.sample()


# -- multi-agent ----------------------------------------------------------------------------------

pettingzoo = pytest.importorskip("pettingzoo")


def _faulty_two_agent_env():
    from test_multi_agent import TwoAgentEnv

    class FaultyTwoAgentEnv(TwoAgentEnv):
        """TwoAgentEnv (uid = env * 10000 + episode * 10 + agent; obs (uid, t)) that logs steps and fails on cue."""

        def __init__(self, env_index, faults, log, len_a, len_b):
            super().__init__(env_index, len_a, len_b)
            self.faults, self.log, self.calls = faults, log, 0

        def step(self, actions):
            self.calls += 1
            kind = self.faults.get(self.calls)
            if kind == "raise":
                raise Injected(f"injected step fault in env {self.env_index}")
            if kind == "interrupt":
                raise KeyboardInterrupt
            before = {a: (self.uid(a), self.t) for a in actions}
            out = super().step(actions)
            for a, key in before.items():
                self.log[key] = int(actions[a])
            if kind == "bad_reward":
                return out[0], {a: "1.0" for a in out[1]}, *out[2:]
            return out

    return FaultyTwoAgentEnv


@settings(max_examples=150, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    len_a=st.integers(1, 6),
    len_b=st.integers(1, 6),
    fragment=st.integers(1, 5),
    batch_mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    count_steps_by=st.sampled_from(["env_steps", "agent_steps"]),
    env_faults=st.lists(st.dictionaries(st.integers(1, 25), st.sampled_from(["raise", "interrupt", "bad_reward"]),
                                        max_size=3), min_size=3, max_size=3),
    act_faults=st.sets(st.integers(1, 30), max_size=2),
    samples=st.integers(2, 5),
)
def test_multi_agent_faults_never_give_a_wrong_row(
    num_envs, len_a, len_b, fragment, batch_mode, count_steps_by, env_faults, act_faults, samples
):
    env_cls = _faulty_two_agent_env()
    log: dict = {}
    made = iter(range(100))

    def creator(cfg):
        i = next(made)
        return env_cls(i, env_faults[i] if i < 3 else {}, log, len_a, len_b)

    policy_cls = type("P", (FaultyPolicy,), {"act_faults": act_faults, "post_faults": set()})
    w = tv.RolloutWorker(creator, policy_cls, num_envs=num_envs, rollout_fragment_length=fragment,
                         batch_mode=batch_mode, count_steps_by=count_steps_by)
    seen: dict = {}
    got = 0
    for _ in range(samples + 10):
        if got == samples:
            break
        try:
            mb = w.sample()
        except (Injected, KeyboardInterrupt):
            continue
        except ValueError as e:
            assert "'rewards'" in str(e), e
            continue
        got += 1
        if batch_mode == "truncate_episodes" and count_steps_by == "env_steps":
            assert mb.env_steps() == fragment * num_envs, "env steps of a batch: exactly the fragment, faults or not"
        b = mb.policy_batches.get("default_policy")
        if b is None:
            continue
        for r in range(len(b)):
            key = (int(b["obs"][r, 0]), int(b["obs"][r, 1]))
            assert key in log, f"row {key} is a transition no env made"
            assert key not in seen, f"transition {key} emitted twice"
            seen[key] = int(b["eps_id"][r])
            assert b["actions"][r] == log[key]
            assert b["new_obs"][r].tolist() == [key[0], key[1] + 1]
            assert b["env_id"][r] == key[0] // 10_000 and b["agent_index"][r] == key[0] % 10
    by_uid: dict = {}
    for u, t in seen:
        by_uid.setdefault(u, set()).add(t)
    for u, ts in by_uid.items():
        assert ts == set(range(len(ts))), f"agent trajectory {u} has a gap: {sorted(ts)}"
