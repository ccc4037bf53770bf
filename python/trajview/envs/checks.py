"""Checks of what an env returns, before anything of it is stored (as gymnasium's env checker asks).

``reset()`` must return ``(obs, info)`` and ``step()`` the five values
``(obs, reward, terminated, truncated, info)`` (gymnasium's API, and
PettingZoo's and RLlib's with dicts by agent): the old gym API (``reset()``
returning the observation alone, ``step()`` returning ``(obs, reward, done,
info)``) is a ValueError naming the call, the env and what was expected.

Rewards must be real numbers (Python or numpy ints and floats; not bools,
strings, None, NaN, complex numbers or arrays; ints only where float64 holds
them exactly). ``terminated`` / ``truncated`` must be bools (Python or numpy). A
bad value is a ValueError naming the column, the env (and agent), what was
expected and what came: never a silent NaN, a parsed string or a truthy cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "check_flag",
    "check_reset",
    "check_reward",
    "check_reward_array",
    "check_vector_flags",
    "check_vector_rewards",
    "step_result_error",
]

from .._validate import MAX_EXACT_INT as _MAX_EXACT_INT, check_reward_array  # noqa: F401 (the rule's home)


def _where(env_index: int, agent: Any) -> str:
    return f"env {env_index}" if agent is None else f"env {env_index}, agent {agent!r}"


def _got(result: Any) -> str:
    """What a call returned, in a few words (not its repr: an observation may be big)."""
    if isinstance(result, (tuple, list)):
        return f"a {type(result).__name__} of {len(result)} ({', '.join(type(v).__name__ for v in result)})"
    return f"one {type(result).__name__} value"


def check_reset(result: Any, where: str, expected: str = "(obs, info)", dict_obs: bool = False) -> tuple[Any, dict]:
    """``(obs, info)`` of what ``reset()`` returned, if it is that pair (``info`` a dict; ``obs`` too with
    ``dict_obs``); else a ValueError naming ``where`` (``"env 3"``) and ``expected``."""
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[1], dict)
        and (not dict_obs or isinstance(result[0], dict))
    ):
        return result[0], result[1]
    raise ValueError(
        f"{where}: reset() returned {_got(result)}, expected {expected} (gymnasium's API; the old gym API's "
        f"reset() returning the observation alone is not supported)"
    )


def step_result_error(
    result: Any, where: str, expected: str = "(obs, reward, terminated, truncated, info)"
) -> ValueError:
    """The error for a ``step()`` result that is not the five values ``expected`` (e.g. the old gym API's
    ``(obs, reward, done, info)``), naming ``where`` (``"env 3"``)."""
    return ValueError(
        f"{where}: step() returned {_got(result)}, expected the 5-tuple {expected} (gymnasium's API; the old gym "
        f"API's (obs, reward, done, info) is not supported: split done into terminated and truncated)"
    )


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
    check_reward_array(arr, (num_envs,), "the VectorEnv returned", "envs",
                       " (a reward of None becomes NaN in a VectorEnv's float array)")
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
