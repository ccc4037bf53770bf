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
    assert last.startswith("ok: checks passed: 1200 batch rows"), r.stdout
    for view in ("obs", "new_obs", "prev_n_obs", "actions", "prev_actions", "rewards", "terminateds", "truncateds"):
        assert view in last


def test_collector_demo_rejects_bad_arguments():
    pytest.importorskip("tqdm")
    r = _run("collector_demo.py", "--num-envs", "0")
    assert r.returncode == 2 and "--num-envs: must be >= 1, got 0" in r.stderr


# Each example checks its own result (asserts) and ends with a line starting "ok:"; --smoke runs it in seconds.
SMOKE = {
    "collector_demo.py": ("tqdm",),
    "framestack_cartpole.py": (),
    "rllib_port.py": ("torch",),
    "lstm_flat.py": ("torch",),
    "multi_agent.py": (),
    "dqn_replay.py": ("torch",),
    "torchrl_interop.py": ("torch", "tensordict"),
    "workerset_ray.py": ("ray",),
    "serve_exported.py": ("torch",),
}


def test_every_example_has_a_smoke_test():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(SMOKE)


# The Ray example starts a Ray session: marked `ray`, like every test that does (see the marker in pyproject.toml).
@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.ray) if "ray" in SMOKE[s] else s for s in sorted(SMOKE)]
)
def test_example_smoke(script):
    for module in SMOKE[script]:
        pytest.importorskip(module)
    r = _run(script, "--smoke", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("ok:"), r.stdout


def test_workerset_example_with_processes():
    r = _run("workerset_ray.py", "--smoke", "--backend", "process")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("ok:"), r.stdout
