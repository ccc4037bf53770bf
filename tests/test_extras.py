"""One-line install hints for every optional dependency (trajview._extras, the one place they come from)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trajview
from trajview._extras import EXTRA_OF, extra_hint, install_hint, missing, require

ROOT = Path(__file__).resolve().parent.parent


def _run_without(modules, code):
    """``code`` in a fresh interpreter where importing any of ``modules`` fails (as when not installed)."""
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    env_path = str(Path(trajview.__file__).parent.parent)
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r}); {block}; {code}"],
                       capture_output=True, text=True, timeout=120)
    return r


def test_every_extra_named_exists_in_pyproject_and_brings_its_module():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in EXTRA_OF.items():
        assert extra in extras, (module, extra)
        names = {req.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip().lower() for req in extras[extra]}
        assert module.lower() in names, (module, extra, names)
    assert "pygame" in {r.split(">")[0] for r in extras["multiagent"]}  # PettingZoo's classic games import it


def test_ppo_policy_without_torch_says_what_to_install():
    r = _run_without(["torch"], "import trajview as tv; print('imported'); tv.PPOPolicy")
    assert r.stdout.strip() == "imported"  # the core package needs no torch
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("ModuleNotFoundError: tv.PPOPolicy needs torch, which is not installed: pip install "
                    "'trajview[torch]' (torch's CPU build: pip install torch==2.13.0)"), r.stderr
    r = _run_without(["torch"], "import trajview.train as t; t.PPOTrainer")
    assert r.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: trajview.train.PPOTrainer needs torch, which is not installed: pip install "
        "'trajview[train]' (torch's CPU build first: pip install torch==2.13.0)"), r.stderr


@pytest.mark.parametrize("module,extra", sorted(EXTRA_OF.items()))
def test_require_gives_the_extras_one_line_hint(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModuleNotFoundError) as info:
        require(module, "the thing")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"the thing needs {module}, which is not installed: ")
    assert msg.endswith(install_hint(module)) and f"pip install 'trajview[{extra}]'" in msg
    assert info.value.name == module


def test_other_import_errors_pass_through():
    e = ModuleNotFoundError("No module named 'somethingelse'", name="somethingelse")
    assert missing(e, "x") is e
    assert install_hint("somethingelse") == "pip install somethingelse"
    assert extra_hint("ray") == "pip install 'trajview[ray]'"


def test_the_library_paths_name_their_extra(monkeypatch):
    import numpy as np

    import trajview as tv

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ModuleNotFoundError, match=r"WorkerSet\(backend='ray'\) needs ray, which is not installed: "
                                                  r"pip install 'trajview\[ray\]'"):
        tv.WorkerSet("CartPole-v1", tv.Policy, num_workers=1, backend="ray")
    monkeypatch.setitem(sys.modules, "tensordict", None)
    with pytest.raises(ModuleNotFoundError,
                       match=r"to_tensordict needs tensordict.*pip install 'trajview\[tensordict\]'"):
        tv.SampleBatch({"obs": np.zeros((2, 1)), "eps_id": np.zeros(2, int), "t": np.arange(2)}).to_tensordict()
    monkeypatch.setitem(sys.modules, "tqdm", None)
    from trajview.train.loop import run_loop

    with pytest.raises(ModuleNotFoundError, match=r"progress bar needs tqdm.*pip install 'trajview\[train\]'"):
        run_loop(None, desc="", log_line=str, progress=False, on_iteration=None,  # type: ignore[arg-type]
                 close=lambda: None)
