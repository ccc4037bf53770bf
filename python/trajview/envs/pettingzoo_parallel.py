"""`PettingZooParallelEnv`: PettingZoo ``ParallelEnv`` s, every live agent acting at every step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import MultiAgentEnvAdapter, MultiAgentStep

__all__ = ["PettingZooParallelEnv", "is_parallel_env"]


def is_parallel_env(env: Any) -> bool:
    """Duck-typed PettingZoo ``ParallelEnv``: ``possible_agents`` and per-agent space methods."""
    return (
        hasattr(env, "possible_agents")
        and callable(getattr(env, "observation_space", None))
        and callable(getattr(env, "action_space", None))
    )


class PettingZooParallelEnv(MultiAgentEnvAdapter):
    """``envs[i]`` is env ``i``; agents, their order and their spaces are ``envs[0]``'s.

    A ParallelEnv's ``step`` returns an observation for every agent still in
    the episode, which is the adapter contract's "agents that need an action".
    """

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.base_env = self.envs
        self.possible_agents = list(self.envs[0].possible_agents)

    def observation_space(self, agent: Any) -> Any:
        return self.envs[0].observation_space(agent)

    def action_space(self, agent: Any) -> Any:
        return self.envs[0].action_space(agent)

    def reset(self, env_index: int, seed: int | None = None) -> tuple[dict, dict]:
        obs, infos = self.envs[env_index].reset(seed=seed)
        return obs, infos

    def step(self, actions: list[dict]) -> list[MultiAgentStep]:
        return [MultiAgentStep(*env.step(actions[i])) for i, env in enumerate(self.envs)]

    def close(self) -> None:
        for env in self.envs:
            env.close()
