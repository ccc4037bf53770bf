"""The rules of PPO's settings (torch-free: `trajview train` checks its settings with them before torch loads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._validate import boolean, finite_number, int_at_least

__all__ = ["PPO_RULES", "check_ppo_settings"]

#: The rule of each PPO setting that has one: ``(kind, low, high, low excluded)``; kinds "number" (a finite real
#: number), "number_or_none" (or None: off), "int", "bool". `check_ppo_settings` applies them (`PPOPolicy`'s config,
#: `trajview train`'s settings).
PPO_RULES: dict[str, tuple[str, float | None, float | None, bool]] = {
    "lr": ("number", 0, None, True),
    "gamma": ("number", 0, 1, False),
    "lambda": ("number", 0, 1, False),
    "clip_param": ("number", 0, None, True),
    "vf_loss_coeff": ("number", 0, None, False),
    "entropy_coeff": ("number", 0, None, False),
    "grad_clip": ("number_or_none", 0, None, True),
    "num_sgd_iter": ("int", 1, None, False),
    "sgd_minibatch_size": ("int", 1, None, False),
    "explore": ("bool", None, None, False),
    "adam_fused": ("bool", None, None, False),
    "decoupled_clip": ("bool", None, None, False),
}


def check_ppo_settings(values: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """A `ValueError` naming the first of ``values`` (PPO settings by their config key) that breaks its rule
    (`PPO_RULES`), as ``name(key)`` says it (e.g. ``PPOPolicy config 'gamma'``, ``gamma (--gamma)``)."""
    for key, value in values.items():
        if key not in PPO_RULES:
            continue
        kind, lo, hi, lo_open = PPO_RULES[key]
        if kind == "bool":
            boolean(name(key), value)
        elif kind == "int":
            int_at_least(name(key), value, int(lo if lo is not None else 0))
        elif not (kind == "number_or_none" and value is None):
            finite_number(name(key), value, lo, hi, lo_open=lo_open)
