"""Encoders from (nested) space values to flat features: one encoder per leaf, concatenated.

Per leaf (see `SpaceEncoder`):

* an **image** Box (3-D, or 2-D ``uint8``: one grey channel) -> a small CNN
  (`ImageCNN`). Channels first or last is read from the shape: the channel
  axis is the smaller of the first and the last axis, a tie meaning channels
  last (``(7, 7, 3)``, ``(210, 160, 3)``: last; ``(4, 84, 84)``: first).
  ``uint8`` pixels are scaled by 1/255;
* any other Box and MultiBinary -> flattened, as floats;
* Discrete and MultiDiscrete -> one-hot (per component, concatenated).

With ``frames=K`` every leaf carries a frame axis after the batch axis
(``[B, K, *leaf_shape]``, a frame-stack view): vector and one-hot leaves are
encoded per frame and concatenated, image leaves stack their K frames along
the channels of one CNN (DQN's frame stack: ``K * C`` input channels).
"""

from __future__ import annotations

from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .spaces import check_supported, leaf_value, leaves

__all__ = ["SpaceEncoder", "ImageCNN", "image_layout", "has_image_leaves"]

Tensor = torch.Tensor
_Layer = TypeVar("_Layer", nn.Conv2d, nn.Linear)


def image_layout(space: Any) -> tuple[int, int, int, bool] | None:
    """``(channels, height, width, channels_last)`` of an image leaf, ``None`` if ``space`` is not one.

    Images: 3-D Boxes, and 2-D ``uint8`` Boxes (one channel, ``channels_last=False``
    with no channel axis). Of a 3-D shape, the channel axis is the smaller of
    the first and the last axis; equal sizes mean channels last.
    """
    if not isinstance(space, gym.spaces.Box):
        return None
    shape = tuple(int(d) for d in space.shape)
    if len(shape) == 2 and space.dtype == np.uint8:
        return 1, shape[0], shape[1], False
    if len(shape) != 3:
        return None
    if shape[-1] <= shape[0]:
        return shape[2], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


def has_image_leaves(space: Any) -> bool:
    """Whether any leaf of ``space`` is an image (see `image_layout`)."""
    return any(image_layout(leaf) is not None for _, leaf in leaves(space))


def _orthogonal(m: _Layer, gain: float) -> _Layer:
    nn.init.orthogonal_(m.weight, gain)
    if m.bias is not None:
        nn.init.zeros_(m.bias)
    return m


class ImageCNN(nn.Module):
    """A small CNN over ``[N, C, H, W]`` float images -> ``[N, out_dim]`` (ReLU).

    Images of 36 pixels or more (the smaller side) get Nature-DQN's three
    layers at half its widths (16, 32, 32 filters: 8x8 stride 4, 4x4 stride 2,
    3x3 stride 1), then a 256-unit layer.
    Smaller images (MiniGrid's 7x7) get 3x3 convolutions that keep the size
    (16, then 32 filters; stride 2 ones while a side is over 8), then a
    128-unit layer.
    """

    def __init__(self, channels: int, height: int, width: int, out_dim: int | None = None) -> None:
        super().__init__()
        gain = float(np.sqrt(2))
        layers: list[nn.Module] = []
        if min(height, width) >= 36:
            layers += [
                _orthogonal(nn.Conv2d(channels, 16, 8, stride=4), gain), nn.ReLU(),
                _orthogonal(nn.Conv2d(16, 32, 4, stride=2), gain), nn.ReLU(),
                _orthogonal(nn.Conv2d(32, 32, 3, stride=1), gain), nn.ReLU(),
            ]
            out_dim = out_dim or 256
        else:
            layers += [_orthogonal(nn.Conv2d(channels, 16, 3, padding=1), gain), nn.ReLU()]
            h, w, c = height, width, 16
            while max(h, w) > 8:
                layers += [_orthogonal(nn.Conv2d(c, 32, 3, stride=2, padding=1), gain), nn.ReLU()]
                h, w, c = (h + 1) // 2, (w + 1) // 2, 32
            layers += [_orthogonal(nn.Conv2d(c, 32, 3, padding=1), gain), nn.ReLU()]
            out_dim = out_dim or 128
        layers.append(nn.Flatten())
        self.conv = nn.Sequential(*layers)
        with torch.no_grad():
            flat = int(self.conv(torch.zeros(1, channels, height, width)).shape[1])
        self.fc = _orthogonal(nn.Linear(flat, out_dim), gain)
        self.out_dim = out_dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.fc(self.conv(x)))


class _Flat(nn.Module):
    """Box (not an image) and MultiBinary leaves: the values as floats, flattened per row."""

    def __init__(self, space: Any, frames: int | None) -> None:
        super().__init__()
        self.dim = int(np.prod(space.shape, dtype=np.int64)) * (frames or 1)

    def forward(self, x: Any) -> Tensor:
        return torch.as_tensor(x).float().flatten(1)


class _OneHot(nn.Module):
    """Discrete and MultiDiscrete leaves: one-hot per component (offset by the space's ``start``), concatenated."""

    shift: Tensor
    low: Tensor
    high: Tensor

    def __init__(self, space: Any, frames: int | None) -> None:
        super().__init__()
        if isinstance(space, gym.spaces.Discrete):
            self.discrete = True
            nvec = np.array([int(space.n)])
            start = np.array([int(space.start)])
        else:
            self.discrete = False
            nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
            start = np.asarray(getattr(space, "start", np.zeros_like(space.nvec)), dtype=np.int64).reshape(-1)
        self.space = space
        self.n = int(nvec[0])
        self.start0 = int(start[0])
        self.components = len(nvec)
        self.dim = int(nvec.sum()) * (frames or 1)
        # Per component: where its one-hot block begins, minus its start (the index of value v is v + shift).
        shift = np.concatenate([[0], np.cumsum(nvec)[:-1]]) - start
        self.register_buffer("shift", torch.as_tensor(shift, dtype=torch.long), persistent=False)
        self.register_buffer("low", torch.as_tensor(start, dtype=torch.long), persistent=False)
        self.register_buffer("high", torch.as_tensor(start + nvec, dtype=torch.long), persistent=False)
        self.width = int(nvec.sum())

    def _valid(self, x: Tensor, low: Any, high: Any) -> Tensor | None:
        """None where every value of ``x`` lies in ``[low, high)``; else the mask of those that do. A 0 where the
        space does not hold 0 is the views' padding before an episode's first step (zeros, whatever the space):
        it encodes as no value (all zeros). Any other value outside the space is a ValueError naming the space
        (one-hot would raise torch's bare error, or for a MultiDiscrete set a bit of another component's block)."""
        inside = (x >= low) & (x < high)
        if bool(inside.all()):
            return None
        bad = ~inside & (x != 0)
        if bool(bad.any()):
            raise ValueError(f"{self.space} one-hot encoder: got {int(x[bad][0])}, outside the space (a Discrete "
                             f"value must be in [start, start + n), each MultiDiscrete component in [start, start + "
                             f"nvec); 0 stands for the padding before an episode's first step)")
        return inside

    def forward(self, x: Any) -> Tensor:
        x = torch.as_tensor(x).long()
        if self.discrete:  # [B] or [B, K]
            inside = None
            if x.numel():
                lo, hi = torch.aminmax(x)
                if int(lo) < self.start0 or int(hi) >= self.start0 + self.n:
                    inside = self._valid(x, self.start0, self.start0 + self.n)
            if inside is not None:  # (padding: no value)
                return (nn.functional.one_hot((x - self.start0).clamp(0, self.n - 1), self.n)
                        * inside[..., None]).float().flatten(1)
            if self.start0:
                x = x - self.start0
            return nn.functional.one_hot(x, self.n).float().flatten(1)
        x = x.reshape(x.shape[0], -1, self.components)  # [B, frames or 1, components]
        inside = self._valid(x, self.low, self.high)
        if inside is not None:  # (padding: no value; its index points at the component's first bit, not set)
            x = torch.where(inside, x, self.low)
        idx = x + self.shift
        out = torch.zeros(*idx.shape[:-1], self.width, device=idx.device)
        out.scatter_(-1, idx, 1.0 if inside is None else inside.float())
        return out.flatten(1)


#: Images whose smaller side is this or more are subsampled 2x (every other row and column) before the CNN.
SUBSAMPLE_AT = 128


class _Image(nn.Module):
    """An image leaf through `ImageCNN` (``frames``: the K frames stacked along the channels).

    Big images (the smaller side ``SUBSAMPLE_AT`` = 128 pixels or more:
    Atari's 210x160) keep every other row and column first (105x80), in the
    stored dtype, before anything is copied or converted to float.
    """

    def __init__(self, space: Any, frames: int | None) -> None:
        super().__init__()
        layout = image_layout(space)
        assert layout is not None
        c, h, w, self.channels_last = layout
        self.grey = len(space.shape) == 2
        self.step = 2 if min(h, w) >= SUBSAMPLE_AT else 1
        h, w = -(-h // self.step), -(-w // self.step)
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else None
        self.cnn = ImageCNN(c * (frames or 1), h, w)
        self.dim = self.cnn.out_dim
        self.hw = (h, w)

    def forward(self, x: Any) -> Tensor:
        x = torch.as_tensor(x)
        k = self.step
        if self.grey:
            x = x[..., ::k, ::k].unsqueeze(-3)  # [..., 1, H, W]
        elif self.channels_last:
            # Dims counted from the front: ONNX's exporter writes movedim(-1, -3) as a Transpose with negative
            # entries, which onnxruntime refuses.
            d = x.dim()
            x = x[..., ::k, ::k, :].movedim(d - 1, d - 3)  # [..., C, H, W]
        else:
            x = x[..., ::k, ::k]
        x = x.reshape(x.shape[0], -1, *self.hw)  # frames: [B, K, C, H, W] -> [B, K * C, H, W]
        x = x.float()  # a copy (from uint8), scaled in place
        if self.scale is not None:
            x.mul_(self.scale)
        return self.cnn(x)


class SpaceEncoder(nn.Module):
    """A (nested) value of ``space`` -> features ``[B, dim]``: an encoder per leaf (module docstring), concatenated
    in the space's leaf order.

    ``what`` names the space in errors (`UnsupportedSpaceError` for leaves other
    than Box, Discrete, MultiDiscrete and MultiBinary).
    """

    def __init__(self, space: Any, frames: int | None = None, what: str = "observation_space") -> None:
        super().__init__()
        check_supported(space, what)
        self.paths = [p for p, _ in leaves(space)]
        encs: list[nn.Module] = []
        for _, leaf in leaves(space):
            if image_layout(leaf) is not None:
                encs.append(_Image(leaf, frames))
            elif isinstance(leaf, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
                encs.append(_OneHot(leaf, frames))
            else:
                encs.append(_Flat(leaf, frames))
        self.leaf_encoders = nn.ModuleList(encs)
        self.dim: int = sum(int(getattr(e, "dim")) for e in encs)

    def forward(self, value: Any) -> Tensor:
        parts = [enc(leaf_value(value, p)) for p, enc in zip(self.paths, self.leaf_encoders)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, -1)
