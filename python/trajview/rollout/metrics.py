"""`EpisodeMetrics`: what a worker's finished episodes were, until it is asked for them."""

from __future__ import annotations

from collections import deque

__all__ = ["EpisodeMetrics"]


class EpisodeMetrics:
    """Finished episodes' returns and lengths (the newest ``window`` of them), and fault counters.

    `pop` hands them out and starts over. If nobody asks, the oldest episodes
    are dropped once ``window`` are kept (memory stays bounded); how many were
    dropped is in ``episodes_dropped``.
    """

    def __init__(self, window: int = 1000) -> None:
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.episodes_dropped = 0
        #: Episodes cut by a fault (an env, the policy, a callback or bad data raised mid-episode).
        self.num_faulty_episodes = 0
        #: Envs recreated after they raised (restart_failed_sub_environments=True).
        self.num_env_restarts = 0

    def record(self, total_reward: float, length: int) -> None:
        if len(self.returns) == self.window:
            self.episodes_dropped += 1
        self.returns.append(float(total_reward))
        self.lengths.append(int(length))

    def pop(self) -> dict:
        out = {
            "episode_returns": list(self.returns),
            "episode_lengths": list(self.lengths),
            "episodes_dropped": self.episodes_dropped,
            "num_faulty_episodes": self.num_faulty_episodes,
            "num_env_restarts": self.num_env_restarts,
        }
        self.returns.clear()
        self.lengths.clear()
        self.episodes_dropped = self.num_faulty_episodes = self.num_env_restarts = 0
        return out
