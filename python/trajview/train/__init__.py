"""Layer 5, the application: the `trajview` command (`trajview train`, `trajview report`) and the trainers it runs.

The top layer: it may import every layer below, none imports it. Training
needs the ``train`` extra (torch, tqdm, matplotlib: ``pip install
'trajview[train]'``); `PPOTrainer` and `DQNTrainer` are imported on first
use, so the command's parser, `TrainConfig` and the metrics readers load
without torch. ``Trainer``, PPOTrainer's old name, still works and warns
(removal planned for 1.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import MODEL_PRESETS, TrainConfig
from .metrics import plot_learning_curve, read_metrics

if TYPE_CHECKING:
    from .dqn_trainer import DQNConfig, DQNTrainer
    from .trainer import PPOTrainer

__all__ = [
    "MODEL_PRESETS",
    "DQNConfig",
    "DQNTrainer",
    "PPOTrainer",
    "TrainConfig",
    "plot_learning_curve",
    "read_metrics",
]

#: Names that need torch: imported by `__getattr__` on first use.
_LAZY = {
    "PPOTrainer": "trajview.train.trainer",
    "DQNTrainer": "trajview.train.dqn_trainer",
    "DQNConfig": "trajview.train.dqn_trainer",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        from .._extras import missing

        try:
            module = importlib.import_module(_LAZY[name])
        except ImportError as e:
            raise missing(e, f"trajview.train.{name}", extra="train")  # chained to e
        return getattr(module, name)
    from .._compat import renamed

    return renamed(__name__, name)  # a deprecated name (warns), or AttributeError


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
