"""The numpy learner and actor of the MLP models (`trajview.algorithms.mlp_learner`, config "learner") against
their reference: the same `PPOPolicy` with ``learner: "torch"`` (its loss under autograd, torch's Adam, its
``action_sampler`` through the model's torch forward), on random networks, spaces, batches and settings."""

from __future__ import annotations

import io
import os
import re
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from learner_checks import assert_close_but_a_few  # noqa: E402
from trajview.algorithms.mlp_learner import MLPActor, MLPLearner, model_supported, supported  # noqa: E402
from trajview.algorithms.ppo import STATS, PPOPolicy  # noqa: E402
from trajview.views.sample_batch import SampleBatch  # noqa: E402

#: Float32 rounding, as Adam amplifies it: Adam moves a weight by up to about lr a step whatever its gradient's size,
#: so the rounding of a gradient near zero can move it by a fraction of lr (1e-3 in these tests): the weights are
#: compared within a tenth of that (the gradients themselves tightly, in `test_one_steps_gradients_are_autograds`).
TOL = dict(rtol=2e-4, atol=1e-4)


def twins(obs_space, action_space, config: dict, model: str = "framestack", model_config: dict | None = None):
    """The same policy twice (the same initial weights): learner "torch" and learner "numpy"."""
    cfg = {"model": model, "model_config": model_config or {}, **config}
    ref = PPOPolicy(obs_space, action_space, {**cfg, "learner": "torch"})
    fast = PPOPolicy(obs_space, action_space, {**cfg, "learner": "numpy"})
    fast.model.load_state_dict(ref.model.state_dict())
    return ref, fast


def random_batch(rng: np.random.Generator, n: int, obs_space, action_space, model: str, frames: int) -> dict:
    obs = np.stack([obs_space.sample() for _ in range(n * (frames if model == "framestack" else 1))])
    batch = {
        "actions": np.array([action_space.sample() for _ in range(n)]),
        "action_logp": (np.log(1.0 / action_space.n) + 0.3 * rng.standard_normal(n)).astype(np.float32),
        "advantages": rng.standard_normal(n).astype(np.float32) * float(rng.uniform(0.1, 10)),
        "value_targets": rng.standard_normal(n).astype(np.float32),
    }
    if model == "framestack":
        batch["prev_n_obs"] = obs.reshape(n, frames, *obs.shape[1:])
    else:
        batch["obs"] = obs
    return batch


def assert_same_state(ref: PPOPolicy, fast: PPOPolicy) -> None:
    """Weights within a tenth of a learning-rate step, Adam's moments within 1e-2 of their largest value (ours
    flushes denormals), but for a few elements (`learner_checks`); the same step counts."""
    lr = float(ref.config["lr"])
    steps = float(next(iter(ref.get_optimizer().state_dict()["state"].values()))["step"])
    assert_close_but_a_few([(k, b.numpy(), a.numpy()) for (k, a), b in
                            zip(ref.model.state_dict().items(), fast.model.state_dict().values())],
                           rtol=2e-4, atol=lr / 10, loose=2 * lr * steps)
    o_ref, o_fast = ref.get_optimizer().state_dict(), fast.get_optimizer().state_dict()
    assert o_ref["state"].keys() == o_fast["state"].keys()
    for i, st_ref in o_ref["state"].items():
        assert float(o_fast["state"][i]["step"]) == float(st_ref["step"])
    for key in ("exp_avg", "exp_avg_sq"):
        scale = max(float(st[key].abs().max()) for st in o_ref["state"].values())
        assert_close_but_a_few([(f"{i} {key}", o_fast["state"][i][key].numpy(), st[key].numpy())
                                for i, st in o_ref["state"].items()], rtol=1e-2, atol=1e-2 * scale + 1e-30,
                               loose=scale + 1e-30)


@settings(max_examples=int(os.environ.get("TV_MLP_EXAMPLES", "25")), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    model=st.sampled_from(["framestack", "mlp"]),
    hidden=st.lists(st.integers(1, 24), min_size=0, max_size=3),
    obs_dim=st.integers(1, 5),
    discrete_obs=st.booleans(),
    n_actions=st.integers(2, 5),
    start=st.integers(-2, 2),
    rows=st.integers(1, 90),
    minibatch=st.integers(2, 64),  # (one-row minibatches: the normalized advantage is 0 / 1e-8, gradients noise)
    epochs=st.integers(1, 3),
    clip=st.floats(0.01, 0.5),
    vf=st.floats(0.0, 2.0),
    entropy=st.sampled_from([0.0, 0.01, 0.3]),
    grad_clip=st.sampled_from([None, 0.05, 0.5, 100.0]),
    fused=st.booleans(),
)
def test_a_learn_on_batch_equals_torchs(seed, model, hidden, obs_dim, discrete_obs, n_actions, start, rows, minibatch,
                                         epochs, clip, vf, entropy, grad_clip, fused):
    """Weights, Adam's moments and steps, and the loss statistics after three ``learn_on_batch`` calls, shuffles
    drawn from one torch seed, equal the torch learner's (float32 rounding apart)."""
    rng = np.random.default_rng(seed)
    obs_space = (gym.spaces.Discrete(obs_dim + 1, seed=seed) if discrete_obs
                 else gym.spaces.Box(-3, 3, (obs_dim,), np.float32, seed=seed))
    action_space = gym.spaces.Discrete(n_actions, start=start, seed=seed)
    frames = 3
    model_config = {"hidden": hidden, **({"num_frames": frames, "prev_actions": False, "prev_rewards": False}
                                          if model == "framestack" else {})}
    config = {"sgd_minibatch_size": minibatch, "num_sgd_iter": epochs, "clip_param": clip, "vf_loss_coeff": vf,
              "entropy_coeff": entropy, "grad_clip": grad_clip, "adam_fused": fused, "lr": 1e-3}
    torch.manual_seed(seed)
    ref, fast = twins(obs_space, action_space, config, model, model_config)
    assert isinstance(fast.numpy_learner(), MLPLearner)
    for it in range(3):
        batch = random_batch(rng, rows, obs_space, action_space, model, frames)
        torch.manual_seed(seed + it)
        s_ref = ref.learn_on_batch(SampleBatch(batch))
        torch.manual_seed(seed + it)
        s_fast = fast.learn_on_batch(SampleBatch(batch))
        assert list(s_fast) == list(s_ref) == list(STATS)
        for k in STATS:
            assert s_fast[k] == pytest.approx(s_ref[k], rel=1e-3, abs=1e-5), k
        np.testing.assert_allclose(fast.last_stats_tensor.numpy(), ref.last_stats_tensor.numpy(), rtol=1e-3, atol=1e-5)
        assert_same_state(ref, fast)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 40), size=st.integers(1, 45), epochs=st.integers(0, 7),
       take_bytes=st.sampled_from([1, 200, 2000, 4 << 20]), features=st.integers(1, 4))
def test_the_shuffled_minibatches_are_one_randperm_per_epoch_in_turn(seed, rows, size, epochs, take_bytes, features):
    """`_shuffled`'s minibatches (its epochs' shuffles drawn first, their rows taken several epochs at a time up to
    ``TAKE_BYTES``) are the plain loop's: per epoch, ``torch.randperm`` in turn, the rows in that order cut every
    ``size`` rows (every row once, unshuffled, where one minibatch holds them all); torch's generator is left as
    that loop leaves it."""
    from trajview.algorithms import mlp_learner

    rng = np.random.default_rng(seed)
    cols = {"x": rng.standard_normal((rows, features)).astype(np.float32),
            "actions": rng.integers(0, 5, rows).astype(np.int64),
            **{k: rng.standard_normal(rows).astype(np.float32) for k in ("old_logp", "adv", "targets")}}
    torch.manual_seed(seed)
    with mock.patch.object(mlp_learner, "TAKE_BYTES", take_bytes):
        got = [{k: v.copy() for k, v in mb.items()} for mb in mlp_learner._shuffled(cols, rows, size, epochs)]
    after = torch.random.get_rng_state()
    torch.manual_seed(seed)
    want = []
    for _ in range(epochs):
        order = np.arange(rows) if rows <= size else torch.randperm(rows).numpy()
        want += [{k: v[order[i : i + size]] for k, v in cols.items()} for i in range(0, rows, size)]
    assert torch.equal(after, torch.random.get_rng_state())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)
            assert g[k].dtype == w[k].dtype


@settings(max_examples=int(os.environ.get("TV_MLP_EXAMPLES", "25")), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    model=st.sampled_from(["framestack", "mlp"]),
    hidden=st.lists(st.integers(1, 24), min_size=0, max_size=3),
    discrete_obs=st.booleans(),
    n_actions=st.integers(2, 5),
    rows=st.integers(2, 90),
    clip=st.floats(0.01, 0.5),
    vf=st.floats(0.0, 2.0),
    entropy=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_one_steps_gradients_are_autograds(seed, model, hidden, discrete_obs, n_actions, rows, clip, vf, entropy):
    """One minibatch step's gradients (the learning rate so small that no weight moves) equal autograd's of
    `PPOPolicy.loss`, within float32 rounding of the gradient's own scale."""
    rng = np.random.default_rng(seed)
    obs_space = (gym.spaces.Discrete(4, seed=seed) if discrete_obs else gym.spaces.Box(-3, 3, (3,), np.float32, seed=seed))
    action_space = gym.spaces.Discrete(n_actions, seed=seed)
    mc = {"hidden": hidden, **({"num_frames": 3} if model == "framestack" else {})}
    torch.manual_seed(seed)
    ref, fast = twins(obs_space, action_space, {"sgd_minibatch_size": 128, "num_sgd_iter": 1, "clip_param": clip,
                                                 "vf_loss_coeff": vf, "entropy_coeff": entropy, "grad_clip": None,
                                                 "lr": 1e-30}, model, mc)
    batch = random_batch(rng, rows, obs_space, action_space, model, 3)
    if model == "framestack":
        batch["prev_n_actions"] = rng.integers(0, n_actions, (rows, 3))
        batch["prev_n_rewards"] = rng.standard_normal((rows, 3)).astype(np.float32)
    ref.learn_on_batch(SampleBatch(batch))
    fast.learn_on_batch(SampleBatch(batch))
    grads = fast.numpy_learner().flat.grads
    scale = max(float(p.grad.abs().max()) for p in ref.model.parameters())
    for (k, p), q in zip(ref.model.named_parameters(), fast.model.parameters()):
        np.testing.assert_allclose(grads[id(q)], p.grad.numpy(), rtol=1e-3, atol=1e-4 * scale + 1e-8, err_msg=k)


def test_the_zoo_frame_stack_with_prev_actions_and_rewards_learns_as_torchs():
    """The frame stack with its previous actions (one-hot) and rewards in the input, the zoo's minibatch of every row."""
    obs_space, action_space = gym.spaces.Box(-1, 1, (2,), np.float32, seed=0), gym.spaces.Discrete(2, seed=0)
    ref, fast = twins(obs_space, action_space, {"sgd_minibatch_size": 256, "num_sgd_iter": 4},
                      model_config={"num_frames": 4})
    rng = np.random.default_rng(1)
    batch = random_batch(rng, 256, obs_space, action_space, "framestack", 4)
    batch["prev_n_actions"] = rng.integers(0, 2, (256, 4))
    batch["prev_n_rewards"] = rng.standard_normal((256, 4)).astype(np.float32)
    for _ in range(2):
        ref.learn_on_batch(SampleBatch(batch))
        fast.learn_on_batch(SampleBatch(batch))
    assert_same_state(ref, fast)


@settings(max_examples=int(os.environ.get("TV_MLP_EXAMPLES", "25")), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    obs_shape=st.sampled_from([(1,), (3,), (2, 2)]),
    frames=st.integers(1, 4),
    n=st.integers(1, 4),
    start=st.integers(-2, 2),
    prev_actions=st.booleans(),
    prev_rewards=st.booleans(),
    rows=st.integers(1, 9),
    as_tensors=st.booleans(),
    odd=st.sampled_from(["none", "padding", "outside"]),
)
def test_frame_stack_input_rows_in_numpy_equal_the_encoders(seed, obs_shape, frames, n, start, prev_actions,
                                                           prev_rewards, rows, as_tensors, odd):
    """The numpy actor's and learner's frame-stack input rows (`mlp_learner._Reader`) against the model's own torch
    encoders (`FrameStackModel._inputs`), bit for bit: observations of any dtype flattened per frame, previous actions
    one-hot (a space's ``start`` too), previous rewards; the views' padding zeros where the action space does not
    hold 0 (no bit set) and values outside the space (a ValueError naming the space, from either)."""
    from trajview.algorithms.mlp_learner import _Reader
    from trajview.algorithms.models.framestack import FrameStackModel

    rng = np.random.default_rng(seed)
    obs_space = gym.spaces.Box(-3, 3, obs_shape, np.float32)
    action_space = gym.spaces.Discrete(n, start=start)
    model = FrameStackModel(obs_space, action_space, num_frames=frames, hidden=(4,), prev_actions=prev_actions,
                            prev_rewards=prev_rewards)
    d = {"prev_n_obs": rng.normal(size=(rows, frames, *obs_shape)).astype(rng.choice([np.float32, np.float64]))}
    if prev_actions:
        actions = rng.integers(start, start + n, (rows, frames))
        if odd == "padding":
            actions[rng.integers(rows), : rng.integers(1, frames + 1)] = 0
        elif odd == "outside":
            actions[rng.integers(rows), rng.integers(frames)] = rng.choice([start - 1, start + n])
        d["prev_n_actions"] = actions
    if prev_rewards:
        d["prev_n_rewards"] = rng.normal(size=(rows, frames))
    if as_tensors:
        d = {k: torch.as_tensor(v) for k, v in d.items()}
    try:
        with torch.no_grad():
            want = model._inputs(d)[0].numpy()
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            _Reader(model)(d)
        return
    got = _Reader(model)(d)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("model_config", [{"num_frames": 3}, {"num_frames": 3, "prev_actions": False,
                                                                "prev_rewards": False}, None])
def test_a_policy_that_acted_and_learned_through_numpy_pickles_and_its_copy_acts_alike(model_config):
    """The numpy actor and learner a policy keeps (their input rows' rule included) pickle with it, as
    `Policy.__getstate__` promises (a `WorkerSet` with ``start_method="spawn"`` pickles the policy): the copy acts
    as the original, greedy and drawing from the same seed, and learns as it does."""
    import pickle

    obs_space, action_space = gym.spaces.Box(-1, 1, (2,), np.float32, seed=0), gym.spaces.Discrete(3, start=1, seed=0)
    model = "mlp" if model_config is None else "framestack"
    p = PPOPolicy(obs_space, action_space, {"model": model, "model_config": model_config or {},
                                            "sgd_minibatch_size": 16})
    rng = np.random.default_rng(0)
    inputs = random_batch(rng, 8, obs_space, action_space, model, 3)
    inputs = {k: v for k, v in inputs.items() if k in ("obs", "prev_n_obs")}
    if model == "framestack" and model_config.get("prev_actions", True):
        inputs["prev_n_actions"] = rng.integers(1, 4, (8, 3))
        inputs["prev_n_rewards"] = rng.standard_normal((8, 3)).astype(np.float32)
    batch = random_batch(rng, 32, obs_space, action_space, model, 3)
    batch.update({k: np.concatenate([v] * 4) for k, v in inputs.items() if k.startswith("prev_n_") and k != "prev_n_obs"})
    p.compute_actions_from_input_dict(inputs, explore=True)
    p.learn_on_batch(SampleBatch(batch))
    assert isinstance(p.numpy_actor(), MLPActor) and isinstance(p.numpy_learner(), MLPLearner)
    q = pickle.loads(pickle.dumps(p))
    for explore in (False, True):
        torch.manual_seed(3)
        a, _, x = p.compute_actions_from_input_dict(inputs, explore=explore)
        torch.manual_seed(3)
        b, _, y = q.compute_actions_from_input_dict(inputs, explore=explore)
        np.testing.assert_array_equal(a, b)
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)
    torch.manual_seed(4)
    p.learn_on_batch(SampleBatch(batch))
    torch.manual_seed(4)
    q.learn_on_batch(SampleBatch(batch))
    for (k, v), w in zip(p.model.state_dict().items(), q.model.state_dict().values()):
        assert torch.equal(v, w), k


@pytest.mark.parametrize("explore", [False, True])
@pytest.mark.parametrize("model", ["framestack", "mlp"])
def test_acting_equals_torchs(model, explore):
    """`MLPActor`: the same actions (the same draws of torch's generator), logps and value predictions as the
    model's torch forward, including after the learner moved the weights into its buffer."""
    obs_space, action_space = gym.spaces.Box(-2, 2, (3,), np.float32, seed=0), gym.spaces.Discrete(4, start=1, seed=0)
    mc = {"num_frames": 2} if model == "framestack" else {}
    ref, fast = twins(obs_space, action_space, {"sgd_minibatch_size": 16}, model, mc)
    assert isinstance(fast.numpy_actor(), MLPActor) and ref.numpy_actor() is None
    rng = np.random.default_rng(0)
    for step in range(3):
        inputs = random_batch(rng, 64, obs_space, action_space, model, 2)
        inputs = {k: v for k, v in inputs.items() if k in ("obs", "prev_n_obs", "prev_n_actions", "prev_n_rewards")}
        if model == "framestack":
            inputs["prev_n_actions"] = rng.integers(1, 5, (64, 2))
            inputs["prev_n_rewards"] = rng.standard_normal((64, 2)).astype(np.float32)
        torch.manual_seed(step)
        a_ref, _, x_ref = ref.compute_actions_from_input_dict(inputs, explore=explore)
        torch.manual_seed(step)
        a_fast, _, x_fast = fast.compute_actions_from_input_dict(inputs, explore=explore)
        np.testing.assert_array_equal(a_fast, a_ref)
        assert a_fast.dtype == a_ref.dtype and a_fast.min() >= 1
        for k in x_ref:
            np.testing.assert_allclose(x_fast[k], x_ref[k], **TOL, err_msg=k)
        batch = random_batch(rng, 32, obs_space, action_space, model, 2)
        if model == "framestack":
            batch["prev_n_actions"] = rng.integers(1, 5, (32, 2))
            batch["prev_n_rewards"] = rng.standard_normal((32, 2)).astype(np.float32)
        torch.manual_seed(10 + step)
        ref.learn_on_batch(SampleBatch(batch))
        torch.manual_seed(10 + step)
        fast.learn_on_batch(SampleBatch(batch))


def test_a_checkpoint_resumes_under_either_learner():
    """``get_state`` of the numpy learner is torch's Adam state: loaded into a torch-learner policy (and the other
    way), training goes on as one learner would have; a ``set_state`` after the numpy learner bound its buffers is
    picked up at its next step (the loaded moments, not the old views)."""
    obs_space, action_space = gym.spaces.Box(-1, 1, (2,), np.float32, seed=0), gym.spaces.Discrete(2, seed=0)
    cfg = {"sgd_minibatch_size": 32, "num_sgd_iter": 2}
    mc = {"num_frames": 2, "prev_actions": False, "prev_rewards": False}
    ref, fast = twins(obs_space, action_space, cfg, model_config=mc)
    rng = np.random.default_rng(3)
    batches = [random_batch(rng, 64, obs_space, action_space, "framestack", 2) for _ in range(4)]
    for i in range(2):
        torch.manual_seed(i)
        ref.learn_on_batch(SampleBatch(batches[i]))
        torch.manual_seed(i)
        fast.learn_on_batch(SampleBatch(batches[i]))

    def through_file(state):
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        return torch.load(buf, weights_only=True)

    # Swap: the numpy learner's state into a torch learner, the torch learner's into a numpy learner (one that has
    # bound its buffers already).
    torch_next = PPOPolicy(obs_space, action_space, {"model": "framestack", "model_config": mc, **cfg, "learner": "torch"})
    torch_next.set_state(through_file(fast.get_state()))
    fast.set_state(through_file(ref.get_state()))
    assert fast.numpy_learner() is not None and not fast.numpy_learner().is_bound()
    for i in range(2, 4):
        for p in (ref, fast, torch_next):
            torch.manual_seed(i)
            p.learn_on_batch(SampleBatch(batches[i]))
    assert fast.numpy_learner().is_bound()
    assert_same_state(ref, fast)
    assert_same_state(ref, torch_next)


def test_what_the_numpy_learner_does_not_take_trains_with_torch_or_says_why():
    box, disc = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2)
    lstm = PPOPolicy(box, disc, {"model": "lstm"})
    assert lstm.numpy_learner() is None and lstm.numpy_actor() is None  # "auto": torch
    assert "LSTMModel" in supported(lstm, PPOPolicy)
    gaussian = PPOPolicy(box, gym.spaces.Box(-1, 1, (1,), np.float32), {"model": "mlp"})
    assert gaussian.numpy_learner() is None and "not Discrete" in model_supported(gaussian, PPOPolicy)
    image = PPOPolicy(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), disc, {"model": "mlp"})
    assert image.numpy_learner() is None and "encoder has weights" in supported(image, PPOPolicy)
    decoupled = PPOPolicy(box, disc, {"model": "mlp", "decoupled_clip": True})
    assert decoupled.numpy_learner() is None and decoupled.numpy_actor() is not None

    class OwnLoss(PPOPolicy):
        def loss(self, train_batch):
            return super().loss(train_batch) * 2

    own = OwnLoss(box, disc, {"model": "mlp"})
    assert own.numpy_learner() is None and "changes PPOPolicy's loss" in supported(own, PPOPolicy)
    with pytest.raises(ValueError, match=r"'learner': 'numpy' cannot train this policy: the model is a LSTMModel"):
        PPOPolicy(box, disc, {"model": "lstm", "learner": "numpy"})
    with pytest.raises(ValueError, match=r"'learner': 'numpy' cannot train this policy: the decoupled objective"):
        PPOPolicy(box, disc, {"model": "mlp", "learner": "numpy", "decoupled_clip": True})
    with pytest.raises(ValueError, match=r"PPOPolicy config 'learner' must be one of \['auto', 'numpy', 'torch'\], got 'jax'"):
        PPOPolicy(box, disc, {"model": "mlp", "learner": "jax"})


def test_a_new_optimizer_that_the_numpy_learner_does_not_take_goes_to_torch():
    """"auto" checks again when the optimizer changes (e.g. a subclass's or a user's optimizer with weight decay)."""
    box, disc = gym.spaces.Box(-1, 1, (2,), np.float32, seed=0), gym.spaces.Discrete(2, seed=0)
    p = PPOPolicy(box, disc, {"model": "mlp", "sgd_minibatch_size": 8, "num_sgd_iter": 1})
    batch = SampleBatch(random_batch(np.random.default_rng(0), 8, box, disc, "mlp", 1))
    p.learn_on_batch(batch)
    assert p.numpy_learner() is not None
    p._optimizer = torch.optim.Adam(p.model.parameters(), lr=1e-3, weight_decay=0.1)
    assert p.numpy_learner() is None
    before = [t.clone() for t in p.model.parameters()]
    p.learn_on_batch(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, p.model.parameters()))
    assert all(q in p._optimizer.state for q in p.model.parameters())  # torch's Adam took the step


def test_trajview_train_takes_learner_and_resume_may_change_it(tmp_path):
    """``--learner`` is stored with the run; ``--resume --learner`` changes it for that session (the same arithmetic
    either way), and the run goes on from its checkpoint."""
    pytest.importorskip("matplotlib")
    from trajview.train.checkpoint import read_checkpoint
    from trajview.train.cli import main

    out = tmp_path / "run"
    common = ["--model", "framestack", "--train-batch-size", "256", "--envs-per-worker", "8", "--minibatch-size", "128",
              "--num-sgd-iter", "2", "--no-progress", "--out", str(out)]
    assert main(["train", "--timesteps", "512", "--learner", "numpy", *common]) == 0
    assert read_checkpoint(out / "checkpoint", weights=False).config["learner"] == "numpy"
    assert main(["train", "--resume", "--timesteps", "1024", "--learner", "torch", "--out", str(out), "--no-progress"]) == 0
    ck = read_checkpoint(out / "checkpoint", weights=False)
    assert ck.config["learner"] == "torch" and ck.counters["env_steps"] == 1024
    assert main(["train", "--timesteps", "512", "--learner", "numpy", "--model", "lstm", "--out", str(tmp_path / "l"),
                 "--no-progress"]) == 2  # a model the numpy learner does not take: a one-line error


@pytest.mark.parametrize("bad", [-1, 2, 7])
def test_an_action_outside_the_space_is_refused_naming_the_column_and_nothing_changes(bad):
    """numpy's indexing would read action -1 as the last one (torch's gather raises): the numpy learners refuse it,
    naming the column and the space, before any step (PPO: the weights and Adam's state as they were)."""
    box, disc = gym.spaces.Box(-1, 1, (2,), np.float32, seed=0), gym.spaces.Discrete(2, seed=0)
    p = PPOPolicy(box, disc, {"model": "mlp", "sgd_minibatch_size": 8, "num_sgd_iter": 2, "learner": "numpy"})
    batch = random_batch(np.random.default_rng(0), 8, box, disc, "mlp", 1)
    p.learn_on_batch(SampleBatch(batch))
    before = {k: v.clone() for k, v in p.model.state_dict().items()}
    steps = float(p.get_optimizer().state_dict()["state"][0]["step"])
    batch["actions"][3] = bad
    with pytest.raises(ValueError, match=rf"column 'actions': a Discrete\(2, start=0\) action must be in \[0, 2\), got {bad}"):
        p.learn_on_batch(SampleBatch(batch))
    assert all(torch.equal(before[k], v) for k, v in p.model.state_dict().items())
    assert float(p.get_optimizer().state_dict()["state"][0]["step"]) == steps

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    q = DQNPolicy(env.observation_space, env.action_space, {"num_frames": 2, "hidden": 8, "learner": "numpy"})
    rng = np.random.default_rng(1)
    replay = {"stack": rng.normal(size=(4, 2, 2)).astype(np.float32), "next_stack": rng.normal(size=(4, 2, 2)).astype(np.float32),
              "actions": np.array([0, 1, bad, 0]), "rewards": np.ones(4, np.float32), "terminateds": np.zeros(4, bool)}
    with pytest.raises(ValueError, match=r"column 'actions': a Discrete\(2, start=0\)"):
        q.learn_on_replay(replay)
    assert q.grad_steps == 0


def _mlp_twins(config: dict | None = None):
    box, disc = gym.spaces.Box(-1, 1, (3,), np.float32, seed=0), gym.spaces.Discrete(3, seed=0)
    ref, fast = twins(box, disc, {"sgd_minibatch_size": 16, "num_sgd_iter": 2, **(config or {})}, model="mlp")
    batches = [SampleBatch(random_batch(np.random.default_rng(i), 32, box, disc, "mlp", 1)) for i in range(3)]
    return ref, fast, batches


def _auto(fast: PPOPolicy) -> PPOPolicy:
    fast.config["learner"] = "auto"
    return fast


def _learn(p: PPOPolicy, batch: SampleBatch, seed: int) -> None:
    """``p.learn_on_batch(batch)`` with torch's generator seeded (the minibatches' shuffles: the same for twins)."""
    torch.manual_seed(seed)
    p.learn_on_batch(batch)


@pytest.mark.parametrize("change", ["freeze", "weight_decay", "maximize", "decoupled_clip"])
def test_what_changes_under_a_bound_learner_goes_to_torch_or_says_why(change):
    """A parameter frozen, the optimizer's settings or the config changed after the numpy learner bound its buffers:
    "auto" trains with torch from then on (what torch does, exactly), "numpy" refuses saying why."""
    def apply(p: PPOPolicy) -> None:
        if change == "freeze":
            next(iter(p.model.pi.parameters())).requires_grad_(False)
        elif change == "decoupled_clip":
            p.config["decoupled_clip"] = True
        else:
            p.get_optimizer().param_groups[0][change] = 0.5 if change == "weight_decay" else True

    for mode in ("auto", "numpy"):
        ref, fast, batches = _mlp_twins()
        fast.config["learner"] = mode
        for p in (ref, fast):
            _learn(p, batches[0], 0)
            apply(p)
        assert fast.numpy_learner() is not None and fast.numpy_learner().is_bound()
        frozen = next(iter(fast.model.pi.parameters())).detach().clone()
        _learn(ref, batches[1], 1)
        if mode == "numpy":
            with pytest.raises(ValueError, match="the numpy learner cannot train this policy any more: the "):
                _learn(fast, batches[1], 1)
            continue
        _learn(fast, batches[1], 1)
        assert fast.numpy_learner() is None
        assert_same_state(ref, fast)
        if change == "freeze":
            assert torch.equal(next(iter(fast.model.pi.parameters())), frozen)


def test_adams_step_count_goes_on_across_a_switch_of_learner():
    """Torch's Adam steps the bound buffers' step views in place: numpy, then torch, then numpy again takes the
    bias correction of the steps taken in all (as torch all along does)."""
    ref, fast, batches = _mlp_twins()
    for i, (mode, b) in enumerate(zip(("numpy", "torch", "numpy"), batches)):
        fast.config["learner"] = mode
        _learn(fast, b, i)
        _learn(ref, b, i)
    assert_same_state(ref, fast)
    steps = {float(s["step"]) for s in fast.get_optimizer().state_dict()["state"].values()}
    assert steps == {3 * 2 * 2.0}  # 3 batches x 2 epochs x 2 minibatches


def test_adam_steps_that_differ_between_parameters_train_with_torch_or_say_why():
    """A checkpoint of a torch run that had some parameters frozen for a while: Adam's step counts differ, which the
    numpy learner (one count for all) cannot step: "auto" takes torch, "numpy" says why."""
    ref, fast, batches = _mlp_twins()
    fast.config["learner"] = "torch"
    first = next(iter(fast.model.pi.parameters()))
    for p in (ref, fast):
        next(iter(p.model.pi.parameters())).requires_grad_(False)
        _learn(p, batches[0], 0)
        next(iter(p.model.pi.parameters())).requires_grad_(True)
        _learn(p, batches[1], 1)
    assert first in fast.get_optimizer().state and len({float(s["step"]) for s in
                                                         fast.get_optimizer().state_dict()["state"].values()}) == 2
    _learn(_auto(fast), batches[2], 2)
    _learn(ref, batches[2], 2)
    assert fast.numpy_learner() is None
    assert_same_state(ref, fast)
    fast.config["learner"] = "numpy"
    with pytest.raises(ValueError, match="different numbers of steps"):
        _learn(fast, batches[2], 2)


def test_a_batch_of_whole_sequences_trains_with_torch_or_is_refused():
    """A batch with seq_lens is minibatched in whole sequences (`minibatches`): "auto" takes torch for it, "numpy"
    refuses it, saying so (it takes random rows)."""
    ref, fast, batches = _mlp_twins()
    cols = dict(batches[0].items())
    cols["seq_lens"] = np.array([10, 12, 10], np.int32)
    torch.manual_seed(3)
    ref.learn_on_batch(SampleBatch(cols))
    torch.manual_seed(3)
    _auto(fast).learn_on_batch(SampleBatch(cols))
    assert_same_state(ref, fast)
    fast.config["learner"] = "numpy"
    with pytest.raises(ValueError, match="this batch has seq_lens"):
        fast.learn_on_batch(SampleBatch(cols))
