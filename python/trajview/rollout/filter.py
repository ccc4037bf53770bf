"""Observation filters with RLlib's semantics: `MeanStdFilter` (running mean / std), `NoFilter`.

A worker's filter keeps two `RunningStat` s: ``running_stats`` (everything it
knows) and ``buffer`` (what it saw since the last sync). A sync (RLlib's
``FilterManager.synchronize``, done by `WorkerSet.sync_filters`):

1. every worker hands a copy of its filter (with its buffer) and clears its
   buffer (``get_filters(flush_after=True)``);
2. the driver's filter takes each copy's buffer into its running stats
   (``apply_changes(other, with_buffer=False)``);
3. every worker's filter becomes a copy of the driver's (``sync``): running
   stats and buffer.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

__all__ = ["Filter", "MeanStdFilter", "NoFilter", "RunningStat", "make_filter"]

#: Added to the std before dividing (RLlib's ``SMALL_NUMBER``).
SMALL_NUMBER = 1e-6


class RunningStat:
    """Welford's running mean and variance of arrays of one ``shape`` (RLlib's ``RunningStat``)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.shape = tuple(shape)
        self.num_pushes = 0
        self.mean_array = np.zeros(self.shape, np.float64)
        self.std_array = np.zeros(self.shape, np.float64)  # the sum of squared deviations (M2)

    def copy(self) -> RunningStat:
        other = RunningStat(self.shape)
        other.num_pushes = self.num_pushes
        other.mean_array = self.mean_array.copy()
        other.std_array = self.std_array.copy()
        return other

    def push(self, x: Any) -> None:
        x = np.asarray(x)
        if x.shape != self.shape:
            raise ValueError(f"RunningStat.push: expected shape {self.shape}, got {x.shape}")
        self.num_pushes += 1
        if self.num_pushes == 1:
            self.mean_array[...] = x
        else:  # Welford: S_k = S_{k-1} + (x - M_{k-1}) (x - M_k)
            delta = x - self.mean_array
            self.mean_array += delta / self.num_pushes
            self.std_array += delta * (x - self.mean_array)

    def update(self, other: RunningStat) -> None:
        """Merges ``other``'s pushes into this one (Chan et al.'s parallel update)."""
        n1, n2 = self.num_pushes, other.num_pushes
        n = n1 + n2
        if n2 == 0:
            return
        if n1 == 0:
            self.num_pushes = n2
            self.mean_array = other.mean_array.copy()
            self.std_array = other.std_array.copy()
            return
        delta = self.mean_array - other.mean_array
        self.mean_array = (n1 * self.mean_array + n2 * other.mean_array) / n
        self.std_array = self.std_array + other.std_array + delta * delta * n1 * n2 / n
        self.num_pushes = n

    @property
    def n(self) -> int:
        return self.num_pushes

    @property
    def mean(self) -> np.ndarray:
        return self.mean_array

    @property
    def var(self) -> np.ndarray:
        """The unbiased variance (float32, as RLlib's); zeros before the second push."""
        if self.num_pushes <= 1:
            return np.zeros(self.shape, np.float32)
        return (self.std_array / (self.num_pushes - 1)).astype(np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.maximum(0, self.var))

    def __repr__(self) -> str:
        return f"RunningStat(n={self.num_pushes}, mean={self.mean_array}, std={self.std})"


class Filter:
    """The filter interface (RLlib's): ``__call__``, ``apply_changes``, ``copy``, ``sync``, ``reset_buffer``."""

    def __call__(self, x: Any, update: bool = True) -> Any:
        raise NotImplementedError

    def apply_changes(self, other: Filter, with_buffer: bool = False) -> None:
        raise NotImplementedError

    def copy(self) -> Filter:
        return copy.deepcopy(self)

    def empty_copy(self) -> Filter:
        """A filter of the same kind and settings that has seen nothing."""
        return type(self)()

    def sync(self, other: Filter) -> None:
        raise NotImplementedError

    def reset_buffer(self) -> None:
        raise NotImplementedError

    clear_buffer = reset_buffer

    def as_serializable(self) -> Filter:
        return self.copy()


class NoFilter(Filter):
    """Passes observations through (RLlib's ``"NoFilter"``)."""

    def __call__(self, x: Any, update: bool = True) -> Any:
        return np.asarray(x)

    def apply_changes(self, other: Filter, with_buffer: bool = False) -> None:
        pass

    def sync(self, other: Filter) -> None:
        pass

    def reset_buffer(self) -> None:
        pass


class MeanStdFilter(Filter):
    """``y = clip((x - mean) / (std + 1e-6), -clip, clip)`` in ``x``'s dtype, with the running mean and the
    unbiased std (0 before the second observation) of every ``x`` seen (RLlib's ``MeanStdFilter(shape,
    demean=True, destd=True, clip=10.0)``). ``__call__`` on ``[n, *shape]`` pushes each row (``update=True``)
    and filters every row with the updated statistics."""

    is_concurrent = False

    def __init__(self, shape: tuple[int, ...], demean: bool = True, destd: bool = True, clip: float | None = 10.0):
        self.shape = tuple(shape)
        self.demean = demean
        self.destd = destd
        self.clip = clip
        self.running_stats = RunningStat(self.shape)
        self.buffer = RunningStat(self.shape)

    def clear_buffer(self) -> None:  # type: ignore[override]
        self.buffer = RunningStat(self.shape)

    def reset_buffer(self) -> None:
        self.buffer = RunningStat(self.shape)

    def apply_changes(self, other: Filter, with_buffer: bool = False) -> None:
        """Adds ``other``'s buffer (what it saw since its last sync) to the running stats."""
        assert isinstance(other, MeanStdFilter)
        self.running_stats.update(other.buffer)
        if with_buffer:
            self.buffer = other.buffer.copy()

    def copy(self) -> MeanStdFilter:
        other = MeanStdFilter(self.shape, self.demean, self.destd, self.clip)
        other.sync(self)
        return other

    def empty_copy(self) -> MeanStdFilter:
        return MeanStdFilter(self.shape, self.demean, self.destd, self.clip)

    def sync(self, other: Filter) -> None:
        """Becomes a copy of ``other`` (settings, running stats and buffer)."""
        assert isinstance(other, MeanStdFilter)
        if other.shape != self.shape:
            raise ValueError(f"MeanStdFilter.sync: shapes differ ({self.shape} vs {other.shape})")
        self.demean, self.destd, self.clip = other.demean, other.destd, other.clip
        self.running_stats = other.running_stats.copy()
        self.buffer = other.buffer.copy()

    def __call__(self, x: Any, update: bool = True) -> np.ndarray:
        x = np.asarray(x)
        dtype = x.dtype
        if update:
            if x.shape == self.shape:
                self.running_stats.push(x)
                self.buffer.push(x)
            elif x.shape[1:] == self.shape:
                for row in x:  # one at a time, as RLlib (so each stat's rounding matches)
                    self.running_stats.push(row)
                    self.buffer.push(row)
            else:
                raise ValueError(f"MeanStdFilter: expected shape {self.shape} or [n, *{self.shape}], got {x.shape}")
        if self.demean:
            x = x - self.running_stats.mean
        if self.destd:
            x = x / (self.running_stats.std + SMALL_NUMBER)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x.astype(dtype)  # the input's dtype, as RLlib

    def __repr__(self) -> str:
        return f"MeanStdFilter({self.shape}, {self.demean}, {self.destd}, {self.clip}, {self.running_stats}, {self.buffer})"


def make_filter(name: Any, shape: tuple[int, ...]) -> Filter:
    """``"MeanStdFilter"`` or ``"NoFilter"`` (RLlib's ``observation_filter`` names), or a `Filter` (copied)."""
    if isinstance(name, Filter):
        return name.copy()
    if name == "MeanStdFilter":
        return MeanStdFilter(shape)
    if name in ("NoFilter", None):
        return NoFilter()
    raise ValueError(f"observation_filter must be 'NoFilter', 'MeanStdFilter' or a Filter, got {name!r}")
