"""`make_adapter`: the one place that looks at what kind of env an ``env_creator`` returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from .base import EnvAdapter
from .gym_list import GymEnvList
from .gym_vector import GymVectorEnv
from .pettingzoo_parallel import PettingZooParallelEnv, is_parallel_env

__all__ = ["make_adapter"]


def make_adapter(env_creator: Callable[[dict], Any], env_config: dict, num_envs: int) -> EnvAdapter:
    """Calls ``env_creator(env_config)`` and wraps what it returns in the adapter for its kind.

    * a ``gymnasium.Env``: ``num_envs`` of them (`GymEnvList`);
    * a ``gymnasium.vector.VectorEnv``: that one (`GymVectorEnv`); ``num_envs``
      must be 1 or its ``num_envs``. An envpool env made with
      ``env_type="gymnasium"`` is one (stepped in one call per vector step);
    * a PettingZoo ``ParallelEnv``: ``num_envs`` of them (`PettingZooParallelEnv`);
    * an `EnvAdapter`: used as it is (``num_envs`` must be 1 or its ``num_envs``).
    """
    first = env_creator(env_config)
    if isinstance(first, EnvAdapter):
        _check_count(num_envs, first.num_envs, "an EnvAdapter")
        return first
    if is_parallel_env(first):
        return PettingZooParallelEnv([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    if isinstance(first, gym.vector.VectorEnv):
        _check_count(num_envs, first.num_envs, "a VectorEnv")
        return GymVectorEnv(first, env_creator, env_config)
    if isinstance(first, gym.Env):
        return GymEnvList([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    raise TypeError(
        "env_creator must return a gymnasium.Env, a gymnasium.vector.VectorEnv, a PettingZoo ParallelEnv or a "
        f"trajview.envs.EnvAdapter, got {type(first).__name__}"
    )


def _check_count(num_envs: int, has: int, what: str) -> None:
    if num_envs not in (1, has):
        raise ValueError(f"num_envs={num_envs} but env_creator returned {what} of {has} envs")
