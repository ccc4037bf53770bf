"""Worker processes, as a red team found them (each failed before its fix): an answer stopped halfway through
its pipe is a timeout, not a hang; a worker sent SIGTERM dies of it even under `trajview train`'s handler; a
SIGTERM whose exception Python swallowed (inside an after-fork hook) still stops the run."""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from trajview.rollout.backends import WorkerFailed, _recv_by

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes


def test_an_answer_not_whole_by_the_deadline_is_a_timeout_and_a_whole_one_is_read():
    a, b = mp.Pipe()
    sender = threading.Thread(target=b.send, args=({"rows": np.arange(100_000)},))  # many pieces of a pipe's buffer
    sender.start()
    got = _recv_by(a, time.monotonic() + 10)
    sender.join()
    assert got["rows"].tolist() == list(range(100_000))
    sender = threading.Thread(target=b.send, args=({"rows": np.arange(100_000)},))
    sender.start()
    time.sleep(0.2)
    got = _recv_by(a, time.monotonic())  # (the deadline passed, the answer coming: read whole)
    sender.join()
    assert got["rows"][-1] == 99_999
    os.write(b.fileno(), struct.pack("!i", 1000) + b"x" * 10)  # a message's head, its writer stopped
    t0 = time.monotonic()
    with pytest.raises(WorkerFailed, match="timeout"):
        _recv_by(a, time.monotonic() + 0.3)
    assert 0.3 <= time.monotonic() - t0 < 15  # (its stall limit, past the deadline)
    b.close()
    a2, b2 = mp.Pipe()
    b2.close()
    with pytest.raises(EOFError):
        _recv_by(a2, time.monotonic() + 5)


def test_a_worker_sent_sigterm_dies_of_it_under_the_trainers_handler():
    """In a fresh interpreter (as `trajview train` is; not forked from pytest's threads): the trainer's SIGTERM
    handler installed, then workers forked; SIGTERM to one mid-sample kills it, reported as such."""
    code = textwrap.dedent("""
        import os, signal, threading, time
        import numpy as np, gymnasium as gym, trajview as tv
        from trajview.errors import WorkerError
        from trajview.train.loop import on_sigterm

        class Slow(gym.Env):
            observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            action_space = gym.spaces.Discrete(2)
            def reset(self, *, seed=None, options=None):
                self.t = 0
                return np.zeros(2, np.float32), {}
            def step(self, a):
                time.sleep(0.01)
                self.t += 1
                return np.zeros(2, np.float32), 1.0, self.t >= 20, False, {}

        class Zeros(tv.Policy):
            def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
                return np.zeros(len(d["obs"]), np.int64), [], {}

        on_sigterm()
        ws = tv.WorkerSet(lambda c: Slow(), Zeros, num_workers=2, rollout_fragment_length=100)
        pid = ws.worker_pids()[0]
        threading.Timer(0.3, lambda: os.kill(pid, signal.SIGTERM)).start()
        try:
            ws.sample()
            print("no error")
        except WorkerError as e:
            print(str(e).splitlines()[0])
        ws.stop()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("rollout worker 1 died: killed by signal SIGTERM"), out


def test_a_swallowed_sigterm_stops_the_run_at_its_next_iteration(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from trajview.train import PPOTrainer, TrainConfig
    from trajview.train import loop

    cfg = TrainConfig(env="trajview/RepeatPrevious-v0", model="mlp", envs_per_worker=2, train_batch_size=100,
                      sgd_minibatch_size=50, num_sgd_iter=1, stop_reward=None, timesteps=1000,
                      out_dir=str(tmp_path / "run"))
    trainer = PPOTrainer(cfg)
    monkeypatch.setattr(loop, "_terminate_requested", True)  # (as the handler leaves it when its raise was lost)
    with pytest.raises(loop.Terminated):
        trainer.train(progress=False)
    assert trainer.iteration == 0
