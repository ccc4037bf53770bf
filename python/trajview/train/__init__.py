"""Layer 5, the application: the `trajview` command (`trajview train`, `trajview report`) and its `Trainer`.

Needs torch, tqdm and matplotlib.
"""

from .trainer import MODEL_PRESETS, TrainConfig, Trainer, plot_learning_curve, read_metrics

__all__ = ["MODEL_PRESETS", "TrainConfig", "Trainer", "plot_learning_curve", "read_metrics"]
