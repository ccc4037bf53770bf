"""Nested observation and action spaces (Dict / Tuple, to any depth) end to end.

The property tests draw random nested spaces (leaf kinds, dtypes, shapes,
nesting), random episode lengths, fragment lengths, batch modes, views of the
observation (stacks with zero or reset padding, ``new_obs``) and of the
actions (``prev_actions``), and envs that fail mid-episode (cut episodes), and
check every leaf of every row against a pure-Python reference: each env logs
what it returned and what it was given, and the expected view of a leaf at
step ``t`` is read from that log by the definition (``col[t + s]``, zeros or
the reset row before ``t = 0``, zeros past the last row).
"""

from __future__ import annotations

import pickle
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.testing import ReferenceCollector
from trajview.views.nest import Nest, flatten_value

VR = tv.ViewRequirement
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- random nested spaces ---------------------------------------------------------------------------------------

LEAF_DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.int8]


@st.composite
def leaf_spaces(draw):
    kind = draw(st.sampled_from(["box", "box", "discrete", "multidiscrete", "multibinary"]))
    if kind == "box":
        dt = draw(st.sampled_from(LEAF_DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
        if np.issubdtype(dt, np.integer):
            return spaces.Box(0, 100, shape, dt)
        return spaces.Box(-1.0, 1.0, shape, dt)
    if kind == "discrete":
        return spaces.Discrete(draw(st.integers(2, 7)), start=draw(st.integers(-2, 2)))
    if kind == "multidiscrete":
        return spaces.MultiDiscrete(draw(st.lists(st.integers(2, 5), min_size=1, max_size=3)))
    return spaces.MultiBinary(draw(st.integers(1, 4)))


def nested_spaces(max_leaves=5):
    def extend(children):
        return st.one_of(
            st.dictionaries(st.sampled_from(["a", "b", "img", "vec", "goal", "x_y"]), children, min_size=1, max_size=3).map(
                spaces.Dict
            ),
            st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(tuple(xs))),
        )

    return st.recursive(leaf_spaces(), extend, max_leaves=max_leaves).filter(
        lambda s: isinstance(s, (spaces.Dict, spaces.Tuple))
    )


def leaf_value(leaf, uid: int, t: int) -> np.ndarray:
    """A distinct, exactly representable value of one leaf for (trajectory ``uid``, step ``t``)."""
    space = leaf.space
    size = int(np.prod(leaf.shape, dtype=np.int64))
    base = np.arange(size).reshape(leaf.shape) if leaf.shape else np.int64(0)
    code = (uid * 31 + t * 7 + base) % 97
    if isinstance(space, spaces.Discrete):
        return np.int64(space.start + int(code) % int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return (code % space.nvec).astype(leaf.dtype)
    if isinstance(space, spaces.MultiBinary):
        return (code % 2).astype(leaf.dtype)
    if leaf.dtype.kind == "f":
        return (code / 100.0).astype(leaf.dtype)
    return code.astype(leaf.dtype)


class NestedEnv(gym.Env):
    """Episodes of scripted lengths; observations are `leaf_value` s of (uid, t); logs every action taken."""

    def __init__(self, obs_space, act_space, lengths, index, fail_at=None):
        self.observation_space = obs_space
        self.action_space = act_space
        self.obs_nest = Nest.from_space(obs_space)
        self.act_nest = Nest.from_space(act_space)
        self.lengths = list(lengths)
        self.index = index
        self.fail_at = set(fail_at or ())  # global step counts at which step() raises
        self.episode = -1
        self.t = 0
        self.steps = 0
        self.actions: dict[int, list] = {}  # uid -> the leaves of each action taken

    @property
    def uid(self) -> int:
        return self.index * 1000 + self.episode

    def _obs(self):
        return self.obs_nest.unflatten(leaf_value(leaf, self.uid, self.t) for leaf in self.obs_nest.leaves)

    def reset(self, *, seed=None, options=None):
        self.episode += 1
        self.t = 0
        self.actions[self.uid] = []
        return self._obs(), {"uid": self.uid}

    def step(self, action):
        self.steps += 1
        if self.steps in self.fail_at:
            raise RuntimeError(f"env {self.index} fails at its step {self.steps}")
        leaves = [np.asarray(v) for v in self.act_nest.leaf_values(action, "action")]
        for leaf, v in zip(self.act_nest.leaves, leaves):
            assert leaf.space.contains(v), (v, leaf.space)
        self.actions[self.uid].append(leaves)
        self.t += 1
        length = self.lengths[self.episode % len(self.lengths)]
        return self._obs(), float(self.t), self.t >= length, False, {"uid": self.uid}


class ActionFromObs(tv.Policy):
    """Actions that are a deterministic function of the current observation; reads the views under test."""

    stack = "-3:0"
    padding = "zero"

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = VR("obs", shift=self.stack, padding=self.padding)
        self.act_nest = Nest.from_space(act_space)
        self.obs_nest = Nest.from_space(obs_space)

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        obs = input_dict["obs"]
        stack = input_dict["stack"]
        first = self.obs_nest.leaf_values(obs, "obs")[0]
        n = len(first)
        self.obs_nest.leaf_values(stack, "stack")  # the stack has the observation's structure
        seed = np.asarray(first).reshape(n, -1).sum(axis=1) if first.size else np.zeros(n)
        leaves = []
        for k, leaf in enumerate(self.act_nest.leaves):
            vals = [leaf_value(leaf, int(abs(s) * 100) % 1000, k) for s in seed]
            leaves.append(np.stack(vals).astype(leaf.dtype) if vals else np.zeros((0,) + leaf.shape, leaf.dtype))
        return self.act_nest.unflatten(leaves), [], {}

    def loss(self, batch):
        batch["obs"], batch["new_obs"], batch["stack"], batch["actions"], batch["prev_actions"], batch["infos"]
        batch["env_id"]
        return 0.0


def expected_row(values, t, s, padding, last):
    """``col[t + s]`` of one trajectory's rows ``values`` (``last`` = its last row index)."""
    i = t + s
    if i < 0:
        return values[0] if padding == "reset" else np.zeros_like(values[0])
    if i > last:
        return np.zeros_like(values[0])
    return values[i]


def check_batch(batch, envs, obs_space, act_space, padding="zero"):
    """Every leaf of every row of ``batch`` against the envs' logs (the reference)."""
    on, an = Nest.from_space(obs_space), Nest.from_space(act_space)
    ts = np.asarray(batch["t"])
    env_ids = np.asarray(batch["env_id"])
    infos = batch["infos"]
    for row in range(len(batch)):
        env = envs[int(env_ids[row])]
        uid = int(infos[row]["uid"])  # the env's own record of the episode of this step
        assert uid // 1000 == env.index
        t = int(ts[row])
        acts = env.actions[uid]
        obs_rows = [[leaf_value(leaf, uid, u) for u in range(len(acts) + 1)] for leaf in on.leaves]
        for k, (c, leaf) in enumerate(zip(on.names("obs"), on.leaves)):
            np.testing.assert_array_equal(batch[c][row], obs_rows[k][t], err_msg=f"{c} row {row}")
            np.testing.assert_array_equal(batch["new_obs" + c[3:]][row], obs_rows[k][t + 1], err_msg=f"new_obs row {row}")
            for j, s in enumerate(range(-3, 1)):
                want = expected_row(obs_rows[k], t, s, padding, len(acts))
                np.testing.assert_array_equal(batch["stack" + c[3:]][row][j], want, err_msg=f"stack{c[3:]} row {row}")
        for k, c in enumerate(an.names("actions")):
            np.testing.assert_array_equal(batch[c][row], acts[t][k], err_msg=f"{c} row {row}")
            prev = acts[t - 1][k] if t > 0 else np.zeros_like(acts[t][k])
            np.testing.assert_array_equal(batch["prev_" + c][row], prev, err_msg=f"prev_{c} row {row}")
        # nested presentation equals the leaves
        nested = batch["obs"]
        np.testing.assert_array_equal(on.leaf_values(nested, "obs")[0][row], batch[on.names("obs")[0]][row])


@settings(max_examples=60, **SETTINGS)
@given(
    obs_space=nested_spaces(),
    act_space=st.one_of(nested_spaces(max_leaves=3), leaf_spaces()),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    num_envs=st.integers(1, 3),
    fragment=st.integers(1, 8),
    mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    padding=st.sampled_from(["zero", "reset"]),
    vector=st.booleans(),
)
def test_worker_nested_spaces_match_reference(obs_space, act_space, lengths, num_envs, fragment, mode, padding, vector):
    policy = type("P", (ActionFromObs,), {"padding": padding})
    envs = [NestedEnv(obs_space, act_space, lengths, i) for i in range(num_envs)]
    if vector:
        it = iter(envs)
        venv = gym.vector.SyncVectorEnv([lambda: next(it) for _ in envs])
        venv_envs = venv.envs
        creator = lambda cfg: venv  # noqa: E731
    else:
        venv_envs = envs
        creator = _creator(envs)
    w = tv.RolloutWorker(creator, policy, num_envs=1 if vector else num_envs, rollout_fragment_length=fragment,
                         batch_mode=mode)
    for _ in range(3):
        b = w.sample()
        assert len(b) >= (fragment * num_envs if mode == "truncate_episodes" else 1)
        if mode == "truncate_episodes":
            assert len(b) == fragment * num_envs
        check_batch(b, venv_envs, obs_space, act_space, padding)
    w.stop()


def _creator(envs):
    it = iter(envs)
    return lambda cfg: next(it)


@settings(max_examples=30, **SETTINGS)
@given(
    obs_space=nested_spaces(),
    lengths=st.lists(st.integers(2, 9), min_size=1, max_size=3),
    fail_at=st.lists(st.integers(1, 25), min_size=1, max_size=3),
    fragment=st.integers(2, 6),
)
def test_cut_episodes_keep_every_leaf_right(obs_space, lengths, fail_at, fragment):
    """An env that raises mid-episode: its episode is cut at its last stored step (truncated), every leaf right."""
    act_space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Box(-1, 1, (2,), np.float32)})
    envs = [NestedEnv(obs_space, act_space, lengths, 0, fail_at=fail_at), NestedEnv(obs_space, act_space, lengths, 1)]
    w = tv.RolloutWorker(_creator(envs), ActionFromObs, num_envs=2, rollout_fragment_length=fragment)
    batches = []
    for _ in range(6):
        try:
            batches.append(w.sample())
        except RuntimeError as e:
            assert "fails at" in str(e)
    assert batches
    for b in batches:
        # A failed step left no row: every row's obs/new_obs/actions come from steps the env really made.
        check_batch(b, envs, obs_space, act_space)
    w.stop()


# -- the collector alone: nested data in, leaf by leaf against the reference collector ---------------------------


@settings(max_examples=40, **SETTINGS)
@given(
    obs_space=nested_spaces(),
    shift=st.sampled_from(["-2:0", "-1:1", [-3, 0], 0, 1, -1]),
    padding=st.sampled_from(["zero", "reset"]),
    steps=st.lists(st.integers(0, 2), min_size=1, max_size=25),
    lazy=st.booleans(),
)
def test_collector_nested_matches_reference_per_leaf(obs_space, shift, padding, steps, lazy):
    on = Nest.from_space(obs_space)
    vr = VR("obs", shift=shift, padding=padding)
    known = vr.shift_to <= 0
    views = {"obs": VR(), "v": VR("obs", shift=shift, padding=padding, used_for_compute_actions=known),
             "actions": VR(used_for_compute_actions=False)}
    coll = tv.Collector(2, {"obs": obs_space, "actions": (np.int64, ())}, views, lazy_views=lazy)
    leaf_cols = on.specs("obs")
    ref_views = {"actions": VR(used_for_compute_actions=False)}
    for c in leaf_cols:
        ref_views[c] = VR()
        ref_views["v" + c[3:]] = VR(c, shift=shift, padding=padding, used_for_compute_actions=known)
    ref = ReferenceCollector(2, {**leaf_cols, "actions": (np.int64, ())}, ref_views, obs_columns=list(leaf_cols))
    slots = np.arange(2)

    def obs_rows(uid, t):
        return on.unflatten(np.stack([leaf_value(leaf, u, t) for u in uid]) for leaf in on.leaves)

    uid, t = np.array([0, 1]), 0
    coll.begin_episodes(slots, {"obs": obs_rows(uid, 0)})
    ref.begin_episodes(slots, flatten_value("obs", obs_rows(uid, 0)))
    for k, op in enumerate(steps):
        t += 1
        data = {"obs": obs_rows(uid, t), "actions": np.array([k, -k])}
        got = coll.step(data)
        coll_flat = {**flatten_value("obs", data["obs"]), "actions": data["actions"]}
        want = ref.step(coll_flat)
        for key, arr in want.items():
            np.testing.assert_array_equal(got[key], arr, err_msg=f"input dict {key}")
        if known:  # presented nested too
            np.testing.assert_array_equal(on.leaf_values(got["v"], "v")[0], want["v" + on.names("obs")[0][3:]])
        if op == 2:
            for b_got, b_want in zip(coll.build_batch(), ref.build_batch()):
                assert sorted(b_got.keys()) == sorted(b_want.keys())
                for key in b_want.keys():
                    np.testing.assert_array_equal(b_got[key], b_want[key], err_msg=f"batch {key}")
                assert isinstance(b_got["v"], (dict, tuple))
        elif op == 1:
            coll.end_episodes(slots)
            ref.end_episodes(slots)
            uid, t = uid + 2, 0
            coll.begin_episodes(slots, {"obs": obs_rows(uid, 0)})
            ref.begin_episodes(slots, flatten_value("obs", obs_rows(uid, 0)))


# -- the nested presentation of a batch ----------------------------------------------------------------------------


def test_sample_batch_presents_nested_columns():
    b = tv.SampleBatch({"obs": {"image": np.zeros((4, 2, 2), np.uint8), "pos": (np.arange(4), np.ones((4, 3)))},
                        "rewards": np.arange(4.0)})
    assert sorted(b.keys()) == ["obs.image", "obs.pos.0", "obs.pos.1", "rewards"]
    assert "obs" in b and "obs.image" in b and "ob" not in b
    assert isinstance(b["obs"], dict) and isinstance(b["obs"]["pos"], tuple)
    np.testing.assert_array_equal(b["obs"]["pos"][0], np.arange(4))
    assert b.nested_keys() == ["obs", "rewards"]
    assert b.leaf_keys("obs") == ["obs.image", "obs.pos.0", "obs.pos.1"]
    # slices, copies, pickling and concat keep the structure
    assert b[1:3]["obs"]["image"].shape == (2, 2, 2)
    assert pickle.loads(pickle.dumps(b))["obs"]["pos"][1].shape == (4, 3)
    assert tv.concat_samples([b, b])["obs"]["pos"][0].tolist() == [0, 1, 2, 3] * 2
    # replace a nested column: old leaves go
    b["obs"] = {"image": np.ones((4, 2, 2), np.uint8)}
    assert sorted(b.keys()) == ["obs.image", "rewards"]
    del b["obs"]
    assert "obs" not in b and list(b.keys()) == ["rewards"]
    with pytest.raises(KeyError, match="obs"):
        b["obs"]
    with pytest.raises(ValueError, match="has 3 rows, expected 4"):
        b["obs"] = {"x": np.zeros(3)}
    assert list(b.keys()) == ["rewards"]  # nothing written


def test_to_padded_and_to_tensordict_keep_the_structure():
    pytest.importorskip("tensordict")
    obs = {"image": np.arange(10, dtype=np.uint8).reshape(5, 2), "vec": np.arange(5, dtype=np.float32)}
    b = tv.SampleBatch(
        obs=obs, new_obs={"image": obs["image"] + 1, "vec": obs["vec"] + 1}, actions=(np.arange(5), np.zeros((5, 2))),
        rewards=np.ones(5, np.float32), terminateds=np.array([0, 1, 0, 0, 1], bool), truncateds=np.zeros(5, bool),
        eps_id=np.array([0, 0, 1, 1, 1]),
    )
    p = b.to_padded()
    assert p["obs"]["image"].shape == (2, 3, 2) and p["mask"].tolist() == [[True, True, False], [True, True, True]]
    assert p["actions"][1].shape == (2, 3, 2)
    td = b.to_tensordict()
    assert td["obs", "image"].shape == (5, 2)
    assert (td["next", "obs", "vec"].numpy() == obs["vec"] + 1).all()
    assert td["action", "0"].tolist() == list(range(5))
    assert td["next", "done"].squeeze(-1).tolist() == [False, True, False, False, True]


# -- errors ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "space, path",
    [
        (spaces.Dict({"image": spaces.Box(0, 1, (2,)), "mission": spaces.Text(10)}), "['mission']"),
        (spaces.Tuple((spaces.Discrete(2), spaces.Sequence(spaces.Discrete(3)))), "[1]"),
        (spaces.Dict({"g": spaces.Graph(spaces.Box(0, 1, (2,)), None)}), "['g']"),
    ],
)
def test_unsupported_leaf_spaces_are_named(space, path):
    class Env(NestedEnv):
        pass

    env = Env.__new__(Env)
    env.observation_space = space
    env.action_space = spaces.Discrete(2)
    where = re.escape(f"observation_space{path}")
    with pytest.raises(ValueError, match=rf"{where}: (Text|Sequence|Graph) spaces are not supported"):
        tv.RolloutWorker(lambda cfg: env, ActionFromObs)


def test_bad_dict_keys_and_structure_errors_name_the_path():
    with pytest.raises(ValueError, match=r"Dict key 'a\.b' cannot name a column"):
        Nest.from_space(spaces.Dict({"a.b": spaces.Discrete(2)}), "observation_space")
    nest = Nest.from_space(spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Tuple((spaces.Discrete(2),) * 2)}))
    with pytest.raises(ValueError, match=r"obs\['b'\]: expected a tuple of 2"):
        nest.leaf_values({"a": 0, "b": (1,)}, "obs")
    with pytest.raises(ValueError, match=r"obs: expected a dict with keys \['a', 'b'\]"):
        nest.leaf_values({"a": 0, "b": (1, 0), "c": 3}, "obs")


def test_env_observation_of_the_wrong_structure_or_leaf_is_an_error_naming_the_leaf():
    obs_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "k": spaces.Discrete(3)})

    class Bad(NestedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return {"pos": np.zeros(3, np.float32), "k": 1}, r, te, tr, info

    env = Bad(obs_space, spaces.Discrete(2), [5], 0)
    w = tv.RolloutWorker(lambda cfg: env, ActionFromObs, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=r"column 'obs\.pos': env 0 returned an observation of dtype float32 and shape \(3,\)"):
        w.sample()

    class MissingKey(NestedEnv):
        def step(self, action):
            o, r, te, tr, info = super().step(action)
            return {"pos": o["pos"], "kk": 1}, r, te, tr, info

    env = MissingKey(obs_space, spaces.Discrete(2), [5], 0)
    w = tv.RolloutWorker(lambda cfg: env, ActionFromObs, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=r"column 'obs': env 0's observation: expected a dict with keys \['k', 'pos'\]"):
        w.sample()


def test_policy_action_of_the_wrong_structure_is_an_error():
    act_space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Discrete(2)})

    class Bad(ActionFromObs):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            n = len(input_dict["obs"]["x"])
            return {"a": np.zeros(n, np.int64)}, [], {}

    env = NestedEnv(spaces.Dict({"x": spaces.Discrete(4)}), act_space, [5], 0)
    w = tv.RolloutWorker(lambda cfg: env, Bad, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=r"column 'actions'.*expected a dict with keys \['a', 'b'\]"):
        w.sample()

    class OutOfRange(ActionFromObs):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            n = len(input_dict["obs"]["x"])
            return {"a": np.full(n, 3), "b": np.zeros(n, np.int64)}, [], {}

    env = NestedEnv(spaces.Dict({"x": spaces.Discrete(4)}), act_space, [5], 0)
    w = tv.RolloutWorker(lambda cfg: env, OutOfRange, rollout_fragment_length=4)
    with pytest.raises(ValueError, match=r"column 'actions\.a'.*outside the action space Discrete\(3\)"):
        w.sample()


# -- storage: each leaf once, big leaves lazy ------------------------------------------------------------------


def test_big_leaves_stay_lazy_and_are_stored_once():
    obs_space = spaces.Dict({"image": spaces.Box(0, 255, (16, 16, 4), np.uint8), "vec": spaces.Box(-1, 1, (8,), np.float32)})
    envs = [NestedEnv(obs_space, spaces.Discrete(2), [50], i) for i in range(4)]
    w = tv.RolloutWorker(_creator(envs), ActionFromObs, num_envs=4, rollout_fragment_length=20)
    b = w.sample()
    assert "stack.image" in b.lazy_keys and "obs.image" in b.lazy_keys  # 1 KiB rows: lazy
    assert "stack.vec" not in b.lazy_keys  # 32-byte rows: plain arrays
    lazy = dict.__getitem__(b, "stack.image")
    check_batch(b, envs, obs_space, spaces.Discrete(2))
    # the 4-frame stack of the image leaf holds each frame once: 20 steps + 1 final + 3 look-back rows per env at most
    assert lazy.base.shape[0] <= 4 * (20 + 1 + 3)
    w.stop()


# -- multi-agent: a PettingZoo ParallelEnv with Dict observations ------------------------------------------------


class DictParallelEnv:
    """Two agents; agent ``b`` leaves after 3 steps; Dict observations with a Tuple inside."""

    possible_agents = ["a", "b"]
    metadata: dict = {}

    def __init__(self):
        self._obs_space = spaces.Dict({"pos": spaces.Box(-10, 10, (2,), np.float32),
                                       "ids": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(3)))})
        self._act_space = spaces.Dict({"move": spaces.Discrete(4), "speed": spaces.Box(0, 1, (1,), np.float32)})
        self.t = 0
        self.ep = -1
        self.actions: list = []

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self, agent):
        k = self.ep * 100 + self.t * 2 + (agent == "b")
        return {"pos": np.array([k, -k], np.float32) / 10, "ids": (k % 5, np.array([k % 2, 1, 0], np.int8))}

    def reset(self, seed=None, options=None):
        self.t, self.ep = 0, self.ep + 1
        self.agents = ["a", "b"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents)
        for a, act in actions.items():
            assert self._act_space.contains(act), act
        self.actions.append(actions)
        self.t += 1
        done = self.t >= 6
        obs = {a: self._obs(a) for a in self.agents}  # every agent that acted gets its (final) observation
        term = {a: done or (a == "b" and self.t == 3) for a in obs}
        if self.t == 3:
            self.agents = ["a"]
        return obs, {a: 1.0 for a in obs}, term, {a: False for a in obs}, {a: {} for a in obs}

    def close(self):
        pass


class MAPolicy(tv.Policy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = VR("obs", shift="-1:0")

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        pos = input_dict["obs"]["pos"]
        assert input_dict["stack"]["ids"][1].shape == (len(pos), 2, 3)
        n = len(pos)
        return {"move": (np.abs(pos[:, 0] * 10).astype(np.int64) % 4), "speed": np.full((n, 1), 0.5, np.float32)}, [], {}

    def loss(self, batch):
        batch["obs"], batch["new_obs"], batch["stack"], batch["actions"]
        return 0.0


def test_pettingzoo_parallel_env_with_dict_observations():
    w = tv.RolloutWorker(lambda cfg: DictParallelEnv(), {"p": MAPolicy}, policy_mapping_fn=lambda agent, *a, **k: "p",
                         num_envs=2, rollout_fragment_length=6, batch_mode="complete_episodes")
    mb = w.sample()
    b = mb.policy_batches["p"]
    pos = b["obs"]["pos"]
    k = np.round(pos[:, 0] * 10).astype(int)
    np.testing.assert_array_equal(b["obs"]["ids"][0], k % 5)
    np.testing.assert_array_equal(np.round(b["new_obs"]["pos"][:, 0] * 10).astype(int), k + 2)  # the agent's next
    np.testing.assert_array_equal(b["actions"]["move"], np.abs(k) % 4)
    t = np.asarray(b["t"])
    prev = np.where(t[:, None] > 0, b["stack"]["pos"][:, 0], 0)
    np.testing.assert_array_equal(np.round(prev[:, 0] * 10).astype(int), np.where(t > 0, k - 2, 0))
    w.stop()


# -- replay ------------------------------------------------------------------------------------------------------


def test_replay_round_trip_of_nested_batches():
    obs_space = spaces.Dict({"image": spaces.Box(0, 255, (3, 3), np.uint8), "t": spaces.Tuple((spaces.Discrete(9),))})
    envs = [NestedEnv(obs_space, spaces.Discrete(2), [7], i) for i in range(2)]
    w = tv.RolloutWorker(_creator(envs), ActionFromObs, num_envs=2, rollout_fragment_length=10)
    b = w.sample()
    rb = tv.ReplayBuffer(500, sampler=tv.SliceSampler(slice_len=3), columns=["obs", "actions", "rewards", "terminateds",
                                                                              "truncateds", "eps_id", "t"])
    rb.add(b)
    assert sorted(rb.columns) == sorted(["obs.image", "obs.t.0", "actions", "rewards", "terminateds", "truncateds",
                                         "eps_id", "t"])
    s = rb.sample(30, views={"stk": VR("obs", shift="-2:0"), "new_obs": VR("obs", shift=1)})
    on = Nest.from_space(obs_space)
    for row in range(len(s)):
        env = envs[0] if int(s["eps_id"][row]) in {int(e) for e in b["eps_id"][b["env_id"] == 0]} else envs[1]
        t = int(s["t"][row])
        uid = _uid_of_obs(s, row, env, on)
        for c, leaf in zip(on.names("obs"), on.leaves):
            np.testing.assert_array_equal(s[c][row], leaf_value(leaf, uid, t))
            np.testing.assert_array_equal(s["new_obs" + c[3:]][row], leaf_value(leaf, uid, t + 1))
            for j, sh in enumerate((-2, -1, 0)):
                want = leaf_value(leaf, uid, t + sh) if t + sh >= 0 else np.zeros_like(leaf_value(leaf, uid, 0))
                np.testing.assert_array_equal(s["stk" + c[3:]][row][j], want)
    assert isinstance(s["stk"]["t"], tuple)
    w.stop()


def _uid_of_obs(s, row, env, on):
    t = int(s["t"][row])
    for uid in env.actions:
        if all(np.array_equal(s[c][row], leaf_value(leaf, uid, t)) for c, leaf in zip(on.names("obs"), on.leaves)):
            return uid
    raise AssertionError(f"row {row} matches no episode")


# -- TorchPolicy: nested tensors in, nested actions out ----------------------------------------------------------


def test_torch_policy_gets_nested_tensors_and_returns_nested_actions():
    torch = pytest.importorskip("torch")
    obs_space = spaces.Dict({"image": spaces.Box(0, 255, (3, 4, 4), np.uint8), "vec": spaces.Box(-1, 1, (2,), np.float32)})
    act_space = spaces.Dict({"move": spaces.Discrete(3), "force": spaces.Box(-1, 1, (2,), np.float32)})
    seen = []

    class Model(torch.nn.Module):
        view_requirements = {"stack": VR("obs", shift="-1:0")}

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

    class P(tv.TorchPolicy):
        def action_sampler(self, input_dict, explore):
            obs, stack = input_dict["obs"], input_dict["stack"]
            assert isinstance(obs["image"], torch.Tensor) and obs["image"].dtype == torch.uint8
            assert stack["vec"].shape[1:] == (2, 2)
            seen.append(obs["image"][:, 0, 0, 0].clone())
            n = obs["vec"].shape[0]
            force = torch.tanh(self.model.lin(obs["vec"]))
            return {"move": obs["image"][:, 0, 0, 0].long() % 3, "force": force}, [], {}

        def loss(self, batch):
            batch["actions"]["move"]
            return self.model.lin(batch["obs"]["vec"]).sum() + batch["stack"]["image"].float().sum() * 0

    envs = [NestedEnv(obs_space, act_space, [5], i) for i in range(2)]
    w = tv.RolloutWorker(_creator(envs), P(obs_space, act_space, {}, model=Model()), num_envs=2,
                         rollout_fragment_length=6)
    b = w.sample()
    np.testing.assert_array_equal(b["actions"]["move"], b["obs"]["image"][:, 0, 0, 0].astype(np.int64) % 3)
    assert b["actions"]["force"].dtype == np.float32 and b["actions"]["force"].shape == (12, 2)
    for env in envs:
        for acts in env.actions.values():
            for a in acts:
                assert a[0].shape == (2,) and a[1].shape == ()  # force, move: handed over in the space's structure
    w.policy.learn_on_batch(b)  # the loss reads nested tensors of the training batch
    w.stop()
