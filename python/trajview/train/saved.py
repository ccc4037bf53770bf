"""A trained policy read back from a run (``trajview evaluate``, ``trajview export``): the run's settings and
weights from its checkpoint (`trajview.train.checkpoint`, nothing in it run), the policy rebuilt as the trainer
builds it, and the run's env made the way the trainer makes it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from .._io import MANIFEST
from ..policy.policy import Policy
from .checkpoint import FOLDER, LEGACY_FILE, read_checkpoint
from .config import RunConfig, TrainConfig
from .envs import check_saved_modules, make_env
from .runs import config_from

__all__ = ["SavedRunError", "TrainedPolicy", "checkpoint_folder", "load_trained"]


class SavedRunError(Exception):
    """A path that holds no run or checkpoint to read (one line, what to give instead)."""


def checkpoint_folder(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(the checkpoint folder, the run folder) of ``path``: a run folder (``trajview train --out``, holding
    ``checkpoint/``) or its checkpoint folder (holding ``manifest.json``). `SavedRunError` when it is neither."""
    p = Path(path)
    if not p.exists():
        raise SavedRunError(f"{p}: no such file or folder (give a run folder, what `trajview train --out` wrote, or "
                            f"its {FOLDER}/ folder)")
    if not p.is_dir():
        raise SavedRunError(f"{p} is a file: give a run folder (what `trajview train --out` wrote) or its {FOLDER}/ "
                            f"folder")
    if (p / MANIFEST).exists() or (p.name == FOLDER and not (p / FOLDER).exists()):
        return p, p.parent
    if (p / FOLDER).exists() or (p / LEGACY_FILE).exists():
        return p / FOLDER, p
    raise SavedRunError(f"{p} holds no checkpoint (no {FOLDER}/{MANIFEST}, no {MANIFEST}): give a run folder that "
                        f"`trajview train --out` wrote after its first iteration, or its {FOLDER}/ folder")


@dataclass
class TrainedPolicy:
    """What `load_trained` read: the algorithm, the run's settings, the policy with the checkpoint's weights."""

    algo: str
    config: RunConfig
    policy: Policy
    #: The checkpoint folder it was read from.
    checkpoint: Path
    #: The checkpoint's counters (iteration, env_steps, ...).
    counters: dict[str, Any]

    def make_env(self, render_mode: str | None = None) -> gym.Env:
        """The run's env as the trainer makes it (``drop_obs_keys`` applied), rendering with ``render_mode``."""
        return make_env(self.config.env, list(getattr(self.config, "drop_obs_keys", [])), render_mode,
                        what="the run's env")


def load_trained(path: str | os.PathLike[str]) -> TrainedPolicy:
    """The trained policy of a run folder or checkpoint folder (`checkpoint_folder`): its settings, the policy
    rebuilt for the run's env, the checkpoint's weights loaded. A module the run's env needs (its
    ``env_modules``, a ``module:EnvId`` id's module) must be imported before (`check_saved_modules`: nothing read
    from the file is imported).
    `SavedRunError` for a path without a checkpoint; `FileIntegrityError` naming the file for a damaged one;
    `EnvSetupError` when the run's env cannot be made here."""
    folder, run = checkpoint_folder(path)
    try:
        ck = read_checkpoint(folder)
    except FileNotFoundError:
        raise SavedRunError(f"{folder}: no committed checkpoint ({MANIFEST} missing: the run was stopped before its "
                            f"first checkpoint)") from None
    if ck.algo == "dqn":
        from .dqn_trainer import DQNConfig, dqn_policy, load_dqn_policy

        # Rebuilt on the CPU (so is the PPO policy below): a run trained on a GPU acts on any machine.
        dqn_cfg = config_from(DQNConfig, ck, str(run), None, {"device": "cpu"})
        check_saved_modules(dqn_cfg.env, [], str(ck.manifest_path))
        policy: Policy = dqn_policy(dqn_cfg, what="the run's env")
        load_dqn_policy(policy, ck)  # type: ignore[arg-type]
        config: RunConfig = dqn_cfg
    else:
        from .trainer import load_ppo_policy, ppo_policy

        ppo_cfg = config_from(TrainConfig, ck, str(run), None, {"device": "cpu"})
        check_saved_modules(ppo_cfg.env, ppo_cfg.env_modules, str(ck.manifest_path))
        ppo = ppo_policy(ppo_cfg, what="the run's env")
        load_ppo_policy(ppo, ck)
        policy, config = ppo, ppo_cfg
    return TrainedPolicy(ck.algo, config, policy, folder, ck.counters)
