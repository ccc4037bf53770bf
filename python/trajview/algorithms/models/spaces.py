"""Walking a gymnasium space together with a value of that space, nested to any depth (``Dict``, ``Tuple``).

The layout of nested values (the collector's nested observations):

* a nested column is stored per leaf under a flat name: ``Dict`` keys joined
  with ``"."`` (``"obs.image"``, ``"obs.pos.x"``), ``Tuple`` leaves named by
  their index (``"obs.0"``);
* a batch or input dict gives the nested column as the nested structure of
  per-leaf arrays or tensors: a ``dict`` for ``Dict`` spaces, a ``tuple`` for
  ``Tuple`` spaces, each leaf ``[B, *leaf_shape]`` (a view such as a frame
  stack adds its axis: ``[B, K, *leaf_shape]``).

`get_nested` reads a nested column either way (the nested value under its
name, or its flat per-leaf columns), so models do not care which one a batch
holds. Everything here works on numpy arrays and torch tensors alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gymnasium as gym

__all__ = [
    "UnsupportedSpaceError",
    "is_nested",
    "leaves",
    "leaf_value",
    "map_leaves",
    "map_leaves_with_path",
    "path_name",
    "flatten_value",
    "get_nested",
    "check_supported",
]

#: A leaf's position in a nested value: Dict keys (str) and Tuple indices (int), outermost first.
Path = tuple[Any, ...]


class UnsupportedSpaceError(ValueError):
    """A space (or a leaf of a nested space) that trajview's models cannot read or act in."""


def is_nested(space: Any) -> bool:
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def leaves(space: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """``(path, leaf space)`` of every leaf of ``space`` in order (Dict keys in the space's order, Tuple by index).

    A space that is neither ``Dict`` nor ``Tuple`` is its own single leaf, at path ``()``.
    """
    if isinstance(space, gym.spaces.Dict):
        for k, sub in space.spaces.items():
            yield from leaves(sub, (*path, k))
    elif isinstance(space, gym.spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            yield from leaves(sub, (*path, i))
    else:
        yield path, space


def path_name(path: Path) -> str:
    """``("pos", 0)`` -> ``"pos.0"``: a leaf's name under its column (the flat column is ``"obs." + name``)."""
    return ".".join(str(p) for p in path)


def leaf_value(value: Any, path: Path) -> Any:
    """The leaf at ``path`` of a nested value (dicts by key, tuples and lists by index)."""
    for p in path:
        if isinstance(value, Mapping):
            value = value[p]
        elif isinstance(value, (tuple, list)):
            value = value[int(p)]
        else:
            raise TypeError(f"expected a dict or tuple at {path_name(path)!r}, got {type(value).__name__}")
    return value


def map_leaves(fn: Callable[..., Any], space: Any, *values: Any) -> Any:
    """``fn(leaf, *other_leaves)`` at every leaf of ``space``, in the space's structure (dicts, tuples)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: map_leaves(fn, sub, *(leaf_value(v, (k,)) for v in values)) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(map_leaves(fn, sub, *(leaf_value(v, (i,)) for v in values)) for i, sub in enumerate(space.spaces))
    return fn(*values)


def flatten_value(name: str, space: Any, value: Any) -> dict[str, Any]:
    """``{flat column name: leaf}`` of a nested value (``{"obs.image": ..., "obs.vec": ...}``); ``{name: value}``
    for a space that is not nested."""
    if not is_nested(space):
        return {name: value}
    return {f"{name}.{path_name(p)}": leaf_value(value, p) for p, _ in leaves(space)}


def get_nested(batch: Mapping[str, Any], name: str, space: Any) -> Any:
    """Column ``name`` of ``batch`` as a value of ``space`` (for a nested space: dicts / tuples of per-leaf arrays).

    Reads the nested value stored under ``name`` if the batch has one, else
    assembles it from the flat per-leaf columns ``name.<leaf>``.
    """
    if not is_nested(space):
        return batch[name]
    try:
        value = batch[name]
    except KeyError:
        value = None
    if isinstance(value, (Mapping, tuple, list)):
        return value
    return map_leaves_with_path(lambda path, _s: batch[f"{name}.{path_name(path)}"], space)


def map_leaves_with_path(fn: Callable[[Path, Any], Any], space: Any, path: Path = ()) -> Any:
    """``fn(path, leaf_space)`` at every leaf, in the space's structure."""
    if isinstance(space, gym.spaces.Dict):
        return {k: map_leaves_with_path(fn, sub, (*path, k)) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(map_leaves_with_path(fn, sub, (*path, i)) for i, sub in enumerate(space.spaces))
    return fn(path, space)


#: The leaf spaces the encoders read.
SUPPORTED_LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def check_supported(space: Any, what: str) -> None:
    """Raises `UnsupportedSpaceError` naming the first leaf of ``space`` that is not Box, Discrete, MultiDiscrete
    or MultiBinary (Text, Graph, Sequence, a custom space, ...)."""
    for path, leaf in leaves(space):
        if not isinstance(leaf, SUPPORTED_LEAVES):
            where = f"{what} leaf {path_name(path)!r}" if path else what
            raise UnsupportedSpaceError(
                f"{where}: unsupported space {type(leaf).__name__} ({leaf!r}); trajview's models read Box, Discrete, "
                "MultiDiscrete and MultiBinary leaves, nested in Dict and Tuple spaces"
            )
