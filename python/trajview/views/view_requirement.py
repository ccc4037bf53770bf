"""`ViewRequirement`: which slice of which column a model reads (see docs/contract.md, Views)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["MAX_BATCH_REPEAT", "MAX_OFFSETS", "MAX_SHIFT", "ViewRequirement"]

_RANGE = re.compile(r"^\s*(-?\d+)\s*:\s*(-?\d+)\s*$")
_PADDINGS = ("zero", "reset")

#: Every offset of a view lies in [-MAX_SHIFT, MAX_SHIFT] (a million steps back or ahead; the C++ stores hold the
#: same bound), a view has at most MAX_OFFSETS offsets and batch_repeat_value is at most MAX_BATCH_REPEAT.
MAX_SHIFT = 1_000_000
MAX_OFFSETS = 100_000
MAX_BATCH_REPEAT = 1_000_000


def _check_offset(s: int, shift: Any) -> int:
    if not -MAX_SHIFT <= s <= MAX_SHIFT:
        raise ValueError(
            f"ViewRequirement shift {shift!r}: offset {s} is out of range; offsets must lie in "
            f"[-{MAX_SHIFT}, {MAX_SHIFT}] (trajview.views.view_requirement.MAX_SHIFT)"
        )
    return s


def _parse_shift(shift: Any) -> tuple[np.ndarray, bool]:
    """Return (offsets as int64 array, whether the shift adds an axis)."""
    if isinstance(shift, (bool, np.bool_)):
        raise ValueError(f"ViewRequirement shift must be an int, a list of ints or 'a:b', got {shift!r}")
    if isinstance(shift, (int, np.integer)):
        return np.array([_check_offset(int(shift), shift)], dtype=np.int64), False
    if isinstance(shift, str):
        m = _RANGE.match(shift)
        if m is None:
            raise ValueError(f"ViewRequirement shift string must look like 'a:b' (e.g. '-3:0'), got {shift!r}")
        a, b = int(m.group(1)), int(m.group(2))
        if a > b:
            raise ValueError(f"ViewRequirement shift range {shift!r} must have start <= end, got {a} > {b}")
        _check_offset(a, shift)
        _check_offset(b, shift)
        if b - a + 1 > MAX_OFFSETS:
            raise ValueError(f"ViewRequirement shift {shift!r} has {b - a + 1} offsets, at most {MAX_OFFSETS} allowed")
        return np.arange(a, b + 1, dtype=np.int64), True
    if isinstance(shift, (list, tuple, np.ndarray)):
        items = list(shift)
        if not items:
            raise ValueError(f"ViewRequirement shift list must not be empty, got {shift!r}")
        if len(items) > MAX_OFFSETS:
            raise ValueError(f"ViewRequirement shift list has {len(items)} offsets, at most {MAX_OFFSETS} allowed")
        for s in items:
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
                raise ValueError(f"ViewRequirement shift list must hold ints only, got {shift!r}")
        return np.array([_check_offset(int(s), shift) for s in items], dtype=np.int64), True
    raise ValueError(f"ViewRequirement shift must be an int, a list of ints or 'a:b', got {shift!r}")


class ViewRequirement:
    """A view of one column: ``data_col[t + s]`` for every offset ``s`` in ``shift``.

    ``shift`` is an int (the column's per-step shape), a list of ints or a
    range string ``"a:b"`` (both ends included; an extra axis of
    ``len(shift_arr)`` right after the batch axis). Offsets lie in
    [-`MAX_SHIFT`, `MAX_SHIFT`] (a million steps), at most `MAX_OFFSETS` of
    them; anything else is a ValueError naming the shift.
    """

    __slots__ = (
        "data_col",
        "space",
        "shift",
        "shift_arr",
        "shift_from",
        "shift_to",
        "batch_repeat_value",
        "padding",
        "used_for_compute_actions",
        "used_for_training",
        "_adds_axis",
    )

    def __init__(
        self,
        data_col: str | None = None,
        space: Any = None,
        shift: int | str | list[int] = 0,
        *,
        batch_repeat_value: int = 1,
        padding: str = "zero",
        used_for_compute_actions: bool = True,
        used_for_training: bool = True,
    ) -> None:
        if data_col is not None and not isinstance(data_col, str):
            raise TypeError(f"ViewRequirement data_col must be a str or None, got {data_col!r}")
        arr, adds_axis = _parse_shift(shift)
        if (
            isinstance(batch_repeat_value, (bool, np.bool_))
            or not isinstance(batch_repeat_value, (int, np.integer))
            or not 1 <= batch_repeat_value <= MAX_BATCH_REPEAT
        ):
            raise ValueError(
                f"ViewRequirement batch_repeat_value must be an int in [1, {MAX_BATCH_REPEAT}], got {batch_repeat_value!r}"
            )
        if padding not in _PADDINGS:
            raise ValueError(f"ViewRequirement padding must be one of {_PADDINGS}, got {padding!r}")
        self.data_col = data_col
        self.space = space
        self.shift = shift
        self.shift_arr = arr
        self.shift_arr.setflags(write=False)
        self.shift_from = int(arr.min())
        self.shift_to = int(arr.max())
        self.batch_repeat_value = int(batch_repeat_value)
        self.padding = padding
        self.used_for_compute_actions = bool(used_for_compute_actions)
        self.used_for_training = bool(used_for_training)
        self._adds_axis = adds_axis

    @property
    def adds_axis(self) -> bool:
        """True when the view has the extra offsets axis (list or range shift)."""
        return self._adds_axis

    def column(self, key: str) -> str:
        """The column this view reads when stored under ``key``."""
        return self.data_col if self.data_col is not None else key

    def __repr__(self) -> str:
        return (
            f"ViewRequirement(data_col={self.data_col!r}, shift={self.shift!r}, "
            f"batch_repeat_value={self.batch_repeat_value}, padding={self.padding!r}, "
            f"used_for_compute_actions={self.used_for_compute_actions}, "
            f"used_for_training={self.used_for_training})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ViewRequirement):
            return NotImplemented
        return (
            self.data_col == other.data_col
            and np.array_equal(self.shift_arr, other.shift_arr)
            and self._adds_axis == other._adds_axis
            and self.batch_repeat_value == other.batch_repeat_value
            and self.padding == other.padding
            and self.used_for_compute_actions == other.used_for_compute_actions
            and self.used_for_training == other.used_for_training
            and self.space == other.space
        )

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """RLlib's ``ViewRequirement.to_dict``: a JSON-able dict (the space as `space_to_dict`); `from_dict`
        rebuilds an equal requirement. trajview adds ``padding``."""
        shift = self.shift
        if isinstance(shift, np.integer):
            shift = int(shift)
        elif not isinstance(shift, (int, str)):
            shift = [int(x) for x in shift]
        return {
            "data_col": self.data_col,
            "space": space_to_dict(self.space),
            "shift": shift,
            "batch_repeat_value": self.batch_repeat_value,
            "padding": self.padding,
            "used_for_compute_actions": self.used_for_compute_actions,
            "used_for_training": self.used_for_training,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ViewRequirement:
        """The requirement `to_dict` described (RLlib's ``index`` key, if present, is ignored)."""
        d = dict(d)
        d.pop("index", None)
        space = space_from_dict(d.pop("space", None))
        return cls(d.pop("data_col", None), space, d.pop("shift", 0), **d)


def space_to_dict(space: Any) -> dict[str, Any] | None:
    """A JSON-able description of a gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple)."""
    if space is None:
        return None
    import gymnasium as gym

    sp = gym.spaces
    if isinstance(space, sp.Box):
        return {"space": "box", "low": space.low.tolist(), "high": space.high.tolist(), "shape": list(space.shape),
                "dtype": np.dtype(space.dtype).name}
    if isinstance(space, sp.Discrete):
        return {"space": "discrete", "n": int(space.n), "start": int(space.start), "dtype": np.dtype(space.dtype).name}
    if isinstance(space, sp.MultiDiscrete):
        return {"space": "multi-discrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(),
                "dtype": np.dtype(space.dtype).name}
    if isinstance(space, sp.MultiBinary):
        return {"space": "multi-binary", "n": list(space.shape)}
    if isinstance(space, sp.Dict):
        return {"space": "dict", "spaces": {k: space_to_dict(v) for k, v in space.spaces.items()}}
    if isinstance(space, sp.Tuple):
        return {"space": "tuple", "spaces": [space_to_dict(v) for v in space.spaces]}
    raise ValueError(f"ViewRequirement.to_dict: cannot describe space {space!r} (Box, Discrete, MultiDiscrete, "
                     f"MultiBinary, Dict and Tuple can be)")


def space_from_dict(d: dict[str, Any] | None) -> Any:
    """The space `space_to_dict` described."""
    if d is None:
        return None
    import gymnasium as gym

    sp = gym.spaces
    kind = d["space"]
    if kind == "box":
        dt = np.dtype(d["dtype"])
        return sp.Box(np.asarray(d["low"], dt), np.asarray(d["high"], dt), tuple(d["shape"]), dt)
    if kind == "discrete":
        return sp.Discrete(d["n"], start=d.get("start", 0), dtype=np.dtype(d.get("dtype", "int64")))
    if kind == "multi-discrete":
        return sp.MultiDiscrete(np.asarray(d["nvec"]), dtype=np.dtype(d.get("dtype", "int64")),
                                start=np.asarray(d.get("start", np.zeros_like(d["nvec"]))))
    if kind == "multi-binary":
        n = d["n"]
        return sp.MultiBinary(n if len(n) != 1 else n[0])
    if kind == "dict":
        return sp.Dict({k: space_from_dict(v) for k, v in d["spaces"].items()})
    if kind == "tuple":
        return sp.Tuple([space_from_dict(v) for v in d["spaces"]])
    raise ValueError(f"ViewRequirement.from_dict: unknown space kind {kind!r}")
