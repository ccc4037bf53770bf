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
from collections.abc import Container, Mapping
from typing import Any

import numpy as np

from ..views.nest import Nest, build_nest

Path = tuple[Any, ...]

__all__ = ["Filter", "MeanStdFilter", "NoFilter", "RunningStat", "filter_shape", "make_filter"]

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


def _is_shape(x: Any) -> bool:
    """Whether ``x`` is one array's shape (a tuple / list of ints, or an int array as RLlib passes), not a nest."""
    if isinstance(x, np.ndarray):
        return x.ndim <= 1 and (x.size == 0 or np.issubdtype(x.dtype, np.integer))
    return isinstance(x, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in x)


def _shape_leaves(shape: Any) -> tuple[Any, list[Path], list[tuple[int, ...] | None], dict[Path, type]]:
    """``shape`` normalized (shapes as tuples, lists as tuples), its leaves' paths and shapes (None: passed
    through), and per inner node ``dict`` or ``tuple``."""
    paths: list[Path] = []
    shapes: list[tuple[int, ...] | None] = []
    kinds: dict[Path, type] = {}

    def walk(x: Any, path: Path) -> Any:
        if x is None or _is_shape(x):
            paths.append(path)
            shapes.append(None if x is None else tuple(int(d) for d in np.asarray(x, np.int64).reshape(-1)))
            return shapes[-1]
        if isinstance(x, Mapping):
            if not x:
                raise ValueError(f"MeanStdFilter: an empty dict in shape {shape!r}")
            kinds[path] = dict
            return {k: walk(v, (*path, k)) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            if not x:
                raise ValueError(f"MeanStdFilter: an empty tuple in shape {shape!r}")
            kinds[path] = tuple
            return tuple(walk(v, (*path, k)) for k, v in enumerate(x))
        raise TypeError(
            f"MeanStdFilter: shape must be a tuple of ints, None, or a dict / tuple nest of those, got {x!r} in {shape!r}"
        )

    return walk(shape, ()), paths, shapes, kinds


def _nest_of(values: list[Any], paths: list[Path], kinds: dict[Path, type]) -> Any:
    """The nest (dicts and tuples as ``kinds`` say) whose leaves at ``paths`` are ``values``."""
    if not kinds:
        return values[0]
    return build_nest(dict(zip(paths, values)), kinds)


class MeanStdFilter(Filter):
    """``y = clip((x - mean) / (std + 1e-6), -clip, clip)`` in ``x``'s dtype, with the running mean and the
    unbiased std (0 before the second observation) of every ``x`` seen (RLlib's ``MeanStdFilter(shape,
    demean=True, destd=True, clip=10.0)``). ``__call__`` on ``[n, *shape]`` pushes each row (``update=True``)
    and filters every row with the updated statistics.

    ``shape`` is one array's shape, or (as RLlib's, for ``Dict`` / ``Tuple`` observations) a nest of dicts and
    tuples whose leaves are shapes or None: one running statistic per shape leaf; a None leaf (a ``Discrete``,
    ``MultiDiscrete`` or ``MultiBinary`` part of the observation, see `filter_shape`) passes through unchanged.
    Then ``__call__`` takes and returns a value of that structure, and ``running_stats`` / ``buffer`` are
    nests of `RunningStat` (None at pass-through leaves).
    """

    is_concurrent = False

    def __init__(self, shape: Any, demean: bool = True, destd: bool = True, clip: float | None = 10.0):
        self.shape, self._paths, self._shapes, self._kinds = _shape_leaves(shape)
        self.demean = demean
        self.destd = destd
        self.clip = clip
        self._rs: list[RunningStat | None] = self._empty_stats()
        self._buf: list[RunningStat | None] = self._empty_stats()

    def _empty_stats(self) -> list[RunningStat | None]:
        return [None if s is None else RunningStat(s) for s in self._shapes]

    @property
    def flat(self) -> bool:
        """Whether ``shape`` is one array's (not a nest)."""
        return not self._kinds

    @property
    def leaf_paths(self) -> list[Path]:
        """The paths (dict keys, tuple indices) of the nest's leaves with a running statistic."""
        return [p for p, s in zip(self._paths, self._shapes) if s is not None]

    @property
    def running_stats(self) -> Any:
        """Everything seen: a `RunningStat`, or a nest of them as ``shape``."""
        return _nest_of(self._rs, self._paths, self._kinds)

    @running_stats.setter
    def running_stats(self, value: Any) -> None:
        self._rs = self._leaves_of(value)

    @property
    def buffer(self) -> Any:
        """What was seen since the last sync (`reset_buffer`): a `RunningStat`, or a nest of them."""
        return _nest_of(self._buf, self._paths, self._kinds)

    @buffer.setter
    def buffer(self, value: Any) -> None:
        self._buf = self._leaves_of(value)

    def _leaves_of(self, x: Any) -> list[Any]:
        """The leaves of ``x`` (a value of ``shape``'s structure) in leaf order."""
        if self.flat:
            return [x]
        out = []
        for path in self._paths:
            v = x
            try:
                for p in path:
                    v = v[p]
            except (KeyError, IndexError, TypeError) as e:
                raise ValueError(
                    f"MeanStdFilter: {type(x).__name__} value does not have the filter's structure {self.shape!r} "
                    f"(no {''.join(f'[{p!r}]' for p in path)})"
                ) from e
            out.append(v)
        return out

    def clear_buffer(self) -> None:  # type: ignore[override]
        self._buf = self._empty_stats()

    def reset_buffer(self) -> None:
        self._buf = self._empty_stats()

    def apply_changes(self, other: Filter, with_buffer: bool = False) -> None:
        """Adds ``other``'s buffer (what it saw since its last sync) to the running stats."""
        assert isinstance(other, MeanStdFilter)
        self._check_same_shape(other, "apply_changes")
        for rs, ob in zip(self._rs, other._buf):
            if rs is not None and ob is not None:
                rs.update(ob)
        if with_buffer:
            self._buf = [None if b is None else b.copy() for b in other._buf]

    def copy(self) -> MeanStdFilter:
        other = self.empty_copy()
        other.sync(self)
        return other

    def empty_copy(self) -> MeanStdFilter:
        return MeanStdFilter(self.shape, self.demean, self.destd, self.clip)

    def _check_same_shape(self, other: MeanStdFilter, what: str) -> None:
        if other.shape != self.shape:
            raise ValueError(f"MeanStdFilter.{what}: shapes differ ({self.shape} vs {other.shape})")

    def sync(self, other: Filter) -> None:
        """Becomes a copy of ``other`` (settings, running stats and buffer)."""
        assert isinstance(other, MeanStdFilter)
        self._check_same_shape(other, "sync")
        self.demean, self.destd, self.clip = other.demean, other.destd, other.clip
        self._rs = [None if r is None else r.copy() for r in other._rs]
        self._buf = [None if b is None else b.copy() for b in other._buf]

    def _leaf(self, k: int, x: Any, update: bool) -> Any:
        """Leaf ``k`` of an observation (or of ``[n, ...]`` observations), pushed and filtered."""
        rs, buf = self._rs[k], self._buf[k]
        if rs is None or buf is None:
            return x  # a pass-through leaf
        x = np.asarray(x)
        dtype = x.dtype
        if update:
            if x.shape == rs.shape:
                rs.push(x)
                buf.push(x)
            elif x.shape[1:] == rs.shape:
                for row in x:  # one at a time, as RLlib (so each stat's rounding matches)
                    rs.push(row)
                    buf.push(row)
            else:
                where = "" if self.flat else f" at {''.join(f'[{p!r}]' for p in self._paths[k])}"
                raise ValueError(f"MeanStdFilter: expected shape {rs.shape} or [n, *{rs.shape}]{where}, got {x.shape}")
        if self.demean:
            x = x - rs.mean
        if self.destd:
            x = x / (rs.std + SMALL_NUMBER)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x.astype(dtype)  # the input's dtype, as RLlib

    def __call__(self, x: Any, update: bool = True) -> Any:
        if self.flat:
            return self._leaf(0, x, update)
        leaves = self._leaves_of(x)
        return _nest_of([self._leaf(k, v, update) for k, v in enumerate(leaves)], self._paths, self._kinds)

    def filter_columns(self, cols: Mapping[Path, Any], skip: Container[int] = ()) -> dict[Path, Any]:
        """Rows of observations as leaf columns (``{leaf path: [n, *leaf_shape]}``, every leaf of the nest)
        filtered row by row: row ``j`` is pushed (not if ``j`` is in ``skip``), then filtered, as ``n`` calls of
        ``__call__`` in row order would. Pass-through leaves come back as they are."""
        out = {}
        for k, path in enumerate(self._paths):
            if path not in cols:
                raise ValueError(f"MeanStdFilter: no column for the leaf {path!r} of its shape {self.shape!r}")
            col = cols[path]
            if self._rs[k] is not None:
                col = np.asarray(col)
                res = np.empty(col.shape, dtype=col.dtype)
                for j in range(len(col)):
                    res[j] = self._leaf(k, col[j], j not in skip)
                col = res
            out[path] = col
        return out

    def __repr__(self) -> str:
        return f"MeanStdFilter({self.shape}, {self.demean}, {self.destd}, {self.clip}, {self.running_stats}, {self.buffer})"


def filter_shape(space: Any) -> Any:
    """The ``shape`` a `MeanStdFilter` of observations of ``space`` gets: the ``Box`` 's shape, or for a ``Dict``
    / ``Tuple`` space (nested to any depth) the nest of its leaves' shapes, None for every leaf that is not a
    ``Box`` (``Discrete``, ``MultiDiscrete``, ``MultiBinary``: passed through, see docs/porting-from-rllib.md) —
    as RLlib's worker builds it with the preprocessor API disabled. None if no leaf is a ``Box``."""
    import gymnasium as gym

    nest = Nest.from_space(space, "observation_space")
    shapes = [leaf.shape if isinstance(leaf.space, gym.spaces.Box) else None for leaf in nest.leaves]
    if all(s is None for s in shapes):
        return None
    return nest.unflatten(shapes)


def make_filter(name: Any, shape: Any) -> Filter:
    """``"MeanStdFilter"`` or ``"NoFilter"`` (RLlib's ``observation_filter`` names), or a `Filter` (copied)."""
    if isinstance(name, Filter):
        return name.copy()
    if name == "MeanStdFilter":
        return MeanStdFilter(shape)
    if name in ("NoFilter", None):
        return NoFilter()
    raise ValueError(f"observation_filter must be 'NoFilter', 'MeanStdFilter' or a Filter, got {name!r}")
