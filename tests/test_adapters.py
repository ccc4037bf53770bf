"""The env-adapter contract, checked the same way over every adapter (trajview.envs).

A `VectorEnvAdapter` step returns, for an env whose episode ended, that
episode's final observation; `reset_envs` then returns the next episode's
first one, whatever the env's autoreset convention. The reference is the
scripted env's own bookkeeping: episode k of env i sees observations
(uid, t) for t = 0..length, rewards t + 1 after step t.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rollout_helpers import UID_STRIDE, ObsActionPolicy, ScriptedEnv, expected_action

import trajview as tv
from trajview.envs import (
    GymEnvList,
    GymVectorEnv,
    MultiAgentEnvAdapter,
    PettingZooParallelEnv,
    VectorEnvAdapter,
    make_adapter,
)

KINDS = ["list", "NEXT_STEP", "SAME_STEP", "DISABLED"]


def make(kind: str, envs: list[ScriptedEnv]) -> VectorEnvAdapter:
    if kind == "list":
        return GymEnvList(envs)
    mode = getattr(gym.vector.AutoresetMode, kind)
    return GymVectorEnv(gym.vector.SyncVectorEnv([lambda e=e: e for e in envs], autoreset_mode=mode))


class Reference:
    """What env i must show: its episode counter k, its step t, and its scripted lengths."""

    def __init__(self, lengths: list[list[int]]):
        self.lengths = lengths
        self.k = [0] * len(lengths)
        self.t = [0] * len(lengths)

    def obs(self, i: int) -> list[float]:
        return [i * UID_STRIDE + self.k[i], self.t[i]]

    def length(self, i: int) -> int:
        ls = self.lengths[i]
        return ls[self.k[i] % len(ls)]


@given(
    kind=st.sampled_from(KINDS),
    lengths=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1, max_size=4),
    steps=st.integers(1, 25),
    truncate=st.booleans(),
    in_place=st.booleans(),
)
def test_vector_adapters_follow_the_contract(kind, lengths, steps, truncate, in_place):
    envs = [ScriptedEnv(ls, i, truncate) for i, ls in enumerate(lengths)]
    ad = make(kind, envs)
    n = len(envs)
    assert ad.num_envs == n and not ad.multi_agent
    assert ad.observation_space == ScriptedEnv.observation_space and ad.action_space == ScriptedEnv.action_space
    ref = Reference(lengths)
    obs, infos = ad.reset(seed=0)
    assert obs.shape == (n, 2) and len(infos) == n
    np.testing.assert_array_equal(obs, [ref.obs(i) for i in range(n)])
    assert all(info["uid"] == i * UID_STRIDE for i, info in enumerate(infos))
    for _ in range(steps):
        out = np.full((n, 2), -1, np.float32) if in_place else None
        actions = np.arange(n, dtype=np.int64) % 5
        st_ = ad.step(actions, out, need_infos=True)
        if in_place and ad.writes_obs_in_place:
            assert st_.obs is out
        done = np.zeros(n, bool)
        for i in range(n):
            ref.t[i] += 1
            done[i] = ref.t[i] >= ref.length(i)
            assert list(st_.obs[i]) == ref.obs(i), "a step's observation is the one after the action, final included"
            assert st_.rewards[i] == ref.t[i]
            assert bool(st_.terminateds[i]) == (done[i] and not truncate)
            assert bool(st_.truncateds[i]) == (done[i] and truncate)
            assert st_.infos is not None and st_.infos[i]["t"] == ref.t[i]
        assert st_.any_done == bool(done.any())
        ids = np.flatnonzero(done)
        if len(ids):
            r_obs, r_infos = ad.reset_envs(ids)
            assert len(r_obs) == len(ids) == len(r_infos)
            for j, i in enumerate(ids):
                ref.k[i] += 1
                ref.t[i] = 0
                assert list(r_obs[j]) == ref.obs(i), "reset_envs gives the next episode's first observation"
    ad.close()


def test_vector_adapter_leaves_infos_out_unless_asked():
    ad = make("list", [ScriptedEnv((3,), 0)])
    ad.reset()
    assert ad.step(np.zeros(1, np.int64)).infos is None


def test_gym_env_list_rejects_an_observation_that_does_not_fit():
    class Bad(ScriptedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return o.astype(np.float64) + 0.5, r, te, tr, info

    ad = GymEnvList([ScriptedEnv((3,), 0), Bad((3,), 1)])
    ad.reset()
    with pytest.raises(ValueError, match=r"column 'obs': env 1 returned an observation of dtype float64"):
        ad.step(np.zeros(2, np.int64))


def test_make_adapter_picks_the_adapter_for_each_kind():
    assert isinstance(make_adapter(lambda cfg: ScriptedEnv(), {}, 3), GymEnvList)
    vec = lambda cfg: gym.vector.SyncVectorEnv([lambda: ScriptedEnv() for _ in range(2)])  # noqa: E731
    assert isinstance(make_adapter(vec, {}, 1), GymVectorEnv)
    assert make_adapter(vec, {}, 2).num_envs == 2
    with pytest.raises(ValueError, match="num_envs=3 but env_creator returned a VectorEnv of 2 envs"):
        make_adapter(vec, {}, 3)
    ready = GymEnvList([ScriptedEnv()])
    assert make_adapter(lambda cfg: ready, {}, 1) is ready
    with pytest.raises(TypeError, match="env_creator must return a gymnasium.Env.*got int"):
        make_adapter(lambda cfg: 3, {}, 1)


def test_env_config_reaches_the_creator():
    seen = []
    make_adapter(lambda cfg: seen.append(cfg) or ScriptedEnv(), {"x": 1}, 2)
    assert seen == [{"x": 1}, {"x": 1}]


def test_a_worker_takes_an_adapter_as_its_env():
    """A new kind of env is one adapter: the worker steps it like any other."""
    envs = [ScriptedEnv((3,), i) for i in range(2)]

    class Wrapped(GymEnvList):
        pass

    w = tv.RolloutWorker(lambda cfg: Wrapped(envs), ObsActionPolicy, num_envs=2, rollout_fragment_length=4)
    b = w.sample()
    assert len(b) == 8
    env0 = b["env_id"] == 0
    np.testing.assert_array_equal(b["obs"][env0][:, 1], [0, 1, 2, 0])
    np.testing.assert_array_equal(b["new_obs"][env0][:, 1], [1, 2, 3, 1])
    assert [a[2] for a in envs[0].actions] == [expected_action(u, t) for u, t, _ in envs[0].actions]


pettingzoo = pytest.importorskip("pettingzoo")


def test_pettingzoo_parallel_adapter_follows_the_contract():
    from test_multi_agent import TwoAgentEnv

    ad = make_adapter(lambda cfg: TwoAgentEnv(), {}, 2)
    assert isinstance(ad, PettingZooParallelEnv) and isinstance(ad, MultiAgentEnvAdapter) and ad.multi_agent
    assert ad.num_envs == 2 and ad.possible_agents == ["a", "b"]
    assert ad.observation_space("a").shape == (2,) and ad.action_space("b").n == 5
    obs, infos = ad.reset(1, seed=3)
    assert set(obs) == {"a", "b"} and set(infos) == {"a", "b"}
    ad.reset(0)
    steps = ad.step([{"a": 0, "b": 1}, {"a": 2, "b": 3}])
    assert len(steps) == 2
    for s in steps:
        assert set(s.obs) == {"a", "b"} and s.rewards == {"a": 1.0, "b": 1.0}
        assert s.terminateds == {"a": False, "b": False} and set(s.truncateds) == {"a", "b"}
    ad.close()
