"""Checks of what an env returns, before anything of it is stored (as gymnasium's env checker asks).

Rewards must be real numbers (Python or numpy ints and floats; not bools,
strings, None, NaN, complex numbers or arrays; ints only where float64 holds
them exactly). ``terminated`` / ``truncated`` must be bools (Python or numpy). A
bad value is a ValueError naming the column, the env (and agent), what was
expected and what came: never a silent NaN, a parsed string or a truthy cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_flag", "check_reward", "check_vector_flags", "check_vector_rewards"]

_MAX_EXACT_INT = 2**53  # ints beyond this do not all have a float64


def _where(env_index: int, agent: Any) -> str:
    return f"env {env_index}" if agent is None else f"env {env_index}, agent {agent!r}"


def check_reward(value: Any, env_index: int, agent: Any = None) -> float:
    """``value`` as a float, if it is a real number float64 holds exactly."""
    t = type(value)
    if t is float or t is np.float64 or t is np.float32:
        if value != value:
            raise ValueError(f"column 'rewards': {_where(env_index, agent)} returned a NaN reward, expected a real number")
        return float(value)
    if t is not bool and isinstance(value, (int, np.integer)):
        if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT:
            return float(value)
        raise ValueError(
            f"column 'rewards': {_where(env_index, agent)} returned the int reward {value}, which float64 cannot "
            f"hold exactly (rewards are stored as float64; expected |reward| <= 2**53)"
        )
    if isinstance(value, np.floating):  # float16, longdouble
        return check_reward(float(value), env_index, agent)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return check_reward(value[()], env_index, agent)
    raise ValueError(
        f"column 'rewards': {_where(env_index, agent)} returned a reward of type {t.__name__} ({value!r}), "
        f"expected a real number (int or float)"
    )


def check_flag(value: Any, name: str, env_index: int, agent: Any = None) -> bool:
    """``value`` as a bool, if it is one (``terminated`` or ``truncated``: ``name``)."""
    t = type(value)
    if t is bool or t is np.bool_:
        return bool(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype == np.bool_:
        return bool(value)
    raise ValueError(
        f"column '{name}': {_where(env_index, agent)} returned {value!r} of type {t.__name__}, expected a bool"
    )


def check_vector_rewards(value: Any, num_envs: int) -> np.ndarray:
    """A VectorEnv's rewards as float64 [num_envs], if they are real numbers of that shape."""
    arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if arr.shape != (num_envs,) or arr.dtype.kind not in "iuf":
        raise ValueError(
            f"column 'rewards': the VectorEnv returned rewards of dtype {arr.dtype} and shape {arr.shape}, "
            f"expected real numbers (an int or float dtype) of shape ({num_envs},)"
        )
    if arr.dtype.kind in "iu" and arr.size and int(np.abs(arr).max()) > _MAX_EXACT_INT:
        raise ValueError(
            f"column 'rewards': the VectorEnv returned int rewards up to {int(np.abs(arr).max())}, which float64 "
            f"cannot hold exactly (expected |reward| <= 2**53)"
        )
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(
            f"column 'rewards': the VectorEnv returned NaN rewards for envs {np.flatnonzero(np.isnan(arr)).tolist()} "
            f"(a reward of None becomes NaN in a VectorEnv's float array), expected real numbers"
        )
    return arr.astype(np.float64, copy=False)


def check_vector_flags(value: Any, name: str, num_envs: int) -> np.ndarray:
    """A VectorEnv's ``terminated`` / ``truncated`` array, if it is bool [num_envs]."""
    arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if arr.shape != (num_envs,) or arr.dtype != np.bool_:
        raise ValueError(
            f"column '{name}': the VectorEnv returned dtype {arr.dtype} and shape {arr.shape}, expected bool of "
            f"shape ({num_envs},)"
        )
    return arr
