"""Small argument checks shared by the public classes (errors name the setting, expected and got)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, if it is an int >= 1 (bools are not ints here)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


#: Row bytes from which ``lazy_views=True`` keeps a column's views lazy.
DEFAULT_LAZY_ROW_BYTES = 1024


def lazy_row_bytes(lazy_views: Any) -> int:
    """The row-bytes threshold that a ``lazy_views`` argument means (0: never lazy)."""
    if lazy_views is True:
        return DEFAULT_LAZY_ROW_BYTES
    if lazy_views is False or lazy_views is None:
        return 0
    if isinstance(lazy_views, (int, np.integer)) and lazy_views >= 0:
        return int(lazy_views)
    raise ValueError(f"lazy_views must be True, False or a number of row bytes >= 0, got {lazy_views!r}")


def int_at_least(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """``value`` as an int, if it is an int (not a bool) in ``[lo, hi]`` (no upper bound when ``hi`` is None)."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo
            or (hi is not None and value > hi)):
        want = f"an int >= {lo}" if hi is None else f"an int in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return int(value)


def finite_number(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                  lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a float, if it is a finite real number (not a bool) within the bounds given (``lo_open`` /
    ``hi_open``: that bound excluded)."""
    ok = (not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
          and bool(np.isfinite(value)))
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        if lo is not None and hi is not None:
            want = f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        elif lo is not None:
            want = f"a finite number {'>' if lo_open else '>='} {lo:g}"
        elif hi is not None:
            want = f"a finite number {'<' if hi_open else '<='} {hi:g}"
        else:
            want = "a finite number"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return float(value)


def timeout_seconds(name: str, value: Any) -> float | None:
    """A timeout setting (``sample_timeout_s``, ``start_timeout_s``): None (no limit), or ``value`` as a float if it
    is a finite number of seconds > 0."""
    if value is None:
        return None
    try:
        return finite_number(name, value, 0, lo_open=True)
    except ValueError:
        raise ValueError(f"{name} must be None or a finite number of seconds > 0, got {value!r}") from None


def boolean(name: str, value: Any) -> bool:
    """``value``, if it is a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


#: Ints beyond this do not all have a float64 (a reward column is float64 in the flat batches).
MAX_EXACT_INT = 2**53


def check_reward_array(arr: np.ndarray, shape: tuple[int, ...], who: str, rows: str = "rows", hint: str = "") -> None:
    """A ValueError unless ``arr`` holds real rewards of ``shape``: an int or float dtype (not bool, object, string,
    complex), ints float64 holds exactly, no NaN. ``who`` (``"the VectorEnv returned"``) and ``rows`` (what an
    index of ``arr`` is) name the source; ``hint`` follows the NaN message. (The NaN scan: one C++ pass,
    `_core.any_nan`, numpy's where that declines: a float16 or strided array.)"""
    if arr.shape != shape or arr.dtype.kind not in "iuf":
        raise ValueError(
            f"column 'rewards': {who} rewards of dtype {arr.dtype} and shape {arr.shape}, "
            f"expected real numbers (an int or float dtype) of shape {shape}"
        )
    if arr.dtype.kind in "iu" and arr.size and int(np.abs(arr).max()) > MAX_EXACT_INT:
        raise ValueError(
            f"column 'rewards': {who} int rewards up to {int(np.abs(arr).max())}, which float64 "
            f"cannot hold exactly (expected |reward| <= 2**53)"
        )
    if arr.dtype.kind == "f" and (nan := _core.any_nan([arr])) is not False and (nan or np.isnan(arr).any()):
        raise ValueError(
            f"column 'rewards': {who} NaN rewards for {rows} {np.flatnonzero(np.isnan(arr).reshape(-1)).tolist()}"
            f"{hint}, expected real numbers"
        )
