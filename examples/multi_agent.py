"""Multi-agent: two agents, two policies, one PettingZoo-style parallel env.

``SignalGame`` is a small local env with PettingZoo's ``ParallelEnv`` API
(``possible_agents``, ``observation_space(agent)``, ``reset``, ``step`` on dicts);
a ``pettingzoo.ParallelEnv`` subclass works the same. Each step the
*speaker* sees a random target bit and sends a message (its action); the
*listener* sees the message the speaker sent the step before and guesses the
target of that step. Both get reward 1 for a right guess.

Each agent maps to its own policy (``policy_mapping_fn``); ``sample()`` returns a
`tv.MultiAgentBatch` with one flat `tv.SampleBatch` per policy. The listener's
``postprocess_trajectory`` reads the speaker's segment of the same episode
through ``other_agent_batches`` (the pattern of a centralized critic) and
recomputes every reward from the two agents' data.

Checks: each policy's batch holds only its agent's rows, env and agent step
counts add up, and every reward equals the one recomputed from the speaker's
targets and the listener's guesses.

    python examples/multi_agent.py            # 20 batches
    python examples/multi_agent.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

import trajview as tv

EPISODE_LEN = 25


class SignalGame:
    """Agents "speaker" and "listener" (PettingZoo's ParallelEnv API, no pettingzoo needed)."""

    metadata = {"name": "signal_game_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["speaker", "listener"]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._t = 0
        self._target = 0
        self._message = 0  # what the speaker said at the last step
        self._asked = 0  # the target of the last step: what the listener must guess now

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return gym.spaces.Discrete(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"speaker": np.array([self._target], np.float32), "listener": np.array([self._message], np.float32)}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t, self._message, self._asked = 0, 0, 0
        self._target = int(self._rng.integers(2))
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        right = float(self._t > 0 and int(actions["listener"]) == self._asked)
        self._t += 1
        self._message, self._asked = int(actions["speaker"]), self._target
        self._target = int(self._rng.integers(2))
        done = self._t >= EPISODE_LEN
        agents = list(self.agents)
        if done:
            self.agents = []
        return (self._obs(), {a: right for a in agents}, {a: False for a in agents},
                {a: done for a in agents}, {a: {} for a in agents})

    def close(self) -> None:
        pass


class NoisyCopy(tv.Policy):
    """Copies its observation bit into its action, flipping it with probability ``config["noise"]``."""

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        bits = np.asarray(input_dict["obs"])[:, 0].astype(np.int64)
        flip = np.random.random(len(bits)) < float(self.config.get("noise", 0.2))
        return bits ^ flip, [], {}


class Listener(NoisyCopy):
    def postprocess_trajectory(
        self, sample_batch: tv.SampleBatch, other_agent_batches: dict[str, Any] | None = None, episode: Any = None
    ) -> tv.SampleBatch:
        guesses, t = sample_batch["actions"], sample_batch["t"]
        expected = np.full(len(sample_batch), np.nan)
        # None in the view-pruning pass (a dummy batch, as in RLlib); then the real segments.
        if other_agent_batches is not None:
            _, speaker = other_agent_batches["speaker"]  # (policy, its segment of this env episode)
            np.testing.assert_array_equal(speaker["t"], t)  # both act at every step: the same timesteps
            targets = speaker["obs"][:, 0].astype(np.int64)
            expected[1:] = guesses[1:] == targets[:-1]  # the first row's target sits in the previous batch
            expected[t == 0] = 0.0  # no guess is scored at t = 0
        sample_batch["expected_rewards"] = expected
        return sample_batch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds: 3 batches")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    np.random.seed(args.seed)

    obs_space, act_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32), gym.spaces.Discrete(2)
    worker = tv.RolloutWorker(
        lambda cfg: SignalGame(),
        {"speaker_policy": NoisyCopy(obs_space, act_space, {"noise": 0.1}), "listener_policy": Listener(obs_space, act_space)},
        policy_mapping_fn=lambda agent_id, episode, **kw: f"{agent_id}_policy",
        num_envs=4,
        rollout_fragment_length=40,
        seed=args.seed,
    )
    scored = 0
    for _ in range(3 if args.smoke else 20):
        batch = worker.sample()  # a tv.MultiAgentBatch: the worker is a RolloutWorker[MultiAgentBatch]
        speaker, listener = batch.policy_batches["speaker_policy"], batch.policy_batches["listener_policy"]
        assert batch.env_steps() == 4 * 40 and batch.agent_steps() == len(speaker) + len(listener) == 2 * 4 * 40
        assert set(speaker["agent_index"]) == {0} and set(listener["agent_index"]) == {1}
        known = ~np.isnan(listener["expected_rewards"])
        np.testing.assert_array_equal(listener["rewards"][known], listener["expected_rewards"][known])
        scored += int(known.sum())
    metrics = worker.get_metrics()
    worker.stop()
    # An env episode's return sums both agents' rewards (RLlib's episode_reward): 2 * 24 scored guesses, each right
    # with probability 0.9 * 0.8 + 0.1 * 0.2 = 0.74 (speaker noise 0.1, listener noise 0.2).
    returns = metrics["episode_returns"]
    print(f"{len(returns)} env episodes, mean return {np.mean(returns):.1f} of 48")
    print(f"ok: {scored} listener rewards recomputed from both agents' data; per-policy batches hold their agent only")


if __name__ == "__main__":
    main()
