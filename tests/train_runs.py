"""What the tests of ``trajview train``'s run folders share: the small PPO settings (a finished run of them is
the ``small_ppo_run`` fixture, conftest.py), a run folder's copy and the environment of a CLI subprocess."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import trajview

#: A PPO run of a few hundred env steps: an MLP on RepeatPrevious, 100-step batches, one SGD pass.
SMALL = ["--env", "trajview/RepeatPrevious-v0", "--model", "mlp", "--envs-per-worker", "2", "--train-batch-size",
         "100", "--minibatch-size", "50", "--num-sgd-iter", "1", "--no-progress"]


def cli_env() -> dict:
    """The environment of a CLI subprocess: it imports the trajview these tests import (the installed wheel, or the
    tree that ``PYTHONPATH`` names), never the source tree."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(trajview.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}


def copy_run(run: Path, tmp_path: Path) -> Path:
    """A copy of the run folder ``run`` in ``tmp_path``."""
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst
