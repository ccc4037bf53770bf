"""examples/ run as users run them: ``python examples/NAME.py``, in a subprocess, with small arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import trajview

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # The example imports the trajview these tests import (a source tree on PYTHONPATH or an installed wheel).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(trajview.__file__).parent.parent), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_collector_demo_checks_every_view_against_the_env():
    pytest.importorskip("tqdm")
    r = _run("collector_demo.py", "--steps", "1200", "--num-envs", "4", "--fragment", "50", "--no-progress")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("checks passed: 1200 batch rows"), r.stdout
    for view in ("obs", "new_obs", "prev_n_obs", "actions", "prev_actions", "rewards", "terminateds", "truncateds"):
        assert view in last


def test_collector_demo_rejects_bad_arguments():
    pytest.importorskip("tqdm")
    r = _run("collector_demo.py", "--num-envs", "0")
    assert r.returncode == 2 and "--num-envs: must be >= 1, got 0" in r.stderr
