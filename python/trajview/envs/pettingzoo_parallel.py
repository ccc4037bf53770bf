"""`PettingZooParallelEnv`: PettingZoo ``ParallelEnv`` s, every live agent acting at every step."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import MultiAgentEnvList, MultiAgentStep
from .checks import check_flag, check_reset, check_reward, step_result_error

__all__ = ["PettingZooParallelEnv", "is_parallel_env"]


def is_parallel_env(env: Any) -> bool:
    """Duck-typed PettingZoo ``ParallelEnv``: ``possible_agents`` and per-agent space methods."""
    return (
        hasattr(env, "possible_agents")
        and callable(getattr(env, "observation_space", None))
        and callable(getattr(env, "action_space", None))
    )


class DictStepEnvList(MultiAgentEnvList):
    """Envs whose ``reset()`` returns ``(observations, infos)`` and ``step(actions)`` the five dicts
    ``(observations, rewards, terminations, truncations, infos)``, all by agent id: PettingZoo's ParallelEnv
    and RLlib's MultiAgentEnv (`MultiAgentDictEnv`). Both are checked (`trajview.envs.checks`)."""

    def reset(self, env_index: int, seed: int | None = None) -> tuple[dict, dict]:
        return check_reset(self.envs[env_index].reset(seed=seed), f"env {env_index}", _RESET, dict_obs=True)

    def _step_one(self, i: int, env: Any, actions: dict) -> MultiAgentStep:
        return _checked(i, env.step(actions))

    def step(self, actions: list[dict]) -> list[MultiAgentStep]:
        return _step_all(self, actions)


class PettingZooParallelEnv(DictStepEnvList):
    """``envs[i]`` is env ``i``; agents, their order and their spaces are ``envs[0]``'s.

    A ParallelEnv's ``step`` returns an observation for every agent still in
    the episode, which is the adapter contract's "agents that need an action".
    """


def _step_all(adapter: MultiAgentEnvList, actions: list[dict]) -> list[MultiAgentStep]:
    """`MultiAgentEnvList.step` for adapters whose `_step_one` is ``_checked(i, env.step(actions))``, inlined."""
    out = []
    for i, env in enumerate(adapter.envs):
        adapter._stepping = i
        res = _checked(i, env.step(actions[i]))
        if not adapter.saw_other_rewards:
            adapter.note_rewards(res.rewards)
        out.append(res)
    adapter._stepping = -1
    return out


#: What a multi-agent env's reset() returns (PettingZoo's ParallelEnv, RLlib's MultiAgentEnv).
_RESET = "(observations dict, infos dict)"
#: What its step() returns.
_STEP = "(observations, rewards, terminations, truncations, infos)"

_REAL = (float, np.float64, np.float32)  # reward types the fast path takes (NaN aside)


def _checked(i: int, result: Any) -> MultiAgentStep:
    """One env's step result, its rewards and flags checked (`trajview.envs.checks`)."""
    # The fast path: plain dicts, float rewards that are not NaN, bool flags (what most envs return). Anything
    # else takes the full checks below, which accept what they accept and name what they refuse.
    if type(result) is tuple and len(result) == 5:
        obs, rew, term, trunc, infos = result
        if type(obs) is dict and type(rew) is dict and type(term) is dict and type(trunc) is dict and type(infos) is dict:
            for r in rew.values():
                t = type(r)
                if (t is not float and t not in _REAL) or r != r:
                    break
            else:
                for v in term.values():
                    if type(v) is not bool:
                        break
                else:
                    for v in trunc.values():
                        if type(v) is not bool:
                            break
                    else:
                        return tuple.__new__(MultiAgentStep, result)  # (the namedtuple's own __new__ is Python code)
    return _checked_fully(i, result)


def _checked_fully(i: int, result: Any) -> MultiAgentStep:
    try:
        obs, rew, term, trunc, infos = result
    except (TypeError, ValueError):
        raise step_result_error(result, f"env {i}", _STEP) from None
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
