"""Layer 2, what acts and learns: `Policy` (views, compute actions, postprocessing, loss) and
`prune_views`, the pass that trims a policy's views to what it reads.

`TorchPolicy` needs torch and is imported on first use.
"""

from typing import Any

from .policy import ColumnSpec, Policy
from .pruning import NEVER_PRUNED, prune_views

__all__ = ["ColumnSpec", "NEVER_PRUNED", "Policy", "TorchPolicy", "prune_views"]


def __getattr__(name: str) -> Any:
    if name == "TorchPolicy":
        from .torch_policy import TorchPolicy

        return TorchPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
