"""`MultiAgentBatch`: one `SampleBatch` per policy, plus the env steps they cover (see docs/contract.md, Views)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .sample_batch import SampleBatch

__all__ = ["MultiAgentBatch"]


class MultiAgentBatch:
    """One `SampleBatch` per policy, plus the number of env steps they cover.

    ``count`` and ``len(batch)`` are ``env_steps``; ``agent_steps()`` sums the
    rows of the policy batches.
    """

    __slots__ = ("policy_batches", "count")

    def __init__(self, policy_batches: Mapping[str, SampleBatch | Mapping[str, Any]], env_steps: int) -> None:
        if not isinstance(policy_batches, Mapping):
            raise TypeError(
                f"MultiAgentBatch policy_batches must be a dict policy_id -> SampleBatch, "
                f"got {type(policy_batches).__name__}"
            )
        if isinstance(env_steps, (bool, np.bool_)) or not isinstance(env_steps, (int, np.integer)):
            raise TypeError(f"MultiAgentBatch env_steps must be an int, got {env_steps!r}")
        if env_steps < 0:
            raise ValueError(f"MultiAgentBatch env_steps must be >= 0, got {env_steps}")
        batches: dict[str, SampleBatch] = {}
        for pid, b in policy_batches.items():
            if isinstance(b, SampleBatch):
                batches[pid] = b
            elif isinstance(b, Mapping):
                batches[pid] = SampleBatch(b)
            else:
                raise TypeError(
                    f"MultiAgentBatch policy_batches[{pid!r}] must be a SampleBatch, got {type(b).__name__}"
                )
        self.policy_batches = batches
        self.count = int(env_steps)

    def env_steps(self) -> int:
        """Env steps covered by this batch."""
        return self.count

    def agent_steps(self) -> int:
        """Sum of the rows of all policy batches."""
        return sum(b.count for b in self.policy_batches.values())

    def __len__(self) -> int:
        return self.count

    def copy(self, shallow: bool = False) -> MultiAgentBatch:
        """A new batch whose policy batches are `SampleBatch.copy` ``(shallow)`` copies."""
        return MultiAgentBatch({pid: b.copy(shallow) for pid, b in self.policy_batches.items()}, self.count)

    def __repr__(self) -> str:
        inner = ", ".join(f"{pid!r}: {b!r}" for pid, b in self.policy_batches.items())
        return f"MultiAgentBatch(env_steps={self.count}, {{{inner}}})"
