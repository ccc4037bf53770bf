import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="module")
def small_ppo_run(tmp_path_factory):
    """A finished 2-iteration PPO run of `train_runs.SMALL` (its optimizer has moments), one per test module:
    copied (`train_runs.copy_run`) by the tests that change it."""
    pytest.importorskip("torch")
    from train_runs import SMALL

    from trajview.train.cli import main

    out = tmp_path_factory.mktemp("ppo") / "run"
    assert main(["train", "--timesteps", "200", "--out", str(out), *SMALL]) == 0
    return out
