"""Layer 5, the application: the `trajview` command (`trajview train`, `trajview report`) and the `Trainer` it runs.

The top layer: it may import every layer below, none imports it. Training
needs the ``train`` extra (torch, tqdm, matplotlib: ``pip install
'trajview[train]'``); `Trainer` is imported on first use, so the command's
parser, `TrainConfig` and the metrics readers load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import MODEL_PRESETS, TrainConfig
from .metrics import plot_learning_curve, read_metrics

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = ["MODEL_PRESETS", "TrainConfig", "Trainer", "plot_learning_curve", "read_metrics"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":  # needs torch
        from .trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'trajview.train' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
