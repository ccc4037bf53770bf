"""Acting from a file that ``trajview export`` wrote, without trajview's training stack.

`ExportedPolicy` needs numpy and either torch (a TorchScript file, read with ``torch.jit.load``) or onnxruntime
(an ``.onnx`` file). It reads the view spec stored in the file and keeps each episode's recent history, so it
feeds the network exactly what a trajview `RolloutWorker` would have built: frame stacks, previous actions and
rewards, recurrent state, attention memory.

    trajview train --model framestack --out runs/fs
    trajview export runs/fs --format torchscript --out fs.pt
    python examples/serve_exported.py fs.pt --episodes 5          # acts in the run's env (gymnasium)
    python examples/serve_exported.py --smoke                     # a few seconds, checks itself

Each step: ``action = policy.act(obs)``, then, after ``env.step(action)``, ``policy.reward(reward)``;
``policy.reset()`` when an episode ends.

``--smoke`` needs trajview (and onnxruntime for the ONNX half): it exports untrained frame-stack and LSTM
policies, lets a RolloutWorker play deterministic episodes, and checks that `ExportedPolicy` replaying the
same observations takes the worker's actions at every step, for both formats.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tempfile
import warnings
import zipfile
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SPEC_FILE = "view_spec.json"  # TorchScript: an extra file; ONNX: the metadata key "view_spec"
#: ONNX: the metadata entry holding the file's sha256, as serialized (key, then the value's tag and length).
DIGEST_KEY = "content_sha256"
#: TorchScript: the most bytes its compressed entries (code, debug info) may unpack to.
PACKED = 64 << 20
DIGEST_PREFIX = b"\x0a" + bytes([len(DIGEST_KEY)]) + DIGEST_KEY.encode() + b"\x12\x40"
RUNNER_COLUMNS = ("obs", "actions", "rewards", "t")


def flat_obs(obs: Any, name: str = "obs") -> dict[str, np.ndarray]:
    """An observation as its flat columns: ``{"obs": array}``, or one ``"obs.<key>"`` / ``"obs.<i>"`` per leaf
    of a Dict / Tuple observation (trajview's column names)."""
    if isinstance(obs, Mapping):
        return {k: v for key, sub in obs.items() for k, v in flat_obs(sub, f"{name}.{key}").items()}
    if isinstance(obs, tuple):
        return {k: v for i, sub in enumerate(obs) for k, v in flat_obs(sub, f"{name}.{i}").items()}
    return {name: np.asarray(obs)}


def read_checked(path: str | Path, limit: int = 1 << 32) -> bytes:
    """The bytes of an exported file, checked before any loader reads them (a `ValueError` naming the file
    otherwise): a TorchScript archive's zip entries each matching its crc32, the compressed ones (its code)
    unpacking to at most `PACKED` bytes; an ONNX file matching the sha256 in its ``content_sha256`` metadata entry (the
    file's bytes with the digest's 64 characters as "0"s, hashed). A damaged or truncated file is refused, not
    run with other weights."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: not a regular file")
    if p.stat().st_size > limit:
        raise ValueError(f"{p}: {p.stat().st_size} bytes, more than an exported policy's {limit}")
    data = p.read_bytes()
    if data.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                # Compressed entries (torch.jit.save's code and debug info) unpack to at most PACKED bytes: a zip
                # bomb is refused before anything unpacks it. Stored ones (the weights) are within the file.
                packed = sum(i.file_size for i in z.infolist() if i.compress_type != zipfile.ZIP_STORED)
                if packed > PACKED:
                    raise ValueError(f"{p}: its compressed entries unpack to {packed} bytes, more than an exported "
                                     f"policy's code takes ({PACKED})")
                bad = z.testzip()  # (reads every entry, in chunks, and checks its crc32)
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error, NotImplementedError) as e:
            raise ValueError(f"{p}: not a readable TorchScript archive (damaged or truncated): {e}") from None
        if bad is not None:
            raise ValueError(f"{p}: entry {bad!r} does not match its crc32: the file is damaged")
        return data
    at = data.find(DIGEST_PREFIX)
    if at < 0:  # (the entry is written in the file's metadata, after the network: a truncated file lacks it)
        raise ValueError(f"{p}: no {DIGEST_KEY!r} entry: the file is truncated or damaged, or is not an ONNX file "
                         f"trajview exported; re-export it with `trajview export`")
    if data.find(DIGEST_PREFIX, at + 1) >= 0:
        raise ValueError(f"{p}: its {DIGEST_KEY!r} entry is there twice: not an ONNX file trajview exported; "
                         f"re-export it with `trajview export`")
    start = at + len(DIGEST_PREFIX)
    recorded = data[start:start + 64]
    if hashlib.sha256(data[:start] + b"0" * 64 + data[start + 64:]).hexdigest().encode() != recorded:
        raise ValueError(f"{p}: its bytes do not match the sha256 it records: the file is damaged")
    return data


class ExportedPolicy:
    """One episode at a time: ``act(obs)`` returns the deterministic action; ``reward(r)`` records the reward
    the last action got; ``reset()`` starts a new episode."""

    def __init__(self, path: str | Path) -> None:
        data = read_checked(path)  # (the bytes checked are the bytes loaded: nothing can swap the file in between)
        if not data.startswith(b"PK\x03\x04"):  # a TorchScript archive is a zip file; an ONNX model is not
            try:
                import onnxruntime
            except ImportError:
                raise ImportError(f"{path}: an ONNX file, which needs onnxruntime: pip install onnxruntime "
                                  f"(or 'trajview[export]')") from None

            self._session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
            text = self._session.get_modelmeta().custom_metadata_map["view_spec"]
            self._run = self._run_onnx
        else:
            try:
                import torch
            except ImportError:
                raise ImportError(f"{path}: a TorchScript file, which needs torch: pip install torch") from None

            extra = {SPEC_FILE: ""}
            with warnings.catch_warnings():
                # torch 2.13 deprecates TorchScript (in favour of torch.export); its loader still works.
                warnings.filterwarnings("ignore", "`torch.jit.load` is deprecated", DeprecationWarning)
                load: Any = torch.jit.load  # untyped in torch's stubs
                self._module = load(io.BytesIO(data), map_location="cpu", _extra_files=extra)
            text = extra[SPEC_FILE]
            self._run = self._run_torchscript
        self.spec: dict[str, Any] = json.loads(text)
        self.inputs: list[dict[str, Any]] = self.spec["inputs"]
        self.columns: dict[str, dict[str, Any]] = self.spec["columns"]
        self.states = [o["name"] for o in self.spec["outputs"][1:]]
        for inp in self.inputs:
            col = inp["column"]
            if col.split(".", 1)[0] not in RUNNER_COLUMNS and not col.startswith("state_out_"):
                raise ValueError(f"input {inp['name']!r} reads column {col!r}, which this runner does not know")
        #: Rows kept per column: the deepest look-back of any input (at least the current row).
        self.keep = 1 + max([-min(inp["shift"]) for inp in self.inputs] + [0])
        self.reset()

    def reset(self) -> None:
        """A new episode: the history is empty, every view reads the before-start values."""
        self.t = 0
        self.history: dict[str, deque[np.ndarray]] = {c: deque(maxlen=self.keep) for c in self.columns}
        self.count: dict[str, int] = {c: 0 for c in self.columns}

    def _record(self, col: str, value: Any) -> None:
        if col in self.history:
            c = self.columns[col]
            v = np.asarray(value, dtype=c["dtype"])
            if v.size != int(np.prod(c["shape"])):
                raise ValueError(f"column {col!r}: the exported policy reads shape {tuple(c['shape'])}, got "
                                 f"{v.shape} (another env than the run's?)")
            self.history[col].append(v.reshape(c["shape"]))
            self.count[col] += 1

    def _row(self, col: str, row: int) -> np.ndarray:
        c = self.columns[col]
        if col == "t":
            return np.asarray(max(row, 0), dtype=c["dtype"])
        if row < 0:
            before = c["before_start"]
            if before == "zeros":
                return np.zeros(c["shape"], dtype=c["dtype"])
            return np.asarray(before, dtype=c["dtype"]).reshape(c["shape"])
        first = self.count[col] - len(self.history[col])
        if not first <= row < self.count[col]:
            raise RuntimeError(f"column {col!r}: row {row} is not in the history (rows {first}..{self.count[col] - 1}):"
                               f" call reward() after each step's act()")
        return self.history[col][row - first]

    def _inputs(self) -> list[np.ndarray]:
        out = []
        for inp in self.inputs:
            rows = [self._row(inp["column"], self.t + s) for s in inp["shift"]]
            value = np.stack(rows) if inp["stacked"] else rows[0]
            out.append(value[None])  # the batch axis
        return out

    def _run_torchscript(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.no_grad():
            out = self._module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in xs])
        return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]

    def _run_onnx(self, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        feed = {inp["name"]: x for inp, x in zip(self.inputs, xs)}
        return [np.asarray(o) for o in self._session.run(None, feed)]

    def act(self, obs: Any) -> np.ndarray:
        """The deterministic action for ``obs``, the observation at this step of the episode."""
        if self.t > 0 and "rewards" in self.count and self.count["rewards"] < self.t:
            raise RuntimeError("call reward(r) after each step before the next act(obs)")
        for col, value in flat_obs(obs).items():
            self._record(col, value)
        outs = self._run(self._inputs())
        action: np.ndarray = np.asarray(outs[0][0])
        self._record("actions", action)
        for name, value in zip(self.states, outs[1:]):
            self._record(name, value[0])
        self.t += 1
        return action

    def reward(self, r: float) -> None:
        """The reward the last action got."""
        self._record("rewards", r)


def run_episodes(policy: ExportedPolicy, env_id: str, episodes: int, seed: int) -> list[float]:
    import gymnasium as gym

    if env_id.startswith("trajview/"):
        import trajview.envs  # noqa: F401  (registers trajview's env ids; nothing of the training stack)
    env = gym.make(env_id)
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        policy.reset()
        total, done = 0.0, False
        while not done:
            a = policy.act(obs)
            obs, r, term, trunc, _ = env.step(a.item() if a.ndim == 0 else a)
            policy.reward(float(r))
            total += float(r)
            done = term or trunc
        returns.append(total)
        obs, _ = env.reset()
    env.close()
    return returns


def smoke() -> None:
    """Exports untrained policies, and checks the runner against a RolloutWorker's deterministic episodes."""
    import importlib.util

    import trajview as tv
    from trajview.train.export import export_policy

    import gymnasium as gym

    formats = ["torchscript"] + (["onnx"] if importlib.util.find_spec("onnxruntime") else [])
    env_id = "trajview/StatelessCartPole-v1"
    probe = gym.make(env_id)
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model, cfg in (("framestack", {"num_frames": 4}), ("lstm", {"max_seq_len": 8})):
            policy = tv.PPOPolicy(probe.observation_space, probe.action_space,
                                  {"model": model, "model_config": cfg})
            policy.keep_views = {"obs"}  # in the batch though the frame-stack model reads only its stack
            worker = tv.RolloutWorker(lambda c: gym.make(env_id), policy, batch_mode="complete_episodes",
                                      rollout_fragment_length=1, seed=1, explore=False)
            batch = worker.sample()
            worker.stop()
            for fmt in formats:
                path = Path(tmp) / f"{model}.{'onnx' if fmt == 'onnx' else 'pt'}"
                export_policy(policy, path, fmt, env=env_id)
                runner = ExportedPolicy(path)
                for eps in np.unique(batch["eps_id"]):
                    rows = np.flatnonzero(batch["eps_id"] == eps)
                    runner.reset()
                    for i in rows:
                        a = runner.act(batch["obs"][i])
                        assert a == batch["actions"][i], (model, fmt, int(i), a, batch["actions"][i])
                        runner.reward(float(batch["rewards"][i]))
                        checked += 1
                returns = run_episodes(runner, env_id, 2, seed=3)
                assert len(returns) == 2
    print(f"ok: {checked} steps of framestack and LSTM policies acted as the worker acted ({', '.join(formats)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", help="a file `trajview export` wrote (TorchScript or ONNX: told by its content)")
    p.add_argument("--env", default=None, help="gymnasium env id (default: the run's, from the file's view spec)")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="a few seconds: export untrained policies and check them")
    args = p.parse_args()
    if args.smoke:
        smoke()
        return
    if args.file is None:
        p.error("give a FILE that `trajview export` wrote, or --smoke")
    policy = ExportedPolicy(args.file)
    env_id = args.env or policy.spec.get("env")
    if not env_id:
        p.error("the file's view spec names no env: give --env")
    returns = run_episodes(policy, env_id, args.episodes, args.seed)
    print(f"returns: {', '.join(f'{r:g}' for r in returns)}")
    print(f"ok: {len(returns)} episodes of {env_id}, mean return {np.mean(returns):.2f}")


if __name__ == "__main__":
    main()
