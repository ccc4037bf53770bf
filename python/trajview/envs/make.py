"""`make_adapter`: the one place that looks at what kind of env an ``env_creator`` returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from .base import EnvAdapter
from .gym_list import GymEnvList
from .gym_vector import GymVectorEnv
from .multi_agent_dict import MultiAgentDictEnv, is_multi_agent_dict_env, is_multi_agent_env_class
from .pettingzoo_aec import PettingZooAECEnv, is_aec_env
from .pettingzoo_parallel import PettingZooParallelEnv, is_parallel_env

__all__ = ["GymMake", "as_env_creator", "make_adapter"]


class GymMake:
    """The ``env_creator`` of a registered gymnasium env id: ``gym.make(env_id, **env_config)`` (RLlib's for an
    env given by its id). A class, not a lambda, so that it pickles (``WorkerSet``'s spawn start method, Ray)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, env_config: dict | None = None) -> Any:
        return gym.make(self.env_id, **dict(env_config or {}))

    def __repr__(self) -> str:
        return f"GymMake({self.env_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GymMake) and other.env_id == self.env_id

    def __hash__(self) -> int:
        return hash((GymMake, self.env_id))


def as_env_creator(env: str | Callable[[dict], Any]) -> Callable[[dict], Any]:
    """``env`` as an ``env_creator(env_config)``: a registered gymnasium env id (a str) becomes `GymMake`; a
    callable is returned as it is. The one place where trajview turns an env id into a creator."""
    if isinstance(env, str):
        if not env:
            raise ValueError("env_creator: an empty env id; give a registered gymnasium env id (e.g. "
                             "'CartPole-v1') or a callable env_creator(env_config)")
        return GymMake(env)
    if not callable(env):
        raise TypeError(f"env_creator must be a callable env_creator(env_config) or a registered gymnasium env id "
                        f"(a str, e.g. 'CartPole-v1'), got {type(env).__name__} {env!r:.80}")
    return env


def make_adapter(env_creator: str | Callable[[dict], Any], env_config: dict, num_envs: int) -> EnvAdapter:
    """Calls ``env_creator(env_config)`` and wraps what it returns in the adapter for its kind.

    ``env_creator`` may be a registered gymnasium env id (`as_env_creator`: ``gym.make(env_id, **env_config)``).

    * a ``gymnasium.Env``: ``num_envs`` of them (`GymEnvList`);
    * a ``gymnasium.vector.VectorEnv``: that one (`GymVectorEnv`); ``num_envs``
      must be 1 or its ``num_envs``. An envpool env made with
      ``env_type="gymnasium"`` is one (stepped in one call per vector step);
    * a PettingZoo ``AECEnv`` (turn-based): ``num_envs`` of them (`PettingZooAECEnv`);
    * an env with RLlib's ``MultiAgentEnv`` dict API: ``num_envs`` of them (`MultiAgentDictEnv`);
    * a PettingZoo ``ParallelEnv``: ``num_envs`` of them (`PettingZooParallelEnv`);
    * an `EnvAdapter`: used as it is (``num_envs`` must be 1 or its ``num_envs``).
    """
    env_creator = as_env_creator(env_creator)
    first = env_creator(env_config)
    if isinstance(first, EnvAdapter):
        _check_count(num_envs, first.num_envs, "an EnvAdapter")
        return first
    if is_aec_env(first):
        return PettingZooAECEnv([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    if is_multi_agent_env_class(first) or (not is_parallel_env(first) and is_multi_agent_dict_env(first)):
        return MultiAgentDictEnv([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    if is_parallel_env(first):
        return PettingZooParallelEnv([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    if isinstance(first, gym.vector.VectorEnv):
        _check_count(num_envs, first.num_envs, "a VectorEnv")
        return GymVectorEnv(first, env_creator, env_config)
    if isinstance(first, gym.Env):
        return GymEnvList([first] + [env_creator(env_config) for _ in range(num_envs - 1)], env_creator, env_config)
    raise TypeError(
        "env_creator must return a gymnasium.Env, a gymnasium.vector.VectorEnv, a PettingZoo ParallelEnv or AECEnv, "
        "an RLlib-style MultiAgentEnv or a "
        f"trajview.envs.EnvAdapter, got {type(first).__name__}"
    )


def _check_count(num_envs: int, has: int, what: str) -> None:
    if num_envs not in (1, has):
        raise ValueError(f"num_envs={num_envs} but env_creator returned {what} of {has} envs")
