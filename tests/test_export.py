"""`trajview export` and examples/serve_exported.py: the exported file, acted from by the example's runner (no
trajview inside it), takes the policy's own deterministic actions at every step of a RolloutWorker's episodes,
for every model and the action / observation spaces trajview trains, in TorchScript and ONNX."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from trajview.algorithms.dqn import DQNPolicy  # noqa: E402
from trajview.train.cli import main  # noqa: E402
from trajview.train.export import ExportError, export_policy, view_spec  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "serve_exported.py"
_spec = importlib.util.spec_from_file_location("serve_exported", EXAMPLE)
serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve)

FORMATS = ["torchscript", pytest.param("onnx", marks=pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="the export extra (onnx, onnxruntime) is not installed"))]


class DictObsEnv(gym.Env):
    """A Dict observation (a vector and a discrete leaf) whose reward depends on the past: 12-step episodes."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                                         "room": gym.spaces.Discrete(4)})
    action_space = gym.spaces.Discrete(3)
    length = 12

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return {"pos": self.np_random.uniform(-1, 1, 3).astype(np.float32), "room": int(self.np_random.integers(4))}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action == self.t % 3), self.t >= self.length, False, {}


class ImageObsEnv(DictObsEnv):
    """A MiniGrid-like observation: a channels-last uint8 image (HxWxC) and a direction; 10-step episodes."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
                                         "direction": gym.spaces.Discrete(4)})
    length = 10

    def _obs(self):
        return {"image": self.np_random.integers(0, 256, (7, 7, 3), dtype=np.uint8),
                "direction": int(self.np_random.integers(4))}


if "tvtest/DictObs-v0" not in gym.registry:
    gym.register("tvtest/DictObs-v0", entry_point=DictObsEnv)
if "tvtest/ImageObs-v0" not in gym.registry:
    gym.register("tvtest/ImageObs-v0", entry_point=ImageObsEnv)

CASES = {
    "mlp": ("trajview/StatelessCartPole-v1", {"model": "mlp"}),
    "framestack": ("trajview/StatelessCartPole-v1", {"model": "framestack", "model_config": {"num_frames": 4}}),
    "lstm": ("trajview/StatelessCartPole-v1", {"model": "lstm", "model_config": {"max_seq_len": 8,
                                                                                  "prev_action": True}}),
    "attention": ("trajview/StatelessCartPole-v1", {"model": "attention", "model_config": {
        "max_seq_len": 8, "memory": 6, "attention_dim": 16, "num_layers": 2}}),
    "framestack-box-actions": ("Pendulum-v1", {"model": "framestack", "model_config": {"num_frames": 3}}),
    "lstm-then-mlp": ("trajview/StatelessCartPole-v1", {"model": "lstm", "model_config": {
        "max_seq_len": 8, "hidden": 0, "post_hidden": [16, 16]}}),
    "lstm-dict-obs": ("tvtest/DictObs-v0", {"model": "lstm", "model_config": {"max_seq_len": 5, "prev_action": True,
                                                                               "prev_reward": True}}),
    "mlp-image-dict-obs": ("tvtest/ImageObs-v0", {"model": "mlp"}),
    "framestack-image-dict-obs": ("tvtest/ImageObs-v0", {"model": "framestack", "model_config": {"num_frames": 2}}),
    "dqn": ("CartPole-v1", None),
}


def _policy(case):
    env_id, cfg = CASES[case]
    env = gym.make(env_id)
    torch.manual_seed(7)
    if cfg is None:
        p = DQNPolicy(env.observation_space, env.action_space, {"num_frames": 3, "seed": 3})
        p.epsilon = 0.0
    else:
        p = tv.PPOPolicy(env.observation_space, env.action_space, cfg)
    env.close()
    p.keep_views = {"obs"}  # the frame-stack models read only their stacks; the runner is given each obs
    return env_id, p


def _episodes(env_id, policy, steps):
    """A worker's deterministic episodes: per episode, (observations, actions, rewards) in step order."""
    w = tv.RolloutWorker(lambda c: gym.make(env_id), policy, num_envs=2, batch_mode="complete_episodes",
                         rollout_fragment_length=steps, seed=4, explore=False)
    b = w.sample()
    w.stop()
    out = []
    leaves = [k for k in b.keys() if k.startswith("obs.")]
    for eps in np.unique(b["eps_id"]):
        rows = np.flatnonzero(b["eps_id"] == eps)
        rows = rows[np.argsort(b["t"][rows])]
        assert list(b["t"][rows]) == list(range(len(rows)))
        if leaves:
            obs = [{k[4:]: b[k][i] for k in leaves} for i in rows]
        else:
            obs = [b["obs"][i] for i in rows]
        out.append((obs, b["actions"][rows], b["rewards"][rows]))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_exported_file_takes_the_policys_actions_at_every_step(case, fmt, tmp_path):
    env_id, policy = _policy(case)
    path = tmp_path / ("policy.onnx" if fmt == "onnx" else "policy.pt")
    spec = export_policy(policy, path, fmt, env=env_id)
    runner = serve.ExportedPolicy(path)
    assert runner.spec == json.loads(json.dumps(spec))
    steps = 0
    for obs, actions, rewards in _episodes(env_id, policy, 60):
        runner.reset()
        for o, a, r in zip(obs, actions, rewards):
            got = runner.act(o)
            if isinstance(policy.action_space, gym.spaces.Box):
                np.testing.assert_allclose(got, a, rtol=1e-5, atol=1e-5)
            else:
                assert got == a, (steps, got, a)
            runner.reward(float(r))
            steps += 1
    assert steps >= 60


def test_the_view_spec_says_what_each_input_reads():
    _, fs = _policy("framestack")
    spec = view_spec(fs, env="x")
    assert spec["format"] == "trajview-exported-policy" and spec["version"] == 1 and spec["env"] == "x"
    by = {i["name"]: i for i in spec["inputs"]}
    assert by["prev_n_obs"] == {"name": "prev_n_obs", "column": "obs", "shift": [-3, -2, -1, 0], "stacked": True,
                                "shape": [2], "dtype": "float32"}
    assert by["prev_n_actions"]["column"] == "actions" and by["prev_n_actions"]["shift"] == [-4, -3, -2, -1]
    assert by["prev_n_rewards"]["dtype"] == "float64"
    assert spec["outputs"] == [{"name": "actions", "shape": [], "dtype": "int64"}]
    _, lstm = _policy("lstm-dict-obs")
    spec = view_spec(lstm)
    names = [i["name"] for i in spec["inputs"]]
    assert {"obs.pos", "obs.room", "prev_actions", "prev_rewards", "state_in_0"} <= set(names)
    assert spec["columns"]["state_out_0"] == {"shape": [32], "dtype": "float32", "before_start": "zeros"} or \
        spec["columns"]["state_out_0"]["before_start"] == "zeros"
    assert [o["name"] for o in spec["outputs"]] == ["actions", "state_out_0", "state_out_1", "state_out_2",
                                                    "state_out_3"]


def test_a_policy_reading_what_a_runner_cannot_know_is_refused(tmp_path):
    _, p = _policy("mlp")
    p.view_requirements["env_id"].used_for_compute_actions = True

    class ReadsEnvId(tv.PPOPolicy):
        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            _ = d["env_id"]
            return super().compute_actions_from_input_dict(d, explore, timestep, **kw)

    env = gym.make("CartPole-v1")
    q = ReadsEnvId(env.observation_space, env.action_space, {"model": "mlp"})
    with pytest.raises(ExportError, match="reads view 'env_id'.*which a runner outside trajview does not know"):
        export_policy(q, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    with pytest.raises(ExportError, match="^fmt must be one of torchscript, onnx, got 'tflite'"):
        export_policy(p, tmp_path / "x.pt", "tflite")
    with pytest.raises(ExportError, match="^--format must be one of torchscript, onnx, got 'tflite'"):
        export_policy(p, tmp_path / "x.pt", "tflite", cli=True)


def test_the_command_exports_a_run_and_the_runner_plays_its_env(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "CartPole-v1", "--model", "framestack", "--model-config", '{"num_frames": 3}',
                 "--envs-per-worker", "4", "--train-batch-size", "200", "--minibatch-size", "50", "--num-sgd-iter",
                 "2", "--timesteps", "400", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["export", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out / 'policy.pt'} (torchscript): ppo framestack on CartPole-v1; inputs: "
                           f"prev_n_obs (obs at -2..0, float32 (4,))")
    runner = serve.ExportedPolicy(out / "policy.pt")
    assert runner.spec["algo"] == "ppo" and runner.spec["iteration"] == 2 and runner.spec["env_steps"] == 400
    # The exported policy plays as `trajview evaluate` (deterministic, the same seed): the same returns.
    from trajview.train.evaluate import evaluate
    from trajview.train.saved import load_trained

    ev = evaluate(load_trained(out), episodes=3, seed=11)
    assert serve.run_episodes(runner, "CartPole-v1", 3, seed=11) == ev.returns
    assert main(["export", str(out), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    # B9: an --out in a folder that does not exist named the temporary file atomic_write writes first.
    missing = tmp_path / "no" / "such" / "dir" / "policy.pt"
    assert main(["export", str(out), "--out", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"trajview export: error: --out {missing}: its folder {missing.parent} does not exist: create "
                   f"it or give another --out")
    assert not (tmp_path / "no").exists()


def test_an_out_that_cannot_take_the_file_is_refused_before_the_export_naming_out(tmp_path, monkeypatch):
    import trajview.train.export as export_mod

    _, p = _policy("mlp")

    def no_export(*a, **k):
        raise AssertionError("the export ran before --out was checked")

    def refused(path, message):
        with pytest.raises(ExportError, match="^" + re.escape(message)):
            export_policy(p, path)

    with monkeypatch.context() as m:
        m.setattr(export_mod, "view_spec", no_export)
        missing = tmp_path / "no" / "such" / "policy.pt"
        refused(missing, f"path {missing}: its folder {missing.parent} does not exist: create it or give another "
                         f"path")
        refused(tmp_path, f"path {tmp_path} is a folder: give the file to write")
        (tmp_path / "f").write_text("x")
        refused(str(tmp_path / "f" / "p.pt"), f"path {tmp_path / 'f' / 'p.pt'}: {tmp_path / 'f'} is a file, not a "
                                              f"folder")
        with pytest.raises(ExportError, match="^" + re.escape(f"--out {tmp_path} is a folder")):
            export_policy(p, tmp_path, cli=True)  # (trajview export's errors name its option)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f"]

    def full_disk(path, data):  # as atomic_write fails: the OSError names its temporary sibling
        raise OSError(28, "No space left on device", str(path.with_name(f".{path.name}.tmp-1-00000000")))

    monkeypatch.setattr(export_mod, "atomic_write", full_disk)
    with pytest.raises(ExportError) as e:
        export_policy(p, tmp_path / "p.pt")
    assert str(e.value) == f"path {tmp_path / 'p.pt'}: cannot write it: No space left on device"


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="the export extra (onnx) is not installed")
def test_onnx_holds_the_spec_in_its_metadata(tmp_path):
    import onnx

    _, p = _policy("lstm")
    spec = export_policy(p, tmp_path / "p.onnx", "onnx", env="e")
    model = onnx.load(str(tmp_path / "p.onnx"))
    meta = {e.key: e.value for e in model.metadata_props}
    assert json.loads(meta["view_spec"]) == json.loads(json.dumps(spec))
    assert [i.name for i in model.graph.input] == [i["name"] for i in spec["inputs"]]
    assert [o.name for o in model.graph.output] == [o["name"] for o in spec["outputs"]]
    # The runner tells the format by the content, not the name.
    export_policy(p, tmp_path / "p.bin", "onnx")
    export_policy(p, tmp_path / "q.bin", "torchscript")
    r = serve.ExportedPolicy(tmp_path / "p.bin")
    assert r._run == r._run_onnx
    assert serve.ExportedPolicy(tmp_path / "q.bin").spec["inputs"] == spec["inputs"]
