"""Observation encoders over any space (images, vectors, discrete leaves, nested Dict/Tuple), and the four models
over nested observations and every action head, end to end with the collector."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from trajview.algorithms.models import (  # noqa: E402
    ImageCNN,
    SpaceEncoder,
    UnsupportedSpaceError,
    get_nested,
    image_layout,
    make_model,
)
from trajview.algorithms.models.spaces import flatten_value, leaves, map_leaves_with_path  # noqa: E402
from trajview.algorithms.ppo import PPOPolicy  # noqa: E402

S = gym.spaces
U8 = np.uint8


@pytest.mark.parametrize("shape,dtype,want", [
    ((7, 7, 3), U8, (3, 7, 7, True)),            # MiniGrid: channels last
    ((210, 160, 3), U8, (3, 210, 160, True)),    # Atari
    ((3, 64, 64), np.float32, (3, 64, 64, False)),
    ((4, 84, 84), U8, (4, 84, 84, False)),       # a channels-first frame stack
    ((84, 84, 4), U8, (4, 84, 84, True)),
    ((3, 3, 3), U8, (3, 3, 3, True)),            # a tie: channels last
    ((84, 84), U8, (1, 84, 84, False)),          # 2-D uint8: one grey channel
    ((5, 5), np.float32, None),                  # 2-D float: a matrix, flattened
    ((8,), np.float32, None),
])
def test_image_layout_detects_channel_order_from_the_shape(shape, dtype, want):
    assert image_layout(S.Box(0, 255, shape, dtype)) == want


def _copy_weights(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    dst.load_state_dict(src.state_dict())


def test_channels_last_and_first_encode_the_same_image_alike():
    torch.manual_seed(0)
    last = SpaceEncoder(S.Box(0, 255, (9, 9, 3), U8))
    first = SpaceEncoder(S.Box(0, 255, (3, 9, 9), U8))
    _copy_weights(first, last)
    x = torch.randint(0, 256, (5, 9, 9, 3), dtype=torch.uint8)
    out = last(x)
    assert out.shape == (5, last.dim) and last.dim == 128
    torch.testing.assert_close(first(x.permute(0, 3, 1, 2)), out)
    # The same weights on a channels-last image read as channels first would mix rows into channels: different.
    assert not torch.allclose(first(x.reshape(5, 3, 9, 9)), out)


def test_uint8_pixels_are_scaled_by_1_over_255():
    torch.manual_seed(1)
    u8 = SpaceEncoder(S.Box(0, 255, (6, 6, 2), U8))
    f32 = SpaceEncoder(S.Box(0.0, 1.0, (6, 6, 2), np.float32))
    _copy_weights(f32, u8)
    x = torch.randint(0, 256, (4, 6, 6, 2), dtype=torch.uint8)
    torch.testing.assert_close(u8(x), f32(x.float() / 255))


def test_frame_stacks_of_images_stack_frames_along_the_channels():
    torch.manual_seed(2)
    space = S.Box(0, 255, (6, 6, 3), U8)
    enc = SpaceEncoder(space, frames=4)
    cnn = enc.leaf_encoders[0].cnn
    assert isinstance(cnn, ImageCNN) and cnn.conv[0].in_channels == 12
    x = torch.randint(0, 256, (2, 4, 6, 6, 3), dtype=torch.uint8)
    # Frame k's channels are input channels 3k .. 3k + 2.
    want = cnn(torch.cat([x[:, k].permute(0, 3, 1, 2) for k in range(4)], 1).float() / 255)
    torch.testing.assert_close(enc(x), want)


def test_big_images_keep_every_other_row_and_column():
    torch.manual_seed(3)
    enc = SpaceEncoder(S.Box(0, 255, (210, 160, 3), U8))
    img = enc.leaf_encoders[0]
    assert img.hw == (105, 80) and img.cnn.out_dim == 256
    x = torch.randint(0, 256, (2, 210, 160, 3), dtype=torch.uint8)
    torch.testing.assert_close(enc(x), img.cnn(x[:, ::2, ::2].permute(0, 3, 1, 2).float() / 255))


NESTED = S.Dict({
    "image": S.Box(0, 255, (5, 5, 3), U8),
    "pos": S.Box(-1.0, 1.0, (2,), np.float32),
    "dir": S.Discrete(4, start=1),
    "more": S.Tuple((S.MultiDiscrete([2, 3]), S.MultiBinary(2), S.Dict({"m": S.Box(-1.0, 1.0, (2, 2), np.float32)}))),
})


def _nested_value(n: int, frames: int | None = None):
    """A batch of ``n`` samples of NESTED (each leaf ``[n, *leaf]``, or ``[n, frames, *leaf]``), as tensors."""
    lead = (n,) if frames is None else (n, frames)

    def leaf(_path, space):
        space.seed(7)
        return torch.as_tensor(np.stack([space.sample() for _ in range(int(np.prod(lead)))]).reshape(lead + space.shape))

    return map_leaves_with_path(leaf, NESTED)


def test_dict_and_tuple_encoder_concatenates_one_encoder_per_leaf():
    torch.manual_seed(4)
    enc = SpaceEncoder(NESTED)
    assert [p for p, _ in leaves(NESTED)] == [
        ("dir",), ("image",), ("more", 0), ("more", 1), ("more", 2, "m"), ("pos",)]  # gymnasium sorts Dict keys
    v = _nested_value(6)
    out = enc(v)
    assert out.shape == (6, 4 + 128 + 5 + 2 + 4 + 2) and enc.dim == out.shape[1]
    c = 0
    torch.testing.assert_close(out[:, c:c + 4], torch.nn.functional.one_hot(v["dir"] - 1, 4).float())
    c += 4
    torch.testing.assert_close(out[:, c:c + 128], enc.leaf_encoders[1](v["image"]))
    c += 128
    md = v["more"][0]
    torch.testing.assert_close(out[:, c:c + 5], torch.cat([torch.nn.functional.one_hot(md[:, 0], 2),
                                                           torch.nn.functional.one_hot(md[:, 1], 3)], -1).float())
    c += 5
    torch.testing.assert_close(out[:, c:c + 2], v["more"][1].float())
    c += 2
    torch.testing.assert_close(out[:, c:c + 4], v["more"][2]["m"].reshape(6, 4))
    c += 4
    torch.testing.assert_close(out[:, c:], v["pos"])
    # The same value as flat per-leaf columns ("obs.more.2.m"), read back nested with get_nested.
    flat = flatten_value("obs", NESTED, v)
    assert sorted(flat) == ["obs.dir", "obs.image", "obs.more.0", "obs.more.1", "obs.more.2.m", "obs.pos"]
    torch.testing.assert_close(enc(get_nested(flat, "obs", NESTED)), out)
    # With a frame axis: every leaf per frame, [B, K, *leaf].
    enc4 = SpaceEncoder(NESTED, frames=3)
    v3 = _nested_value(6, frames=3)
    out3 = enc4(v3)
    assert out3.shape == (6, 3 * (4 + 5 + 2 + 4 + 2) + 128)
    torch.testing.assert_close(out3[:, -6:], v3["pos"].reshape(6, 6))


def test_get_nested_reads_a_sample_batch_nested_column():
    v = {k: np.asarray(x) for k, x in flatten_value("obs", NESTED, _nested_value(3)).items()}
    b = tv.SampleBatch(v)
    got = get_nested(b, "obs", NESTED)
    assert isinstance(got["more"], tuple) and np.array_equal(got["more"][2]["m"], v["obs.more.2.m"])


def test_unsupported_leaves_are_named():
    space = S.Dict({"image": S.Box(0, 255, (5, 5, 3), U8), "mission": S.Text(10)})
    with pytest.raises(UnsupportedSpaceError, match="observation_space leaf 'mission': unsupported space Text"):
        SpaceEncoder(space)
    with pytest.raises(UnsupportedSpaceError, match="leaf 'mission'"):
        make_model("mlp", space, S.Discrete(2))


# -- the models over nested observations and every action head, with the collector -------------------------------

DICT_OBS = S.Dict({"image": S.Box(0, 255, (6, 6, 3), U8), "dir": S.Discrete(4), "vec": S.Box(-1.0, 1.0, (2,), np.float32)})
TUPLE_OBS = S.Tuple((S.Box(0, 255, (5, 5, 1), U8), S.MultiDiscrete([2, 3])))
DEEP_OBS = S.Dict({"image": S.Box(0, 255, (5, 5, 3), U8),
                   "more": S.Tuple((S.Discrete(3), S.Dict({"m": S.Box(-1.0, 1.0, (2,), np.float32),
                                                           "b": S.MultiBinary(2)})))})
OBS = {"dict": DICT_OBS, "tuple": TUPLE_OBS, "deep": DEEP_OBS}
ACTIONS = {
    "box": S.Box(-2.0, 2.0, (2,), np.float32),
    "multidiscrete": S.MultiDiscrete([3, 2]),
    "multibinary": S.MultiBinary(3),
    "discrete": S.Discrete(3),
}


class RandomNestedEnv(gym.Env):
    """Random observations of a nested space, episodes of 4 to 14 steps, random rewards."""

    def __init__(self, obs_space, act_space):
        self.observation_space = obs_space
        self.action_space = act_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 31)))
        self.t, self.len = 0, int(self.np_random.integers(4, 15))
        return self.observation_space.sample(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        self.t += 1
        return self.observation_space.sample(), float(self.np_random.normal()), self.t >= self.len, False, {}


MODEL_CONFIGS = {
    "mlp": {"hidden": (16,)},
    "framestack": {"num_frames": 3, "hidden": (16,)},
    "lstm": {"max_seq_len": 5, "cell_size": 8, "hidden": 8},
    "attention": {"max_seq_len": 5, "memory": 3, "attention_dim": 8, "ff_dim": 8},
}
CASES = [(m, "dict", a) for m in MODEL_CONFIGS for a in ("box", "multidiscrete")] + [
    ("framestack", "tuple", "multibinary"), ("lstm", "tuple", "discrete"), ("mlp", "tuple", "box"),
    ("framestack", "deep", "box"), ("attention", "deep", "discrete")]


def _worker(model, obs, act, fragment=9):
    torch.manual_seed(0)
    obs_space = OBS[obs]
    policy = PPOPolicy(obs_space, ACTIONS[act], {"model": model, "model_config": MODEL_CONFIGS[model]})
    w = tv.RolloutWorker(lambda cfg: RandomNestedEnv(obs_space, ACTIONS[act]), policy, num_envs=2,
                         rollout_fragment_length=fragment, seed=0)
    return w, policy


@pytest.mark.parametrize("model,obs,act", CASES)
def test_training_pass_over_nested_batches_reproduces_the_rollout(model, obs, act):
    """Acting stored each step's logp and value; the training pass over the collected (nested) batch recomputes
    them from the stored actions: the models read nested views alike in both, every action head round-trips."""
    w, policy = _worker(model, obs, act)
    for _ in range(3):
        b = w.sample()
    space = ACTIONS[act]
    assert b["actions"].dtype == space.dtype and b["actions"].shape[1:] == space.shape
    assert all(space.contains(a) for a in b["actions"])
    tensors = policy._to_torch(b)
    with torch.no_grad():
        inputs, values = policy.model.forward_train(tensors)
        logp = policy.model.action_dist(inputs).logp(tensors["actions"])
    np.testing.assert_allclose(logp.numpy(), b["action_logp"], atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(values.numpy(), b["vf_preds"], atol=2e-4, rtol=1e-4)
    # The loss runs on it (gradients to every parameter that the batch reaches).
    policy.model.zero_grad()
    policy.loss(tensors).backward()
    assert all(p.grad is not None for p in policy.model.parameters())


@pytest.mark.parametrize("model,obs", [("mlp", "dict"), ("framestack", "deep"), ("lstm", "dict"), ("attention", "deep")])
def test_bootstrap_of_nested_observations_is_the_next_steps_value(model, obs):
    w, policy = _worker(model, obs, "box", fragment=5)
    first, second = w.sample(), w.sample()
    compared = 0
    for seg in first.split_by_episode():
        if seg["terminateds"][-1]:
            continue
        eid, t_last = int(seg["eps_id"][-1]), int(seg["t"][-1])
        nxt = np.flatnonzero((second["eps_id"] == eid) & (second["t"] == t_last + 1))
        assert len(nxt) == 1
        assert policy.value_of_next_step(seg) == pytest.approx(float(second["vf_preds"][nxt[0]]), abs=2e-4)
        compared += 1
    assert compared >= 1


def test_one_hot_refuses_values_outside_the_space_and_reads_zero_padding_as_no_value():
    """A Discrete / MultiDiscrete value outside the space is a ValueError naming the space (a MultiDiscrete one set a
    bit of the next component's block); 0 where the space does not hold it is the views' padding before an
    episode's first step: all zeros."""
    enc = SpaceEncoder(S.Discrete(3, start=5))
    np.testing.assert_array_equal(enc(torch.tensor([5, 7, 0])).numpy(), [[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    for bad in (4, 8, -1):
        with pytest.raises(ValueError, match=rf"Discrete\(3, start=5\) one-hot encoder: got {bad}, outside the space"):
            enc(torch.tensor([5, bad]))
    stack = SpaceEncoder(S.Discrete(3, start=5), frames=2)  # prev_n_actions of a frame stack: [B, K]
    np.testing.assert_array_equal(stack(torch.tensor([[0, 6]])).numpy(), [[0, 0, 0, 0, 1, 0]])
    md = SpaceEncoder(S.MultiDiscrete([3, 2], start=[1, 4]))
    np.testing.assert_array_equal(md(torch.tensor([[1, 5], [3, 4], [0, 0]])).numpy(),
                                  [[1, 0, 0, 0, 1], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"MultiDiscrete\(\[3 2\], start=\[1 4\]\) one-hot encoder: got 4"):
        md(torch.tensor([[4, 4]]))  # (4 + shift would have set the second component's first bit)
    plain = SpaceEncoder(S.MultiDiscrete([3, 2]))
    with pytest.raises(ValueError, match="got 3, outside the space"):
        plain(torch.tensor([[3, 0]]))


@pytest.mark.parametrize("model", ["framestack", "lstm", "attention"])
def test_models_with_previous_actions_act_in_a_discrete_space_that_does_not_hold_zero(model):
    """``Discrete(3, start=5)``: the previous actions before an episode's first step are the views' zeros, outside
    the space; the models read them as no action, and act and train."""

    class Env(gym.Env):
        observation_space = S.Box(-1, 1, (2,), np.float32)
        action_space = S.Discrete(3, start=5)

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, a):
            assert a in self.action_space, a
            self.t += 1
            return np.full(2, 0.1 * a, np.float32), 1.0, self.t >= 5, False, {}

    policy = PPOPolicy(Env.observation_space, Env.action_space, {"model": model, "sgd_minibatch_size": 16,
                                                                 "num_sgd_iter": 1})
    worker = tv.RolloutWorker(lambda cfg: Env(), policy, num_envs=2, rollout_fragment_length=20)
    batch = worker.sample()
    assert set(np.asarray(batch["actions"]).tolist()) <= {5, 6, 7}
    assert policy.learn_on_batch(batch)  # (the worker's batch is postprocessed: advantages, value targets)
    assert policy.compute_single_action(np.zeros(2, np.float32))[0] in (5, 6, 7)
