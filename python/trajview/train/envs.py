"""The envs of a training run: any registered gymnasium id, after importing the modules that register it.

* ``env_modules`` are imported first (``"minigrid"``, ``"ale_py"``: each
  registers its ids when imported).
* ``drop_obs_keys`` leaves top-level keys out of a Dict observation
  (gymnasium's ``FilterObservation`` keeping the others), e.g. MiniGrid's
  ``mission`` text, which no model can read.

Errors are `EnvSetupError` with a one-line message that says what to change.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from .. import envs as _envs  # noqa: F401  (registers trajview's gymnasium ids)

__all__ = ["EnvSetupError", "import_env_modules", "make_env"]


class EnvSetupError(ValueError):
    """The env of a run cannot be made as asked (unknown id, a module that fails to import, a bad key to drop)."""


def import_env_modules(modules: Sequence[str]) -> None:
    """Imports each module (which registers its gymnasium ids), or raises `EnvSetupError`."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (any failure of the import: the module's own code runs)
            raise EnvSetupError(f"--env-module {name}: import failed: {type(e).__name__}: {e}") from e


def _drop_keys(env: gym.Env, keys: Sequence[str]) -> gym.Env:
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        raise EnvSetupError(f"--drop-obs-keys needs a Dict observation space, got {space!r}")
    missing = [k for k in keys if k not in space.spaces]
    if missing:
        raise EnvSetupError(f"--drop-obs-keys {' '.join(missing)}: not in the observation (keys: {list(space.spaces)})")
    keep = [k for k in space.spaces if k not in keys]
    if not keep:
        raise EnvSetupError("--drop-obs-keys would drop every key of the observation")
    return gym.wrappers.FilterObservation(env, keep)


def make_env(env_id: str, drop_obs_keys: Sequence[str] = (), render_mode: str | None = None) -> gym.Env:
    """``gym.make(env_id)`` (with ``render_mode`` when given), its observation without ``drop_obs_keys``;
    `EnvSetupError` for an unknown id."""
    try:
        env = gym.make(env_id) if render_mode is None else gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as e:
        raise EnvSetupError(
            f"--env {env_id}: {e} (a module that registers it can be imported first with --env-module MODULE, "
            "e.g. --env-module minigrid or --env-module ale_py)"
        ) from e
    if drop_obs_keys:
        try:
            env = _drop_keys(env, drop_obs_keys)
        except BaseException:
            env.close()
            raise
    return env


def env_creator(env_id: str, drop_obs_keys: Sequence[str] = ()) -> Any:
    """``env_creator(env_config)`` for `RolloutWorker`: `make_env` with these settings."""
    keys = list(drop_obs_keys)
    return lambda cfg: make_env(env_id, keys)
