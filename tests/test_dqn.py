"""``trajview train --algo dqn``: double DQN from replay whose frame stack is a view built at sample time."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tqdm")
pytest.importorskip("matplotlib")

import torch  # noqa: E402

from trajview import _io  # noqa: E402
from trajview.train.checkpoint import read_checkpoint  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.dqn_trainer import DQNConfig, DQNTrainer  # noqa: E402


def _replay_state(out):
    """The replay buffer's state.json in the run's checkpoint (read as trajview does: verified)."""
    ck = read_checkpoint(out / "checkpoint", weights=False)
    return ck, json.loads(bytes(_io.read_verified(ck.manifest, "replay.state.json")))


def test_dqn_train_writes_metrics_plot_checkpoint_and_resumes(tmp_path, capsys):
    out = tmp_path / "dqn"
    args = ["train", "--algo", "dqn", "--timesteps", "1000", "--out", str(out), "--seed", "1", "--no-progress"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["env_steps"] >= 1000
    for name in ("metrics.csv", "learning_curve.png", "checkpoint", "config.json"):
        assert (out / name).exists()
    ck, buf = _replay_state(out)
    # One committed unit: the weights and the replay buffer's files under one manifest.
    assert ck.algo == "dqn" and {"weights.pt", "replay.state.json", "replay.col.0.npy"} <= set(ck.manifest.files)
    assert ck.extra["resumes"] == 0 and set(ck.extra["policy"]) == {"epsilon", "grad_steps", "rng"}
    # The buffer stores each observation once: no frame stack column, the stack is a view.
    columns = [c[0] for c in buf["columns"]]
    assert "stack" not in columns and "obs" in columns
    assert set(buf["views"]) == {"stack", "next_stack"}
    # --resume finds the DQN run without --algo dqn.
    assert main(["train", "--timesteps", "3000", "--out", str(out), "--no-progress", "--resume"]) == 0
    ck2, buf2 = _replay_state(out)
    assert ck2.counters["env_steps"] > ck.counters["env_steps"] and ck2.extra["resumes"] == 1
    # The restored buffer kept the earlier steps and took the new ones.
    assert buf2["store"]["head"] > buf["store"]["head"]



def test_iteration_steps_set_how_often_dqn_writes_a_row_and_a_checkpoint(tmp_path, capsys):
    """``--iteration-steps``: a metrics row and a checkpoint every so many env steps (whole samples of 8 envs x 4
    steps); kept by ``--resume``, which refuses another value; PPO's option is ``--train-batch-size``."""
    from trajview.train.metrics import read_metrics

    out = tmp_path / "dqn"
    assert main(["train", "--algo", "dqn", "--timesteps", "1100", "--iteration-steps", "300", "--out", str(out),
                 "--stop-reward", "none", "--no-progress"]) == 0
    rows = read_metrics(out / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows] == [320, 640, 960, 1120]  # the last stops at --timesteps
    ck = read_checkpoint(out / "checkpoint")
    assert ck.counters["iteration"] == 4 and ck.config["iteration_steps"] == 300
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(out), "--timesteps", "2000", "--iteration-steps", "500"]) == 2
    assert "--iteration-steps 500 (the run's: 300)" in capsys.readouterr().err
    assert main(["train", "--iteration-steps", "300", "--out", str(tmp_path / "ppo")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--iteration-steps is DQN's (--algo dqn)" in err and "--train-batch-size" in err
    assert main(["train", "--algo", "dqn", "--iteration-steps", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "iteration_steps (--iteration-steps) must be an int >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "ppo").exists() and not (tmp_path / "bad").exists()

def test_dqn_resume_restores_policy_buffer_and_counters_exactly(tmp_path):
    """A DQN run resumed from its checkpoint holds what the run held when it wrote it: the networks, optimizer,
    epsilon, gradient steps, exploration RNG, the replay buffer (its samples the same) and the counters."""
    c = DQNConfig(timesteps=1000, iteration_steps=500, learning_starts=200, gradient_steps=2, out_dir=str(tmp_path),
                  stop_reward=None, prioritized=True, buffer_size=2000)
    a = DQNTrainer(c)
    a.train(progress=False)
    b = DQNTrainer(DQNConfig(**{**dataclasses.asdict(c), "timesteps": 2000}), resume=True)
    try:
        assert (b.iteration, b.env_steps, b.episodes, list(b.returns)) == (a.iteration, a.env_steps, a.episodes,
                                                                            list(a.returns))
        sa, sb = a.policy.get_state(), b.policy.get_state()
        for k in ("q", "target"):
            assert all(torch.equal(sa[k][n], sb[k][n]) for n in sa[k])
        assert (sa["epsilon"], sa["grad_steps"], sa["rng"]) == (sb["epsilon"], sb["grad_steps"], sb["rng"])
        assert len(a.buffer) == len(b.buffer)
        x, y = a.buffer.sample(16), b.buffer.sample(16)
        for k in ("obs", "stack", "next_stack", "actions", "rewards"):
            np.testing.assert_array_equal(x[k], y[k])
    finally:
        b.worker.stop()


def test_dqn_resume_refuses_a_damaged_replay_file_and_resume_as_ppo_is_refused(tmp_path, capsys):
    out = tmp_path / "dqn"
    assert main(["train", "--algo", "dqn", "--timesteps", "500", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--algo", "ppo", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--out {out} holds a DQN run" in err and "leave out --algo ppo" in err
    ck = read_checkpoint(out / "checkpoint", weights=False)
    col = ck.manifest.path("replay.col.0.npy")
    data = bytearray(col.read_bytes())
    data[-1] ^= 0x01
    col.write_bytes(bytes(data))
    assert main(["train", "--resume", "--timesteps", "1000", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("trajview train: error: ") and str(col) in err, err
    assert "crc32" in err and "put back a copy" in err


def test_dqn_learns_from_stack_views(tmp_path):
    """A few thousand steps with frequent updates: TD loss finite, Q values move, the sample's stacks are views."""
    c = DQNConfig(timesteps=3000, iteration_steps=1000, learning_starts=500, gradient_steps=4, out_dir=str(tmp_path),
                  stop_reward=None, prioritized=True)
    tr = DQNTrainer(c)
    summary = tr.train(progress=False)
    assert summary["env_steps"] >= 3000 and np.isfinite(summary["episode_return_mean"])
    s = tr.buffer.sample(8)
    assert s["stack"].shape == (8, 4, 2) and s["next_stack"].shape == (8, 4, 2)
    np.testing.assert_array_equal(s["stack"][:, 1:], s["next_stack"][:, :-1])
    np.testing.assert_array_equal(s["stack"][:, -1], s["obs"])


def test_dqn_keeps_the_timesteps_budget_within_one_sample(tmp_path, capsys):
    out = tmp_path / "dqn"
    assert main(["train", "--algo", "dqn", "--timesteps", "3000", "--stop-reward", "none", "--out", str(out),
                 "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    per_sample = 8 * 4  # DQNConfig's envs x rollout_fragment_length
    assert 3000 <= summary["env_steps"] < 3000 + per_sample, summary  # 4,032 before: a whole second iteration
    from trajview.train.metrics import read_metrics

    assert [int(r["env_steps"]) for r in read_metrics(out / "metrics.csv")] == [2016, summary["env_steps"]]


@pytest.mark.parametrize("double_q", [True, False])
def test_dqn_target_is_double_q_or_the_target_networks_max(double_q):
    """``double_q``: the TD target against a per-row pure-Python reference (the Q values read off the networks):
    double DQN's ``r + gamma (1 - term) Q_target(s', argmax Q(s'))``, else DQN's ``r + gamma (1 - term) max
    Q_target(s')``; the two differ on this batch (the target network is not the Q-network)."""
    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    p = DQNPolicy(env.observation_space, env.action_space, {"num_frames": 2, "hidden": 8, "seed": 5,
                                                             "double_q": double_q, "dueling": False, "gamma": 0.9})
    with torch.no_grad():
        for w in p.target.parameters():
            w.add_(torch.randn_like(w))
    rng = np.random.default_rng(0)
    n = 32
    batch = {"stack": rng.normal(size=(n, 2, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(n, 2, 2)).astype(np.float32),
             "actions": rng.integers(0, 2, n), "rewards": rng.normal(size=n).astype(np.float32),
             "terminateds": (rng.random(n) < 0.3)}
    with torch.no_grad():
        q = p.q(torch.from_numpy(batch["stack"])).tolist()
        q2 = p.q(torch.from_numpy(batch["next_stack"])).tolist()
        qt = p.target(torch.from_numpy(batch["next_stack"])).tolist()
    ys, ys_other = [], []
    for i in range(n):
        pick = max(range(2), key=lambda a: q2[i][a])
        boot = qt[i][pick] if double_q else max(qt[i])
        other = max(qt[i]) if double_q else qt[i][pick]
        keep = 0.0 if batch["terminateds"][i] else 1.0
        ys.append(float(batch["rewards"][i]) + 0.9 * keep * boot)
        ys_other.append(float(batch["rewards"][i]) + 0.9 * keep * other)
    want = [abs(q[i][int(batch["actions"][i])] - ys[i]) for i in range(n)]
    other = [abs(q[i][int(batch["actions"][i])] - ys_other[i]) for i in range(n)]
    out = p.learn_on_replay(batch)
    np.testing.assert_allclose(out["td_errors"], want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(want, other, rtol=1e-5, atol=1e-5)  # the batch tells the two targets apart
    huber = [0.5 * d * d if d < 1 else d - 0.5 for d in want]
    assert out["td_loss"] == pytest.approx(sum(huber) / n, rel=1e-5)


def test_dqn_double_q_and_dueling_must_be_bools():
    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    with pytest.raises(ValueError, match="double_q must be a bool, got 'no'"):
        DQNPolicy(env.observation_space, env.action_space, {"double_q": "no"})
    with pytest.raises(ValueError, match="double_q"):
        DQNConfig(double_q=0)  # type: ignore[arg-type]
    assert DQNConfig().double_q is True and DQNConfig(double_q=False).policy_config()["double_q"] is False


def test_dqn_metrics_rows_carry_the_gradient_steps_seconds(tmp_path):
    c = DQNConfig(timesteps=192, iteration_steps=64, learning_starts=100, gradient_steps=2, out_dir=str(tmp_path),
                  stop_reward=None, double_q=False)
    rows: list[dict] = []
    DQNTrainer(c).train(progress=False, on_iteration=rows.append)
    assert [r["env_steps"] for r in rows] == [64, 128, 192]
    assert rows[0]["learn_s"] == 0 and all(0 < r["learn_s"] <= r["time_s"] for r in rows[1:])
    from trajview.train.metrics import read_metrics

    assert [r["learn_s"] for r in read_metrics(tmp_path / "metrics.csv")] == [r["learn_s"] for r in rows]


@pytest.mark.parametrize("warmup", [False, True])
def test_dqn_epsilon_schedule_and_random_warmup(tmp_path, warmup):
    """Epsilon at each sample's start against a pure-Python reference: linear from eps_start to eps_end over
    eps_steps env steps; with ``random_warmup``, 1 before learning_starts env steps, the same line after."""
    c = DQNConfig(envs=1, rollout_fragment_length=10, eps_start=0.9, eps_end=0.1, eps_steps=100, learning_starts=35,
                  timesteps=150, iteration_steps=50, gradient_steps=1, batch_size=4, random_warmup=warmup,
                  stop_reward=None, out_dir=str(tmp_path))
    tr = DQNTrainer(c)
    seen: list[float] = []
    add = tr.buffer.add

    def spy(batch):
        seen.append(tr.policy.epsilon)
        return add(batch)

    tr.buffer.add = spy  # type: ignore[method-assign]
    tr.train(progress=False)

    def ref(t: int) -> float:
        if warmup and t < 35:
            return 1.0
        return 0.9 + min(1.0, t / 100) * (0.1 - 0.9)

    assert seen == pytest.approx([ref(t) for t in range(0, 150, 10)], abs=1e-12)
    with pytest.raises(ValueError, match="random_warmup"):
        DQNConfig(random_warmup="yes")  # type: ignore[arg-type]


# -- the numpy learner (config "learner": `trajview.algorithms.dqn_learner`) against torch's ---------------------------


def _dqn_twins(config: dict, action_space=None):
    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    actions = env.action_space if action_space is None else action_space
    ref = DQNPolicy(env.observation_space, actions, {**config, "learner": "torch"})
    fast = DQNPolicy(env.observation_space, actions, {**config, "learner": "numpy"})
    fast.set_state(ref.get_state())
    return ref, fast


def _assert_same_dqn(ref, fast):
    """The networks within a tenth of a learning-rate step, Adam's moments within 1e-2 of their largest value (ours
    flushes denormals), but for a few elements (`learner_checks`: the gradients themselves are compared tightly in
    `test_the_numpy_learners_gradients_are_torchs`); the same step counts."""
    from learner_checks import assert_close_but_a_few

    lr = float(ref.config["lr"])
    o_ref, o_fast = ref.optimizer.state_dict()["state"], fast.optimizer.state_dict()["state"]
    assert o_ref.keys() == o_fast.keys()
    steps = max(float(st["step"]) for st in o_ref.values())
    for i in o_ref:
        assert float(o_fast[i]["step"]) == float(o_ref[i]["step"])
    for net in ("q", "target"):
        assert_close_but_a_few([(f"{net}.{k}", b.numpy(), a.numpy()) for (k, a), b in
                                zip(getattr(ref, net).state_dict().items(), getattr(fast, net).state_dict().values())],
                               rtol=1e-4, atol=lr / 10, loose=2 * lr * steps)
    for key in ("exp_avg", "exp_avg_sq"):
        scale = max(float(st[key].abs().max()) for st in o_ref.values())
        assert_close_but_a_few([(f"{i} {key}", o_fast[i][key].numpy(), o_ref[i][key].numpy()) for i in o_ref],
                               rtol=1e-2, atol=1e-2 * scale + 1e-30, loose=scale + 1e-30)


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=int(os.environ.get("TV_DQN_EXAMPLES", "20")), deadline=None)
@given(seed=st.integers(0, 2**20), frames=st.integers(2, 5), hidden=st.integers(1, 40), dueling=st.booleans(),
       double_q=st.booleans(), rows=st.integers(1, 70), weighted=st.booleans(), grad_clip=st.sampled_from([0.01, 10.0]),
       fused=st.booleans(), target_every=st.integers(1, 3))
def test_the_numpy_learner_steps_as_torchs(seed, frames, hidden, dueling, double_q, rows, weighted, grad_clip, fused,
                                           target_every):
    """Six gradient steps (with target copies between them) on random replay samples: the Q and target networks,
    Adam's moments and steps, the loss, mean Q and TD errors, and the greedy actions equal the torch learner's."""
    ref, fast = _dqn_twins({"num_frames": frames, "hidden": hidden, "dueling": dueling, "double_q": double_q,
                            "seed": seed, "grad_clip": grad_clip, "adam_fused": fused, "lr": 1e-4,
                            "target_update_interval": target_every})
    assert fast.numpy_learner() is not None and ref.numpy_learner() is None
    rng = np.random.default_rng(seed)
    for _ in range(6):
        batch = {"stack": rng.normal(size=(rows, frames, 2)).astype(np.float32),
                 "next_stack": rng.normal(size=(rows, frames, 2)).astype(np.float32),
                 "actions": rng.integers(0, 2, rows), "rewards": rng.normal(size=rows).astype(np.float32) * 3,
                 "terminateds": rng.random(rows) < 0.2}
        w = rng.uniform(0.1, 1, rows).astype(np.float32) if weighted else None
        o_ref, o_fast = ref.learn_on_replay(batch, w), fast.learn_on_replay(batch, w)
        assert o_fast["td_loss"] == pytest.approx(o_ref["td_loss"], rel=1e-3, abs=1e-4)
        assert o_fast["q_mean"] == pytest.approx(o_ref["q_mean"], rel=1e-3, abs=1e-4)
        # (a TD error is a difference of Q-values of up to ~5: float32 rounding of those, not of the difference)
        np.testing.assert_allclose(o_fast["td_errors"], o_ref["td_errors"], rtol=1e-4, atol=2e-4)
        assert o_fast["td_errors"].dtype == o_ref["td_errors"].dtype
        _assert_same_dqn(ref, fast)
        obs = {"stack": rng.normal(size=(16, frames, 2)).astype(np.float32)}
        a_ref, _, _ = ref.compute_actions_from_input_dict(obs, explore=False)
        a_fast, _, _ = fast.compute_actions_from_input_dict(obs, explore=False)
        np.testing.assert_array_equal(a_fast, a_ref)
        assert a_fast.dtype == a_ref.dtype


@settings(max_examples=int(os.environ.get("TV_DQN_EXAMPLES", "20")), deadline=None)
@given(seed=st.integers(0, 2**20), frames=st.integers(2, 5), hidden=st.integers(1, 40), dueling=st.booleans(),
       double_q=st.booleans(), rows=st.integers(1, 70), weighted=st.booleans())
def test_the_numpy_learners_gradients_are_torchs(seed, frames, hidden, dueling, double_q, rows, weighted):
    """One step's gradients (the learning rate so small that no weight moves, the clip so large that it never
    scales) equal autograd's, within float32 rounding of the gradient's own scale."""
    ref, fast = _dqn_twins({"num_frames": frames, "hidden": hidden, "dueling": dueling, "double_q": double_q,
                            "seed": seed, "grad_clip": 1e30, "lr": 1e-30})
    with torch.no_grad():
        for w in ref.target.parameters():  # (a target network other than the Q-network)
            w.add_(0.1 * torch.randn_like(w))
    fast.target.load_state_dict(ref.target.state_dict())
    rng = np.random.default_rng(seed)
    batch = {"stack": rng.normal(size=(rows, frames, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(rows, frames, 2)).astype(np.float32),
             "actions": rng.integers(0, 2, rows), "rewards": rng.normal(size=rows).astype(np.float32) * 3,
             "terminateds": rng.random(rows) < 0.2}
    w = rng.uniform(0.1, 1, rows).astype(np.float32) if weighted else None
    ref.learn_on_replay(batch, w)
    fast.learn_on_replay(batch, w)
    grads = fast.numpy_learner().flat.grads
    scale = max(float(p.grad.abs().max()) for p in ref.q.parameters())
    for (k, p), q in zip(ref.q.named_parameters(), fast.q.parameters()):
        np.testing.assert_allclose(grads[id(q)], p.grad.numpy(), rtol=1e-3, atol=1e-4 * scale + 1e-8, err_msg=k)


def test_a_dqn_checkpoint_resumes_under_either_learner():
    """The numpy learner's state (torch Adam's) loads into a torch-learner policy and the other way, including into
    a numpy learner that has bound its buffers already: training goes on alike."""
    cfg = {"num_frames": 3, "hidden": 16, "seed": 1, "target_update_interval": 2}
    ref, fast = _dqn_twins(cfg)
    rng = np.random.default_rng(2)
    batches = [{"stack": rng.normal(size=(32, 3, 2)).astype(np.float32),
                "next_stack": rng.normal(size=(32, 3, 2)).astype(np.float32), "actions": rng.integers(0, 2, 32),
                "rewards": rng.normal(size=32).astype(np.float32), "terminateds": rng.random(32) < 0.2}
               for _ in range(6)]
    for b in batches[:3]:
        ref.learn_on_replay(b)
        fast.learn_on_replay(b)
    import io

    def through_file(state):
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        return torch.load(buf, weights_only=False)  # (a test of our own bytes: the rng state is a dict of ints)

    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    torch_next = DQNPolicy(env.observation_space, env.action_space, {**cfg, "learner": "torch"})
    torch_next.set_state(through_file(fast.get_state()))
    fast.set_state(through_file(ref.get_state()))
    for b in batches[3:]:
        for p in (ref, fast, torch_next):
            p.learn_on_replay(b)
    _assert_same_dqn(ref, fast)
    _assert_same_dqn(ref, torch_next)


def test_dqn_learner_setting_is_checked_and_the_cli_takes_it(tmp_path):
    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    with pytest.raises(ValueError, match=r"learner must be one of \['auto', 'numpy', 'torch'\], got 'gpu'"):
        DQNPolicy(env.observation_space, env.action_space, {"learner": "gpu"})
    with pytest.raises(ValueError, match=r"learner \(--learner\) must be one of"):
        DQNConfig(learner="fast")
    out = tmp_path / "dqn"
    assert main(["train", "--algo", "dqn", "--timesteps", "1200", "--out", str(out), "--no-progress", "--learner",
                 "torch"]) == 0
    assert read_checkpoint(out / "checkpoint", weights=False).config["learner"] == "torch"


def test_a_new_dqn_optimizer_that_the_numpy_learner_does_not_take_goes_to_torch():
    """"auto" checks again when the optimizer changes (as PPO's: one rule, `numpy_nets.LearnerChoice`)."""
    import gymnasium as gym

    from trajview.algorithms.dqn import DQNPolicy

    env = gym.make("trajview/StatelessCartPole-v1")
    fast = DQNPolicy(env.observation_space, env.action_space, {"num_frames": 2, "hidden": 8, "seed": 3})  # "auto"
    rng = np.random.default_rng(0)
    batch = {"stack": rng.normal(size=(8, 2, 2)).astype(np.float32), "next_stack": rng.normal(size=(8, 2, 2)).astype(np.float32),
             "actions": rng.integers(0, 2, 8), "rewards": np.ones(8, np.float32), "terminateds": np.zeros(8, bool)}
    fast.learn_on_replay(batch)
    assert fast.numpy_learner() is not None
    fast.optimizer = torch.optim.Adam(fast.q.parameters(), lr=1e-3, weight_decay=0.1)
    assert fast.numpy_learner() is None
    fast.learn_on_replay(batch)
    assert all(q in fast.optimizer.state for q in fast.q.parameters())  # torch's Adam took the step


@pytest.mark.parametrize("start", [-2, 5])
def test_dqn_acts_and_learns_in_a_discrete_space_that_does_not_start_at_zero(start):
    """``Discrete(n, start=k)``: the Q-network's output i is action k + i, greedy and random; learning reads the
    actions back the same way (both learners alike); an action outside the space is refused naming the column."""
    import gymnasium as gym

    ref, fast = _dqn_twins({"num_frames": 3, "hidden": 8, "lr": 1e-4}, gym.spaces.Discrete(3, start=start))
    rng = np.random.default_rng(0)
    for p in (ref, fast):
        for eps in (0.0, 1.0):
            p.epsilon = eps
            a, _, _ = p.compute_actions_from_input_dict({"stack": rng.normal(size=(200, 3, 2)).astype(np.float32)})
            assert set(a.tolist()) <= set(range(start, start + 3)) and (eps == 0.0 or len(set(a.tolist())) == 3)
    batch = {"stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
             "actions": rng.integers(start, start + 3, 16), "rewards": np.ones(16, np.float32),
             "terminateds": np.zeros(16, bool)}
    for _ in range(3):
        assert fast.learn_on_replay(batch)["td_loss"] == pytest.approx(ref.learn_on_replay(batch)["td_loss"], rel=1e-3)
    _assert_same_dqn(ref, fast)
    batch["actions"] = np.full(16, start + 3)
    for p in (ref, fast):
        with pytest.raises(ValueError, match=rf"column 'actions': a Discrete\(3, start={start}\) action must be in"):
            p.learn_on_replay(batch)


def test_a_dqn_parameter_frozen_under_a_bound_learner_goes_to_torch_or_says_why():
    ref, fast = _dqn_twins({"num_frames": 3, "hidden": 8, "lr": 1e-3})
    rng = np.random.default_rng(0)
    batch = {"stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(16, 3, 2)).astype(np.float32), "actions": rng.integers(0, 2, 16),
             "rewards": np.ones(16, np.float32), "terminateds": np.zeros(16, bool)}
    ref.learn_on_replay(batch)
    fast.learn_on_replay(batch)
    for p in (ref, fast):
        next(iter(p.q.parameters())).requires_grad_(False)
    with pytest.raises(ValueError, match="the numpy learner cannot train this policy any more: the parameters"):
        fast.learn_on_replay(batch)
    fast.config["learner"] = "auto"
    frozen = next(iter(fast.q.parameters())).detach().clone()
    ref.learn_on_replay(batch)
    fast.learn_on_replay(batch)
    assert fast.numpy_learner() is None and torch.equal(next(iter(fast.q.parameters())), frozen)
    _assert_same_dqn(ref, fast)


def test_learning_steps_set_numpys_blas_limit_once_for_the_block(monkeypatch):
    """Inside `DQNPolicy.learning_steps`, the BLAS thread limit is set once (not at each gradient step), the steps
    run under it, and it is put back after the block; a step outside a block sets it itself."""
    from trajview.algorithms import numpy_nets

    _, fast = _dqn_twins({"num_frames": 3, "hidden": 8, "lr": 1e-3})
    rng = np.random.default_rng(0)
    batch = {"stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(16, 3, 2)).astype(np.float32), "actions": rng.integers(0, 2, 16),
             "rewards": np.ones(16, np.float32), "terminateds": np.zeros(16, bool)}
    fast.learn_on_replay(batch)  # (the controller made)
    limits = []
    libs = numpy_nets._blas_libraries()
    assert libs, "threadpoolctl finds numpy's BLAS"
    real = numpy_nets._blas_held
    monkeypatch.setattr(numpy_nets, "_blas_held", lambda libs, threads: limits.append(threads) or real(libs, threads))
    outside = [c.get_num_threads() for c in libs]
    monkeypatch.setattr(torch, "get_num_threads", lambda: max(outside) + 1)  # (a count numpy's BLAS is not at)
    threads = torch.get_num_threads()
    with fast.learning_steps():
        assert numpy_nets._BLAS_HELD == [threads] and [c.get_num_threads() for c in libs] == [threads] * len(libs)
        for _ in range(5):
            fast.learn_on_replay(batch)
    assert limits == [threads] and numpy_nets._BLAS_HELD == []
    assert [c.get_num_threads() for c in libs] == outside  # (put back)
    fast.learn_on_replay(batch)
    assert limits == [threads, threads]


def test_learning_steps_check_the_numpy_learner_once_and_again_after_the_block(monkeypatch):
    """`DQNPolicy.learning_steps` (a trainer's run of gradient steps): the numpy learner's support is checked at the
    block's first step only, and at each step again after it; the steps are the same as without the block."""
    from trajview.algorithms import dqn as dqn_module

    ref, fast = _dqn_twins({"num_frames": 3, "hidden": 8, "lr": 1e-3})  # torch, numpy
    fast.config["learner"] = "auto"
    calls = []
    real = dqn_module.numpy_supported
    monkeypatch.setattr(dqn_module, "numpy_supported", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(0)
    batches = [{"stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
                "next_stack": rng.normal(size=(16, 3, 2)).astype(np.float32), "actions": rng.integers(0, 2, 16),
                "rewards": np.ones(16, np.float32), "terminateds": np.zeros(16, bool)} for _ in range(4)]
    fast.learn_on_replay(batches[0])
    ref.learn_on_replay(batches[0])
    calls.clear()
    with fast.learning_steps():
        for b in batches:
            fast.learn_on_replay(b)
    assert len(calls) == 1
    for b in batches:
        ref.learn_on_replay(b)
    _assert_same_dqn(ref, fast)
    calls.clear()
    fast.learn_on_replay(batches[0])
    fast.learn_on_replay(batches[1])
    assert len(calls) == 2
    # A change inside the block before its first step is seen; a policy the learner no longer takes goes to torch.
    with fast.learning_steps():
        next(iter(fast.q.parameters())).requires_grad_(False)
        fast.learn_on_replay(batches[2])
        assert fast.numpy_learner() is None


@pytest.mark.parametrize("budget_batches", [None, 3, 1])
def test_uniform_gradient_steps_cut_their_samples_from_draws_of_several_steps(tmp_path, monkeypatch, budget_batches):
    """`DQNTrainer._uniform_samples`: a round's ``gradient_steps`` samples of ``batch_size`` rows each, in order,
    cut from draws of several steps' rows (the first draw of a run one step's, to learn the row size; then as many
    steps as fit in `GROUPED_SAMPLE_BYTES`, at least one): every row drawn is used once, nothing else."""
    from trajview.train import dqn_trainer

    c = DQNConfig(timesteps=10_000, iteration_steps=64, learning_starts=10_000, gradient_steps=7, batch_size=5,
                  envs=2, out_dir=str(tmp_path), stop_reward=None)
    tr = DQNTrainer(c)
    try:
        tr.train_iteration()  # (64 env steps stored, no gradient step: learning_starts)
        drawn, real = [], tr.buffer.sample
        monkeypatch.setattr(tr.buffer, "sample", lambda n, **kw: drawn.append(real(n, **kw)) or drawn[-1])
        row = None
        for round_ in range(3):
            if budget_batches is not None and row is not None:
                monkeypatch.setattr(dqn_trainer, "GROUPED_SAMPLE_BYTES", budget_batches * c.batch_size * row)
            drawn.clear()
            got = list(tr._uniform_samples())
            row = tr._sample_row_bytes
            assert row == sum(v.nbytes for v in dict.values(drawn[0])) // len(drawn[0]) > 0
            assert len(got) == c.gradient_steps and all(len(s) == c.batch_size for s in got)
            sizes = [len(d) // c.batch_size for d in drawn]
            if round_ == 0:
                assert sizes[0] == 1
            per_draw = c.gradient_steps if budget_batches is None or round_ == 0 else budget_batches
            want, left = [], c.gradient_steps - (1 if round_ == 0 else 0)
            while left > 0:
                want.append(min(left, per_draw))
                left -= want[-1]
            assert sizes == ([1] if round_ == 0 else []) + want
            for k in ("stack", "next_stack", "actions", "rewards", "terminateds"):
                np.testing.assert_array_equal(np.concatenate([s[k] for s in got]),
                                              np.concatenate([d[k] for d in drawn]))
    finally:
        tr.worker.stop()


@pytest.mark.parametrize("prioritized", [False, True])
def test_the_trainers_replay_samples_gather_the_columns_the_update_reads(tmp_path, prioritized):
    """`DQNPolicy.replay_columns`: the trainer's replay samples hold the columns `learn_on_replay` reads (and
    ``is_init``; their values are a whole sample's: `test_replay_property`), uniform or prioritized; a subclass or a
    function set on the instance that changes how it learns gets every column."""
    from trajview.algorithms.dqn import REPLAY_COLUMNS, DQNPolicy

    c = DQNConfig(timesteps=10_000, iteration_steps=64, learning_starts=10_000, gradient_steps=3, batch_size=8,
                  envs=2, out_dir=str(tmp_path), stop_reward=None, prioritized=prioritized)
    tr = DQNTrainer(c)
    try:
        tr.train_iteration()  # (64 env steps stored, no gradient step: learning_starts)
        samples = [s for s, _ in tr._replay_samples()]
        assert len(samples) == c.gradient_steps
        for s in samples:
            assert sorted(s) == sorted(REPLAY_COLUMNS + ("is_init",))
    finally:
        tr.worker.stop()

    class Changed(DQNPolicy):
        def learn_on_replay(self, batch, weights=None):
            return super().learn_on_replay(batch, weights)

    policy = tr.policy
    assert policy.replay_columns() == REPLAY_COLUMNS
    for name in ("learn_on_replay", "_learn_torch"):  # a wrapper set on the instance reads what it likes
        setattr(policy, name, getattr(policy, name))
        assert policy.replay_columns() is None
        delattr(policy, name)
        assert policy.replay_columns() == REPLAY_COLUMNS
    policy.__class__ = Changed
    assert policy.replay_columns() is None


def test_the_numpy_learners_steps_run_with_denormals_flushed_in_a_block_and_alone(monkeypatch):
    """Every numpy gradient step runs with denormal floats flushed to zero (`flushed_denormals`): inside
    `DQNPolicy.learning_steps` the block holds the mode (its later steps enter nothing), alone each step sets it;
    the caller's mode is back after either."""
    from trajview import _core

    def mode() -> bool:
        previous = _core.set_flush_denormals(True)
        _core.restore_flush_denormals(previous)
        return bool(previous)

    _, fast = _dqn_twins({"num_frames": 3, "hidden": 8, "lr": 1e-3})
    fast.config["learner"] = "auto"
    rng = np.random.default_rng(0)
    batch = {"stack": rng.normal(size=(16, 3, 2)).astype(np.float32),
             "next_stack": rng.normal(size=(16, 3, 2)).astype(np.float32), "actions": rng.integers(0, 2, 16),
             "rewards": np.ones(16, np.float32), "terminateds": np.zeros(16, bool)}
    learner = fast.numpy_learner()
    assert learner is not None
    seen, repeats, real = [], [], learner._learn
    real_learn = learner.learn
    monkeypatch.setattr(learner, "_learn", lambda *a: seen.append(mode()) or real(*a))
    monkeypatch.setattr(learner, "learn", lambda *a, **k: repeats.append(k.get("repeat")) or real_learn(*a, **k))
    outside = mode()
    fast.learn_on_replay(batch)
    with fast.learning_steps():
        for _ in range(3):
            fast.learn_on_replay(batch)
        assert mode()
    assert mode() == outside and seen == [True] * 4 and repeats == [False, False, True, True]
