"""`PPOPolicy.state_snapshot` (a deferred checkpoint's copy of ``get_state()``) against its reference: every
tensor of ``get_state()`` cloned at the same moment. Where the numpy learner holds the weights and Adam's moments
(`FlatAdam.copy`, `FlatCopy`), its buffers are copied whole and the tensors made later: the state it returns after
more learning steps must be the one of the moment it was taken, in torch's own layout (key order, the module's
``_metadata``, the optimizer's packed state and param group), and whatever else the state holds (a buffer of the
model, another key in the optimizer's state, a state-dict hook, a subclass's ``get_state``) must be copied too."""

from __future__ import annotations

import io
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from trajview.algorithms.numpy_nets import FlatCopy  # noqa: E402
from trajview.algorithms.ppo import PPOPolicy  # noqa: E402
from trajview.policy.torch_policy import cloned_state  # noqa: E402
from trajview.views.sample_batch import SampleBatch  # noqa: E402


def _batch(rng: np.random.Generator, n: int, obs_dim: int, n_actions: int, model: str, frames: int) -> SampleBatch:
    obs = rng.uniform(-1, 1, (n * (frames if model == "framestack" else 1), obs_dim)).astype(np.float32)
    cols = {
        "actions": rng.integers(0, n_actions, n),
        "action_logp": np.full(n, np.log(1.0 / n_actions), np.float32),
        "advantages": rng.standard_normal(n).astype(np.float32),
        "value_targets": rng.standard_normal(n).astype(np.float32),
    }
    cols["prev_n_obs" if model == "framestack" else "obs"] = (obs.reshape(n, frames, obs_dim)
                                                             if model == "framestack" else obs)
    return SampleBatch(cols)


def _policy(model: str, obs_dim: int, n_actions: int, learner: str, frames: int, **config) -> PPOPolicy:
    mc = {"num_frames": frames, "prev_actions": False, "prev_rewards": False} if model == "framestack" else {}
    return PPOPolicy(gym.spaces.Box(-1, 1, (obs_dim,), np.float32), gym.spaces.Discrete(n_actions),
                     {"model": model, "model_config": mc, "sgd_minibatch_size": 16, "num_sgd_iter": 2,
                      "learner": learner, **config})


def assert_identical(got, want, where: str = "state") -> None:
    """The same containers (types, key order, a module state's ``_metadata``), equal plain values, and tensors
    of the same dtype, shape and bits."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, where
        assert torch.equal(got, want), f"{where}: values differ"
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        if isinstance(want, OrderedDict):
            assert getattr(got, "_metadata", None) == getattr(want, "_metadata", None), f"{where}: _metadata"
        for k in want:
            assert_identical(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_identical(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def _reference(policy: PPOPolicy):
    """``get_state()`` now, every tensor cloned (`cloned_state`, which keeps a module state's OrderedDict)."""
    return cloned_state(policy.get_state())


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    model=st.sampled_from(["framestack", "mlp"]),
    obs_dim=st.integers(1, 4),
    n_actions=st.integers(2, 4),
    learner=st.sampled_from(["auto", "numpy", "torch"]),
    before=st.integers(0, 3),
    after=st.integers(1, 3),
    schedule=st.booleans(),
)
def test_a_snapshot_is_the_state_of_the_moment_it_was_taken(seed, model, obs_dim, n_actions, learner, before,
                                                            after, schedule):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    config = {"lr_schedule": "linear"} if schedule else {}
    policy = _policy(model, obs_dim, n_actions, learner, 2, **config)
    batches = [_batch(rng, 40, obs_dim, n_actions, model, 2) for _ in range(before + after)]
    for i, b in enumerate(batches[:before]):
        policy.progress_remaining = 1.0 - 0.1 * i
        policy.learn_on_batch(b)
    want = _reference(policy)
    snap = policy.state_snapshot()
    for i, b in enumerate(batches[before:]):
        policy.progress_remaining = 0.5 - 0.1 * i
        policy.learn_on_batch(b)
    got = snap()
    assert_identical(got, want)
    assert_identical(snap(), want)  # (asked again: the same)
    # The live state moved on (the copy is no view of it), and a copy loads into a fresh policy as the reference.
    live = policy.get_state()["model"]
    assert any(not torch.equal(live[k], want["model"][k]) for k in want["model"])
    buf = io.BytesIO()
    torch.save(got, buf)
    buf.seek(0)
    fresh = _policy(model, obs_dim, n_actions, learner, 2, **config)
    fresh.set_state(torch.load(buf, weights_only=True))
    assert_identical(cloned_state(fresh.get_state())["model"], want["model"])


def test_the_numpy_learners_buffers_are_copied_whole_and_the_tensors_made_when_asked():
    rng = np.random.default_rng(0)
    policy = _policy("framestack", 3, 2, "numpy", 2)
    policy.learn_on_batch(_batch(rng, 40, 3, 2, "framestack", 2))
    flat = policy.numpy_learner().flat
    copied = flat.copy()
    assert isinstance(copied, FlatCopy)
    for key in ("param", "m", "v"):  # copies, not views
        assert np.array_equal(getattr(copied, key), flat.flat[key])
        assert not np.shares_memory(getattr(copied, key), flat.flat[key])
    state = copied.optimizer_state()
    assert_identical(state, cloned_state(policy.get_optimizer().state_dict()))


def _learned(learner: str = "numpy") -> tuple[PPOPolicy, list]:
    rng = np.random.default_rng(1)
    policy = _policy("framestack", 3, 2, learner, 2)
    batches = [_batch(rng, 40, 3, 2, "framestack", 2) for _ in range(3)]
    policy.learn_on_batch(batches[0])
    return policy, batches[1:]


def test_a_buffer_of_the_model_is_copied_too():
    policy, batches = _learned()
    policy.model.register_buffer("seen", torch.zeros(3))
    policy.model.seen += 1
    want = _reference(policy)
    snap = policy.state_snapshot()
    policy.model.seen += 5
    for b in batches:
        policy.learn_on_batch(b)
    got = snap()
    assert "seen" in got["model"] and torch.equal(got["model"]["seen"], torch.ones(3))
    assert_identical(got, want)


def test_a_policy_switched_to_torchs_learner_is_copied_from_the_buffers_torch_steps():
    """Config "learner" set to "torch" under a bound numpy learner: torch's Adam steps the buffers' views in place,
    so the buffers' copy is still the state (and the snapshot the reference's)."""
    policy, batches = _learned()
    learner = policy.numpy_learner()
    policy.config["learner"] = "torch"
    policy.learn_on_batch(batches[0])
    assert policy.numpy_learner() is None and policy._learner_choice.learner is learner and learner.is_bound()
    want = _reference(policy)
    assert learner.flat.copy() is not None
    snap = policy.state_snapshot()
    policy.learn_on_batch(batches[1])
    assert_identical(snap(), want)


@pytest.mark.parametrize("change", ["state key", "state-dict hook", "get_state of a subclass", "torch learner"])
def test_what_the_flat_copy_does_not_hold_is_cloned(change):
    policy, batches = _learned()
    opt = policy.get_optimizer()
    if change == "state key":
        p = next(iter(opt.state))
        opt.state[p]["note"] = torch.ones(2)
    elif change == "state-dict hook":
        def hook(optimizer, state):
            state["hooked"] = torch.full((1,), float(len(state["state"])))
            return state

        opt.register_state_dict_post_hook(hook)
    elif change == "get_state of a subclass":
        class Sub(PPOPolicy):
            def get_state(self):
                return {**super().get_state(), "extra": torch.arange(3)}

        policy.__class__ = Sub
    else:
        policy.config["learner"] = "torch"
        policy._learner_choice.learner = None
    assert policy.numpy_learner().flat.copy() is None if change in ("state key", "state-dict hook") else True
    want = _reference(policy)
    snap = policy.state_snapshot()
    for b in batches:
        policy.learn_on_batch(b)
    if change == "state key":
        opt.state[p]["note"].fill_(7.0)
    assert_identical(snap(), want)


def test_a_model_replaced_under_a_bound_learner_is_copied_as_it_is():
    """A new model whose weights are not the learner's buffers: its tensors are cloned, the optimizer's state (still
    the bound one's) copied from the buffers."""
    policy, batches = _learned()
    old_learner = policy.numpy_learner()
    policy.model = _policy("framestack", 3, 2, "numpy", 2).model
    assert policy._learner_choice.learner is old_learner
    want = _reference(policy)
    snap = policy.state_snapshot()
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1.0)
    old_learner.flat.flat["m"] += 1.0
    assert_identical(snap(), want)


@pytest.mark.parametrize("learner", ["numpy", "auto"])
def test_an_optimizer_whose_parameters_are_in_another_order_is_copied_in_its_own(learner):
    """The optimizer's state is keyed by each parameter's index in its param group, in the order its state holds
    them: neither need be the learner's buffer order."""
    rng = np.random.default_rng(2)
    policy = _policy("framestack", 3, 3, learner, 2)
    params = list(policy.model.parameters())
    policy._optimizer = torch.optim.Adam(params[::-1], lr=1e-3, eps=1e-5)
    policy.learn_on_batch(_batch(rng, 40, 3, 3, "framestack", 2))
    assert policy.numpy_learner() is not None and policy.numpy_learner().flat.params[0] is not params[-1]
    want = _reference(policy)
    assert list(want["optimizer"]["state"]) != list(range(len(params)))  # (the state's order: the learner's)
    snap = policy.state_snapshot()
    policy.learn_on_batch(_batch(rng, 40, 3, 3, "framestack", 2))
    assert_identical(snap(), want)
