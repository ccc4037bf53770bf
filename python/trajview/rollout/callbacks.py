"""`Callbacks` (RLlib's hooks and argument names) and the `Episode` they see."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Callbacks", "Episode"]


class Episode:
    """What callbacks and ``postprocess_trajectory`` see of one running episode.

    Attributes follow RLlib's ``Episode``: ``episode_id``, ``env_id``,
    ``length`` (steps so far), ``total_reward``, ``user_data``,
    ``custom_metrics``, ``hist_data``, ``media``.
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
    )

    def __init__(self, episode_id: int, env_id: int, first_obs: np.ndarray | None, first_info: Any) -> None:
        self.episode_id = int(episode_id)
        self.env_id = int(env_id)
        self.length = 0
        self.total_reward = 0.0
        self.user_data: dict = {}
        self.custom_metrics: dict = {}
        self.hist_data: dict = {}
        self.media: dict = {}
        self._last_obs = first_obs
        self._last_action: Any = None
        self._last_info = first_info
        self._last_reward: float | None = None

    def last_observation_for(self, agent_id: Any = None) -> np.ndarray | None:
        return self._last_obs

    def last_action_for(self, agent_id: Any = None) -> Any:
        return self._last_action

    def last_info_for(self, agent_id: Any = None) -> Any:
        return self._last_info

    def last_reward_for(self, agent_id: Any = None) -> float | None:
        return self._last_reward

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
