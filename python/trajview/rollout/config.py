"""`RolloutConfig`: how a `RolloutWorker` samples (RLlib's settings), validated once and shared by its samplers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import lazy_row_bytes, positive_int

__all__ = ["BATCH_MODES", "COUNT_STEPS_BY", "MAX_WORKERS", "NAN_OUTPUTS", "RolloutConfig"]

BATCH_MODES = ("truncate_episodes", "complete_episodes")
COUNT_STEPS_BY = ("env_steps", "agent_steps")
NAN_OUTPUTS = ("raise", "allow")
#: worker_index < MAX_WORKERS (eps_ids keep 23 bits for it, see rollout.plan.eps_id_start).
MAX_WORKERS = 1 << 23


@dataclass(frozen=True)
class RolloutConfig:
    """The sampling settings of one worker (see `RolloutWorker` for each one's meaning)."""

    batch_mode: str = "truncate_episodes"
    rollout_fragment_length: int = 200
    count_steps_by: str = "env_steps"
    horizon: int | None = None
    soft_horizon: bool = False
    no_done_at_end: bool = False
    seed: int | None = None
    worker_index: int = 0
    #: Row bytes from which training views are lazy (0: never); see `Collector`.
    lazy_min_row_bytes: int = 1024
    restart_failed_sub_environments: bool = False
    #: What NaN in a policy's float outputs gets: "raise" (a ValueError naming the column) or "allow".
    nan_outputs: str = "raise"
    #: Finished episodes whose return and length `get_metrics` keeps (the newest ones).
    metrics_window: int = 1000
    #: Where this worker's episode counter starts (`WorkerSet` sets it for a replacement worker).
    eps_id_offset: int = 0

    @classmethod
    def validated(
        cls,
        *,
        batch_mode: Any,
        rollout_fragment_length: Any,
        count_steps_by: Any,
        horizon: Any,
        soft_horizon: Any,
        no_done_at_end: Any,
        seed: Any,
        worker_index: Any,
        lazy_views: Any,
        restart_failed_sub_environments: Any = False,
        nan_outputs: Any = "raise",
        metrics_window: Any = 1000,
        eps_id_offset: Any = 0,
    ) -> RolloutConfig:
        """Checks every setting (a ValueError names the setting, expected and got) and returns the config."""
        if batch_mode not in BATCH_MODES:
            raise ValueError(f"batch_mode must be one of {BATCH_MODES}, got {batch_mode!r}")
        if count_steps_by not in COUNT_STEPS_BY:
            raise ValueError(f"count_steps_by must be one of {COUNT_STEPS_BY}, got {count_steps_by!r}")
        if horizon is not None:
            horizon = positive_int("horizon", horizon)
        if soft_horizon and horizon is None:
            raise ValueError("soft_horizon=True needs a horizon, got horizon=None")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        if isinstance(worker_index, bool) or not isinstance(worker_index, (int, np.integer)):
            raise ValueError(f"worker_index must be an int, got {worker_index!r}")
        if not 0 <= worker_index < MAX_WORKERS:
            raise ValueError(f"worker_index must be in [0, {MAX_WORKERS}), got {worker_index}")
        if nan_outputs not in NAN_OUTPUTS:
            raise ValueError(f"nan_outputs must be one of {NAN_OUTPUTS}, got {nan_outputs!r}")
        if not isinstance(restart_failed_sub_environments, (bool, np.bool_)):
            raise ValueError(f"restart_failed_sub_environments must be a bool, got {restart_failed_sub_environments!r}")
        return cls(
            batch_mode=batch_mode,
            rollout_fragment_length=positive_int("rollout_fragment_length", rollout_fragment_length),
            count_steps_by=count_steps_by,
            horizon=horizon,
            soft_horizon=bool(soft_horizon),
            no_done_at_end=bool(no_done_at_end),
            seed=None if seed is None else int(seed),
            worker_index=int(worker_index),
            lazy_min_row_bytes=lazy_row_bytes(lazy_views),
            restart_failed_sub_environments=bool(restart_failed_sub_environments),
            nan_outputs=nan_outputs,
            metrics_window=positive_int("metrics_window", metrics_window),
            eps_id_offset=_eps_id_offset(eps_id_offset),
        )

    @property
    def complete_episodes(self) -> bool:
        return self.batch_mode == "complete_episodes"


def _eps_id_offset(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**32:
        raise ValueError(f"eps_id_offset must be an int in [0, 2**32), got {value!r}")
    return int(value)
