"""`trajview train --device cpu|cuda|auto`: where the learner trains. This machine has no CUDA device, so what is
tested is the plumbing: the setting's checks and messages, "auto" resolving to the CPU, a resumed run taking this
session's device, and the workers' CPU copy of the policy following the learner's weights (the path a learner on
a GPU takes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trajview.algorithms.ppo import PPOPolicy  # noqa: E402
from trajview.train import TrainConfig  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.dqn_trainer import DQNConfig  # noqa: E402
from trajview.train.envs import env_creator  # noqa: E402
from trajview.train.sampling import LocalRollouts  # noqa: E402
from trajview.views.lazy_view import to_device  # noqa: E402

SMALL = ["--env", "trajview/RepeatPrevious-v0", "--model", "mlp", "--envs-per-worker", "2", "--train-batch-size",
         "100", "--minibatch-size", "50", "--num-sgd-iter", "1", "--stop-reward", "none", "--no-progress"]


@pytest.mark.parametrize("cls", [TrainConfig, DQNConfig])
def test_the_device_setting_is_checked_naming_the_option(cls):
    with pytest.raises(ValueError, match=r"device \(--device\) must be one of cpu, cuda, auto, got 'gpu'"):
        cls(device="gpu")


@pytest.mark.parametrize("cls", [TrainConfig, DQNConfig])
def test_auto_is_cuda_where_torch_sees_a_device_and_cuda_without_one_says_so(cls, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cls(device="auto").resolved_device() == "cpu"
    assert cls(device="cpu").resolved_device() == "cpu"
    with pytest.raises(ValueError, match=r"device \(--device\): cuda asked for, but torch sees no CUDA device"):
        cls(device="cuda").resolved_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cls(device="auto").resolved_device() == "cuda"
    assert cls(device="cuda").resolved_device() == "cuda"


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the message of a machine without CUDA")
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_cuda_without_a_device_is_a_one_line_error(tmp_path, capsys, algo):
    assert main(["train", "--algo", algo, "--device", "cuda", "--timesteps", "100", "--out", str(tmp_path / "r"),
                 *(SMALL if algo == "ppo" else ["--env", "trajview/RepeatPrevious-v0", "--no-progress"])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device" in err and "no CUDA device" in err, err
    assert not (tmp_path / "r").exists()


def test_auto_trains_on_the_cpu_here_and_a_resume_takes_this_sessions_device(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--device", "auto", "--timesteps", "100", "--out", str(out), *SMALL]) == 0
    assert json.loads((out / "config.json").read_text())["device"] == "auto"
    assert main(["train", "--resume", "--device", "cpu", "--timesteps", "200", "--out", str(out), "--no-progress"]) == 0
    from trajview.train.checkpoint import read_checkpoint

    assert read_checkpoint(out / "checkpoint", weights=False).config["device"] == "cpu"


def test_the_workers_cpu_copy_follows_the_learners_weights():
    """A learner off the CPU trains one policy while the local workers act with a CPU copy: `sync_weights`
    copies the learner's weights into it (after that, both act alike)."""
    config = TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=2, train_batch_size=20,
                         stop_reward=None)
    probe = env_creator(config.env, [])({})
    spaces = (probe.observation_space, probe.action_space)
    torch.manual_seed(0)
    learner = PPOPolicy(*spaces, config.ppo_config())
    torch.manual_seed(1)
    acting = PPOPolicy(*spaces, {**config.ppo_config(), "device": "cpu"})
    rollouts = LocalRollouts(config, env_creator(config.env, []), acting, 10, 0)
    try:
        assert rollouts.workers[0].policy is acting
        nbytes, _ = rollouts.sync_weights(learner)
        want = learner.get_weights()
        assert nbytes == sum(v.nbytes for v in want.values()) > 0
        for k, v in acting.get_weights().items():
            assert np.array_equal(v, want[k]), k
        assert rollouts.sync_weights(acting) == (0, 0.0)  # the workers' own policy: nothing to copy
        batch = rollouts.sample().batch
        assert len(batch) == 20
    finally:
        rollouts.stop()


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_run_trained_on_a_gpu_is_evaluated_on_a_machine_without_one(tmp_path, monkeypatch, capsys, algo):
    """A checkpoint whose settings say ``cuda`` (made here with the device resolved to the CPU, which is how a GPU
    run's checkpoint reads: weights saved from the CPU side, settings naming cuda) loads for `evaluate` / `export`
    on a machine without CUDA: the policy is rebuilt on the CPU."""
    from trajview.train import PPOTrainer
    from trajview.train.dqn_trainer import DQNTrainer
    from trajview.train.saved import load_trained

    out = tmp_path / "run"
    cls = TrainConfig if algo == "ppo" else DQNConfig
    monkeypatch.setattr(cls, "resolved_device", lambda self: "cpu")
    if algo == "ppo":
        PPOTrainer(TrainConfig(env=STATELESS, model="mlp", envs_per_worker=2, train_batch_size=64,
                               sgd_minibatch_size=32, num_sgd_iter=1, stop_reward=None, timesteps=64, device="cuda",
                               out_dir=str(out))).train(progress=False)
    else:
        DQNTrainer(DQNConfig(env=STATELESS, envs=2, rollout_fragment_length=16, learning_starts=32, batch_size=16,
                             gradient_steps=2, iteration_steps=64, timesteps=64, stop_reward=None, device="cuda",
                             out_dir=str(out))).train(progress=False)
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from trajview.train.checkpoint import read_checkpoint

    assert read_checkpoint(out / "checkpoint", weights=False).config["device"] == "cuda"
    trained = load_trained(out)
    assert trained.config.device == "cpu"
    assert main(["evaluate", str(out), "--episodes", "2"]) == 0
    assert "return" in capsys.readouterr().out


def test_to_device_on_the_cpu_is_the_tensor_itself():
    t = torch.arange(5)
    assert to_device(t, "cpu") is t and to_device(t, None) is t


# -- on a CUDA device (a GPU machine; CI has none: these run where torch sees one) ----------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (a GPU machine)")
STATELESS = "trajview/StatelessCartPole-v1"


@cuda
@pytest.mark.parametrize("model", ["mlp", "framestack", "lstm", "attention"])
def test_ppo_learns_on_cuda_acts_with_a_cpu_copy_and_resumes_on_the_cpu(tmp_path, model):
    from trajview.train import PPOTrainer
    from trajview.train.checkpoint import read_checkpoint

    out = tmp_path / "run"
    config = TrainConfig(env=STATELESS, model=model, envs_per_worker=2, train_batch_size=64, sgd_minibatch_size=32,
                         num_sgd_iter=2, stop_reward=None, timesteps=128, device="cuda", out_dir=str(out))
    trainer = PPOTrainer(config)
    before = {k: np.array(v, copy=True) for k, v in trainer.policy.get_weights().items()}
    trainer.train(progress=False)
    assert trainer.env_steps == 128
    assert all(p.is_cuda for p in trainer.policy.model.parameters())
    acting = trainer.rollouts.workers[0].policy
    assert acting is not trainer.policy and acting.device.type == "cpu"
    after = trainer.policy.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in after)  # the GPU learner's updates
    trainer.rollouts.sync_weights(trainer.policy)
    for k, v in acting.get_weights().items():
        assert np.array_equal(v, after[k]), k
    # the checkpoint written on the GPU resumes on the CPU, with the learned weights
    ck = read_checkpoint(out / "checkpoint")
    assert ck.config["device"] == "cuda"
    assert main(["train", "--resume", "--device", "cpu", "--timesteps", "192", "--out", str(out), "--no-progress"]) == 0
    ck = read_checkpoint(out / "checkpoint", weights=False)
    assert ck.config["device"] == "cpu" and ck.counters["env_steps"] == 192


@cuda
def test_dqn_learns_on_cuda_acts_with_a_cpu_copy_and_resumes_on_the_cpu(tmp_path):
    from trajview.train.checkpoint import read_checkpoint
    from trajview.train.dqn_trainer import DQNTrainer

    out = tmp_path / "run"
    config = DQNConfig(env=STATELESS, envs=2, rollout_fragment_length=16, learning_starts=32, batch_size=16,
                       gradient_steps=4, iteration_steps=64, timesteps=128, stop_reward=None, device="cuda",
                       out_dir=str(out))
    trainer = DQNTrainer(config)
    trainer.train(progress=False)
    p = trainer.policy
    assert p.grad_steps > 0 and all(w.is_cuda for w in p.q.parameters())
    stack = np.random.default_rng(0).normal(size=(5, p.num_frames * 2)).astype(np.float32)
    actions, _, _ = p.compute_actions_from_input_dict({"stack": stack}, explore=False)
    assert all(not w.is_cuda for w in p._actor.parameters())  # acting ran on the CPU copy ...
    for k, v in p._actor.state_dict().items():  # ... refreshed with the learner's weights
        assert torch.equal(v, p.q.state_dict()[k].cpu()), k
    with torch.no_grad():
        want = p.q(torch.from_numpy(stack).cuda()).argmax(dim=1).cpu().numpy()
    assert np.array_equal(actions, want)
    assert main(["train", "--algo", "dqn", "--resume", "--device", "cpu", "--timesteps", "192", "--out", str(out),
                 "--no-progress"]) == 0
    ck = read_checkpoint(out / "checkpoint", weights=False)
    assert ck.config["device"] == "cpu" and ck.counters["env_steps"] == 192
