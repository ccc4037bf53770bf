"""`MultiAgentDictEnv`: envs with RLlib's ``MultiAgentEnv`` dict API, and `MultiAgentEnv`, a base class for them.

``reset()`` returns ``(obs dict, infos dict)``; ``step(action dict)`` returns
``(obs, rewards, terminateds, truncateds, infos)`` dicts keyed by agent id,
with ``"__all__"`` in ``terminateds`` / ``truncateds`` ending the episode for
every agent. Agents act only when they are in the observation dict, so they
may act in turns, act without being observed every step, join late and
leave early; rewards given to an agent while it waits add up on its next
step (the sampler does that, as RLlib does).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .pettingzoo_parallel import DictStepEnvList

__all__ = ["MultiAgentDictEnv", "MultiAgentEnv", "is_multi_agent_dict_env", "is_multi_agent_env_class"]


class MultiAgentEnv(gym.Env):
    """A base class with RLlib's ``MultiAgentEnv`` names: ``possible_agents``, ``agents``,
    ``observation_spaces`` / ``action_spaces`` (dicts by agent id) and ``get_observation_space(agent_id)`` /
    ``get_action_space(agent_id)``. Subclasses implement ``reset`` and ``step`` with the dict API."""

    possible_agents: list = []
    agents: list = []
    observation_spaces: dict = {}
    action_spaces: dict = {}

    def get_observation_space(self, agent_id: Any) -> Any:
        return self.observation_spaces[agent_id]

    def get_action_space(self, agent_id: Any) -> Any:
        return self.action_spaces[agent_id]


def is_multi_agent_env_class(env: Any) -> bool:
    """An instance of RLlib's ``MultiAgentEnv`` or trajview's (by class name: RLlib need not be imported)."""
    return any(c.__name__ == "MultiAgentEnv" for c in type(env).__mro__)


def is_multi_agent_dict_env(env: Any) -> bool:
    """RLlib's ``MultiAgentEnv`` or trajview's, or any env with per-agent space lookups
    (``get_observation_space`` or an ``observation_spaces`` dict) and a ``step`` (make_adapter asks after
    ruling out PettingZoo envs, which may have ``observation_spaces`` too)."""
    if is_multi_agent_env_class(env):
        return True
    return callable(getattr(env, "step", None)) and (
        callable(getattr(env, "get_observation_space", None)) or isinstance(getattr(env, "observation_spaces", None), dict)
    )


def _agents_of(env: Any) -> list:
    for name in ("possible_agents", "_agent_ids"):
        agents = getattr(env, name, None)
        if agents:
            return sorted(agents, key=str) if isinstance(agents, (set, frozenset)) else list(agents)
    get_ids = getattr(env, "get_agent_ids", None)
    if callable(get_ids):
        return sorted(get_ids(), key=str)
    spaces = getattr(env, "observation_spaces", None)
    if isinstance(spaces, dict) and spaces:
        return list(spaces)
    space = getattr(env, "observation_space", None)
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces)
    raise ValueError(
        f"{type(env).__name__}: a multi-agent env must name its agents (possible_agents, _agent_ids, "
        f"get_agent_ids() or an observation_spaces dict)"
    )


def _space_of(env: Any, kind: str, agent: Any) -> Any:
    getter = getattr(env, f"get_{kind}_space", None)
    if callable(getter):
        return getter(agent)
    spaces = getattr(env, f"{kind}_spaces", None)
    if isinstance(spaces, dict) and agent in spaces:
        return spaces[agent]
    space = getattr(env, f"{kind}_space", None)
    if isinstance(space, gym.spaces.Dict) and agent in space.spaces:
        return space[agent]
    if space is not None:
        return space  # one space shared by every agent
    raise ValueError(f"{type(env).__name__}: no {kind} space for agent {agent!r}")


class MultiAgentDictEnv(DictStepEnvList):
    """``envs[i]`` is env ``i`` (RLlib's dict API); agents, their order and their spaces are ``envs[0]``'s."""

    def _agents(self, env: Any) -> list:
        return _agents_of(env)

    def observation_space(self, agent: Any) -> Any:
        return _space_of(self.envs[0], "observation", agent)

    def action_space(self, agent: Any) -> Any:
        return _space_of(self.envs[0], "action", agent)

