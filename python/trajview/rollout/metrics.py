"""`EpisodeMetrics`: returns and lengths of the episodes a worker finished, until it is asked for them."""

from __future__ import annotations

__all__ = ["EpisodeMetrics"]


class EpisodeMetrics:
    """Finished episodes' returns and lengths, in the order they ended; `pop` hands them out and forgets them."""

    def __init__(self) -> None:
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def record(self, total_reward: float, length: int) -> None:
        self.returns.append(float(total_reward))
        self.lengths.append(int(length))

    def pop(self) -> dict:
        out = {"episode_returns": self.returns, "episode_lengths": self.lengths}
        self.returns, self.lengths = [], []
        return out
