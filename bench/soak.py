"""Soak: does memory stay flat over long runs? (RSS after warm-up, sampled as the run goes.)

Two runs in one process, one after the other:

* **worker**: `tv.RolloutWorker` over the W1 workload (64 envs, obs float32[4],
  50-step episodes, a constant policy), ``--worker-steps`` env steps
  (default 10 million), fragment 200, the batch dropped after each sample;
* **replay**: `tv.ReplayBuffer` (``--capacity`` rows, default 50,000) of 84x84
  uint8 frames with a 4-frame stack view, ``--replay-steps`` steps
  (default 1 million) added 1,000 at a time (20 episodes of 50 steps), and
  after each add a sample of 256 steps (slices of 8) with the stack built
  at sample time.

The RSS is read from /proc/self/statm at ``--points`` evenly spaced moments
of each run. Warm-up is the first 10% of the worker run, and for replay the
larger of 10% and four passes over the buffer (filled, then overwritten
three times: the stored rows, the samples' buffers and malloc's arenas
settle); the report gives the RSS at the end of
warm-up, its maximum after it and the growth, and plots both runs
(``--plot``, default bench/soak.png). Exit status 1 if either run grew by
more than ``--max-growth-mb`` (default 32 MB) after warm-up.

    python bench/soak.py                                # the full soak (~2-4 minutes on 2 cores)
    python bench/soak.py --worker-steps 200000 --replay-steps 50000 --capacity 10000   # a quick one
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import trajview as tv

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class W1Env(gym.Env):
    """obs float32[4], reward 1, 50-step episodes: the collector's work, not the env's."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self._obs = np.zeros(4, np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs, {}

    def step(self, action):
        self.t += 1
        return self._obs, 1.0, self.t >= 50, False, {}


class ConstantPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {}


def run(name: str, total: int, per_call: int, call: Callable[[], None], points: int) -> list[tuple[int, float]]:
    """Calls ``call`` (``per_call`` steps each) until ``total`` steps; RSS at ``points`` moments."""
    calls = max(1, total // per_call)
    every = max(1, calls // points)
    trace = [(0, rss_mb())]
    with tqdm(total=calls * per_call, desc=name, unit="step", unit_scale=True, mininterval=1.0) as bar:
        for k in range(1, calls + 1):
            call()
            bar.update(per_call)
            if k % every == 0 or k == calls:
                trace.append((k * per_call, rss_mb()))
                bar.set_postfix(rss_mb=f"{trace[-1][1]:.0f}", refresh=False)
    return trace


def worker_soak(steps: int, points: int) -> list[tuple[int, float]]:
    w = tv.RolloutWorker(lambda cfg: W1Env(), ConstantPolicy, num_envs=64, rollout_fragment_length=200)
    per = 64 * 200
    out = run("worker (W1, 64 envs)", steps, per, lambda: w.sample() and None, points)
    w.stop()
    return out


def replay_soak(steps: int, capacity: int, points: int) -> list[tuple[int, float]]:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (1000, 84, 84), dtype=np.uint8)
    t = np.tile(np.arange(50), 20)
    eps = np.repeat(np.arange(20), 50)
    last = t == 49
    rb = tv.ReplayBuffer(
        capacity,
        sampler=tv.SliceSampler(slice_len=8),
        views={"stack": tv.ViewRequirement("obs", shift="-3:0")},
    )
    state = {"episode": 0}

    def add_and_sample() -> None:
        batch = tv.SampleBatch(
            {
                "obs": frames,
                "actions": np.zeros(1000, np.int64),
                "rewards": np.ones(1000, np.float32),
                "terminateds": last,
                "truncateds": np.zeros(1000, bool),
                "eps_id": eps + state["episode"],
                "t": t,
            }
        )
        state["episode"] += 20
        rb.add(batch)
        s = rb.sample(256)
        assert s["stack"].shape == (256, 4, 84, 84)

    return run(f"replay (84x84 frames, capacity {capacity})", steps, 1000, add_and_sample, points)


def report(name: str, trace: list[tuple[int, float]], warm_steps: int) -> float:
    warm = next(r for s, r in trace if s >= warm_steps)
    after = [r for s, r in trace if s >= warm_steps]
    growth = max(after) - warm
    print(
        f"{name}: RSS {trace[0][1]:.0f} MB at start, {warm:.0f} MB after warm-up ({warm_steps:,} steps), "
        f"max {max(after):.0f} MB after it, {trace[-1][1]:.0f} MB at the end: growth {growth:+.1f} MB"
    )
    return growth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker-steps", type=int, default=10_000_000)
    p.add_argument("--replay-steps", type=int, default=1_000_000)
    p.add_argument("--capacity", type=int, default=50_000)
    p.add_argument("--points", type=int, default=100)
    p.add_argument("--max-growth-mb", type=float, default=32.0)
    p.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak.png"))
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    wt = worker_soak(a.worker_steps, a.points)
    rt = replay_soak(a.replay_steps, a.capacity, a.points)
    print(f"soak: {time.perf_counter() - t0:.0f} s, trajview {tv.__version__}, python {sys.version.split()[0]}")
    warm_w = a.worker_steps // 10
    # The buffer filled and overwritten 3 times: its rows, the samples' fresh buffers and malloc's arenas settle.
    warm_r = max(a.replay_steps // 10, 4 * a.capacity)
    if warm_r >= a.replay_steps:
        p.error(f"--replay-steps must exceed the warm-up (4 x capacity = {4 * a.capacity})")
    gw = report(f"worker, {a.worker_steps:,} W1 env steps", wt, warm_w)
    gr = report(f"replay, {a.replay_steps:,} add+sample steps", rt, warm_r)
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        panels = ((axes[0], wt, warm_w, "RolloutWorker, W1, 64 envs"), (axes[1], rt, warm_r, "ReplayBuffer, 84x84 frames"))
        for ax, trace, warm_steps, title in panels:
            xs, ys = zip(*trace)
            ax.plot(np.asarray(xs) / 1e6, ys)
            ax.set_title(title)
            ax.set_xlabel("million steps")
            ax.set_ylabel("RSS (MB)")
            ax.set_ylim(0, max(ys) * 1.15)
            ax.axvline(warm_steps / 1e6, color="grey", lw=0.8, ls="--")
        fig.suptitle("trajview soak: RSS over the run (dashed: end of warm-up)")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"plot: {a.plot}")
    ok = gw <= a.max_growth_mb and gr <= a.max_growth_mb
    print("flat after warm-up" if ok else f"RSS grew by more than {a.max_growth_mb} MB after warm-up")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
