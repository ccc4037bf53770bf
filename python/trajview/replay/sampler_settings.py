"""The settings the replay samplers share, checked once: the batch size, the column-name keywords,
``num_slices`` / ``slice_len`` and the slice flags (`_SliceSettings`), and alpha, beta, eps and
max_capacity of the prioritized samplers (`_PrioritySettings`, TorchRL's names and formulas)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import positive_int

#: Steps one `sample` may ask for (2**31: far beyond any training batch; a larger request is a mistake, refused
#: before anything is allocated).
MAX_BATCH_SIZE = 2**31

#: Priority exponents up to this keep every leaf ``(p + eps) ** alpha`` exact (the C++ store's bound).
MAX_ALPHA = 1e6


def _check_batch_size(batch_size: int) -> int:
    batch_size = positive_int("batch_size", batch_size)
    if batch_size > MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be at most {MAX_BATCH_SIZE} steps per sample, got {batch_size}")
    return batch_size


def check_max_capacity(owner: str, max_capacity: int | None, capacity: int) -> None:
    """A prioritized sampler's ``max_capacity`` must be None or the buffer's capacity (a `ValueError`)."""
    if max_capacity is not None and max_capacity != capacity:
        raise ValueError(f"{owner}: max_capacity={max_capacity} differs from the buffer's capacity {capacity}; pass "
                         f"max_capacity=None or the same value")


def check_alpha(owner: str, alpha: Any) -> float:
    """A priority exponent: finite, >= 0 and at most `MAX_ALPHA`."""
    v = _real(owner, "alpha", alpha)
    if v > MAX_ALPHA:
        raise ValueError(f"{owner} alpha must be at most {MAX_ALPHA:g}, got {alpha!r}")
    return v


def _check_keys(owner: str, **keys: str | None) -> None:
    for name, key in keys.items():
        if key is not None and not isinstance(key, str):
            raise TypeError(f"{owner} {name} must be a column name (str) or None, got {key!r}")


def _real(owner: str, name: str, value: Any, *, low: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{owner} {name} must be a real number, got {value!r}") from None
    if not np.isfinite(v) or v < low:
        raise ValueError(f"{owner} {name} must be finite and >= {low}, got {value!r}")
    return v


class _SliceSettings:
    """`num_slices` / `slice_len` and the trajectory settings shared by the slice samplers."""

    num_slices: int | None
    slice_len: int | None

    def _init_slices(
        self,
        owner: str,
        num_slices: int | None,
        slice_len: int | None,
        traj_key: str | None,
        end_key: str | None,
        truncated_key: str | None,
        strict_length: bool,
        pad_output: bool,
    ) -> None:
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"{owner} needs exactly one of num_slices and slice_len, got num_slices={num_slices!r}, "
                f"slice_len={slice_len!r}"
            )
        self.num_slices = None if num_slices is None else positive_int("num_slices", num_slices)
        self.slice_len = None if slice_len is None else positive_int("slice_len", slice_len)
        _check_keys(owner, traj_key=traj_key, end_key=end_key, truncated_key=truncated_key)
        if strict_length and pad_output:
            raise ValueError(
                f"{owner}: strict_length=True and pad_output=True cannot go together (strict_length samples only "
                "trajectories of at least slice_len steps, so there is nothing to pad), as in TorchRL"
            )
        self.traj_key = traj_key  # type: ignore[misc]
        self.end_key = end_key  # type: ignore[misc]
        self.truncated_key = truncated_key  # type: ignore[misc]
        self.strict_length = bool(strict_length)  # type: ignore[misc]
        self.pad_output = bool(pad_output)  # type: ignore[misc]

    def slices(self, batch_size: int) -> tuple[int, int]:
        """``(num_slices, slice_len)`` for a batch of ``batch_size`` steps."""
        batch_size = _check_batch_size(batch_size)
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size must be divisible by num_slices={self.num_slices}, got batch_size={batch_size}"
                )
            return self.num_slices, batch_size // self.num_slices
        assert self.slice_len is not None
        if batch_size % self.slice_len:
            raise ValueError(f"batch_size must be divisible by slice_len={self.slice_len}, got batch_size={batch_size}")
        return batch_size // self.slice_len, self.slice_len

    def _size_repr(self) -> str:
        return f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"


class _PrioritySettings:
    """alpha, beta, eps and max_capacity of the prioritized samplers (TorchRL's names and formulas)."""

    _alpha: float
    _beta: float
    _eps: float
    max_capacity: int | None

    def _init_priorities(self, owner: str, max_capacity: int | None, alpha: float, beta: float, eps: float) -> None:
        self.max_capacity = None if max_capacity is None else positive_int("max_capacity", max_capacity)
        self._alpha = check_alpha(owner, alpha)
        self._beta = _real(owner, "beta", beta)
        self._eps = _real(owner, "eps", eps)

    @property
    def alpha(self) -> float:
        """Priority exponent: a stored step's leaf is ``(priority + eps) ** alpha`` (fixed once the buffer exists)."""
        return self._alpha

    @property
    def beta(self) -> float:
        """Importance-weight exponent: ``_weight = (leaf / min leaf) ** -beta``; may be annealed between samples."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = _real(type(self).__name__, "beta", value)

    @property
    def eps(self) -> float:
        return self._eps

    def _priority_repr(self) -> str:
        return f"alpha={self._alpha}, beta={self._beta}, eps={self._eps}"
