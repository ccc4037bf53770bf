"""Small argument checks shared by the public classes (errors name the setting, expected and got)."""

from __future__ import annotations

from typing import Any

import numpy as np


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, if it is an int >= 1 (bools are not ints here)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)
