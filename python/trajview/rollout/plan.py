"""From a policy to the `Collector` that stores what it reads: columns, views, initial rows, eps-id ranges."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..collect.collector import BOUNDARY_COLUMNS, Collector
from ..policy.policy import Policy
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import ViewRequirement
from .config import RolloutConfig

__all__ = ["PolicyColumns", "make_collector", "view_snapshot"]


def view_snapshot(vrs: dict[str, ViewRequirement]) -> dict:
    """What a collector was built from: compared before each sample to see whether the views changed."""
    return {
        k: (
            vr.data_col,
            tuple(vr.shift_arr.tolist()),
            vr.adds_axis,
            vr.padding,
            vr.batch_repeat_value,
            vr.used_for_compute_actions,
            vr.used_for_training,
        )
        for k, vr in vrs.items()
    }


def make_collector(
    policy: Policy, num_slots: int, config: RolloutConfig, rebuild: int, policy_index: int = 0
) -> Collector:
    """Runs the policy's view-pruning pass (once) and builds a collector of ``num_slots`` slots for its views.

    ``rebuild`` counts the stores this worker built before (views can change
    between samples); with ``worker_index`` and ``policy_index`` it picks an
    eps-id range no other store of any worker uses (2**24 trajectories each).
    """
    policy._initialize_view_requirements()
    specs = policy.column_specs()
    views = {}
    for key, vr in policy.view_requirements.items():
        col = vr.column(key)
        if col == SampleBatch.INFOS:
            continue
        if col in specs or col in BOUNDARY_COLUMNS:
            views[key] = vr
        elif col not in policy.postprocessed_columns:
            raise ValueError(
                f"view {key!r} reads column {col!r}, which no one produces; known columns: "
                f"{sorted(specs) + list(BOUNDARY_COLUMNS)} (plus what postprocessing adds: "
                f"{sorted(policy.postprocessed_columns)})"
            )
    init = {f"state_out_{i}": np.asarray(s) for i, s in enumerate(policy.get_initial_state())}
    return Collector(
        num_slots,
        specs,
        views,
        initial_rows=init,
        chunk_rows=config.rollout_fragment_length,
        lazy_views=config.lazy_min_row_bytes,
        eps_id_start=config.worker_index << 40 | (rebuild & 0xFF) << 32 | policy_index << 24,
    )


class PolicyColumns:
    """The columns a policy itself adds to each step (``state_out_i``, extra fetches), and whether it trains on infos."""

    def __init__(self, policy: Policy) -> None:
        self.policy_name = type(policy).__name__
        self.state_keys = [f"state_out_{i}" for i in range(len(policy.get_initial_state()))]
        self.extra_keys = list(policy.extra_fetch_columns)
        infos_vr = policy.view_requirements.get(SampleBatch.INFOS)
        self.need_infos = infos_vr is not None and infos_vr.used_for_training

    def __bool__(self) -> bool:
        return bool(self.state_keys or self.extra_keys)

    def add_to(self, data: dict, state_outs: Any, extra: Any) -> None:
        """Puts ``state_outs`` and ``extra`` (what compute actions returned) into a step's ``data``, checked."""
        if len(state_outs) != len(self.state_keys):
            raise ValueError(
                f"compute_actions_from_input_dict returned {len(state_outs)} state_outs, expected "
                f"{len(self.state_keys)} (len(get_initial_state()))"
            )
        for k, s in zip(self.state_keys, state_outs):
            data[k] = s
        for k in self.extra_keys:
            if k not in extra:
                raise ValueError(
                    f"column {k!r}: compute_actions_from_input_dict returned it in extra_fetches during the "
                    f"view-pruning pass, but not now; got extra fetches {sorted(extra)}"
                )
            data[k] = extra[k]
        if len(extra) != len(self.extra_keys):
            unknown = sorted(set(extra) - set(self.extra_keys))
            raise ValueError(
                f"compute_actions_from_input_dict returned extra fetches {unknown} that it did not return in the "
                f"view-pruning pass; known: {sorted(self.extra_keys)}"
            )
