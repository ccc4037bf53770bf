"""What the tests of ``trajview train``'s run folders share: the small PPO settings (a finished run of them is
the ``small_ppo_run`` fixture, conftest.py), a run folder's copy, the environment of a CLI subprocess and a subprocess
that handles Ctrl-C as it would in a terminal."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

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


def popen_in_group(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, start_new_session=True, **kwargs)``: a process group of its own, as a terminal gives
    a command (Ctrl-C there is SIGINT to the whole group), with SIGINT handled in the child even where pytest runs
    with it ignored (a script's background job): an ignored signal stays ignored across exec, a handled one becomes
    the default. Without this, SIGINT to the group does nothing there, and a test waits out its timeout."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, start_new_session=True, **kwargs)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
