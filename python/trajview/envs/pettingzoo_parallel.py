"""`PettingZooParallelEnv`: PettingZoo ``ParallelEnv`` s, every live agent acting at every step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import MultiAgentEnvAdapter, MultiAgentStep
from .checks import check_flag, check_reward

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

    def __init__(
        self, envs: Sequence[Any], env_creator: Callable[[dict], Any] | None = None, env_config: dict | None = None
    ) -> None:
        self._creator = env_creator
        self._config = dict(env_config or {})
        self._stepping = -1
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
        out = []
        for i, env in enumerate(self.envs):
            self._stepping = i
            out.append(_checked(i, env.step(actions[i])))
        self._stepping = -1
        return out

    def moved_on(self) -> list[int]:
        return list(range(self._stepping + 1))

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _checked(i: int, result: Any) -> MultiAgentStep:
    """One env's step result, its rewards and flags checked (`trajview.envs.checks`)."""
    try:
        obs, rew, term, trunc, infos = result
    except (TypeError, ValueError):
        raise ValueError(
            f"env {i}: step() must return (observations, rewards, terminations, truncations, infos), got {result!r}"
        ) from None
    for name, d in (("observations", obs), ("rewards", rew), ("terminateds", term), ("truncateds", trunc), ("infos", infos)):
        if not isinstance(d, dict):
            raise ValueError(f"column '{name}': env {i} returned {type(d).__name__} {d!r}, expected a dict by agent id")
    for agent, r in rew.items():
        check_reward(r, i, agent)
    for agent, v in term.items():
        check_flag(v, "terminateds", i, agent)
    for agent, v in trunc.items():
        check_flag(v, "truncateds", i, agent)
    return MultiAgentStep(obs, rew, term, trunc, infos)
