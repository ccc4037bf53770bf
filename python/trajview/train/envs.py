"""The envs of a training run: any registered gymnasium id, after importing the modules that register it.

* ``env_modules`` are imported first (``"minigrid"``, ``"ale_py"``: each
  registers its ids when imported).
* ``drop_obs_keys`` leaves top-level keys out of a Dict observation
  (gymnasium's ``FilterObservation`` keeping the others), e.g. MiniGrid's
  ``mission`` text, which no model can read.

Errors are `EnvSetupError` with a one-line message that says what to change.

Settings read back from a file (a checkpoint's, on ``--resume``, ``trajview evaluate`` / ``export``,
`load_trained`) never import a module: `check_saved_modules` refuses a run whose env needs one that is not
imported yet (its ``env_modules``, or the module of a ``module:EnvId`` id, which gymnasium would import),
naming it and the ``--env-module`` that imports it. Nothing read from a file runs code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from .. import envs as _envs  # noqa: F401  (registers trajview's gymnasium ids)

__all__ = ["EnvSetupError", "check_saved_modules", "import_env_modules", "make_env"]


class EnvSetupError(ValueError):
    """The env of a run cannot be made as asked (unknown id, a module that fails to import, a bad key to drop)."""


def import_env_modules(modules: Sequence[str]) -> None:
    """Imports each module (which registers its gymnasium ids), or raises `EnvSetupError`."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (any failure of the import: the module's own code runs)
            raise EnvSetupError(f"--env-module {name}: import failed: {type(e).__name__}: {e}") from e


def check_saved_modules(env_id: str, env_modules: Sequence[str], source: str) -> None:
    """Refuses (`EnvSetupError`) settings read from ``source`` (a file) whose env would import a module not
    imported yet: each of ``env_modules``, and the module of a ``module:EnvId`` ``env_id`` (gymnasium imports
    it in ``gym.make``). Importing a module runs its code, and nothing read from a file may run code; a module
    this session imported already (``--env-module``, or the caller's own ``import``) imports nothing again."""
    named = [*env_modules, *([env_id.split(":", 1)[0]] if ":" in env_id else [])]
    missing = [m for m in dict.fromkeys(named) if m not in sys.modules]
    if missing:
        flags = " ".join(f"--env-module {m}" for m in missing)
        raise EnvSetupError(
            f"{source} names module(s) {missing} that the run's env ({env_id}) imports; trajview imports no module a "
            f"file names (importing runs its code): if you trust them, import them first ({flags}, or import them "
            f"in Python before load_trained)"
        )


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


def make_env(env_id: str, drop_obs_keys: Sequence[str] = (), render_mode: str | None = None,
             what: str = "--env") -> gym.Env:
    """``gym.make(env_id)`` (with ``render_mode`` when given), its observation without ``drop_obs_keys``;
    `EnvSetupError` for an unknown id, naming it as ``what`` (the option that gave it, or e.g. "the run's env")."""
    try:
        env = gym.make(env_id) if render_mode is None else gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as e:
        raise EnvSetupError(
            f"{what} {env_id}: {e} (a module that registers it can be imported first with --env-module MODULE, "
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
