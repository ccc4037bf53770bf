"""Quick run of bench/act_latency.py (one short round): what the latency comparison rests on, not timings.

The runner's call and both baselines run for each model and batch size, the baselines' prebuilt inputs are
the ones the runner built (the policy gives the runner's action on them), and the table prints
(timings: ``python bench/act_latency.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import act_latency  # noqa: E402


@pytest.mark.parametrize("model", act_latency.MODELS)
@pytest.mark.parametrize("n", [1, act_latency.EPISODES])
def test_act_latency_workload(model, n):
    for interleave in (False, True):
        m = act_latency.measure(model, n, rounds=1, calls=5, interleave=interleave)
        assert set(m) == {"runner", "policy", "model_only"}
        assert all(len(v) == 5 and min(v) > 0 for v in m.values())


@pytest.mark.parametrize("n", [1, 4])
def test_the_env_stepper_steps_n_envs_and_restarts_them(n):
    """`--env-step`'s work between calls: ``n`` envs stepped once per call, ended ones restarted (never an error
    for stepping an ended env), over more steps than an episode of a random policy lasts."""
    step = act_latency.env_stepper(n)
    for _ in range(300):
        step()


def test_the_baselines_act_on_the_runners_inputs():
    case = act_latency.Case("lstm", act_latency.EPISODES, calls=10)
    runner_acts = case.runner.act_many(case.obs[5], case.keys, rewards=case.rewards[5], explore=False)
    assert runner_acts.shape == (act_latency.EPISODES,)
    inputs = case.inputs  # what the runner built for the 5th step of its 64 episodes
    assert inputs["state_in_0"].shape == (act_latency.EPISODES, 64) and np.abs(inputs["state_in_0"]).sum() > 0
    np.testing.assert_array_equal(case.policy_call(0), case.model_call(0).numpy())


def test_the_table_prints(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["act_latency.py", "--quick"])
    act_latency.main()
    out = capsys.readouterr().out
    assert out.count("| framestack |") == 2 and out.count("| lstm |") == 2
    assert "each variant in a block" in out
    monkeypatch.setattr("sys.argv", ["act_latency.py", "--quick", "--env-step", "--interleave"])
    act_latency.main()
    out = capsys.readouterr().out
    assert "an untimed env step before each call" in out and out.count("| lstm |") == 2
    assert "the variants call by call" in out


def test_the_split_times_every_part_and_restores_the_runner(capsys, monkeypatch):
    from trajview.rollout import runner as runner_mod

    lane_run, hot_init = runner_mod._Lane.run, runner_mod._Hot.__init__
    m = act_latency.split("framestack", 4, rounds=1, calls=5)
    assert runner_mod._Hot.__init__ is hot_init
    assert all(len(m[k]) == 5 and min(m[k]) > 0 for k in ("runner", "model_only", "step", "check", "lane",
                                                            "check_alone", "lane_alone"))
    # each part lies inside its call
    assert all(s + c + ln <= r for s, c, ln, r in zip(m["step"], m["check"], m["lane"], m["runner"]))
    assert runner_mod._Lane.run is lane_run
    monkeypatch.setattr("sys.argv", ["act_latency.py", "--quick", "--split"])
    act_latency.main()
    out = capsys.readouterr().out
    assert out.count("| framestack |") == 2 and out.count("| lstm |") == 2 and "lane over model" in out


def test_the_parts_time_the_runners_own_work(monkeypatch):
    from trajview.rollout import runner as runner_mod

    lane_run = runner_mod._Lane.run
    m = act_latency.parts("lstm", number=3, repeat=1)
    assert set(m) == {"check", "nan_scan", "nan_values", "drop", "step"} and min(m.values()) > 0
    assert m["nan_values"] == act_latency.EPISODES * (4 * 64 + 2)  # the LSTM's 4 states of 64, logp and value
    assert runner_mod._Lane.run is lane_run


def test_cold_times_each_operation_after_the_model_and_again(monkeypatch, capsys):
    m = act_latency.cold("framestack", reps=3)
    assert len(m) == 8 and all(a > 0 and b > 0 for a, b in m.values())
    monkeypatch.setattr("sys.argv", ["act_latency.py", "--quick", "--cold"])
    act_latency.main()
    out = capsys.readouterr().out
    assert out.count("| framestack |") == 8 and out.count("| lstm |") == 8 and "after the model" in out
