"""Replay sampling side by side (issue 14): trajview, numpy, SB3 and TorchRL, each in its own process (one
7 GB buffer at a time). Run in the compare venv (see bench/compare.py for how to make ``.venv-compare``)::

    .venv-compare/bin/python bench/compare_replay.py            # all; ~5 min on 2 cores, ~8 GB RAM at the peak
    .venv-compare/bin/python bench/compare_replay.py --quick    # 100k steps, a smoke run
    .venv-compare/bin/python bench/compare_replay.py --only prioritized-trajview prioritized-torchrl --repeats 7

Uniform: 256 transitions with a 4-frame 84x84 stack from a 1,000,000-step buffer of 500-step trajectories:

* ``trajview``: `tv.RandomSampler`, the stack ``obs@"-3:0"`` built at sample time from frames stored once;
* ``numpy``: the same number of rows gathered by fancy indexing from one flat frame array (+ the small
  columns), zeros before a trajectory's start: the same output bytes;
* ``sb3``: ``ReplayBuffer(optimize_memory_usage=True)`` holding ``VecFrameStack``-style [4, 84, 84]
  observations (4 frames per step: 200,000 steps = 5.6 GB, as 1,000,000 would need 28 GB), ``sample(256)``;
* ``torchrl``: frames stored once in a ``LazyTensorStorage``; ``SliceSampler(slice_len=4, strict_length=True,
  cache_values=True)`` draws 256 slices of 4 steps and ``CatFrames(N=4)`` stacks each, keeping the last step
  (TorchRL's ``RandomSampler`` draws single rows, which ``CatFrames`` cannot stack: a slice of 4 is the
  smallest TorchRL sample that carries a transition's 4-frame context).

Prioritized: sample 256 + update their priorities, 1,000,000 steps of obs float32[4]: ``trajview``
`tv.PrioritizedSampler` vs ``torchrl`` ``PrioritizedSampler`` in a ``TensorDictReplayBuffer``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

TRAJ = 500
BATCH = 256
POOL = 7


def timed(fn, rounds: int) -> dict:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return {"median_ms": statistics.median(ts) * 1e3, "min_ms": min(ts) * 1e3, "rounds": rounds}


def pool() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (POOL, 84, 84), dtype=np.uint8)


def uniform_trajview(n: int) -> dict:
    import trajview as tv

    p = pool()
    rb = tv.ReplayBuffer(n, sampler=tv.RandomSampler(seed=0),
                         columns=["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"])
    for a in range(0, n, 10_000):
        k = np.arange(a, min(a + 10_000, n))
        t = k % TRAJ
        rb.add(tv.SampleBatch({"obs": p[k % POOL], "actions": k, "rewards": np.ones(len(k), np.float32),
                               "terminateds": t == TRAJ - 1, "truncateds": np.zeros(len(k), bool),
                               "eps_id": k // TRAJ, "t": t}))
    views = {"stack": tv.ViewRequirement("obs", shift="-3:0")}
    out = rb.sample(BATCH, views=views)
    assert out["stack"].shape == (BATCH, 4, 84, 84)
    return {**timed(lambda: rb.sample(BATCH, views=views), 200), "steps": n,
            "frames_per_step": rb.nbytes() / len(rb) / 7056}


def uniform_numpy(n: int) -> dict:
    p = pool()
    k = np.arange(n)
    frames, t = p[k % POOL], k % TRAJ
    small = {"actions": k, "rewards": np.ones(n, np.float32), "terminateds": t == TRAJ - 1,
             "truncateds": np.zeros(n, bool), "eps_id": k // TRAJ, "t": t}
    rng = np.random.default_rng(1)

    def run():
        rows = rng.integers(0, n, BATCH)
        out = {c: a.take(rows) for c, a in small.items()}
        out["obs"] = frames.take(rows, axis=0)
        st = np.empty((BATCH, 4, 84, 84), np.uint8)
        for j, s in enumerate(range(-3, 1)):
            np.take(frames, np.maximum(rows + s, 0), axis=0, out=st[:, j])
            st[out["t"] + s < 0, j] = 0
        out["stack"] = st
        return out

    return {**timed(run, 200), "steps": n}


def uniform_sb3(n: int) -> dict:
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer

    n = min(n, 200_000)
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    rb = ReplayBuffer(n, obs_space, gym.spaces.Discrete(4), device="cpu", n_envs=1, optimize_memory_usage=True,
                      handle_timeout_termination=False)
    p = pool()
    for a in range(0, n, 10_000):  # the stacked observations, written straight into its arrays
        k = np.arange(a, min(a + 10_000, n))
        st = np.stack([p[(k + s) % POOL] for s in range(-3, 1)], axis=1)
        rb.observations[a:a + len(k), 0] = st
        rb.actions[a:a + len(k), 0, 0] = k % 4
        rb.rewards[a:a + len(k), 0] = 1.0
        rb.dones[a:a + len(k), 0] = (k % TRAJ) == TRAJ - 1
    rb.pos, rb.full = 0, True
    s = rb.sample(BATCH)
    assert tuple(s.observations.shape) == (BATCH, 4, 84, 84)
    return {**timed(lambda: rb.sample(BATCH), 200), "steps": n,
            "frames_per_step": rb.observations.nbytes / n / 7056}


def uniform_torchrl(n: int) -> dict:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
    from torchrl.envs import CatFrames

    torch.set_num_threads(1)
    p = torch.from_numpy(pool())
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n),
                                sampler=SliceSampler(slice_len=4, end_key=("next", "done"), strict_length=True,
                                                     cache_values=True),
                                batch_size=BATCH * 4)
    for a in range(0, n, 10_000):
        k = torch.arange(a, min(a + 10_000, n))
        done = ((k % TRAJ) == TRAJ - 1).unsqueeze(-1)
        rb.extend(TensorDict({
            "observation": p[k % POOL].unsqueeze(-3), "action": k % 4, "episode": k // TRAJ,
            "done": torch.zeros(len(k), 1, dtype=torch.bool),
            "next": {"reward": torch.ones(len(k), 1), "done": done, "terminated": done.clone(),
                     "truncated": torch.zeros(len(k), 1, dtype=torch.bool)},
        }, batch_size=[len(k)]))
    cat = CatFrames(N=4, dim=-3, in_keys=["observation"], out_keys=["stack"], padding="constant")

    def run():
        s = cat(rb.sample().reshape(BATCH, 4).refine_names(None, "time"))
        return s[:, -1]

    out = run()
    assert tuple(out["stack"].shape) == (BATCH, 4, 84, 84)
    return {**timed(run, 200), "steps": n}


def prio_trajview(n: int) -> dict:
    import trajview as tv

    rb = tv.ReplayBuffer(n, sampler=tv.PrioritizedSampler(None, 0.6, 0.4, seed=0))
    for a in range(0, n, 100_000):
        k = np.arange(a, min(a + 100_000, n))
        rb.add(tv.SampleBatch({"obs": np.ones((len(k), 4), np.float32), "eps_id": k // TRAJ,
                               "t": k % TRAJ, "terminateds": (k % TRAJ) == TRAJ - 1}))
    rng = np.random.default_rng(2)

    def run():
        _, info = rb.sample(BATCH, return_info=True)
        rb.update_priority(info["index"], rng.uniform(0.1, 2.0, BATCH))

    return {**timed(run, 500), "steps": n}


def prio_torchrl(n: int) -> dict:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    torch.set_num_threads(1)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(n), sampler=PrioritizedSampler(n, 0.6, 0.4),
                                batch_size=BATCH)
    for a in range(0, n, 100_000):
        m = min(100_000, n - a)
        rb.extend(TensorDict({"obs": torch.ones(m, 4)}, batch_size=[m]))
    gen = torch.Generator().manual_seed(2)

    def run():
        s, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], torch.rand(BATCH, generator=gen) * 1.9 + 0.1)

    return {**timed(run, 500), "steps": n}


CASES = {"uniform-trajview": uniform_trajview, "uniform-numpy": uniform_numpy, "uniform-sb3": uniform_sb3,
         "uniform-torchrl": uniform_torchrl, "prioritized-trajview": prio_trajview,
         "prioritized-torchrl": prio_torchrl}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--one", choices=sorted(CASES))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the cases this many times, interleaved (each in a fresh process); report the median of "
                         "the runs' medians with their spread, and each trajview/other ratio")
    args = ap.parse_args()
    n = 100_000 if args.quick else 1_000_000
    if args.one:
        print(json.dumps(CASES[args.one](n)))
        return 0
    results: dict[str, dict] = {}
    runs: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        for name in args.only or CASES:
            cmd = [sys.executable, __file__, "--one", name] + (["--quick"] if args.quick else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                results[name] = {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}"}
            else:
                results[name] = json.loads(r.stdout.strip().splitlines()[-1])
                runs.setdefault(name, []).append(results[name]["median_ms"])
            print(f"[{rep + 1}/{args.repeats}]", name, results[name], flush=True)
    if args.repeats > 1:
        summary = {name: {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v), "runs": len(v)}
                   for name, v in runs.items()}
        for kind in ("uniform", "prioritized"):
            mine = runs.get(f"{kind}-trajview")
            for name, v in runs.items():
                if mine and name.startswith(kind + "-") and name != f"{kind}-trajview" and len(v) == len(mine):
                    ratios = [o / t for o, t in zip(v, mine)]  # per repeat: the other's time / trajview's
                    summary[f"{name} / {kind}-trajview"] = {"median": statistics.median(ratios), "min": min(ratios),
                                                            "max": max(ratios)}
        print(json.dumps(summary, indent=1))
    else:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
