"""`PettingZooAECEnv`: PettingZoo ``AECEnv`` s (turn-based), one agent acting per step.

Each adapter step gives the selected agent its action (``env.step``), then
plays the "dead steps" of agents that are terminated or truncated
(``env.step(None)``, as PettingZoo asks) and reports, per agent, what
changed: the next selected agent's observation (it acts next), the final
observation of agents that are done, and the step's rewards for every agent
(``env.rewards``; the sampler adds up an agent's rewards until its next step,
as RLlib does). The env episode ends when no agent is left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .base import MultiAgentEnvAdapter, MultiAgentStep
from .checks import check_flag, check_reward

__all__ = ["PettingZooAECEnv", "is_aec_env"]


def is_aec_env(env: Any) -> bool:
    """Duck-typed PettingZoo ``AECEnv``: ``agent_selection``, ``last()`` and ``agent_iter()``."""
    return (
        hasattr(env, "possible_agents")
        and callable(getattr(env, "last", None))
        and callable(getattr(env, "agent_iter", None))
        and callable(getattr(env, "observe", None))
    )


class PettingZooAECEnv(MultiAgentEnvAdapter):
    """``envs[i]`` is env ``i``; agents, their order and their spaces are ``envs[0]``'s."""

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
        env = self.envs[env_index]
        env.reset(seed=seed)
        obs: dict = {}
        rew: dict = {}
        term: dict = {}
        trunc: dict = {}
        infos: dict = {}
        self._settle(env_index, env, obs, rew, term, trunc, infos)
        return obs, infos

    def _settle(self, i: int, env: Any, obs: dict, rew: dict, term: dict, trunc: dict, infos: dict) -> None:
        """Plays the dead steps of done agents (recording their final observation) and observes the next agent."""
        for agent, r in env.rewards.items():
            rew[agent] = rew.get(agent, 0.0) + check_reward(r, i, agent)
        while env.agents:
            agent = env.agent_selection
            te = check_flag(env.terminations.get(agent, False), "terminateds", i, agent)
            tr = check_flag(env.truncations.get(agent, False), "truncateds", i, agent)
            infos[agent] = env.infos.get(agent, {})
            obs[agent] = env.observe(agent)
            if not (te or tr):
                return
            term[agent], trunc[agent] = te, tr
            env.step(None)
            for a, r in env.rewards.items():
                rew[a] = rew.get(a, 0.0) + check_reward(r, i, a)
        # every agent is done: the episode is over
        term["__all__"] = True

    def step(self, actions: list[dict]) -> list[MultiAgentStep]:
        out = []
        for i, env in enumerate(self.envs):
            self._stepping = i
            obs: dict = {}
            rew: dict = {}
            term: dict = {}
            trunc: dict = {}
            infos: dict = {}
            acts = actions[i]
            if acts:
                agent = env.agent_selection
                if set(acts) != {agent}:
                    raise ValueError(
                        f"env {i}: an AEC env takes one action, of the selected agent {agent!r}; got actions for "
                        f"{sorted(map(str, acts))}"
                    )
                env.step(acts[agent])
                self._settle(i, env, obs, rew, term, trunc, infos)
            out.append(MultiAgentStep(obs, rew, term, trunc, infos))
        self._stepping = -1
        return out

    def moved_on(self) -> list[int]:
        return list(range(self._stepping + 1))

    def close(self) -> None:
        for env in self.envs:
            env.close()
