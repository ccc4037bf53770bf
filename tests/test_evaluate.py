"""`trajview evaluate`: a run's policy over N episodes, checked against a plain loop that acts with the same
weights (deterministic actions, the env seeded as the worker seeds it); its one-line errors."""

from __future__ import annotations

import collections
import importlib.util

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trajview.train.cli import main  # noqa: E402
from trajview.train.evaluate import evaluate  # noqa: E402
from trajview.train.saved import load_trained  # noqa: E402

PPO_SMALL = ["--env", "CartPole-v1", "--model", "mlp", "--envs-per-worker", "4", "--train-batch-size", "200",
             "--minibatch-size", "50", "--num-sgd-iter", "2", "--timesteps", "400", "--no-progress"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "ppo"
    assert main(["train", *PPO_SMALL, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "dqn"
    assert main(["train", "--algo", "dqn", "--env", "CartPole-v1", "--timesteps", "300", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def _reference(env_id, act, episodes, seed):
    """Returns and lengths of ``episodes`` episodes of one env (the first reset seeded, as a RolloutWorker does),
    acting with ``act(obs, t)``."""
    env = gym.make(env_id)
    returns, lengths = [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, t, done = 0.0, 0, False
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs, t))
            total += float(r)
            t += 1
            done = term or trunc
        returns.append(total)
        lengths.append(t)
        obs, _ = env.reset()
    return returns, lengths


def test_ppo_evaluation_equals_a_plain_loop_with_the_runs_weights(ppo_run):
    trained = load_trained(ppo_run)
    ev = evaluate(trained, episodes=4, seed=5)
    policy = load_trained(ppo_run / "checkpoint").policy  # the checkpoint folder reads the same

    def act(obs, t):
        return int(policy.compute_single_action(obs, explore=False)[0])

    assert (ev.returns, ev.lengths) == _reference("CartPole-v1", act, 4, 5)


def test_dqn_evaluation_equals_a_plain_loop_with_a_zero_padded_frame_stack(dqn_run):
    trained = load_trained(dqn_run)
    ev = evaluate(trained, episodes=3, seed=2)
    q = trained.policy.q
    k = trained.policy.num_frames
    frames: collections.deque = collections.deque(maxlen=k)

    def act(obs, t):
        if t == 0:
            frames.extend([np.zeros_like(obs)] * k)
        frames.append(obs)
        with torch.no_grad():
            return int(q(torch.as_tensor(np.stack(frames)[None], dtype=torch.float32)).argmax(1)[0])

    assert (ev.returns, ev.lengths) == _reference("CartPole-v1", act, 3, 2)


def test_evaluate_prints_the_table_and_explore_runs_the_episodes_asked(ppo_run, capsys):
    assert main(["evaluate", str(ppo_run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    ev = evaluate(load_trained(ppo_run), episodes=3, seed=0)
    s = ev.summary()
    row = out.strip().splitlines()[-1]
    assert "| ppo | CartPole-v1 |" in row and "| deterministic |" in row
    assert f"| {s['return_mean']:.2f} | {s['return_std']:.2f} | {s['length_mean']:.2f} | {s['length_std']:.2f} |" in row
    assert s["return_std"] == pytest.approx(float(np.std(ev.returns)))
    explored = evaluate(load_trained(ppo_run), episodes=5, explore=True)
    assert len(explored.returns) == len(explored.lengths) == 5


def _err(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_path_without_a_run_is_one_line_exit_2(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "none")]) == 2
    assert "no such file or folder" in _err(capsys)
    (tmp_path / "f").write_text("x")
    assert main(["evaluate", str(tmp_path / "f")]) == 2
    assert "is a file" in _err(capsys)
    (tmp_path / "empty").mkdir()
    assert main(["evaluate", str(tmp_path / "empty")]) == 2
    assert "holds no checkpoint" in _err(capsys)
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "empty"), "--episodes", "0"])


def test_a_damaged_checkpoint_is_one_line_exit_2(ppo_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ppo_run, run)
    weights = next((run / "checkpoint").glob("gen-*/weights.pt"))
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["evaluate", str(run)]) == 2
    err = _err(capsys)
    assert "weights.pt" in err and "put back a copy" in err


class _NoRender(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_modes": []}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 5, False, {}


if "tvtest/NoRender-v0" not in gym.registry:
    gym.register("tvtest/NoRender-v0", entry_point=_NoRender)


class _BrokenRender(_NoRender):
    """Says it renders rgb_array frames, but cannot draw one (as classic control without pygame)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def render(self):
        raise ImportError("pygame is not installed, run `pip install pygame`")


if "tvtest/BrokenRender-v0" not in gym.registry:
    gym.register("tvtest/BrokenRender-v0", entry_point=_BrokenRender)


def test_video_of_an_env_that_cannot_draw_a_frame_is_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "broken"
    assert main(["train", *PPO_SMALL, "--env", "tvtest/BrokenRender-v0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--video", str(tmp_path / "v")]) == 2
    assert ("--video: tvtest/BrokenRender-v0 could not render an rgb_array frame: ImportError: pygame is not "
            "installed") in _err(capsys)


def test_video_of_an_env_that_does_not_render_and_without_moviepy_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    out = tmp_path / "norender"
    assert main(["train", *PPO_SMALL, "--env", "tvtest/NoRender-v0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--episodes", "2"]) == 0
    assert "| 2 | deterministic | 5.00 | 0.00 | 5.00 | 0.00 |" in capsys.readouterr().out
    assert main(["evaluate", str(out), "--video", str(tmp_path / "v")]) == 2
    assert "does not render rgb_array frames" in _err(capsys)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moviepy" else real(name, *a))
    assert main(["train", *PPO_SMALL, "--out", str(tmp_path / "cp")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "cp"), "--video", str(tmp_path / "v")]) == 2
    assert "pip install 'trajview[video]'" in _err(capsys)


@pytest.mark.skipif(importlib.util.find_spec("moviepy") is None, reason="--video writes mp4 files with moviepy")
def test_video_records_each_episode(ppo_run, tmp_path):
    ev = evaluate(load_trained(ppo_run), episodes=2, video_dir=tmp_path / "v")
    assert [p.rsplit("/", 1)[1] for p in ev.videos] == ["eval-episode-0.mp4", "eval-episode-1.mp4"]


class _Endless(_NoRender):
    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


if "tvtest/Endless-v0" not in gym.registry:
    gym.register("tvtest/Endless-v0", entry_point=_Endless)


def test_evaluate_gives_up_on_episodes_that_never_end(tmp_path):
    from trajview.train.evaluate import EvaluateError

    out = tmp_path / "norender"
    assert main(["train", *PPO_SMALL, "--env", "tvtest/NoRender-v0", "--out", str(out)]) == 0
    trained = load_trained(out)
    trained.config.env = "tvtest/Endless-v0"  # the same spaces, episodes that never end
    with pytest.raises(EvaluateError, match=r"1000 env steps and only 0 of 2 episodes ended: does "
                                            r"tvtest/Endless-v0 end its episodes\?"):
        evaluate(trained, episodes=2, max_steps=1000)


@pytest.mark.parametrize("run", ["ppo_run", "dqn_run"])
def test_explore_is_reproducible_from_the_seed_and_leaves_the_callers_rngs_alone(run, request):
    """B6: PPO's sampled actions came from torch's global RNG, never seeded by evaluate (each run of the command
    gave other returns); DQN's epsilon-greedy RNG, the policy's own, went on from one evaluation to the next."""
    trained = load_trained(request.getfixturevalue(run))
    torch.manual_seed(123)
    torch_state = torch.get_rng_state()
    rng_state = trained.policy.get_state()["rng"] if trained.algo == "dqn" else None
    first = evaluate(trained, episodes=4, explore=True, seed=3)
    assert torch.equal(torch.get_rng_state(), torch_state)
    if rng_state is not None:
        assert trained.policy.get_state()["rng"] == rng_state
    torch.manual_seed(456)  # the caller's RNG elsewhere: the evaluation does not read it
    again = evaluate(trained, episodes=4, explore=True, seed=3)
    assert (again.returns, again.lengths) == (first.returns, first.lengths)
    assert evaluate(load_trained(request.getfixturevalue(run)), episodes=4, explore=True, seed=3).returns == \
        first.returns
    # Exploration matters for these barely trained policies: another seed, or no exploration, other episodes.
    assert evaluate(trained, episodes=4, explore=True, seed=4).returns != first.returns
    assert evaluate(trained, episodes=4, seed=3).returns != first.returns
    assert evaluate(trained, episodes=4, seed=3).returns == evaluate(trained, episodes=4, seed=3).returns


def test_the_command_with_explore_prints_the_same_table_for_the_same_seed(ppo_run, capsys):
    tables = []
    for _ in range(2):
        torch.manual_seed(len(tables))  # whatever the process's RNG holds
        assert main(["evaluate", str(ppo_run), "--episodes", "4", "--explore", "--seed", "7"]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1] and "| explore |" in tables[0]


def test_a_seed_out_of_range_is_refused_naming_the_option(ppo_run):
    trained = load_trained(ppo_run)
    for bad in (-1, 2**32, 10**23, 1.5, True):
        with pytest.raises(ValueError, match=r"^--seed must be an int in \[0, 4294967295\], got "):
            evaluate(trained, episodes=1, seed=bad)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_runs_env_that_is_not_registered_here_is_named_as_the_runs_env(tmp_path, capsys, algo):
    """A run on an env registered in the training process only (a Python ``gym.register``): evaluate and export
    name it as the run's env with the --env-module hint (before: as ``--env``, an option neither command has; DQN:
    gymnasium's bare error)."""
    env_id = f"tvtest/GoneAfterTraining{algo}-v0"
    gym.register(env_id, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=50)
    out = tmp_path / "run"
    try:
        if algo == "ppo":
            args = [a if a != "CartPole-v1" else env_id for a in PPO_SMALL]
        else:
            args = ["--algo", "dqn", "--env", env_id, "--timesteps", "300", "--no-progress"]
        assert main(["train", *args, "--out", str(out)]) == 0
    finally:
        del gym.registry[env_id]
    capsys.readouterr()
    for command in (["evaluate", str(out)], ["export", str(out), "--out", str(tmp_path / "policy.pt")]):
        assert main(command) == 2
        err = _err(capsys)
        assert err.startswith(f"trajview {command[0]}: error: the run's env {env_id}: "), err
        assert "--env-module MODULE" in err and "--env " not in err, err
