"""A smoke of `bench/compare_sb3_train.py` (SB3 and sb3-contrib next to ``trajview train``, PPO and DQN): every
system's loop runs a tiny budget in its own subprocess and reports sane numbers; without the compare extra it says
what is missing; the trajview sides' settings are the zoo's, mapped. The tests that run SB3 skip where the compare
extra is not installed."""

from __future__ import annotations

import json

import pytest
import compare_sb3_train as bench


def test_the_trajview_side_has_the_zoos_settings(tmp_path):
    pytest.importorskip("torch")
    z = bench.ZOO
    for system in ("trajview-framestack", "trajview-lstm"):
        c = bench.trajview_config(system, 3, 10_000, False, 256, 1, str(tmp_path / system))
        assert (c.envs_per_worker, c.train_batch_size, c.sgd_minibatch_size, c.num_sgd_iter) == (
            z["n_envs"], z["n_envs"] * z["n_steps"], z["batch_size"], z["n_epochs"])
        assert (c.lr, c.clip_param, c.entropy_coeff, c.gamma, c.lambda_, c.vf_loss_coeff, c.grad_clip) == (
            z["learning_rate"], z["clip_range"], z["ent_coef"], z["gamma"], z["gae_lambda"], z["vf_coef"],
            z["max_grad_norm"])
        assert (c.lr_schedule, c.clip_schedule, c.entropy_schedule) == ("linear", "linear", "constant")
        assert (c.seed, c.timesteps, c.stop_reward, c.smoothing_episodes) == (3, 10_000, 150.0, 100)
        assert c.env == "trajview/StatelessCartPole-v1"
    assert bench.trajview_config("trajview-lstm", 0, 1, True, 64, 1, str(tmp_path / "x")).model_config == {
        "max_seq_len": 32, "cell_size": 64, "hidden": 0, "post_hidden": [64, 64], "prev_action": False,
        "prev_reward": False}
    assert bench.linear(0.2)(0.25) == pytest.approx(0.05)


def _trajview_lstm_networks(tmp_path):
    """The trajview-lstm side's networks: {"pi" / "vf": the sorted shapes of its parameters}, each checked to be
    an LSTM of 256 over the 2 observed floats, then 64x64 tanh layers, then its head."""
    import gymnasium as gym
    import torch

    import trajview as tv

    c = bench.trajview_config("trajview-lstm", 0, 1, True, 256, 1, str(tmp_path / "x"))
    env = gym.make(bench.ENV_ID)
    model = tv.PPOPolicy(env.observation_space, env.action_space, {"model": c.model,
                                                                    "model_config": c.model_config}).model
    ours = {}
    for net, core, head in (("pi", model.pi_core, model.pi_head), ("vf", model.vf_core, model.vf_head)):
        assert core.fc is None and isinstance(core.lstm, torch.nn.LSTM)
        assert (core.lstm.input_size, core.lstm.hidden_size) == (2, 256)
        tanh_layers = [m for m in core.post if isinstance(m, torch.nn.Linear)]
        assert [(m.in_features, m.out_features) for m in tanh_layers] == [(256, 64), (64, 64)]
        assert all(isinstance(m, torch.nn.Tanh) for m in list(core.post)[1::2])
        ours[net] = sorted(tuple(p.shape) for p in [*core.parameters(), *head.parameters()])
    return ours


def test_the_trajview_lstm_is_an_lstm_then_a_64x64_tanh_mlp(tmp_path):
    pytest.importorskip("torch")
    nets = _trajview_lstm_networks(tmp_path)
    assert nets["pi"] == sorted([(1024, 2), (1024, 256), (1024,), (1024,), (64, 256), (64,), (64, 64), (64,),
                                 (2, 64), (2,)])
    assert nets["vf"] == sorted([(1024, 2), (1024, 256), (1024,), (1024,), (64, 256), (64,), (64, 64), (64,),
                                 (1, 64), (1,)])


def test_the_trajview_lstm_has_recurrent_ppos_networks(tmp_path):
    """RecurrentPPO's "MlpLstmPolicy" with a critic LSTM has the same parameter shapes, network by network."""
    pytest.importorskip("torch")
    sb3_contrib = pytest.importorskip("sb3_contrib")
    import gymnasium as gym

    ours = _trajview_lstm_networks(tmp_path)
    env = gym.make(bench.ENV_ID)
    sb3 = sb3_contrib.RecurrentPPO("MlpLstmPolicy", env, policy_kwargs={"lstm_hidden_size": 256,
                                                                      "enable_critic_lstm": True}, device="cpu").policy
    theirs = {
        "pi": [*sb3.lstm_actor.parameters(), *sb3.mlp_extractor.policy_net.parameters(), *sb3.action_net.parameters()],
        "vf": [*sb3.lstm_critic.parameters(), *sb3.mlp_extractor.value_net.parameters(), *sb3.value_net.parameters()],
    }
    assert ours == {k: sorted(tuple(p.shape) for p in v) for k, v in theirs.items()}


def test_the_trajview_dqn_side_has_the_zoos_settings_mapped(tmp_path):
    """Each of rl-baselines3-zoo's CartPole-v1 DQN settings in `DQNConfig`'s terms (the module's docs)."""
    pytest.importorskip("torch")
    from trajview.algorithms.dqn import DEFAULT_DQN_CONFIG

    z = bench.ZOO_DQN
    c = bench.trajview_dqn_config(3, 50_000, False, 1, str(tmp_path / "dqn"))
    assert (c.env, c.model, c.seed, c.timesteps, c.num_frames) == (bench.ENV_ID, "dqn-framestack", 3, 50_000, 16)
    assert (c.envs, c.rollout_fragment_length, c.gradient_steps, c.iteration_steps) == (1, 256, 128, 256)
    assert (c.lr, c.batch_size, c.buffer_size, c.gamma) == (2.3e-3, 64, 100_000, 0.99)
    assert (c.learning_starts, c.target_update_interval) == (1001, 128)  # > 1000 env steps; once per round
    assert (c.eps_start, c.eps_end, c.eps_steps, c.random_warmup) == (1.0, 0.04, 8_000, True)  # 0.16 of the budget
    assert (c.hidden, c.dueling, c.double_q, c.prioritized) == (256, False, False, False)
    assert (c.stop_reward, c.smoothing_episodes, c.threads) == (150.0, 100, 1)
    p = c.policy_config()
    assert (p["hidden"], p["dueling"], p["double_q"], p["target_update_interval"], p["lr"]) == (
        256, False, False, 128, 2.3e-3)
    assert DEFAULT_DQN_CONFIG["grad_clip"] == z["max_grad_norm"] == 10.0  # SB3's max_grad_norm, trajview's clip
    assert bench.trajview_dqn_config(0, 1024, True, 2, str(tmp_path / "x")).stop_reward is None
    assert bench.trajview_dqn_config(0, 1024, True, 2, str(tmp_path / "x")).eps_steps == 164
    assert (bench.budget_of("trajview-dqn", None), bench.budget_of("sb3-dqn", None),
            bench.budget_of("trajview-lstm", None), bench.budget_of("sb3-dqn", 777)) == (50_000, 50_000, 100_000, 777)
    cmd = bench.trajview_dqn_command(c)
    assert "double_q=False" in cmd and "dueling=False" in cmd and "target_update_interval=128" in cmd
    assert "out_dir" not in cmd and "seed=SEED" in cmd


def test_the_trajview_dqn_side_trains_in_sb3s_rounds(tmp_path):
    """The rounds of the mapped settings, against what SB3's loop does with the zoo's (its source, written out):
    256 env steps, then 128 gradient steps once the env steps are > 1000; the target network, in every round's
    gradient steps, the Q-network as the round found it; epsilon 1 while the env steps are < 1000 (SB3's warm-up),
    then linear from 1 to 0.04 over 0.16 of the budget."""
    pytest.importorskip("torch")
    import torch
    from trajview.train.dqn_trainer import DQNTrainer

    budget = 1536
    c = bench.trajview_dqn_config(0, budget, True, 1, str(tmp_path / "dqn"))
    tr = DQNTrainer(c)
    policy = tr.policy
    seen: list[tuple[int, bool]] = []  # (gradient step, the target equal to the Q-network as the round found it)
    found: dict[str, dict] = {}
    inner = policy.learn_on_replay

    def spy(batch, weights=None):
        if policy.grad_steps % c.gradient_steps == 0:  # a round's first gradient step
            found["q"] = {k: v.clone() for k, v in policy.q.state_dict().items()}
        target = policy.target.state_dict()
        seen.append((policy.grad_steps, all(torch.equal(target[k], found["q"][k]) for k in target)))
        return inner(batch, weights)

    policy.learn_on_replay = spy  # type: ignore[method-assign]
    eps: list[float] = []
    sample = tr.buffer.add

    def add(batch):
        eps.append(policy.epsilon)
        return sample(batch)

    tr.buffer.add = add  # type: ignore[method-assign]
    rows: list[dict] = []
    tr.train(progress=False, on_iteration=rows.append)
    assert [r["env_steps"] for r in rows] == list(range(256, budget + 1, 256))
    rounds = [s for s in range(256, budget + 1, 256) if s > bench.ZOO_DQN["learning_starts"]]  # SB3's condition
    assert [r["learn_s"] > 0 for r in rows] == [s in rounds for s in range(256, budget + 1, 256)]
    assert [s for s, _ in seen] == list(range(128 * len(rounds))) and all(ok for _, ok in seen)
    # SB3's warm-up (random while its env steps are < learning_starts), then its LinearSchedule(1, 0.04, 0.16), at
    # the env steps before each sample.
    z = bench.ZOO_DQN
    ref = [1.0 if t < z["learning_starts"] else 1.0 + min(t / budget, z["exploration_fraction"])
           * (z["exploration_final_eps"] - 1.0) / z["exploration_fraction"] for t in range(0, budget, 256)]
    assert eps == pytest.approx(ref, abs=1e-3)  # eps_steps rounded to whole env steps


def test_without_the_compare_extra_it_says_what_is_missing(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(bench.NEEDS, "sb3-lstm", [("no_such_module_xyz", "sb3-contrib")])
    assert bench.main(["--systems", "sb3-lstm", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "missing sb3-contrib (import no_such_module_xyz" in err and "requirements-compare.txt" in err


def test_the_learners_device_reaches_every_side_and_names_its_rows(tmp_path):
    pytest.importorskip("torch")
    for system in ("trajview-framestack", "trajview-lstm"):
        assert bench.trajview_config(system, 0, 512, False, 64, 1, str(tmp_path / system)).device == "cpu"
        c = bench.trajview_config(system, 0, 512, False, 64, 1, str(tmp_path / system), "cuda")
        assert c.device == "cuda" and "--device cuda" in bench.trajview_command(c)
    assert bench.trajview_dqn_config(0, 512, False, 1, str(tmp_path / "d"), "cuda").device == "cuda"
    assert bench.sb3_dqn_kwargs(0)["device"] == "cpu" and bench.sb3_dqn_kwargs(0, "cuda")["device"] == "cuda"
    run = {"seed": 0, "steps_to_150": None, "steps_run": 256, "wall_s": 1.0, "steps_per_s": 256.0,
           "final_return": 20.0, "split_s": {"sampling": 0.5, "sgd": 0.5}, "curve": [[256, 20.0]]}
    results = [{**run, "system": "trajview-dqn", "device": "cuda"}, {**run, "system": "sb3-framestack"},
               {**run, "system": "trajview-dqn", "device": "cpu", "steps_per_s": 300.0}]
    rows = [line.split(" | ")[0].lstrip("| ") for line in bench.table(results).splitlines()[2:]]
    # SYSTEMS' order, the CPU row first; results of earlier runs (no "device") are CPU runs
    assert rows == ["sb3-framestack", "trajview-dqn", "trajview-dqn (cuda)"]
    line = bench.run_line(results[0])
    assert line.startswith("trajview-dqn (cuda) ") and line.split()[2:4] == ["seed", "0:"]


def test_cuda_where_torch_sees_none_is_refused_before_any_run(monkeypatch, capsys, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--systems", "trajview-framestack", "--device", "cpu", "cuda", "--out",
                       str(tmp_path / "out")]) == 2
    assert "--device cuda asked for, but torch sees no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_every_system_runs_a_tiny_budget(tmp_path, capsys):
    for module in ("torch", "stable_baselines3", "sb3_contrib"):
        pytest.importorskip(module)
    assert bench.main(["--seeds", "0", "--budget", "512", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["system"] for r in results] == list(bench.SYSTEMS)
    for r in results:
        assert r["steps_run"] == 512 and [c[0] for c in r["curve"]] == [256, 512]  # two 256-step iterations
        # (DQN: two rounds of 256 env steps, before learning starts)
        assert r["wall_s"] > 0 and r["steps_per_s"] == pytest.approx(512 / r["wall_s"], rel=0.01)
        assert all(v >= 0 for v in r["split_s"].values())
        assert 5 < r["final_return"] < 150 and r["steps_to_150"] is None  # random policies on CartPole
        if r["system"] in bench.DQN_SYSTEMS and r["system"].startswith("trajview"):  # (numpy and torch learners)
            assert set(r["split_s"]) == {"sampling", "sgd", "other"} and r["split_s"]["sgd"] == 0
            assert sum(r["split_s"].values()) == pytest.approx(r["wall_s"], abs=0.01)
            assert "double_q=False" in r["command"] and "eps_steps=82" in r["command"]
        elif r["system"].startswith("trajview"):
            assert set(r["split_s"]) == {"sampling", "postprocessing", "sgd", "other"}
            assert sum(r["split_s"].values()) == pytest.approx(r["wall_s"], abs=0.01)
            assert "--lr-schedule linear --clip-param 0.2 --clip-schedule linear" in r["command"]
        else:
            assert set(r["split_s"]) == {"sampling", "sgd"}
            assert sum(r["split_s"].values()) <= r["wall_s"] + 0.005  # each rounded to ms
    out = capsys.readouterr().out
    assert all(f"| {s} | 0 | 0/1 |" in out for s in bench.SYSTEMS)
    assert bench.main(["--table-from", str(tmp_path / "results.json")]) == 0
    assert "| sb3-lstm | 0 | 0/1 |" in capsys.readouterr().out


def test_sb3s_dqn_takes_the_zoos_settings_and_explores_on_the_schedule_trajview_maps():
    """SB3 itself as the reference: its DQN built from `sb3_dqn_kwargs` holds the zoo's settings, its epsilon at
    each env step is the linear schedule the trajview side's ``eps_start`` / ``eps_end`` / ``eps_steps`` make, and
    its target copies come every 10 env steps (one env)."""
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    env = VecFrameStack(make_vec_env(bench.ENV_ID, n_envs=1, seed=0), bench.NUM_FRAMES)
    m = DQN("MlpPolicy", env, **bench.sb3_dqn_kwargs(0))
    assert m.observation_space.shape == (2 * bench.NUM_FRAMES,)
    assert [type(x).__name__ for x in m.q_net.q_net] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [x.out_features for x in m.q_net.q_net if hasattr(x, "out_features")] == [256, 256, 2]
    assert (m.train_freq.frequency, m.train_freq.unit.value, m.gradient_steps, m.target_update_interval) == (
        256, "step", 128, 10)
    c = bench.trajview_dqn_config(0, 50_000, False, 1, "unused")
    for t in range(0, 50_000, 500):
        want = c.eps_start + min(1.0, t / c.eps_steps) * (c.eps_end - c.eps_start)  # DQNTrainer._epsilon
        assert m.exploration_schedule(1 - t / 50_000) == pytest.approx(want, abs=1e-12)


def test_trajviews_linear_schedules_give_each_update_the_values_sb3s_updates_use(tmp_path):
    """SB3 itself as the reference of ``--lr-schedule linear --clip-schedule linear``: the learning rate SB3's
    optimizer stepped with in each update and the clip range of that update, against the values of a trajview
    run of the same batch and total."""
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from trajview.train import PPOTrainer, TrainConfig
    from trajview.train.metrics import read_metrics

    total, n_envs, n_steps = 160, 2, 16  # 5 updates of 32 env steps
    seen: list[tuple[float, float]] = []

    class Spy(BaseCallback):
        def _note(self) -> None:  # the last train()'s lr (set at its start) and clip range
            m = self.model
            seen.append((m.policy.optimizer.param_groups[0]["lr"], m.clip_range(m._current_progress_remaining)))

        def _on_rollout_start(self) -> None:
            if self.model.num_timesteps > 0:
                self._note()

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            self._note()

    env = make_vec_env("trajview/StatelessCartPole-v1", n_envs=n_envs, seed=0)
    PPO("MlpPolicy", env, n_steps=n_steps, batch_size=32, n_epochs=1, learning_rate=bench.linear(1e-3),
        clip_range=bench.linear(0.2), seed=0, device="cpu").learn(total, callback=Spy())
    out = tmp_path / "run"
    PPOTrainer(TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=n_envs,
                           train_batch_size=n_envs * n_steps, sgd_minibatch_size=32, num_sgd_iter=1, lr=1e-3,
                           lr_schedule="linear", clip_param=0.2, clip_schedule="linear", timesteps=total,
                           stop_reward=None, out_dir=str(out))).train(progress=False)
    rows = read_metrics(out / "metrics.csv")
    assert len(seen) == len(rows) == 5
    assert [r["lr"] for r in rows] == pytest.approx([s[0] for s in seen], rel=1e-9, abs=1e-15)
    assert [r["clip_param"] for r in rows] == pytest.approx([s[1] for s in seen], rel=1e-9, abs=1e-15)
