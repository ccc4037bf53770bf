"""Small turn-based multi-agent envs for the tests: a PettingZoo AEC env and scripted RLlib-style dict envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from pettingzoo import AECEnv
from pettingzoo.utils.agent_selector import AgentSelector as agent_selector

import trajview as tv


class CountingGame(AECEnv):
    """Players take turns; a move adds its action to a counter; after ``moves`` moves the player who moved last
    gets +1, every other -1 (rewards: +0.1 * action to the mover each move). obs = [player, counter, move]."""

    metadata = {"name": "counting_game_v0", "is_parallelizable": False}

    def __init__(self, n_players=2, moves=5):
        super().__init__()
        self.possible_agents = [f"p{k}" for k in range(n_players)]
        self.moves = moves
        self._obs_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
        self._act_space = gym.spaces.Discrete(3)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def observe(self, agent):
        return np.array([self.possible_agents.index(agent), self.counter, self.move], np.float32)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._selector = agent_selector(self.agents)
        self.agent_selection = self._selector.reset()
        self.counter = 0
        self.move = 0

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards()
        self.counter += int(action)
        self.move += 1
        self.rewards[agent] = 0.1 * int(action)
        if self.move >= self.moves:
            for a in self.agents:
                self.rewards[a] += 1.0 if a == agent else -1.0
                self.terminations[a] = True
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


class Script:
    """One episode's script for `ScriptedEnv`: ``length`` env steps (then ``"__all__"``), per agent its join step
    (0: at reset), its leave step (terminated there; None: stays to the end) and whether it gets a final
    observation when it leaves; ``turns[s % len(turns)]`` is a bitmask of the agents observed at step ``s``."""

    def __init__(self, length, join, leave, final_obs, turns, end_obs=True):
        self.length, self.join, self.leave, self.final_obs, self.turns, self.end_obs = (
            length, join, leave, final_obs, turns, end_obs)


class ScriptedEnv(tv.envs.MultiAgentEnv):
    """An RLlib-style dict env that follows `Script`s (episode k plays ``scripts[k % len]``).

    obs of agent a at env step s of episode k: ``[uid, s]`` with ``uid = env * 100_000 + k * 10 + a``.
    Every step each agent that has joined before and not left gets reward ``(a + 1) + 0.5 * s`` (also while it
    is not observed: it adds up on its next step). The env checks that exactly the agents it observed act.
    """

    def __init__(self, scripts, n_agents, env_index=0):
        self.scripts = scripts
        self.n = n_agents
        self.possible_agents = [f"a{k}" for k in range(n_agents)]
        self.agents = []
        space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
        self.observation_spaces = {a: space for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(7) for a in self.possible_agents}
        self.env_index = env_index
        self.k = -1

    def _obs(self, a):
        return np.array([self.env_index * 100_000 + self.k * 10 + a, self.s], np.float64)

    def reset(self, seed=None, options=None):
        self.k += 1
        self.sc = self.scripts[self.k % len(self.scripts)]
        self.s = 0
        self.gone = set()
        self.observed = {a for a in range(self.n) if self.sc.join[a] == 0}
        return {f"a{a}": self._obs(a) for a in sorted(self.observed)}, {f"a{a}": {"s": 0} for a in self.observed}

    def step(self, actions):
        got = {int(k[1:]) for k in actions}
        assert got == self.observed, (self.k, self.s, got, self.observed)
        self.s += 1
        s, sc = self.s, self.sc
        obs, rew, term, trunc, info = {}, {}, {}, {"__all__": False}, {}
        for a in range(self.n):
            if sc.join[a] < s and a not in self.gone:
                rew[f"a{a}"] = (a + 1) + 0.5 * s
        end = s >= sc.length
        observed = set()
        for a in range(self.n):
            if a in self.gone:
                continue
            if sc.join[a] == s and not end:
                observed.add(a)
            elif sc.join[a] < s:
                if sc.leave[a] == s and not end:
                    term[f"a{a}"] = True
                    self.gone.add(a)
                    if sc.final_obs[a]:
                        obs[f"a{a}"] = self._obs(a)
                elif end:
                    if sc.end_obs:
                        obs[f"a{a}"] = self._obs(a)
                elif sc.turns[s % len(sc.turns)] >> a & 1:
                    observed.add(a)
        for a in observed:
            obs[f"a{a}"] = self._obs(a)
            info[f"a{a}"] = {"s": s}
        term["__all__"] = end
        self.observed = observed
        return obs, rew, term, trunc, info
