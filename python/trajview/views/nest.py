"""Nested spaces as flat columns: `Nest`, the leaves of a ``Dict`` / ``Tuple`` space, and the flat names they get.

A nested observation (or action) is stored one column per *leaf*: a ``Dict``
key or a ``Tuple`` index at each level, joined with ``"."`` to the column's
name. ``Dict(image=Box(0, 255, (84, 84, 3), uint8), vec=Box(-1, 1, (8,)))``
under ``obs`` is stored as ``obs.image`` and ``obs.vec``; ``Tuple((Discrete(3),
Dict(a=...)))`` as ``obs.0`` and ``obs.1.a``. Every view of such a column
reads leaf by leaf (``prev_n_obs.image`` reads ``obs.image``), and a batch
presents the leaves in the space's structure again: ``batch["obs"]`` is a
dict (a tuple for a ``Tuple`` space) of the leaf arrays, ``batch["obs.image"]``
one leaf (see docs/spaces.md).

Nested values meet plain names in one place, `flatten_columns`: a plain name
that is also a leaf (``"obs.a"`` beside ``"obs": {"a": ...}``) is an error
naming both, never a silent replacement.

The structure is read back from the names: a node whose children are named
``0 .. n-1`` is a tuple, any other node a dict. (So a ``Dict`` whose keys are
exactly ``"0" .. "n-1"`` reads back as a tuple.)

numpy only at import time: gymnasium is imported inside `Nest.from_space`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "SEP",
    "Leaf",
    "Nest",
    "assemble",
    "build_nest",
    "expand_views",
    "flatten_columns",
    "flatten_value",
    "has_leaves",
    "is_nested_value",
    "leaf_names",
    "space_specs",
]

#: Joins a nested column's name and the keys / indices of a leaf's path.
SEP = "."

Path = tuple[Any, ...]


class Leaf(NamedTuple):
    """One leaf of a nested space: its path (keys and indices), the leaf space, and its (dtype, shape)."""

    path: Path
    space: Any
    dtype: np.dtype
    shape: tuple[int, ...]

    def suffix(self) -> str:
        """The leaf's part of its column name (``"image"``, ``"1.a"``; ``""`` for a space that is one leaf)."""
        return SEP.join(str(p) for p in self.path)


def _describe(what: str, path: Path) -> str:
    return what + "".join(f"[{p!r}]" for p in path)


def _leaf(space: Any, path: Path, what: str) -> Leaf:
    dtype, shape = getattr(space, "dtype", None), getattr(space, "shape", None)
    if dtype is None or shape is None:
        raise ValueError(f"{_describe(what, path)}: space {space!r} has no fixed dtype and shape; trajview stores "
                         f"fixed-shape arrays")
    return Leaf(path, space, np.dtype(dtype), tuple(int(d) for d in shape))


class Nest:
    """The leaves of a (possibly nested) gymnasium space, in the space's order.

    ``Box``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` are leaves;
    ``Dict`` and ``Tuple`` nest them to any depth. ``Text``, ``Graph``,
    ``Sequence`` and ``OneOf`` have no fixed shape: a ValueError names the
    space and its path (``what`` names the whole space, e.g.
    ``"observation_space"``). A space that is a leaf itself is *flat*: stored
    as one column under its own name.
    """

    __slots__ = ("space", "leaves", "flat", "kinds", "_fast")

    def __init__(self, space: Any, leaves: list[Leaf], flat: bool, kinds: dict[Path, type]) -> None:
        self.space = space
        self.leaves = leaves
        self.flat = flat
        #: Per inner node (path), ``dict`` or ``tuple``.
        self.kinds = kinds
        self._fast = self._compile() if not flat else None

    def _structure_code(self) -> tuple[list[str], list[str]]:
        """Lines that walk a value ``v`` of the space's structure (one size and type check per inner node; any
        other value raises), and the expression of each leaf."""
        names = {(): "v"}
        lines = []
        for path in self.kinds:  # parents before children (the walk's order)
            if path:
                parent = names[path[:-1]]
                names[path] = f"n{len(names)}"
                lines.append(f"    {names[path]} = {parent}[{path[-1]!r}]")
            var = names[path]
            n = len({leaf.path[len(path)] for leaf in self.leaves if leaf.path[: len(path)] == path})
            ok = "(type({0}) is dict or isinstance({0}, Mapping))" if self.kinds[path] is dict else \
                "(type({0}) is tuple or type({0}) is list)"
            lines.append(f"    if not {ok.format(var)} or len({var}) != {n}: raise _Mismatch")
        return lines, [f"{names[leaf.path[:-1]]}[{leaf.path[-1]!r}]" if leaf.path else "v" for leaf in self.leaves]

    def _exec(self, lines: list[str], name: str, extra: dict[str, Any] | None = None) -> Any:
        scope: dict[str, Any] = {"Mapping": Mapping, "_Mismatch": _Mismatch, **(extra or {})}
        exec("\n".join(lines), scope)  # noqa: S102 - code built from the space's own keys (repr'd) and constants
        return scope[name]

    def _compile(self) -> Callable[[Any], list[Any]]:
        """A function returning the leaves of a value of exactly the space's structure (else it raises).

        Generated code: one size and type check per inner node and one index per leaf, no loops (this is
        every step of every env). Any other value raises; `leaf_values` then finds and names the problem.
        """
        lines, gets = self._structure_code()
        return self._exec(["def leaves(v):", *lines, f"    return [{', '.join(gets)}]"], "leaves")  # type: ignore[no-any-return]

    def row_writer(self) -> Callable[[Any, int, list[Any], Callable[[int, Any], Any]], None]:
        """``write(v, j, outs, check)``: each leaf of one value ``v`` into row ``j`` of ``outs[k]`` (leaf order).

        A leaf that is an ndarray of exactly the leaf's dtype and shape is
        written as it is; any other goes through ``check(k, leaf)``, which
        returns it checked (or raises). A value not of the space's structure
        raises (`leaf_values` names the problem). A flat space is one leaf
        (``outs[0]``, the value itself). Generated code, no loops: this is
        every step of every env.
        """
        lines, gets = self._structure_code()
        body = ["def write(v, j, outs, check):", *lines]
        consts: dict[str, Any] = {"_nd": np.ndarray}
        for k, (leaf, get) in enumerate(zip(self.leaves, gets)):
            consts[f"_dt{k}"], consts[f"_sh{k}"] = leaf.dtype, leaf.shape
            body += [
                f"    x = {get}",
                f"    if type(x) is _nd and x.dtype is _dt{k} and x.shape == _sh{k}: outs[{k}][j] = x",
                f"    else: outs[{k}][j] = check({k}, x)",
            ]
        return self._exec(body, "write", consts)  # type: ignore[no-any-return]

    @classmethod
    def from_space(cls, space: Any, what: str = "space") -> Nest:
        import gymnasium as gym

        spaces = gym.spaces
        leaves: list[Leaf] = []
        kinds: dict[Path, type] = {}

        def walk(s: Any, path: Path) -> None:
            if isinstance(s, spaces.Dict):
                kinds[path] = dict
                if not s.spaces:
                    raise ValueError(f"{_describe(what, path)}: an empty Dict space has nothing to store")
                for k, sub in s.spaces.items():
                    if not isinstance(k, str) or not k or SEP in k:
                        raise ValueError(
                            f"{_describe(what, path)}: Dict key {k!r} cannot name a column: keys must be non-empty "
                            f"str without {SEP!r} (trajview joins nested names with {SEP!r})"
                        )
                    walk(sub, (*path, k))
            elif isinstance(s, spaces.Tuple):
                kinds[path] = tuple
                if not s.spaces:
                    raise ValueError(f"{_describe(what, path)}: an empty Tuple space has nothing to store")
                for i, sub in enumerate(s.spaces):
                    walk(sub, (*path, i))
            elif isinstance(s, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
                leaves.append(_leaf(s, path, what))
            elif isinstance(s, (spaces.Text, spaces.Graph, spaces.Sequence, spaces.OneOf)):
                raise ValueError(
                    f"{_describe(what, path)}: {type(s).__name__} spaces are not supported ({s!r}): trajview stores "
                    f"fixed-shape arrays; drop it from the observation (e.g. gymnasium.wrappers.FilterObservation) "
                    f"or encode it as a Box"
                )
            else:
                leaves.append(_leaf(s, path, what))  # another fixed-shape space (a custom Space with dtype and shape)

        walk(space, ())
        return cls(space, leaves, not kinds, kinds)

    # -- names ----------------------------------------------------------------------------------------------------

    def names(self, name: str) -> list[str]:
        """The column names of the leaves under ``name`` (``[name]`` for a flat space)."""
        if self.flat:
            return [name]
        return [name + SEP + leaf.suffix() for leaf in self.leaves]

    def specs(self, name: str) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """``{column: (dtype, shape)}`` of the leaves under ``name``."""
        return {c: (leaf.dtype, leaf.shape) for c, leaf in zip(self.names(name), self.leaves)}

    # -- values ---------------------------------------------------------------------------------------------------

    def leaf_values(self, value: Any, what: str) -> list[Any]:
        """The leaves of one nested ``value`` (a dict / tuple in the space's structure), in leaf order.

        A missing or unknown key, or a tuple of the wrong length, is a
        ValueError naming ``what`` and the path.
        """
        if self.flat:
            return [value]
        try:
            return self._fast(value)  # type: ignore[misc]
        except Exception:
            pass  # find and name what does not fit
        out = []
        for leaf in self.leaves:
            v = value
            for depth, p in enumerate(leaf.path):
                node = leaf.path[:depth]
                if self.kinds[node] is dict:
                    if not isinstance(v, Mapping) or p not in v:
                        raise ValueError(self._structure_error(what, node, v))
                else:
                    if isinstance(v, Mapping) or not isinstance(v, (tuple, list)) or p >= len(v):
                        raise ValueError(self._structure_error(what, node, v))
                v = v[p]
            out.append(v)
        self._check_no_extra(value, (), what)
        return out

    def _check_no_extra(self, v: Any, path: Path, what: str) -> None:
        kind = self.kinds.get(path)
        if kind is None:
            return
        children = [leaf.path[len(path)] for leaf in self.leaves if leaf.path[: len(path)] == path]
        expected = list(dict.fromkeys(children))
        if (kind is dict and set(v.keys()) != set(expected)) or (kind is tuple and len(v) != len(expected)):
            raise ValueError(self._structure_error(what, path, v))
        for c in expected:
            self._check_no_extra(v[c], (*path, c), what)

    def _structure_error(self, what: str, path: Path, got: Any) -> str:
        kind = self.kinds[path]
        children = list(dict.fromkeys(leaf.path[len(path)] for leaf in self.leaves if leaf.path[: len(path)] == path))
        if kind is dict:
            want = f"a dict with keys {children}"
            have = f"a dict with keys {list(got.keys())}" if isinstance(got, Mapping) else f"{type(got).__name__}"
        else:
            want = f"a tuple of {len(children)}"
            have = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        return f"{_describe(what, path)}: expected {want} (the space's structure), got {have}"

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """The nested value (dicts and tuples in the space's structure) of ``leaves`` given in leaf order."""
        vals = list(leaves)
        if self.flat:
            return vals[0]
        return _build({leaf.path: v for leaf, v in zip(self.leaves, vals)}, self.kinds)

    def columns(self, name: str, value: Any, what: str) -> dict[str, Any]:
        """``{column: leaf}`` of one nested ``value`` (e.g. ``[n, *leaf_shape]`` arrays of a VectorEnv)."""
        return dict(zip(self.names(name), self.leaf_values(value, what)))

    def row(self, cols: Mapping[str, Any], name: str, j: int) -> Any:
        """Row ``j`` of the leaf columns under ``name`` as one nested value (copies)."""
        return self.unflatten(np.array(cols[c][j], copy=True) for c in self.names(name))

    def split_rows(self, cols: Mapping[str, Any], name: str, n: int) -> list[Any]:
        """The ``n`` rows of the leaf columns under ``name``, each one nested value (views of the columns)."""
        arrays = [cols[c] for c in self.names(name)]
        return [self.unflatten(a[j] for a in arrays) for j in range(n)]

    def stack(self, name: str, values: Sequence[Any], what: str) -> dict[str, np.ndarray]:
        """``{column: [len(values), *leaf_shape]}`` of nested ``values`` (one per row), structure checked."""
        if self.flat:
            return {name: _stack_rows(values)}
        per_leaf = list(zip(*(self.leaf_values(v, what) for v in values)))
        return {c: _stack_rows(leaf) for c, leaf in zip(self.names(name), per_leaf)}


def _stack_rows(values: Sequence[Any]) -> np.ndarray:
    """``np.stack`` of ``values`` (one row each, of one shape), in one ``np.array`` call (3x faster for small rows)."""
    try:
        out = np.array(values)
    except ValueError:  # rows of different shapes: np.stack's error names them
        return np.stack([np.asarray(v) for v in values])
    if out.dtype == object:  # rows numpy cannot make one array of (it would keep them as objects)
        return np.stack([np.asarray(v) for v in values])
    return out


class _Mismatch(Exception):
    """A value that does not have the space's structure (raised by `Nest._compile` d code)."""


def _build(by_path: dict[Path, Any], kinds: Mapping[Path, type]) -> Any:
    return _build_node((), by_path, kinds)


def build_nest(by_path: dict[Path, Any], kinds: Mapping[Path, type]) -> Any:
    """The nested value whose leaf at each path of ``by_path`` is its value; ``kinds`` gives each inner node's
    type (``dict`` or ``tuple``), as `Nest.kinds`."""
    return _build_node((), by_path, kinds)


def _build_node(path: Path, by_path: dict[Path, Any], kinds: Mapping[Path, type]) -> Any:
    # A module-level recursion, not a closure calling itself: such a closure is a reference cycle that would keep
    # the leaves (a step's arrays) alive until the garbage collector runs.
    if path not in kinds:
        return by_path[path]
    children = list(dict.fromkeys(p[len(path)] for p in by_path if p[: len(path)] == path and len(p) > len(path)))
    if kinds[path] is tuple:
        return tuple(_build_node((*path, c), by_path, kinds) for c in children)
    return {c: _build_node((*path, c), by_path, kinds) for c in children}


# -- nested values without a space (a batch's columns, a user's dict) ---------------------------------------------


def is_nested_value(value: Any) -> bool:
    """Whether ``value`` is a nested structure to store leaf by leaf (a dict, or a tuple/list of arrays/dicts)."""
    if isinstance(value, Mapping):
        return True
    if isinstance(value, tuple) and value:
        return all(isinstance(v, (Mapping, tuple)) or hasattr(v, "shape") for v in value)
    return False


def flatten_value(name: str, value: Any) -> dict[str, Any]:
    """``{column: leaf}`` of a nested ``value`` under ``name`` (dict keys and tuple indices joined with ``"."``)."""
    out: dict[str, Any] = {}
    _flatten_into(out, name, value)
    return out


def _flatten_into(out: dict[str, Any], prefix: str, v: Any) -> None:
    # Module-level recursion (no self-referencing closure holding ``out``: see `_build_node`).
    if isinstance(v, Mapping):
        if not v:
            raise ValueError(f"column {prefix!r}: an empty dict has no leaves to store")
        for k, sub in v.items():
            if not isinstance(k, str) or not k or SEP in k:
                raise ValueError(f"column {prefix!r}: key {k!r} cannot name a column (a non-empty str without {SEP!r})")
            _flatten_into(out, prefix + SEP + k, sub)
    elif isinstance(v, tuple) and is_nested_value(v):
        for i, sub in enumerate(v):
            _flatten_into(out, prefix + SEP + str(i), sub)
    else:
        out[prefix] = v


def flatten_columns(
    columns: Mapping[str, Any], leaves: Callable[[str, Any], Mapping[str, Any] | None]
) -> dict[str, Any]:
    """``columns`` with each nested entry given by its leaves, in order: ``leaves(name, value)`` is
    ``{leaf column: leaf}`` for a nested entry (`flatten_value`, `space_specs`) and None for a plain one.

    The one place where nested values meet plain names: a column given both as a plain name and as a leaf
    of a nested entry (``"obs.a"`` beside ``"obs": {"a": ...}``), or as a plain name and a node above or
    below a leaf (``"obs.a"`` beside ``"obs": {"a": {"b": ...}}``), is a ValueError naming both entries;
    nothing is silently replaced.
    """
    out: dict[str, Any] = {}
    source: dict[str, str] = {}  # column -> the entry that gave it, for nested entries' leaves
    for name, value in columns.items():
        sub = leaves(name, value)
        if sub is None:
            if name in out:  # (a mapping has each name once: this one is a leaf of an earlier nested entry)
                raise _collision(name, source[name], name)
            out[name] = value
            continue
        for leaf, v in sub.items():
            if leaf in out:
                raise _collision(leaf, source.get(leaf, leaf), name)
            out[leaf] = v
            source[leaf] = name
    if source:
        for col in out:  # a column above another: which is the leaf would depend on the order
            cut = col.rfind(SEP)
            while cut > 0:
                above = col[:cut]
                if above in out and (col in source or above in source):
                    raise _collision(above, source.get(above, above), source.get(col, col), col)
                cut = above.rfind(SEP)
    return out


def _collision(col: str, first: str, second: str, below: str | None = None) -> ValueError:
    """The error for column ``col`` given by the entries ``first`` and ``second`` (an entry is the column itself
    or the nested column it is a leaf of), or, with ``below``, for ``col`` (from ``first``) standing above
    ``below`` (from ``second``)."""

    def entry(e: str, c: str) -> str:
        return "a column of its own" if e == c else f"a leaf of the nested column {e!r}"

    if below is None:
        what = f"column {col!r} is given twice: as {entry(first, col)} and as {entry(second, col)}"
    else:
        what = (f"column {col!r} ({entry(first, col)}) would have column {below!r} ({entry(second, below)}) "
                f"under it, and a column is a leaf or a node, not both")
    return ValueError(f"{what} (a nested value is stored by leaf: {{'a': x}} under 'obs' is column 'obs.a'); "
                      f"give each column once")


def has_leaves(name: str, keys: Iterable[str]) -> bool:
    """Whether any of ``keys`` is a leaf column under ``name``."""
    p = name + SEP
    return any(k.startswith(p) for k in keys)


def leaf_names(name: str, keys: Iterable[str]) -> list[str]:
    """The leaf columns under ``name`` among ``keys``, in their order."""
    p = name + SEP
    return [k for k in keys if k.startswith(p)]


def assemble(name: str, keys: Iterable[str], get: Callable[[str], Any]) -> Any:
    """The nested value under ``name`` of the leaf columns among ``keys`` (``get(column)`` reads one).

    A node whose children are named ``0 .. n-1`` becomes a tuple, any other a
    dict; children keep the order of ``keys``. A KeyError if there are none.
    """
    p = name + SEP
    tree: dict[str, Any] = {}
    found = False
    for k in keys:
        if not k.startswith(p):
            continue
        found = True
        parts = k[len(p):].split(SEP)
        node = tree
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        node[parts[-1]] = _LeafRef(k)
    if not found:
        raise KeyError(name)

    return _assemble_node(tree, get)


def _assemble_node(node: dict[str, Any], get: Callable[[str], Any]) -> Any:
    # Module level for the same reason as `_build_node`: no self-referencing closure holding ``get``'s batch.
    vals = {c: (get(v.key) if isinstance(v, _LeafRef) else _assemble_node(v, get)) for c, v in node.items()}
    index = [str(i) for i in range(len(vals))]
    if set(vals) == set(index):
        return tuple(vals[i] for i in index)
    return vals


class _LeafRef:
    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def expand_views(view_requirements: Mapping[str, Any], columns: Iterable[str]) -> dict[str, Any]:
    """The views with every view of a nested column replaced by one view per leaf.

    A view ``key`` reading column ``col`` whose leaves ``col.a``, ``col.b.0``
    are among ``columns`` becomes the views ``key.a`` (reading ``col.a``),
    ``key.b.0`` ..., each with the same shift, padding, repeat and flags.
    Other views are kept as they are.
    """
    from .view_requirement import ViewRequirement

    cols = list(columns)
    plain = set(cols)
    out: dict[str, Any] = {}
    for key, vr in view_requirements.items():
        col = vr.column(key)
        leaves = [] if col in plain else leaf_names(col, cols)
        if not leaves:
            out[key] = vr
            continue
        for leaf in leaves:
            out[key + leaf[len(col):]] = ViewRequirement(
                leaf,
                shift=vr.shift,
                batch_repeat_value=vr.batch_repeat_value,
                padding=vr.padding,
                used_for_compute_actions=vr.used_for_compute_actions,
                used_for_training=vr.used_for_training,
            )
    return out


def space_specs(name: str, spec: Any) -> dict[str, tuple[np.dtype, tuple[int, ...]]] | None:
    """``{leaf column: (dtype, shape)}`` if ``spec`` is a nested space (a Dict / Tuple, or one without a shape)."""
    if isinstance(spec, tuple) or getattr(spec, "shape", ()) is not None:
        return None
    return Nest.from_space(spec, f"column {name!r}").specs(name)
