"""What the view-pruning pass refuses in a policy's outputs: errors that name the setting, expected and got."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import ObsActionPolicy, creator_from, make_envs

import trajview as tv


def worker_with(outputs):
    class P(ObsActionPolicy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, _, _ = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            state_outs, extra = outputs(len(a))
            return a, state_outs, extra

    return tv.RolloutWorker(creator_from(make_envs(2)), P, num_envs=2, rollout_fragment_length=3)


@pytest.mark.parametrize("name", ["new_obs", "prev_actions", "prev_rewards", "infos", "eps_id", "t", "seq_lens",
                                  "state_in_0", "dones"])
def test_extra_fetches_named_like_a_view_are_errors(name):
    w = worker_with(lambda n: ([], {name: np.zeros(n, np.float32)}))
    with pytest.raises(ValueError, match=rf"extra fetch '{name}': .*rename the fetch"):
        w.sample()


def test_an_extra_fetch_with_its_own_view_is_fine():
    class P(ObsActionPolicy):
        def __init__(self, obs_space, act_space, config=None):
            super().__init__(obs_space, act_space, config)
            self.view_requirements["vf_preds"] = tv.ViewRequirement(used_for_compute_actions=False)

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, _, _ = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            return a, [], {"vf_preds": np.full(len(a), 0.5, np.float32)}

    b = tv.RolloutWorker(creator_from(make_envs(2)), P, num_envs=2, rollout_fragment_length=3).sample()
    assert (b["vf_preds"] == 0.5).all()


@pytest.mark.parametrize(
    "outputs, pattern",
    [
        (lambda n: (None, {}), r"state_outs: .*must return a list of arrays .* got NoneType"),
        (lambda n: ([], None), r"extra_fetches: .*must return a dict of arrays .* got NoneType"),
        (lambda n: ([], {"label": np.array(["a"] * n)}), r"extra fetch 'label': .*dtype <U1, which a trajectory store"),
        (lambda n: ([], {"obj": np.array([object()] * n)}), r"extra fetch 'obj': .*dtype object"),
        (lambda n: ([], {"c": np.zeros(n, np.complex64)}), r"extra fetch 'c': .*dtype complex64"),
    ],
)
def test_bad_outputs_in_the_pruning_pass(outputs, pattern):
    with pytest.raises(ValueError, match=pattern):
        worker_with(outputs).sample()


# -- the pass's dummy batches: valid samples of the spaces; errors that name the call; keep_views -----------------

import gymnasium as gym  # noqa: E402

from trajview.policy.pruning import ViewPruningError, is_action_mask, prune_views  # noqa: E402

MASKED_OBS = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3, 3, 2), np.int8),
                              "action_mask": gym.spaces.Box(0, 1, (9,), np.int8)})


class MaskSampler(tv.Policy):
    """Samples a legal action from the mask (as a PettingZoo board-game policy does): an all-zero mask raises
    numpy's "'a' cannot be empty"."""

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["prev_n_obs"] = tv.ViewRequirement("obs", shift="-2:0")
        self.seen = []

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
        obs = input_dict["obs"]
        self.seen.append({"obs": obs, "stack": input_dict["prev_n_obs"],
                          "prev_actions": np.asarray(input_dict["prev_actions"])})
        rng = np.random.default_rng(0)
        acts = [rng.choice(np.flatnonzero(m)) for m in obs["action_mask"]]
        return np.asarray(acts, np.int64), [], {}

    def loss(self, batch):
        return [batch["obs"], batch["actions"]]


def test_the_pass_feeds_valid_samples_and_masks_with_a_legal_action():
    p = MaskSampler(MASKED_OBS, gym.spaces.Discrete(9))
    before = MASKED_OBS.np_random.bit_generator.state
    prune_views(p)  # raised "'a' cannot be empty" with all-zero inputs
    assert MASKED_OBS.np_random.bit_generator.state == before  # the policy's spaces' RNGs are left alone
    seen = p.seen[0]
    rows = len(seen["prev_actions"])
    for r in range(rows):
        obs = {k: v[r] for k, v in seen["obs"].items()}
        assert MASKED_OBS.contains(obs), obs
        assert obs["action_mask"].any()
        assert gym.spaces.Discrete(9).contains(int(seen["prev_actions"][r]))
        # Views of one column agree: the stack's last frame is the observation.
        for k in ("observation", "action_mask"):
            np.testing.assert_array_equal(seen["stack"][k][r, -1], obs[k])
    # The same batches every time (seeded).
    q = MaskSampler(MASKED_OBS, gym.spaces.Discrete(9))
    prune_views(q)
    for k in ("observation", "action_mask"):
        np.testing.assert_array_equal(q.seen[0]["obs"][k], seen["obs"][k])


def test_values_differ_from_zeros_and_each_view_reads_one_series_at_its_offsets():
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    got = {}

    class P(tv.Policy):
        def __init__(self, o, a, c=None):
            super().__init__(o, a, c)
            self.view_requirements["stack"] = tv.ViewRequirement("obs", shift="-3:0")
            self.view_requirements["older"] = tv.ViewRequirement("obs", shift=-2)

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            got.update({k: np.asarray(d[k]) for k in ("obs", "stack", "older")})
            return np.zeros(len(d["obs"]), np.int64), [], {}

    prune_views(P(space, gym.spaces.Discrete(2)))
    assert np.all(np.abs(got["obs"]) <= 1) and np.any(got["obs"] != 0)
    np.testing.assert_array_equal(got["stack"][:, -1], got["obs"])
    np.testing.assert_array_equal(got["stack"][:, 1], got["older"])
    np.testing.assert_array_equal(got["stack"][1, :-1], got["stack"][0, 1:])  # row r + 1 is one step later


@pytest.mark.parametrize("col,mask", [("obs.action_mask", True), ("obs.legal_action_mask", True),
                                      ("obs.0.action_mask", True), ("obs.observation", False),
                                      ("obs.action_masks", False)])
def test_is_action_mask(col, mask):
    assert is_action_mask(col) is mask


class _Raises(tv.Policy):
    where = "compute"
    error: Exception = ValueError("bad input")

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        if self.where == "compute":
            raise self.error
        return np.zeros(len(d["obs"]), np.int64), [], {}

    def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
        if self.where == "postprocess":
            raise self.error
        return batch

    def loss(self, batch):
        if self.where == "loss":
            raise self.error
        return [batch["obs"]]


class _TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


@pytest.mark.parametrize("where,call", [("compute", "compute_actions_from_input_dict"),
                                        ("postprocess", "postprocess_trajectory"), ("loss", "loss")])
def test_an_error_in_the_pass_names_the_call_and_views_and_chains_the_policys(where, call):
    p = _Raises(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))
    p.where = where
    with pytest.raises(ValueError, match=rf"view-pruning pass .*called _Raises\.{call} on a dummy batch of the "
                                         rf"views \[.*'obs'.*\].* raised ValueError: bad input") as info:
        prune_views(p)
    assert info.value.__cause__ is p.error
    assert not p._views_initialized
    p.error = _TwoArgError("x", "y")  # cannot be built from one message: ViewPruningError
    with pytest.raises(ViewPruningError, match=rf"_Raises\.{call} .* raised _TwoArgError: x/y") as info:
        prune_views(p)
    assert info.value.__cause__ is p.error


class _ObsActionLoss(ObsActionPolicy):
    def loss(self, batch):
        return [batch["obs"], batch["actions"]]


def test_keep_views_keeps_views_the_loss_does_not_read():
    w = tv.RolloutWorker(creator_from(make_envs(1)), _ObsActionLoss, rollout_fragment_length=4)
    b = w.sample()
    assert w.policy.view_requirements["new_obs"].used_for_training is False  # the loss reads obs and actions only
    with pytest.raises(KeyError, match=r"name it in policy.keep_views before the first sample \(policy.keep_views = "
                                       r"\{'new_obs'\}\)"):
        b["new_obs"]
    p = _ObsActionLoss(w.policy.observation_space, w.policy.action_space)
    p.keep_views = {"new_obs", "prev_actions"}
    w2 = tv.RolloutWorker(creator_from(make_envs(1)), p, rollout_fragment_length=4)
    b = w2.sample()
    assert p.view_requirements["new_obs"].used_for_training
    np.testing.assert_array_equal(b["new_obs"][:-1], b["obs"][1:])  # within the one episode of 4+ steps
    assert "prev_actions" in b
    p3 = _ObsActionLoss(w.policy.observation_space, w.policy.action_space)
    p3.keep_views = {"nope"}
    with pytest.raises(ValueError, match=r"keep_views names \['nope'\], which are not views of the policy"):
        prune_views(p3)
    p3.keep_views = "new_obs"
    with pytest.raises(TypeError, match="keep_views must be a set of view names"):
        prune_views(p3)


def test_keep_views_may_name_an_extra_fetch():
    """An extra fetch becomes a view in the pruning pass: keep_views may name it (it is in the batch either way),
    and a name that is neither a view nor an extra fetch is still refused, the extra fetches listed among the
    views."""

    class Fetches(_ObsActionLoss):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, s, _ = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            return a, s, {"foo": np.ones(len(a), np.float32)}

    spaces = (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.Discrete(5))
    p = Fetches(*spaces)
    p.keep_views = {"foo", "new_obs"}
    prune_views(p)
    assert p.view_requirements["foo"].used_for_training and p.view_requirements["new_obs"].used_for_training
    p2 = Fetches(*spaces)
    p2.keep_views = {"foo", "nope"}
    with pytest.raises(ValueError, match=r"keep_views names \['nope'\], which are not views of the policy \(its "
                                         r"views: \[.*'foo'"):
        prune_views(p2)


class _Cells(tv.Policy):
    """Samples a legal cell from the board game's action mask (the PettingZoo classic pattern)."""

    def __init__(self, o, a, c=None):
        super().__init__(o, a, c)
        self.rng = np.random.default_rng(0)

    def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
        masks = np.asarray(d["obs"]["action_mask"])
        return np.asarray([self.rng.choice(np.flatnonzero(m)) for m in masks], np.int64), [], {}

    def loss(self, batch):
        return [batch["obs"], batch["actions"]]


def test_a_board_game_policy_sampling_from_its_mask_runs_in_a_worker():
    from pettingzoo import AECEnv
    from pettingzoo.utils.agent_selector import AgentSelector

    class Cells(AECEnv):
        """Two players take turns claiming one of 5 free cells (the mask: cells still free); 5 moves a game."""

        metadata = {"name": "cells_v0", "is_parallelizable": False}
        space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (5,), np.int8),
                                 "action_mask": gym.spaces.Box(0, 1, (5,), np.int8)})

        def __init__(self):
            super().__init__()
            self.possible_agents = ["p0", "p1"]

        def observation_space(self, agent):
            return self.space

        def action_space(self, agent):
            return gym.spaces.Discrete(5)

        def observe(self, agent):
            return {"observation": self.taken.copy(), "action_mask": (1 - self.taken).astype(np.int8)}

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            self.rewards = {a: 0.0 for a in self.agents}
            self._cumulative_rewards = {a: 0.0 for a in self.agents}
            self.terminations = {a: False for a in self.agents}
            self.truncations = {a: False for a in self.agents}
            self.infos = {a: {} for a in self.agents}
            self._selector = AgentSelector(self.agents)
            self.agent_selection = self._selector.reset()
            self.taken = np.zeros(5, np.int8)

        def step(self, action):
            agent = self.agent_selection
            if self.terminations[agent] or self.truncations[agent]:
                self._was_dead_step(action)
                return
            self._clear_rewards()
            assert self.taken[action] == 0, f"illegal move {action} on {self.taken}"
            self.taken[action] = 1
            if self.taken.all():
                for a in self.agents:
                    self.terminations[a] = True
            self.agent_selection = self._selector.next()
            self._accumulate_rewards()

    w = tv.RolloutWorker(lambda cfg: Cells(), _Cells, num_envs=2, rollout_fragment_length=20)
    b = w.sample()
    batch = b.policy_batches["default_policy"]
    masks, acts = batch["obs"]["action_mask"], batch["actions"]
    assert len(acts) >= 20 and all(m[a] == 1 for m, a in zip(masks, acts))  # every move legal


def test_a_space_that_cannot_sample_gets_zeros():
    class Fixed(gym.spaces.Space):
        def __init__(self):
            super().__init__((2,), np.float32)

        def sample(self, mask=None, probability=None):
            raise RuntimeError("cannot sample")

        def contains(self, x):
            return True

    got = {}

    class P(tv.Policy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            got["obs"] = np.asarray(d["obs"])
            return np.zeros(len(d["obs"]), np.int64), [], {}

    prune_views(P(Fixed(), gym.spaces.Discrete(2)))
    np.testing.assert_array_equal(got["obs"], np.zeros((2, 2), np.float32))
