"""Layer 4, learning on top of the library: algorithms that train policies on collected batches (PPO, DQN).

`postprocessing` (GAE) is numpy only, `schedules` (PPO's lr / clip / entropy
schedules) plain Python; `ppo`, `dqn` and `models` (the view-fed
torch models) need torch and are imported on first use
(``trajview.algorithms.models`` works after ``import trajview``). Imports only
the layers below it (here: views, policy), never `trajview.train`.
"""

from typing import TYPE_CHECKING, Any

from . import postprocessing, schedules

if TYPE_CHECKING:
    from . import dqn, models, ppo

__all__ = ["dqn", "models", "postprocessing", "ppo", "schedules"]

#: Submodules that need torch: imported by `__getattr__` on first use.
_LAZY = ("dqn", "models", "ppo")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
