"""Small argument checks shared by the public classes (errors name the setting, expected and got)."""

from __future__ import annotations

from typing import Any

import numpy as np


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
