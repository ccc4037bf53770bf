"""Schedules of PPO's settings over a run: Stable-Baselines3's ``linear_schedule``, and constant.

A schedule maps the run's *progress remaining* to a setting's value. Progress
remaining is ``1 - env_steps_done / total_env_steps`` (SB3's
``_current_progress_remaining``), where ``env_steps_done`` counts the steps
sampled so far *including the batch about to be learned on*: SB3's on-policy
loop (``OnPolicyAlgorithm.learn``) updates the progress after
``collect_rollouts`` and before ``train()``, which sets the learning rate
(``_update_learning_rate``) and reads the clip range from it. So the first
update of a run already uses ``1 - batch / total``, and the last one (of a run
whose total is a multiple of the batch) 0.

- ``"constant"``: the setting's value, whatever the progress.
- ``"linear"``: ``progress_remaining * value``, from ``value`` at the start to
  zero at ``total_env_steps`` (SB3 zoo's ``linear_schedule`` / ``lin_<value>``).
  One difference: an update after ``total_env_steps`` (the last batch overshot
  a total that is not a multiple of the batch) gets 0, where SB3's negative
  progress gives a negative value (a negative learning rate).

Numpy- and torch-free: the checks of `trajview.train.config` use it.
"""

from __future__ import annotations

from typing import Any

from .._validate import int_at_least

__all__ = ["SCHEDULES", "SCHEDULED", "check_schedule", "progress_remaining", "scheduled_value"]

#: The schedules a setting can follow.
SCHEDULES = ("constant", "linear")

#: The settings that have a schedule: setting -> the name of its schedule's setting (PPO's config keys, and
#: `trajview.train.config.TrainConfig`'s fields).
SCHEDULED = {"lr": "lr_schedule", "clip_param": "clip_schedule", "entropy_coeff": "entropy_schedule"}


def check_schedule(name: str, value: Any) -> str:
    """``value``, if it is one of `SCHEDULES`; else ValueError naming ``name`` (the setting, as errors give it)."""
    if not isinstance(value, str) or value not in SCHEDULES:
        raise ValueError(f"{name} must be one of {', '.join(SCHEDULES)}, got {value!r}")
    return value


def progress_remaining(env_steps_done: int, total_env_steps: int) -> float:
    """SB3's progress remaining, ``1 - env_steps_done / total_env_steps``: 1 at the start, 0 at the total, below
    0 past it (`scheduled_value` reads that as 0)."""
    int_at_least("env_steps_done", env_steps_done, 0)
    int_at_least("total_env_steps", total_env_steps, 1)
    return 1.0 - float(env_steps_done) / float(total_env_steps)


def scheduled_value(schedule: str, value: float, progress: float) -> float:
    """The value of a setting whose initial value is ``value``, following ``schedule`` (`SCHEDULES`), at progress
    remaining ``progress`` (`progress_remaining`)."""
    if schedule == "constant":
        return float(value)
    if schedule == "linear":
        return max(float(progress), 0.0) * float(value)
    raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
