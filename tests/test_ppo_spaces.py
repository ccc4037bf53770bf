"""PPO learns with every action head and with nested image observations: tiny local tasks, a few thousand steps.

Each task is 10 steps of independent decisions whose answer the observation gives; a random policy earns
about half (or less) of the best return.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trajview.train import TrainConfig, PPOTrainer  # noqa: E402

S = gym.spaces
STEPS = 10


class _Task(gym.Env):
    """Shows a random target each step; ``reward(action, target)`` scores the answer."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.target = self._draw()
        return self._obs(), {}

    def step(self, action):
        r = float(self._reward(action, self.target))
        self.t += 1
        self.target = self._draw()
        return self._obs(), r, self.t >= STEPS, False, {}


class ContinuousTarget(_Task):
    """Box actions: answer 1.5 * x for x in [-1, 1] shown (reward -|a - 1.5 x|; random: about -1 a step)."""

    observation_space = S.Box(-1.0, 1.0, (1,), np.float32)
    action_space = S.Box(-2.0, 2.0, (1,), np.float32)

    def _draw(self):
        return self.np_random.uniform(-1, 1, (1,)).astype(np.float32)

    def _obs(self):
        return self.target

    def _reward(self, a, x):
        return -abs(float(a[0]) - 1.5 * float(x[0]))


class MultiDiscreteMatch(_Task):
    """MultiDiscrete actions: name both components of a target shown one-hot (reward: the share matched)."""

    observation_space = S.Box(0.0, 1.0, (7,), np.float32)
    action_space = S.MultiDiscrete([3, 4])

    def _draw(self):
        return np.array([self.np_random.integers(3), self.np_random.integers(4)])

    def _obs(self):
        o = np.zeros(7, np.float32)
        o[self.target[0]] = o[3 + self.target[1]] = 1
        return o

    def _reward(self, a, target):
        return float(np.mean(np.asarray(a) == target))


class BitCopy(_Task):
    """MultiBinary actions: copy 4 bits (reward: the share copied right; random: 0.5)."""

    observation_space = S.Box(0.0, 1.0, (4,), np.float32)
    action_space = S.MultiBinary(4)

    def _draw(self):
        return self.np_random.integers(0, 2, 4)

    def _obs(self):
        return self.target.astype(np.float32)

    def _reward(self, a, target):
        return float(np.mean(np.asarray(a) == target))


class ImageSide(_Task):
    """A Dict observation: a lit pixel in the left or right column of a 3x3 image, and a Discrete ``flip``;
    the answer is the pixel's side, swapped when ``flip`` is 1 (both leaves are needed; random: 0.5)."""

    observation_space = S.Dict({"image": S.Box(0, 255, (3, 3, 1), np.uint8), "flip": S.Discrete(2)})
    action_space = S.Discrete(2)

    def _draw(self):
        return int(self.np_random.integers(2)), int(self.np_random.integers(3)), int(self.np_random.integers(2))

    def _obs(self):
        side, row, flip = self.target
        img = np.zeros((3, 3, 1), np.uint8)
        img[row, 2 * side, 0] = 255
        return {"image": img, "flip": flip}

    def _reward(self, a, target):
        side, _, flip = target
        return float(int(a) == side ^ flip)


for _cls in (ContinuousTarget, MultiDiscreteMatch, BitCopy, ImageSide):
    if f"tvtest/{_cls.__name__}-v0" not in gym.registry:
        gym.register(f"tvtest/{_cls.__name__}-v0", entry_point=_cls)


def _train(tmp_path, env, steps, model="mlp", lr=3e-3, **kw):
    torch.set_num_threads(1)
    cfg = TrainConfig(env=f"tvtest/{env}-v0", model=model, seed=0, timesteps=steps, envs_per_worker=8,
                      train_batch_size=400, sgd_minibatch_size=100, num_sgd_iter=6, lr=lr, gamma=0.5,
                      stop_reward=None, out_dir=str(tmp_path / env), **kw)
    t = PPOTrainer(cfg)
    t.train(progress=False)
    return t


def test_box_actions_learn_a_continuous_target(tmp_path):
    t = _train(tmp_path, "ContinuousTarget", 6000, model_config={"hidden": (32,), "log_std_init": -0.5})
    # Random answers lose about 10 per episode; the learned ones less than a third of that.
    assert t.mean_return > -3.0, t.mean_return


def test_multidiscrete_actions_learn_both_components(tmp_path):
    t = _train(tmp_path, "MultiDiscreteMatch", 4000, model_config={"hidden": (32,)})
    assert t.mean_return > 8.0, t.mean_return  # random: 10 * (1/3 + 1/4) / 2 = 2.9


def test_multibinary_actions_learn_to_copy_bits(tmp_path):
    t = _train(tmp_path, "BitCopy", 4000, model_config={"hidden": (32,)})
    assert t.mean_return > 8.5, t.mean_return  # random: 5


def test_dict_observation_with_an_image_and_a_discrete_leaf(tmp_path):
    t = _train(tmp_path, "ImageSide", 6000, model_config={"hidden": (32,)})
    assert t.mean_return > 8.5, t.mean_return  # random: 5; either leaf alone: 5
