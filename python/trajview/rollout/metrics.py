"""`EpisodeMetrics`: what a worker's finished episodes were, until it is asked for them; `merge_worker_metrics`:
many workers' metrics as one (`WorkerSet.get_metrics`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

__all__ = ["EpisodeMetrics", "merge_worker_metrics", "summarize_custom_metrics"]


def summarize_custom_metrics(per_episode: list[dict]) -> dict[str, float]:
    """RLlib's aggregation of ``episode.custom_metrics``: ``<name>_mean``, ``_min`` and ``_max`` over the episodes
    that set ``name`` (NaN values left out; all NaN or none: NaN)."""
    values: dict[str, list[float]] = {}
    for cm in per_episode:
        for k, v in cm.items():
            values.setdefault(k, []).append(float(v))
    out: dict[str, float] = {}
    for k, vs in values.items():
        finite = [v for v in vs if not math.isnan(v)]
        out[k + "_mean"] = sum(finite) / len(finite) if finite else math.nan
        out[k + "_min"] = min(finite) if finite else math.nan
        out[k + "_max"] = max(finite) if finite else math.nan
    return out


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
        #: Per finished episode: its custom_metrics, hist_data and media (set by callbacks).
        self.custom: deque[dict] = deque(maxlen=window)
        self.hist: deque[dict] = deque(maxlen=window)
        self.media: deque[dict] = deque(maxlen=window)
        self.episodes_dropped = 0
        #: Episodes cut by a fault (an env, the policy, a callback or bad data raised mid-episode).
        self.num_faulty_episodes = 0
        #: Envs recreated after they raised (restart_failed_sub_environments=True).
        self.num_env_restarts = 0

    def record(self, total_reward: float, length: int, episode: Any = None) -> None:
        if len(self.returns) == self.window:
            self.episodes_dropped += 1
        self.returns.append(float(total_reward))
        self.lengths.append(int(length))
        # The episode's own dicts: on_episode_end (called after this) fills them.
        self.custom.append(episode.custom_metrics if episode is not None else {})
        self.hist.append(episode.hist_data if episode is not None else {})
        self.media.append(episode.media if episode is not None else {})

    def pop(self) -> dict:
        out = {
            "episode_returns": list(self.returns),
            "episode_lengths": list(self.lengths),
            "episodes_dropped": self.episodes_dropped,
            "num_faulty_episodes": self.num_faulty_episodes,
            "num_env_restarts": self.num_env_restarts,
        }
        per_episode = [dict(c) for c in self.custom]
        out["custom_metrics"] = summarize_custom_metrics(per_episode)
        out["episode_custom_metrics"] = per_episode  # per episode, for a WorkerSet to aggregate across workers
        hist: dict[str, list] = {"episode_reward": list(self.returns), "episode_lengths": list(self.lengths)}
        for h in self.hist:
            for k, v in h.items():
                hist.setdefault(k, []).extend(v if isinstance(v, (list, tuple)) else [v])
        out["hist_stats"] = hist
        media: dict[str, list] = {}
        for m in self.media:
            for k, v in m.items():
                media.setdefault(k, []).append(v)
        out["episode_media"] = media
        self.returns.clear()
        self.lengths.clear()
        self.custom.clear()
        self.hist.clear()
        self.media.clear()
        self.episodes_dropped = self.num_faulty_episodes = self.num_env_restarts = 0
        return out


def merge_worker_metrics(per_worker: Iterable[dict | None]) -> dict[str, Any]:
    """The workers' metrics (each `RolloutWorker.get_metrics`' with a served worker's additions; None: a worker
    that failed, left out) as one: lists joined in worker order, numbers summed, ``hist_stats`` /
    ``episode_media`` joined per name, ``custom_metrics`` aggregated anew over every worker's episodes."""
    out: dict[str, Any] = {
        "episode_returns": [],
        "episode_lengths": [],
        "episodes_dropped": 0,
        "num_faulty_episodes": 0,
        "num_env_restarts": 0,
    }
    hist: dict[str, list] = {}
    media: dict[str, list] = {}
    for m in per_worker:
        if m is None:
            continue
        for k, v in m.items():
            if k == "custom_metrics":
                continue  # aggregated below from every worker's episodes
            if k == "hist_stats" or k == "episode_media":
                for name, vals in v.items():
                    (hist if k == "hist_stats" else media).setdefault(name, []).extend(vals)
            elif isinstance(v, list):
                out.setdefault(k, []).extend(v)
            else:
                out[k] = out.get(k, 0) + v
    out["custom_metrics"] = summarize_custom_metrics(out.get("episode_custom_metrics", []))
    out["hist_stats"] = hist
    out["episode_media"] = media
    return out
