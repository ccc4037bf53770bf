"""PPO's schedules (--lr-schedule, --clip-schedule, --entropy-schedule) against a tiny reference of Stable-Baselines3's
on-policy loop with the zoo's ``linear_schedule``: the values each update uses, in the policy, in the trainer and
across --resume."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from trajview.algorithms.ppo import PPOPolicy  # noqa: E402
from trajview.algorithms.schedules import progress_remaining, scheduled_value  # noqa: E402
from trajview.train import PPOTrainer, TrainConfig  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.metrics import read_metrics  # noqa: E402


# -- the reference --------------------------------------------------------------------------------------------------


def sb3_linear_schedule(initial: float):
    """rl-baselines3-zoo's ``linear_schedule`` (what ``lin_<initial>`` means): progress_remaining * initial."""
    return lambda progress_remaining: progress_remaining * initial


def sb3_update_values(schedule, total_timesteps: int, batch: int) -> list[float]:
    """The value each update of SB3's ``OnPolicyAlgorithm.learn`` reads from ``schedule``: the loop collects a batch
    (num_timesteps += batch), then ``_update_current_progress_remaining(num_timesteps, total_timesteps)``, then
    ``train()`` (which sets the lr and reads the clip range at that progress)."""
    values, num_timesteps = [], 0
    while num_timesteps < total_timesteps:
        num_timesteps += batch
        values.append(schedule(1.0 - float(num_timesteps) / float(total_timesteps)))
    return values


# -- the schedule ---------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(initial=st.floats(1e-6, 10.0), batch=st.integers(1, 500), updates=st.integers(1, 50),
       schedule=st.sampled_from(["linear", "constant"]))
def test_each_update_value_is_sb3s(initial, batch, updates, schedule):
    """A run of ``updates`` batches whose total is a multiple of the batch: every update's value is SB3's."""
    total = batch * updates
    ref = sb3_linear_schedule(initial) if schedule == "linear" else (lambda _p: initial)
    want = sb3_update_values(ref, total, batch)
    got = [scheduled_value(schedule, initial, progress_remaining(batch * (k + 1), total)) for k in range(updates)]
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    if schedule == "linear":  # from (1 - 1/updates) of the value down to 0 in the last update (SB3's too)
        assert all(a > b >= 0 for a, b in zip(got, got[1:])) and got[-1] == 0.0
        assert got[0] == pytest.approx(initial * (1 - 1 / updates))


@settings(max_examples=100, deadline=None)
@given(initial=st.floats(1e-6, 10.0), batch=st.integers(2, 500), total=st.integers(1, 5000))
def test_an_update_past_the_total_gets_zero_where_sb3s_goes_negative(initial, batch, total):
    want = sb3_update_values(sb3_linear_schedule(initial), total, batch)
    steps = [batch * (k + 1) for k in range(len(want))]
    got = [scheduled_value("linear", initial, progress_remaining(s, total)) for s in steps]
    # The same up to the total; past it (the last batch overshot a total that is not a multiple) 0, not SB3's < 0.
    assert got == pytest.approx([max(w, 0.0) for w in want], rel=1e-12, abs=1e-15)


def test_bad_schedules_and_progress_are_errors_naming_the_setting():
    with pytest.raises(ValueError, match=r"lr_schedule \(--lr-schedule\) must be one of constant, linear, "
                                         r"got 'cosine'"):
        TrainConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match=r"clip_schedule \(--clip-schedule\) must be one of constant, linear, got 1"):
        TrainConfig(clip_schedule=1)
    with pytest.raises(ValueError, match=r"entropy_schedule \(--entropy-schedule\) must be one of"):
        TrainConfig(entropy_schedule="Linear")
    env = gym.make("trajview/StatelessCartPole-v1")
    with pytest.raises(ValueError, match="PPOPolicy config 'lr_schedule' must be one of constant, linear"):
        PPOPolicy(env.observation_space, env.action_space, {"model": "mlp", "lr_schedule": "exp"})
    with pytest.raises(ValueError, match="total_env_steps must be an int >= 1, got 0"):
        progress_remaining(0, 0)
    with pytest.raises(ValueError, match="schedule must be one of constant, linear, got 'step'"):
        scheduled_value("step", 1.0, 0.5)


# -- the policy uses the scheduled values ---------------------------------------------------------------------------


def _policy_and_batch(**config):
    env = gym.make("trajview/StatelessCartPole-v1")
    p = PPOPolicy(env.observation_space, env.action_space,
                  {"model": "mlp", "vf_loss_coeff": 0.0, "num_sgd_iter": 1, "sgd_minibatch_size": 64, **config})
    torch.manual_seed(0)
    obs = torch.randn(64, 2)
    with torch.no_grad():
        logits, _ = p.model.forward_train({"obs": obs})
    actions = torch.randint(0, 2, (64,))
    logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    batch = {"obs": obs, "actions": actions, "advantages": torch.randn(64), "value_targets": torch.zeros(64),
             "action_logp": logp + 0.3 * torch.randn(64)}  # ratios spread around 1
    return p, batch, logp


@pytest.mark.parametrize("progress", [1.0, 0.6, 0.25])
def test_the_loss_clips_at_the_scheduled_clip_and_weighs_the_entropy_by_the_scheduled_coefficient(progress):
    p, batch, logp = _policy_and_batch(clip_param=0.2, clip_schedule="linear", entropy_coeff=0.05,
                                       entropy_schedule="linear")
    p.progress_remaining = progress
    assert p.scheduled("clip_param") == pytest.approx(0.2 * progress)
    assert p.scheduled("entropy_coeff") == pytest.approx(0.05 * progress)
    total = float(p.loss(batch).detach())
    ratio = torch.exp(logp - batch["action_logp"])
    # The fraction of rows clipped, at the clip of this progress.
    assert p.last_stats["clip_frac"] == pytest.approx(float(((ratio - 1).abs() > 0.2 * progress).float().mean()))
    adv = batch["advantages"]
    norm = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    c = 0.2 * progress
    surrogate = torch.min(ratio * norm, torch.clamp(ratio, 1 - c, 1 + c) * norm).mean()
    assert p.last_stats["policy_loss"] == pytest.approx(-float(surrogate), rel=1e-5)
    assert total == pytest.approx(-float(surrogate) - 0.05 * progress * p.last_stats["entropy"], rel=1e-5)


def test_learn_on_batch_steps_with_the_scheduled_lr():
    p, batch, _ = _policy_and_batch(lr=1e-2, lr_schedule="linear")
    p.progress_remaining = 0.3
    before = [w.clone() for w in p.model.parameters()]
    p.learn_on_batch(batch)
    assert p.get_optimizer().param_groups[0]["lr"] == pytest.approx(3e-3)
    assert any(not torch.equal(a, b) for a, b in zip(before, p.model.parameters()))
    # Progress 0: the linear lr is 0 and Adam's step changes nothing.
    p.progress_remaining = 0.0
    before = [w.clone() for w in p.model.parameters()]
    p.learn_on_batch(batch)
    assert p.get_optimizer().param_groups[0]["lr"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, p.model.parameters()))
    # A constant schedule keeps the value whatever the progress.
    q, batch, _ = _policy_and_batch(lr=1e-2)
    q.progress_remaining = 0.0
    q.learn_on_batch(batch)
    assert q.get_optimizer().param_groups[0]["lr"] == 1e-2


# -- the trainer: each iteration's values, config.json, --resume ---------------------------------------------------


def _tiny(out, **kw) -> TrainConfig:
    return TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=2, train_batch_size=100,
                       sgd_minibatch_size=50, num_sgd_iter=1, stop_reward=None, out_dir=str(out), **kw)


SCHEDULED = {"lr": 1e-3, "clip_param": 0.2, "entropy_coeff": 0.01}


def _want(total: int, batch: int = 100) -> dict[str, list[float]]:
    return {k: sb3_update_values(sb3_linear_schedule(v), total, batch) for k, v in SCHEDULED.items()}


def test_a_run_updates_with_sb3s_values_and_records_them(tmp_path):
    out = tmp_path / "run"
    cfg = _tiny(out, timesteps=500, lr_schedule="linear", clip_schedule="linear", entropy_schedule="linear",
                **SCHEDULED)
    seen = []
    t = PPOTrainer(cfg)
    orig = t.policy.learn_on_batch

    def spy(batch):  # the lr the optimizer stepped with, the clip the loss read
        stats = orig(batch)
        seen.append((t.policy.get_optimizer().param_groups[0]["lr"], t.policy.scheduled("clip_param")))
        return stats

    t.policy.learn_on_batch = spy
    t.train(progress=False)
    want = _want(500)
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == [100, 200, 300, 400, 500]
    for k in SCHEDULED:
        assert [r[k] for r in rows] == pytest.approx(want[k], rel=1e-12)
    assert [s[0] for s in seen] == pytest.approx(want["lr"], rel=1e-12)  # the optimizer's lr in each update
    assert [s[1] for s in seen] == pytest.approx(want["clip_param"], rel=1e-12)
    saved = json.loads((out / "config.json").read_text())
    assert (saved["lr_schedule"], saved["clip_schedule"], saved["entropy_schedule"]) == ("linear",) * 3


def test_the_default_schedules_are_constant(tmp_path):
    out = tmp_path / "run"
    PPOTrainer(_tiny(out, timesteps=300, **SCHEDULED)).train(progress=False)
    rows = read_metrics(out / "metrics.csv")
    for k, v in SCHEDULED.items():
        assert [r[k] for r in rows] == [v, v, v]
    assert json.loads((out / "config.json").read_text())["lr_schedule"] == "constant"


def test_the_schedules_go_on_across_resume(tmp_path):
    """Stopped after 2 of 6 iterations and resumed: the run's updates use the values an uninterrupted run's do
    (the progress comes from the checkpoint's env steps), with the schedules from the checkpoint."""
    out = tmp_path / "run"
    args = ["train", "--env", "trajview/RepeatPrevious-v0", "--model", "mlp", "--envs-per-worker", "2",
            "--train-batch-size", "100", "--minibatch-size", "50", "--num-sgd-iter", "1", "--stop-reward", "none",
            "--lr", "1e-3", "--clip-param", "0.2", "--entropy-coeff", "0.01", "--lr-schedule", "linear",
            "--clip-schedule", "linear", "--entropy-schedule", "linear", "--out", str(out), "--no-progress"]
    assert main(args + ["--timesteps", "200"]) == 0
    # Resumed with the whole run's total: the checkpoint holds 200 env steps and the schedules.
    assert main(["train", "--resume", "--timesteps", "600", "--out", str(out), "--no-progress"]) == 0
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == [100, 200, 300, 400, 500, 600]
    # The first session's two updates ran over a total of 200; the resumed ones over 600, from 200 on.
    first, resumed = _want(200), _want(600)
    for k in SCHEDULED:
        assert [r[k] for r in rows] == pytest.approx(first[k] + resumed[k][2:], rel=1e-12)
    saved = json.loads((out / "config.json").read_text())
    assert saved["lr_schedule"] == "linear" and saved["timesteps"] == 200  # config.json: the run's start


def test_a_run_interrupted_and_resumed_updates_as_an_uninterrupted_one(tmp_path):
    out = tmp_path / "run"
    cfg = dict(timesteps=600, lr_schedule="linear", clip_schedule="linear", entropy_schedule="linear", **SCHEDULED)
    t = PPOTrainer(_tiny(out, **cfg))

    def stop_after_two(row):
        if row["iteration"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        t.train(progress=False, on_iteration=stop_after_two)
    PPOTrainer(_tiny(out, **cfg), resume=True).train(progress=False)
    rows = read_metrics(out / "metrics.csv")
    assert [r["env_steps"] for r in rows] == [100, 200, 300, 400, 500, 600]
    want = _want(600)
    for k in SCHEDULED:
        assert [r[k] for r in rows] == pytest.approx(want[k], rel=1e-12)


def test_dqn_refuses_the_ppo_schedules(tmp_path, capsys):
    assert main(["train", "--algo", "dqn", "--lr-schedule", "linear", "--out", str(tmp_path / "d"),
                 "--no-progress"]) == 2
    assert "--lr-schedule" in capsys.readouterr().err
