"""Action distributions for PPO: one head per action space, from the policy network's outputs to a distribution.

`make_action_head(action_space)` picks the head; ``head.num_inputs`` is the
width the policy network outputs; ``head(inputs)`` is a distribution with
``sample()``, ``deterministic()``, ``logp(actions)`` and ``entropy()`` (each
``[B]``). Actions come out with the space's dtype and shape, inside the space.

* ``Discrete(n, start)``: a categorical over ``n`` logits.
* ``MultiDiscrete(nvec, start)``: independent categoricals, one per component.
* ``MultiBinary(n)``: independent Bernoullis, one logit each.
* ``Box``: a diagonal Gaussian over the network's means with a learned,
  state-independent log-std (``log_std_init``), **tanh-squashed** to the
  bounds in every dimension that has finite bounds: ``u ~ N(mean, std)``,
  ``action = low + (tanh(u) + 1) * (high - low) / 2``, so every action is
  within the space and is exactly what the env gets and what is stored.
  ``logp(action)`` recovers ``u = atanh(t)`` from the stored action (``t``
  clamped to ``±(1 - 1e-6)``) and subtracts the change-of-variables term
  ``log(1 - t**2) + log((high - low) / 2)`` per dimension; the logp stored at
  action time is computed the same way from the stored action, so PPO's
  ratio compares like with like. ``entropy()`` is the Gaussian's (before the
  squash: the squashed one has no closed form). Dimensions with an infinite
  bound are plain Gaussian samples. ``deterministic()`` squashes the mean.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .spaces import UnsupportedSpaceError

__all__ = [
    "ActionDistribution",
    "ActionHead",
    "Categorical",
    "MultiCategorical",
    "Bernoulli",
    "SquashedGaussian",
    "make_action_head",
]

Tensor = torch.Tensor

#: |tanh(u)| is clamped to 1 - SQUASH_EPS before atanh when an action's log-probability is computed.
SQUASH_EPS = 1e-6


def _torch_dtype(space: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype


class ActionDistribution:
    """A batch of action distributions (one per row)."""

    def sample(self) -> Tensor:
        raise NotImplementedError

    def deterministic(self) -> Tensor:
        raise NotImplementedError

    def logp(self, actions: Any) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor:
        raise NotImplementedError


class ActionHead(nn.Module):
    """From ``[B, num_inputs]`` network outputs to an `ActionDistribution` over the action space."""

    num_inputs: int

    def forward(self, inputs: Tensor) -> ActionDistribution:
        raise NotImplementedError


# -- Discrete --------------------------------------------------------------------------------------------------


def draw_categorical(probs: Tensor) -> Tensor:
    """One draw per row of ``probs`` (``[N, K]``, each row probabilities), ``[N]`` indices: the draws
    ``torch.multinomial(probs, 1, True)[:, 0]`` makes, bit for bit, from torch's generator. That is torch's own way
    to draw one sample (the argmax of ``probs / q``, ``q`` drawn Exp(1)), without its checks of the values, which
    take about two thirds of its time on small batches (they read the values back; a NaN probability is left to the
    output checks, which name the column)."""
    return (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)


class Categorical(ActionDistribution):
    """A categorical over ``logits`` (``[B, n]``): the arithmetic of ``torch.distributions.Categorical`` (the
    same ops, so the same values and the same random draws), without its argument validation and broadcasting,
    which cost more than the math at PPO's minibatch sizes."""

    def __init__(self, logits: Tensor, start: int = 0, dtype: torch.dtype = torch.int64) -> None:
        self.logits = logits
        self.start = start
        self.dtype = dtype
        self._norm: Tensor | None = None
        self._probs: Tensor | None = None

    @property
    def norm_logits(self) -> Tensor:
        """Log-probabilities: the logits less their logsumexp."""
        if self._norm is None:
            self._norm = self.logits - self.logits.logsumexp(dim=-1, keepdim=True)
        return self._norm

    @property
    def probs(self) -> Tensor:
        if self._probs is None:
            self._probs = torch.softmax(self.norm_logits, -1)
        return self._probs

    def _out(self, idx: Tensor) -> Tensor:
        return (idx + self.start if self.start else idx).to(self.dtype)

    def sample(self) -> Tensor:
        probs = self.probs
        return self._out(draw_categorical(probs.reshape(-1, probs.shape[-1])).reshape(probs.shape[:-1]))

    def deterministic(self) -> Tensor:
        return self._out(torch.argmax(self.logits, -1))

    def logp(self, actions: Any) -> Tensor:
        a = torch.as_tensor(actions).long()
        a = a - self.start if self.start else a
        return self.norm_logits.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        logits = torch.clamp(self.norm_logits, min=torch.finfo(self.logits.dtype).min)
        return -(logits * self.probs).sum(-1)


class _CategoricalHead(ActionHead):
    def __init__(self, space: gym.spaces.Discrete) -> None:
        super().__init__()
        self.num_inputs = int(space.n)
        self.start = int(space.start)
        self.dtype = _torch_dtype(space)

    def forward(self, inputs: Tensor) -> ActionDistribution:
        return Categorical(inputs, self.start, self.dtype)


# -- MultiDiscrete -------------------------------------------------------------------------------------------------


class MultiCategorical(ActionDistribution):
    """Independent categoricals, one per component of ``nvec`` (flattened); actions ``[B, *shape]``."""

    def __init__(self, logits: Tensor, nvec: list[int], start: Tensor, shape: tuple[int, ...], dtype: torch.dtype):
        self.parts = [torch.distributions.Categorical(logits=x) for x in torch.split(logits, nvec, -1)]
        self.start = start.to(logits.device)
        self.shape = shape
        self.dtype = dtype

    def _out(self, idx: list[Tensor]) -> Tensor:
        a = torch.stack(idx, -1) + self.start
        return a.reshape(a.shape[0], *self.shape).to(self.dtype)

    def sample(self) -> Tensor:
        return self._out([d.sample() for d in self.parts])

    def deterministic(self) -> Tensor:
        return self._out([torch.argmax(d.logits, -1) for d in self.parts])

    def logp(self, actions: Any) -> Tensor:
        a = torch.as_tensor(actions).long()
        a = a.reshape(a.shape[0], -1) - self.start
        return torch.stack([d.log_prob(a[:, i]) for i, d in enumerate(self.parts)], -1).sum(-1)

    def entropy(self) -> Tensor:
        return torch.stack([d.entropy() for d in self.parts], -1).sum(-1)


class _MultiCategoricalHead(ActionHead):
    start: Tensor

    def __init__(self, space: gym.spaces.MultiDiscrete) -> None:
        super().__init__()
        self.nvec = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
        start = np.asarray(getattr(space, "start", np.zeros_like(space.nvec)), dtype=np.int64).reshape(-1)
        self.register_buffer("start", torch.as_tensor(start), persistent=False)
        self.shape = tuple(int(d) for d in space.shape)
        self.num_inputs = sum(self.nvec)
        self.dtype = _torch_dtype(space)

    def forward(self, inputs: Tensor) -> ActionDistribution:
        return MultiCategorical(inputs, self.nvec, self.start, self.shape, self.dtype)


# -- MultiBinary ------------------------------------------------------------------------------------------------------


class Bernoulli(ActionDistribution):
    """Independent Bernoullis, one logit each; actions ``[B, *shape]`` of 0 and 1."""

    def __init__(self, logits: Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.logits = logits
        self.shape = shape
        self.dtype = dtype

    def _out(self, bits: Tensor) -> Tensor:
        return bits.reshape(bits.shape[0], *self.shape).to(self.dtype)

    def sample(self) -> Tensor:
        return self._out(torch.bernoulli(torch.sigmoid(self.logits)))

    def deterministic(self) -> Tensor:
        return self._out(self.logits > 0)

    def logp(self, actions: Any) -> Tensor:
        a = torch.as_tensor(actions).reshape(len(self.logits), -1).to(self.logits.dtype)
        return -nn.functional.binary_cross_entropy_with_logits(self.logits, a, reduction="none").sum(-1)

    def entropy(self) -> Tensor:
        p = torch.sigmoid(self.logits)
        return nn.functional.binary_cross_entropy_with_logits(self.logits, p, reduction="none").sum(-1)


class _BernoulliHead(ActionHead):
    def __init__(self, space: gym.spaces.MultiBinary) -> None:
        super().__init__()
        self.shape = tuple(int(d) for d in space.shape)
        self.num_inputs = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = _torch_dtype(space)

    def forward(self, inputs: Tensor) -> ActionDistribution:
        return Bernoulli(inputs, self.shape, self.dtype)


# -- Box ------------------------------------------------------------------------------------------------------------------


class SquashedGaussian(ActionDistribution):
    """A diagonal Gaussian, tanh-squashed into ``[low, high]`` where both are finite (the module docstring)."""

    def __init__(self, mean: Tensor, log_std: Tensor, head: _GaussianHead) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)
        self.head = head

    def _squash(self, u: Tensor) -> Tensor:
        h = self.head
        a = torch.where(h.bounded, h.center + torch.tanh(u) * h.scale, u)
        a = torch.where(h.bounded, torch.minimum(torch.maximum(a, h.low), h.high), a)
        return a.reshape(a.shape[0], *h.shape).to(h.dtype)

    def sample(self) -> Tensor:
        with torch.no_grad():  # like torch.distributions' sample(): not differentiable
            return self._squash(self.mean + torch.exp(self.log_std) * torch.randn_like(self.mean))

    def deterministic(self) -> Tensor:
        return self._squash(self.mean)

    def logp(self, actions: Any) -> Tensor:
        h = self.head
        a = torch.as_tensor(actions).reshape(len(self.mean), -1).to(self.mean.dtype)
        t = ((a - h.center) / h.scale).clamp(-1 + SQUASH_EPS, 1 - SQUASH_EPS)
        u = torch.where(h.bounded, torch.atanh(t), a)
        logp = torch.distributions.Normal(self.mean, torch.exp(self.log_std)).log_prob(u)
        correction = torch.where(h.bounded, torch.log1p(-t * t) + torch.log(h.scale), torch.zeros_like(t))
        return (logp - correction).sum(-1)

    def entropy(self) -> Tensor:
        return (0.5 + 0.5 * np.log(2 * np.pi) + self.log_std).sum(-1)


class _GaussianHead(ActionHead):
    """The Box head: owns the learned log-std (``log_std``, one per action dimension)."""

    bounded: Tensor
    center: Tensor
    scale: Tensor
    low: Tensor
    high: Tensor

    def __init__(self, space: gym.spaces.Box, log_std_init: float) -> None:
        super().__init__()
        self.shape = tuple(int(d) for d in space.shape)
        self.num_inputs = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = _torch_dtype(space)
        low = np.asarray(space.low, dtype=np.float64).reshape(-1)
        high = np.asarray(space.high, dtype=np.float64).reshape(-1)
        bounded = np.isfinite(low) & np.isfinite(high)
        center = np.zeros_like(low)
        half = np.ones_like(low)
        center[bounded] = (low[bounded] + high[bounded]) / 2
        half[bounded] = (high[bounded] - low[bounded]) / 2
        if np.any(half[bounded] <= 0):
            raise UnsupportedSpaceError(f"action_space {space!r}: every bounded dimension needs high > low")
        for name, v in (("bounded", bounded), ("center", center), ("scale", half), ("low", low), ("high", high)):
            t = torch.as_tensor(v) if name == "bounded" else torch.as_tensor(v, dtype=torch.float32)
            self.register_buffer(name, t, persistent=False)
        self.log_std = nn.Parameter(torch.full((self.num_inputs,), float(log_std_init)))

    def forward(self, inputs: Tensor) -> ActionDistribution:
        return SquashedGaussian(inputs, self.log_std, self)


def make_action_head(action_space: Any, log_std_init: float = 0.0) -> ActionHead:
    """The head for ``action_space`` (Discrete, MultiDiscrete, MultiBinary or Box; the module docstring).

    Any other space raises `UnsupportedSpaceError`.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return _CategoricalHead(action_space)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return _MultiCategoricalHead(action_space)
    if isinstance(action_space, gym.spaces.MultiBinary):
        return _BernoulliHead(action_space)
    if isinstance(action_space, gym.spaces.Box):
        if not np.issubdtype(action_space.dtype, np.floating):
            raise UnsupportedSpaceError(f"action_space {action_space!r}: a Box action space needs a float dtype")
        return _GaussianHead(action_space, log_std_init)
    raise UnsupportedSpaceError(
        f"action_space: unsupported space {type(action_space).__name__} ({action_space!r}); trajview's PPO acts in "
        "Discrete, MultiDiscrete, MultiBinary and Box spaces"
    )
