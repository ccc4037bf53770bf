"""Layer 2, what acts and learns: `Policy` (views, compute actions, postprocessing, loss) and its view-pruning pass.

`TorchPolicy` needs torch and is imported on first use.
"""

from typing import Any

from .policy import NEVER_PRUNED, ColumnSpec, Policy

__all__ = ["ColumnSpec", "NEVER_PRUNED", "Policy", "TorchPolicy"]


def __getattr__(name: str) -> Any:
    if name == "TorchPolicy":
        from .torch_policy import TorchPolicy

        return TorchPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
