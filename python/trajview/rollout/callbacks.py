"""`Callbacks` (RLlib's hooks and argument names) and the `Episode` they see."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Callbacks", "DUMMY_AGENT_ID", "Episode"]


#: The agent id RLlib gives the one agent of a single-agent env (``last_*_for()``'s default).
DUMMY_AGENT_ID = "agent0"


class Episode:
    """What callbacks and ``postprocess_trajectory`` see of one running episode.

    Attributes follow RLlib's ``Episode``: ``episode_id``, ``env_id``,
    ``length`` (env steps so far), ``total_reward``, ``agent_rewards``
    (``{(agent_id, policy_id): return}``), ``user_data``, ``custom_metrics``
    (``{name: float}``, aggregated by ``get_metrics()`` as
    ``<name>_mean/_min/_max``), ``hist_data`` (``{name: [floats]}``) and
    ``media``; ``last_observation_for(agent_id)``, ``last_action_for``,
    ``last_reward_for``, ``last_info_for`` and ``policy_for`` as RLlib's. In a
    single-agent episode the agent id is ignored.
    """

    __slots__ = (
        "episode_id",
        "env_id",
        "length",
        "total_reward",
        "user_data",
        "custom_metrics",
        "hist_data",
        "media",
        "_last_obs",
        "_last_action",
        "_last_info",
        "_last_reward",
        "_multi",
        "_policies",
        "_agent_steps",
        "_agents",
    )

    def __init__(
        self, episode_id: int, env_id: int, first_obs: Any, first_info: Any, multi_agent: bool = False
    ) -> None:
        self.episode_id = int(episode_id)
        self.env_id = int(env_id)
        self.length = 0
        self.total_reward = 0.0
        self.user_data: dict = {}
        self.custom_metrics: dict = {}
        self.hist_data: dict = {}
        self.media: dict = {}
        self._multi = multi_agent
        self._policies: dict = {}  # agent id -> policy id (multi-agent)
        self._agent_steps = 0  # agent steps stored (multi-agent)
        #: Multi-agent: agent id -> its trajectory in this episode (which keeps its last values).
        self._agents: dict = {}
        self._last_obs: Any = first_obs if not multi_agent else None
        self._last_action: Any = None
        self._last_info: Any = first_info if not multi_agent else None
        self._last_reward: float | None = None

    def _last(self, agent_id: Any, what: str) -> Any:
        ae = self._agents.get(agent_id)
        return None if ae is None else getattr(ae, what)

    def last_observation_for(self, agent_id: Any = DUMMY_AGENT_ID) -> Any:
        return self._last(agent_id, "last_obs") if self._multi else self._last_obs

    def last_action_for(self, agent_id: Any = DUMMY_AGENT_ID) -> Any:
        return self._last(agent_id, "last_action") if self._multi else self._last_action

    def last_info_for(self, agent_id: Any = DUMMY_AGENT_ID) -> Any:
        return self._last(agent_id, "last_info") if self._multi else self._last_info

    def last_reward_for(self, agent_id: Any = DUMMY_AGENT_ID) -> float | None:
        return self._last(agent_id, "last_reward") if self._multi else self._last_reward

    @property
    def agent_rewards(self) -> dict:
        """``{(agent_id, policy_id): the agent's return so far}`` (RLlib's; single-agent: the default policy's)."""
        if not self._multi:
            return {(DUMMY_AGENT_ID, pid): self.total_reward for pid in self._policies.values()}
        return {(a, ae.policy_id): ae.total_reward for a, ae in self._agents.items()}

    def policy_for(self, agent_id: Any = DUMMY_AGENT_ID) -> Any:
        """The policy id ``agent_id`` is mapped to in this episode (None if it has not appeared yet)."""
        return self._policies.get(agent_id) if self._multi else next(iter(self._policies.values()), None)

    def get_agents(self) -> list:
        """The agents that have appeared in this episode so far."""
        return list(self._policies)

    def __repr__(self) -> str:
        return f"Episode(id={self.episode_id}, env_id={self.env_id}, length={self.length}, total_reward={self.total_reward})"


class Callbacks:
    """Hooks into a `RolloutWorker`'s sampling; every hook is a no-op here.

    The order within ``sample()``: ``on_episode_start`` when an episode begins
    (after its reset observation is stored), ``on_episode_step`` after each of
    its steps is stored, ``on_episode_end`` when it ends; then, at the end of
    the ``sample()`` call, ``on_postprocess_trajectory`` once per episode
    segment (after ``postprocess_trajectory``) and ``on_sample_end`` once.
    """

    def on_episode_start(self, *, worker: Any, base_env: Any, policies: dict, episode: Episode, env_index: int, **kwargs: Any) -> None:
        pass

    def on_episode_step(self, *, worker: Any, base_env: Any, policies: dict, episode: Episode, env_index: int, **kwargs: Any) -> None:
        pass

    def on_episode_end(self, *, worker: Any, base_env: Any, policies: dict, episode: Episode, env_index: int, **kwargs: Any) -> None:
        pass

    def on_postprocess_trajectory(
        self,
        *,
        worker: Any,
        episode: Episode,
        agent_id: Any,
        policy_id: str,
        policies: dict,
        postprocessed_batch: Any,
        original_batches: dict,
        **kwargs: Any,
    ) -> None:
        pass

    def on_sample_end(self, *, worker: Any, samples: Any, **kwargs: Any) -> None:
        pass
