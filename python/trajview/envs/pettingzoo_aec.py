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

from typing import Any

from .base import MultiAgentEnvList, MultiAgentStep
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


class PettingZooAECEnv(MultiAgentEnvList):
    """``envs[i]`` is env ``i``; agents, their order and their spaces are ``envs[0]``'s."""

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

    def _step_one(self, i: int, env: Any, actions: dict) -> MultiAgentStep:
        obs: dict = {}
        rew: dict = {}
        term: dict = {}
        trunc: dict = {}
        infos: dict = {}
        if actions:
            agent = env.agent_selection
            if set(actions) != {agent}:
                raise ValueError(
                    f"env {i}: an AEC env takes one action, of the selected agent {agent!r}; got actions for "
                    f"{sorted(map(str, actions))}"
                )
            env.step(actions[agent])
            self._settle(i, env, obs, rew, term, trunc, infos)
        return MultiAgentStep(obs, rew, term, trunc, infos)
