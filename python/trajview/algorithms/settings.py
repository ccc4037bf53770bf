"""The rules of the algorithms' settings, one table per algorithm (torch-free: `trajview train` checks its settings
with them before torch loads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._validate import boolean, finite_number, int_at_least

__all__ = ["CHOICES", "DQN_RULES", "PPO_RULES", "check_dqn_settings", "check_ppo_settings", "check_settings"]

#: A setting's rule: ``(kind, low, high, low excluded)``; kinds "number" (a finite real number), "number_or_none" (or
#: None: off), "int", "bool", "choice" (one of `CHOICES`' values for its key).
Rule = tuple[str, float | None, float | None, bool]

#: The rule of each PPO setting that has one: `check_ppo_settings` applies them (`PPOPolicy`'s config, `trajview
#: train`'s settings).
PPO_RULES: dict[str, Rule] = {
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
    "learner": ("choice", None, None, False),
}

#: The values a "choice" setting takes.
CHOICES: dict[str, tuple[str, ...]] = {
    #: Who takes the gradient steps: "numpy" (`trajview.algorithms.mlp_learner` for PPO's MLP models,
    #: `trajview.algorithms.dqn_learner` for DQN), "torch", or "auto" (numpy where it is supported).
    "learner": ("auto", "numpy", "torch"),
}


#: The rule of each DQN setting that has one (`DQNPolicy`'s config; `check_dqn_settings`).
DQN_RULES: dict[str, Rule] = {
    "num_frames": ("int", 2, None, False),
    "hidden": ("int", 1, None, False),
    "dueling": ("bool", None, None, False),
    "double_q": ("bool", None, None, False),
    "lr": ("number", 0, None, True),
    "gamma": ("number", 0, 1, False),
    "grad_clip": ("number", 0, None, True),
    "target_update_interval": ("int", 1, None, False),
    "seed": ("int", 0, None, False),
    "adam_fused": ("bool", None, None, False),
    "learner": ("choice", None, None, False),
}


def check_settings(rules: Mapping[str, Rule], values: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """A `ValueError` naming the first of ``values`` (settings by their config key) that breaks its rule in
    ``rules``, as ``name(key)`` says it (e.g. ``PPOPolicy config 'gamma'``, ``gamma (--gamma)``)."""
    for key, value in values.items():
        if key not in rules:
            continue
        kind, lo, hi, lo_open = rules[key]
        if kind == "bool":
            boolean(name(key), value)
        elif kind == "choice":
            if not isinstance(value, str) or value not in CHOICES[key]:
                raise ValueError(f"{name(key)} must be one of {list(CHOICES[key])}, got {value!r}")
        elif kind == "int":
            int_at_least(name(key), value, int(lo if lo is not None else 0))
        elif not (kind == "number_or_none" and value is None):
            finite_number(name(key), value, lo, hi, lo_open=lo_open)


def check_ppo_settings(values: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """`check_settings` by `PPO_RULES`."""
    check_settings(PPO_RULES, values, name)


def check_dqn_settings(values: Mapping[str, Any], name: Callable[[str], str]) -> None:
    """`check_settings` by `DQN_RULES`."""
    check_settings(DQN_RULES, values, name)
