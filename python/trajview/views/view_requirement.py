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
