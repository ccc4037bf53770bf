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

A replacement of a failed worker (``WorkerSet(recreate_failed_workers=True)``)
gets a copy of the driver's filters with the last weights, as RLlib's
recreated workers get the local worker's state.

Non-finite observations (a NaN or an infinity in any filtered leaf) never
reach the running statistics: ``MeanStdFilter(nonfinite="skip")`` (the
default) leaves them untouched for that observation and counts it
(``num_nonfinite``, synced as the statistics are); ``nonfinite="raise"``
refuses it with a `trajview.errors.NonFiniteObservationError` naming the
column (and, inside a worker, the env), before anything changes.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Mapping
from typing import Any, cast

import numpy as np

from ..errors import NonFiniteObservationError
from ..views.nest import SEP, Nest, build_nest

Path = tuple[Any, ...]

__all__ = ["NONFINITE_MODES", "Filter", "MeanStdFilter", "NoFilter", "RunningStat", "filter_shape", "make_filter"]

#: Added to the std before dividing (RLlib's ``SMALL_NUMBER``).
SMALL_NUMBER = 1e-6

#: What a `MeanStdFilter` does with an observation holding a NaN or an infinity (its ``nonfinite``).
NONFINITE_MODES = ("skip", "raise")


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

    def pop_nonfinite_skipped(self) -> int:
        """Observations this filter skipped itself (non-finite) since the last call; none for filters that never skip."""
        return 0


class NoFilter(Filter):
    """Passes observations through (RLlib's ``"NoFilter"``)."""

    def __init__(self, shape: Any = None) -> None:
        pass  # (``shape`` accepted so that ``make_filter(NoFilter, shape)`` works as for any Filter class)

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

    ``nonfinite``: what an observation holding a NaN or an infinity in any filtered leaf does (RLlib's filter
    pushes it, and from then on every output is NaN). ``"skip"`` (the default): it is not pushed into any
    leaf's statistics (the whole observation is left out) and is counted in ``num_nonfinite`` /
    ``buffer_num_nonfinite``; it is still filtered with the statistics as they are (a NaN stays NaN, an
    infinity is clipped to ``±clip``: nothing is made up). ``"raise"``: a
    `trajview.errors.NonFiniteObservationError` naming the column (``"obs"``, a nested leaf's ``"obs.pos"``),
    raised before anything changes. Rows not pushed (``update=False``, `filter_columns`' ``skip``) are never
    checked.
    """

    is_concurrent = False

    def __init__(self, shape: Any, demean: bool = True, destd: bool = True, clip: float | None = 10.0,
                 nonfinite: str = "skip"):
        if nonfinite not in NONFINITE_MODES:
            raise ValueError(f"MeanStdFilter: nonfinite must be one of {NONFINITE_MODES}, got {nonfinite!r}")
        self.shape, self._paths, self._shapes, self._kinds = _shape_leaves(shape)
        self.demean = demean
        self.destd = destd
        self.clip = clip
        self.nonfinite = nonfinite
        self._rs: list[RunningStat | None] = self._empty_stats()
        self._buf: list[RunningStat | None] = self._empty_stats()
        #: Non-finite observations skipped (``nonfinite="skip"``), as ``running_stats`` counts pushes: this
        #: filter's own and those its `apply_changes` / `sync` took in (the driver's: every worker's).
        self.num_nonfinite = 0
        #: ... since the last sync (`reset_buffer`), as ``buffer``: what `apply_changes` adds to the driver's.
        self.buffer_num_nonfinite = 0
        self._unreported = 0  # skipped here since the last pop_nonfinite_skipped (never synced nor copied)

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

    def _where(self, k: int) -> str:
        return "" if self.flat else f" at {''.join(f'[{p!r}]' for p in self._paths[k])}"

    def column(self, k: int) -> str:
        """The observation column of leaf ``k`` (``"obs"``, or a nested leaf's ``"obs.pos"``), as stored."""
        return "obs" if self.flat else "obs" + SEP + SEP.join(str(p) for p in self._paths[k])

    def reset_buffer(self) -> None:
        self._buf = self._empty_stats()
        self.buffer_num_nonfinite = 0

    clear_buffer = reset_buffer

    def apply_changes(self, other: Filter, with_buffer: bool = False) -> None:
        """Adds ``other``'s buffer (what it saw since its last sync) to the running stats."""
        assert isinstance(other, MeanStdFilter)
        self._check_same_shape(other, "apply_changes")
        for rs, ob in zip(self._rs, other._buf):
            if rs is not None and ob is not None:
                rs.update(ob)
        self.num_nonfinite += other.buffer_num_nonfinite
        if with_buffer:
            self._buf = [None if b is None else b.copy() for b in other._buf]
            self.buffer_num_nonfinite = other.buffer_num_nonfinite

    def copy(self) -> MeanStdFilter:
        other = self.empty_copy()
        other.sync(self)
        return other

    def empty_copy(self) -> MeanStdFilter:
        return MeanStdFilter(self.shape, self.demean, self.destd, self.clip, self.nonfinite)

    def _check_same_shape(self, other: MeanStdFilter, what: str) -> None:
        if other.shape != self.shape:
            raise ValueError(f"MeanStdFilter.{what}: shapes differ ({self.shape} vs {other.shape})")

    def sync(self, other: Filter) -> None:
        """Becomes a copy of ``other`` (settings, running stats and buffer, and their non-finite counts)."""
        assert isinstance(other, MeanStdFilter)
        self._check_same_shape(other, "sync")
        self.demean, self.destd, self.clip, self.nonfinite = other.demean, other.destd, other.clip, other.nonfinite
        self._rs = [None if r is None else r.copy() for r in other._rs]
        self._buf = [None if b is None else b.copy() for b in other._buf]
        self.num_nonfinite = other.num_nonfinite
        self.buffer_num_nonfinite = other.buffer_num_nonfinite

    def pop_nonfinite_skipped(self) -> int:
        """Non-finite observations this filter skipped itself since the last call (a worker's metric:
        ``num_nonfinite_obs_skipped``); unlike ``num_nonfinite``, never changed by a sync."""
        n, self._unreported = self._unreported, 0
        return n

    # -- pushing -------------------------------------------------------------------------------

    def _as_rows(self, k: int, x: np.ndarray) -> tuple[np.ndarray, bool]:
        """Leaf ``k``'s value as rows ``[n, *leaf_shape]``, and whether it was ``[n, ...]`` (not one observation)."""
        shape = cast(RunningStat, self._rs[k]).shape
        if x.shape == shape:
            return x[None], False
        if x.shape[1:] == shape:
            return x, True
        raise ValueError(f"MeanStdFilter: expected shape {shape} or [n, *{shape}]{self._where(k)}, got {x.shape}")

    def _push_mask(self, rows: dict[int, np.ndarray], n: int, skip: Container[int], batched: bool) -> np.ndarray:
        """Which of the ``n`` observations (``rows``: each filtered leaf's ``[n, ...]``) are pushed: those not in
        ``skip`` whose every filtered value is finite. A non-finite one is counted (``"skip"``) or raised
        (``"raise"``, before anything changes)."""
        push = np.array([j not in skip for j in range(n)], dtype=bool)
        finite = np.ones(n, dtype=bool)
        for x in rows.values():
            if n and x.dtype.kind in "fc":  # (ints and bools are always finite)
                finite &= np.isfinite(x.reshape(n, -1)).all(axis=1)
        bad = push & ~finite
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            if self.nonfinite == "raise":
                for k, x in rows.items():
                    where = np.argwhere(~np.isfinite(x[j]))
                    if len(where):
                        idx = tuple(int(i) for i in where[0])
                        found = f"{x[j][idx]} at {list(idx)}" if idx else f"{x[j][()]}"
                        raise NonFiniteObservationError(self.column(k), found, row=j if batched else None)
            skipped = int(bad.sum())
            self.num_nonfinite += skipped
            self.buffer_num_nonfinite += skipped
            self._unreported += skipped
            push &= finite
        return push

    def _push(self, k: int, row: np.ndarray) -> None:
        cast(RunningStat, self._rs[k]).push(row)
        cast(RunningStat, self._buf[k]).push(row)

    def _normalize(self, k: int, x: Any) -> Any:
        """Leaf ``k``'s value(s) filtered with the statistics as they are, in the input's dtype (as RLlib)."""
        rs = cast(RunningStat, self._rs[k])
        x = np.asarray(x)
        dtype = x.dtype
        if self.demean:
            x = x - rs.mean
        if self.destd:
            x = x / (rs.std + SMALL_NUMBER)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x.astype(dtype)

    def __call__(self, x: Any, update: bool = True) -> Any:
        leaves = self._leaves_of(x)
        stat = [k for k, rs in enumerate(self._rs) if rs is not None]
        if update and stat:
            one = [(k, np.asarray(leaves[k])) for k in stat]
            if all(a.shape == cast(RunningStat, self._rs[k]).shape for k, a in one):  # one observation (the usual)
                if all(a.dtype.kind not in "fc" or np.isfinite(a).all() for _, a in one):
                    for k, a in one:
                        self._push(k, a)
                else:
                    self._push_mask({k: a[None] for k, a in one}, 1, (), False)  # raises, or counts it
            else:
                self._push_batch(x, {k: a for k, a in one})
        out = [self._normalize(k, v) if self._rs[k] is not None else v for k, v in enumerate(leaves)]
        return out[0] if self.flat else _nest_of(out, self._paths, self._kinds)

    def _push_batch(self, x: Any, leaves: dict[int, np.ndarray]) -> None:
        """Pushes ``[n, *leaf_shape]`` observations (each filtered leaf's rows), one at a time in row order."""
        shaped = {k: self._as_rows(k, a) for k, a in leaves.items()}
        rows = {k: r for k, (r, _) in shaped.items()}
        sizes = {len(r) for r in rows.values()}
        batched = any(b for _, b in shaped.values())
        if len(sizes) > 1 or (batched and not all(b for _, b in shaped.values())):
            raise ValueError(
                f"MeanStdFilter: the leaves of {type(x).__name__} value hold different numbers of observations "
                f"({ {self._paths[k]: (len(r) if b else 'one') for k, (r, b) in shaped.items()} })"
            )
        n = sizes.pop()
        push = self._push_mask(rows, n, (), batched)
        for j in np.flatnonzero(push):  # one at a time, as RLlib (so each stat's rounding matches)
            for k, r in rows.items():
                self._push(k, r[j])

    def filter_columns(self, cols: Mapping[Path, Any], skip: Container[int] = ()) -> dict[Path, Any]:
        """Rows of observations as leaf columns (``{leaf path: [n, *leaf_shape]}``, every leaf of the nest; a flat
        filter's one column under ``()``) filtered row by row: row ``j`` is pushed (not if ``j`` is in ``skip``,
        nor if it is not finite: see ``nonfinite``), then filtered, as ``n`` calls of ``__call__`` in row order
        would. Pass-through leaves come back as they are. A `NonFiniteObservationError` names the row."""
        for path in self._paths:
            if path not in cols:
                raise ValueError(f"MeanStdFilter: no column for the leaf {path!r} of its shape {self.shape!r}")
        rows: dict[int, np.ndarray] = {}
        for k, path in enumerate(self._paths):
            if self._rs[k] is not None:
                col = np.asarray(cols[path])
                shape = cast(RunningStat, self._rs[k]).shape
                if col.shape[1:] != shape:
                    raise ValueError(f"MeanStdFilter: expected rows [n, *{shape}]{self._where(k)}, got {col.shape}")
                rows[k] = col
        sizes = {len(c) for c in rows.values()}
        if len(sizes) > 1:
            raise ValueError(f"MeanStdFilter: the leaf columns hold different numbers of rows ({sorted(sizes)})")
        n = sizes.pop() if sizes else 0
        push = self._push_mask(rows, n, skip, True)
        out = {path: cols[path] for path in self._paths}
        res = {k: np.empty(c.shape, dtype=c.dtype) for k, c in rows.items()}
        for j in range(n):
            for k, col in rows.items():
                if push[j]:
                    self._push(k, col[j])
                res[k][j] = self._normalize(k, col[j])
        for k, r in res.items():
            out[self._paths[k]] = r
        return out

    def __repr__(self) -> str:
        return (f"MeanStdFilter({self.shape}, {self.demean}, {self.destd}, {self.clip}, nonfinite={self.nonfinite!r}, "
                f"{self.running_stats}, {self.buffer}, num_nonfinite={self.num_nonfinite})")


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
    """``"MeanStdFilter"`` or ``"NoFilter"`` (RLlib's ``observation_filter`` names), a `Filter` (copied), or a
    callable ``shape -> Filter`` (a `Filter` class, or e.g. ``functools.partial(MeanStdFilter, nonfinite="raise")``:
    a partial pickles, for ``start_method="spawn"``)."""
    if isinstance(name, Filter):
        return name.copy()
    if isinstance(name, str) or name is None:
        if name == "MeanStdFilter":
            return MeanStdFilter(shape)
        if name in ("NoFilter", None):
            return NoFilter()
    elif callable(name):
        made = name(shape)
        if not isinstance(made, Filter):
            raise ValueError(f"observation_filter: {name!r}(shape) must return a Filter, got {type(made).__name__}")
        return made
    raise ValueError(
        f"observation_filter must be 'NoFilter', 'MeanStdFilter', a Filter or a callable shape -> Filter, got {name!r}"
    )
