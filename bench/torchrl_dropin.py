#!/usr/bin/env python3
"""trajview's TorchRL drop-ins next to TorchRL 0.14.1's own, side by side in one run (issue 27, "Measured").

    python bench/torchrl_dropin.py                       # (a) and (b) at 1M steps: ~8 GB RAM + ~14 GB in --scratch
    python bench/torchrl_dropin.py --steps 200000        # (b) on a smaller buffer
    python bench/torchrl_dropin.py --only collector      # (a) alone; --only replay: (b) alone
    python bench/torchrl_dropin.py --quick               # smoke: 2 rounds, small batches, a 20k-step buffer

(a) **Collector**, env steps per second: ``trajview.torchrl.TrajviewCollector`` (gymnasium ``CartPole-v1``, in
this process) against TorchRL's ``Collector`` (0.14's ``SyncDataCollector``) over ``GymEnv("CartPole-v1",
categorical_action_encoding=True)``, at 1 env (``frames_per_batch=1000``) and 8 envs (8000: trajview
``num_envs=8``; TorchRL ``SerialEnv(8, ...)``, in this process as trajview's, and with ``--torchrl-batched
serial parallel`` also ``ParallelEnv(8, ...)``, 8 processes). The same ``TensorDictModule`` policy on both: a
fixed ``Linear(4, 2)`` + argmax (``int64`` actions). A round times ``--batches`` batches of each collector;
rounds alternate between the systems; each collector is built and warmed up (one batch) before timing. Before
timing, the script checks each side's batch (shapes, ``("next", "observation")`` = the next step's
``observation`` within a trajectory, the actions the policy's) and, at 1 env, that each side's batch equals a
plain gymnasium loop of the policy step for step (TorchRL's ``GymEnv.set_seed`` resets once itself, so its first
episode is gymnasium's second reset). Beside them, in the same rounds, two ``bare loop`` s: the same gymnasium
envs and policy in a plain Python loop that stores nothing, calling the policy on a TensorDict (``bare loop``:
the limit of a collector that makes the ``TensorDictModule``'s own call, as TorchRL's does; ``bare loop /
torchrl`` is printed) or calling its inner ``nn.Module`` on the observation tensor (``bare loop (module)``:
trajview's limit; ``trajview / bare loop (module)`` is printed). Goal printed: trajview >= 5x TorchRL's steps
per second. The ``TensorDictModule`` call weighs on TorchRL's side: tensordict 0.14.3 builds TensorDicts and
calls ``importlib.util.find_spec("pandas")`` for each output (``TensorDict.from_any``), which searches
``sys.path`` on every call where pandas is not installed (about half the policy's time on the dev VM).
trajview's collector calls a policy that is exactly a ``TensorDictModule`` (no subclass, no hooks, no
``select_out_keys``) as that call would, without the TensorDicts: its module on the input tensors, the outputs
mapped to ``out_keys`` (same outputs, same RNG use; tests/test_torchrl_collector.py); any other policy
(``ProbabilisticActor``, ``TensorDictSequential``) gets its own call.

(b) **Stacked 4-frame slices** from a buffer of ``--steps`` Atari-sized steps (uint8 84x84 frames, episodes of
``--episode-len`` steps written as one TensorDict each, in TorchRL's collector layout: ``observation``,
``action``, ``("next", "observation")``, reward and flags, ``("collector", "traj_ids")``; frame ``k`` is one of 7
random frames, ``pool[k % 7]``). The same TensorDicts go into both buffers:

* ``trajview``: ``TensorDictReplayBuffer(storage=TrajviewStorage(steps, views={"stack":
  ViewRequirement("observation", shift="-3:0")}), sampler=TrajviewSliceSampler(num_slices=256, ...),
  batch_size=8192)`` (the storage's default ``extra_rows``; ``--extra-rows`` overrides it); ``rb.sample()``
  returns the slices with ``stack`` built from the one stored copy;
* ``torchrl``: ``TensorDictReplayBuffer(storage=LazyMemmapStorage(steps, scratch_dir=...),
  sampler=SliceSampler(num_slices=256, ...), batch_size=8192)``; the sample, reshaped to ``[256, 32]`` with a
  ``"time"`` dim, goes through ``Compose(UnsqueezeTransform(-3), CatFrames(N=4, dim=-3, padding="constant"))``
  (CatFrames' docstring: store trajectories, sample slices, stack at sample time; applied to the sample as
  bench/compare_systems.py does: as the buffer's own transform it changes the batch shape, which
  ``TensorDictReplayBuffer.sample`` refuses when it writes the indices back).

Both samplers: ``traj_key=("collector", "traj_ids")``, ``strict_length=True``, ``cache_values=True`` (TorchRL's
advice for speed). One difference, by design: CatFrames sees only the slice, so the first 3 steps of a slice
get zeros where trajview gives the frames before the slice (zeros before an episode's start on both). Before
timing, on a small buffer of distinct random frames, the script asserts that TorchRL's stacks equal trajview's
stacks of the same sampled steps wherever CatFrames can see the frame, that the rest is TorchRL's padding
where trajview has the true earlier frame, and that both equal a pure-Python reference. Reported: time per
``sample()`` of 8192 steps (median and min-max over ``--rounds`` interleaved rounds) and bytes stored per step
in frames (allocated bytes of every column / steps held / 7056: ``TrajviewStorage`` holds ``steps +
extra_rows`` rows, by default ``extra_rows = max(steps // 25, 40 * isqrt(steps), 256)`` for these big rows, what a user who
writes ``TrajviewStorage(steps, views=...)`` gets: 40,000 at 1M steps, with one final-observation row per
episode; the extra rows and the store's rows per step are printed; TorchRL's storage holds ``observation``
and ``("next", "observation")``, as the collector gives them; ``--torchrl-drop-next`` leaves the latter out of
TorchRL's buffer, its leanest
form). Goals printed: trajview >= 10x faster, <= 1.05 frames stored per step.

(c) The whole PPO tutorial loop's wall-clock with each side is ``bench/torchrl_ppo.py`` (it prints each side's
loop wall-clock per run next to the curves); it is not repeated here.

Needs torchrl 0.14.1 / tensordict 0.14.3 (the ``torchrl`` extra). ``--threads`` (default 1) sets torch's
threads for both sides. Timings are for a quiet machine; the smoke (``--quick``) only shows the script runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

FRAME = (84, 84)
FRAME_BYTES = 84 * 84
POOL = 7
N_STACK = 4
GOAL_COLLECTOR = 5.0
GOAL_SLICES = 10.0
GOAL_FRAMES_PER_STEP = 1.05
BARE, BARE_DIRECT = "bare loop", "bare loop (module)"


def spread(ts: list[float]) -> str:
    return f"{statistics.median(ts):.4g} ({min(ts):.4g}-{max(ts):.4g})"


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each fn, ``rounds`` rounds, the systems alternating (order flipped every round)."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            fns[name]()
            out[name].append(time.perf_counter() - t0)
    return out


# ----------------------------------------------------------------------------------------- (a) collectors

def make_policy() -> Any:
    import torch
    from tensordict.nn import TensorDictModule
    from torch import nn

    class LinearArgmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 2)
            with torch.no_grad():  # fixed weights: a policy that balances a little, so episodes vary in length
                self.linear.weight.copy_(torch.tensor([[0.0, 0.0, -1.0, -0.5], [0.0, 0.0, 1.0, 0.5]]))
                self.linear.bias.zero_()

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.linear(obs).argmax(-1)

    return TensorDictModule(LinearArgmax(), in_keys=["observation"], out_keys=["action"])


def make_collectors(num_envs: int, fpb: int, batched: str, policy: Any, seed: int) -> dict[str, Any]:
    import gymnasium as gym
    from torchrl.envs import GymEnv, ParallelEnv, SerialEnv

    from trajview.torchrl import TrajviewCollector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from torchrl.collectors import Collector

    def gym_env() -> Any:
        return GymEnv("CartPole-v1", categorical_action_encoding=True)

    if num_envs == 1:
        env: Any = gym_env()
    else:
        env = (SerialEnv if batched == "serial" else ParallelEnv)(num_envs, gym_env)
    env.set_seed(seed)
    theirs = Collector(env, policy, frames_per_batch=fpb, total_frames=-1, auto_register_policy_transforms=False)
    ours = TrajviewCollector(lambda: gym.make("CartPole-v1"), policy, frames_per_batch=fpb, total_frames=-1,
                             num_envs=num_envs, seed=seed)
    return {"trajview": ours, f"torchrl-{batched}" if num_envs > 1 else "torchrl": theirs}


def check_batch(name: str, td: Any, policy: Any, num_envs: int, fpb: int) -> None:
    import torch

    want = torch.Size([fpb]) if num_envs == 1 else torch.Size([num_envs, fpb // num_envs])
    assert td.batch_size == want, (name, td.batch_size, want)
    rows = [td] if num_envs == 1 else list(td.unbind(0))
    for row in rows:
        ids = row["collector", "traj_ids"]
        same = ids[1:] == ids[:-1]
        assert torch.equal(row["next", "observation"][:-1][same], row["observation"][1:][same]), name
        done = row["next", "done"].reshape(-1)
        assert ((ids[1:] != ids[:-1]) == done[:-1]).all(), f"{name}: a new trajectory id right after each end"
    with torch.no_grad():
        acts = policy(td.select("observation").reshape(-1).clone())["action"]
    assert torch.equal(acts, td["action"].reshape(-1)), f"{name}: the actions are the policy's"


def gym_reference(policy: Any, steps: int, seed: int, extra_resets: int) -> dict[Any, Any]:
    """CartPole-v1 stepped by hand with the policy: ``reset(seed=seed)``, ``extra_resets`` more resets, then
    a reset (without a seed) after each episode's end."""
    import gymnasium as gym
    import torch
    from tensordict import TensorDict

    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    for _ in range(extra_resets):
        obs, _ = env.reset()
    rows: dict[Any, list[Any]] = {"observation": [], "action": [], ("next", "observation"): [],
                                  ("next", "reward"): [], ("next", "done"): []}
    for _ in range(steps):
        with torch.no_grad():
            td = TensorDict({"observation": torch.as_tensor(obs).unsqueeze(0)}, batch_size=[1])
            act = int(policy(td)["action"][0])
        nxt, r, term, trunc, _ = env.step(act)
        for key, v in zip(rows, (obs, act, nxt, float(r), bool(term or trunc))):
            rows[key].append(v)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
    return {"observation": torch.as_tensor(np.stack(rows["observation"])),
            "action": torch.tensor(rows["action"]),
            ("next", "observation"): torch.as_tensor(np.stack(rows[("next", "observation")])),
            ("next", "reward"): torch.tensor(rows[("next", "reward")], dtype=torch.float32),
            ("next", "done"): torch.tensor(rows[("next", "done")])}


def bare_loop(policy: Any, num_envs: int, seed: int, direct: bool = False) -> Callable[[int], None]:
    """A collector's floor: ``num_envs`` gymnasium CartPoles stepped in a Python loop, one policy call per step
    on a ``[num_envs]`` TensorDict (``direct``: the TensorDictModule's inner module on the observation tensor,
    as trajview's collector calls a plain TensorDictModule), nothing stored. Returns ``run(steps)``."""
    import gymnasium as gym
    import torch
    from tensordict import TensorDict

    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])

    def run(steps: int) -> None:
        nonlocal obs
        for _ in range(steps // num_envs):
            with torch.no_grad():
                if direct:
                    act = policy.module(torch.from_numpy(obs))
                else:
                    act = policy(TensorDict({"observation": torch.from_numpy(obs)}, batch_size=[num_envs]))["action"]
            for i, (e, a) in enumerate(zip(envs, act.tolist())):
                o, _, term, trunc, _ = e.step(a)
                obs[i] = e.reset()[0] if term or trunc else o

    return run


def take(it: Any, n: int) -> None:
    for _ in range(n):
        next(it)


def bench_collectors(args: argparse.Namespace) -> list[str]:
    import torch

    policy = make_policy()
    lines = []
    # 1 env, seed 3: each side's batch is a plain gymnasium loop of the policy (TorchRL's GymEnv.set_seed resets
    # with the seed, then its collector resets again: its first episode is gymnasium's second reset).
    for name, c in make_collectors(1, 300, "serial", policy, seed=3).items():
        td = next(iter(c))
        c.shutdown()
        check_batch(name, td, policy, 1, 300)
        ref = gym_reference(policy, 300, seed=3, extra_resets=0 if name == "trajview" else 1)
        for key, want in ref.items():
            got = td[key].reshape(want.shape)
            assert torch.equal(got, want.to(got.dtype)), f"{name} {key}: not the gymnasium loop's"
    print("check: at 1 env, each side's batch (observation, action, next observation, reward, done) is a plain "
          "gymnasium loop of the policy")
    cases = [(1, args.fpb1, "serial")] + [(8, args.fpb8, b) for b in args.torchrl_batched]
    for num_envs, fpb, batched in cases:
        cols = make_collectors(num_envs, fpb, batched, policy, seed=0)
        its = {name: iter(c) for name, c in cols.items()}
        for name, it in its.items():
            check_batch(name, next(it), policy, num_envs, fpb)  # warm-up batch, checked

        fns: dict[str, Callable[[], Any]] = {name: functools.partial(take, it, args.batches) for name, it in its.items()}
        fns[BARE] = functools.partial(bare_loop(policy, num_envs, seed=0), args.batches * fpb)
        fns[BARE_DIRECT] = functools.partial(bare_loop(policy, num_envs, seed=0, direct=True), args.batches * fpb)
        ts = interleaved(fns, args.rounds)
        sps = {name: [args.batches * fpb / t for t in v] for name, v in ts.items()}
        for c in cols.values():
            c.shutdown()
        (theirs,) = [n for n in sps if n not in ("trajview", BARE, BARE_DIRECT)]
        ratio = [a / b for a, b in zip(sps["trajview"], sps[theirs])]
        print(f"collector, {num_envs} env(s), frames_per_batch={fpb}, {args.batches} batches x {args.rounds} rounds")
        for name, v in sps.items():
            note = {BARE: "  (gymnasium + the policy's TensorDict call in a plain loop: TorchRL's limit)",
                    BARE_DIRECT: "  (gymnasium + the policy's inner module in a plain loop: trajview's limit)"}
            print(f"  {name:18s} env steps/s {spread(v)}{note.get(name, '')}")
        mark = "meets" if statistics.median(ratio) >= GOAL_COLLECTOR else "MISSES"
        line = (f"| collector, {num_envs} env(s) ({theirs}) | >= {GOAL_COLLECTOR:g}x | "
                f"**{statistics.median(ratio):.2f}x** ({min(ratio):.2f}-{max(ratio):.2f}) |")
        print(f"  trajview / {theirs}: {spread(ratio)}x per round; goal >= {GOAL_COLLECTOR:g}x: {mark}")
        bound = [a / b for a, b in zip(sps[BARE], sps[theirs])]
        print(f"  {BARE} / {theirs}: {spread(bound)}x per round (the most a collector making the policy's "
              f"TensorDict call could reach here)")
        near = [a / b for a, b in zip(sps["trajview"], sps[BARE_DIRECT])]
        print(f"  trajview / {BARE_DIRECT}: {spread(near)}x per round (how near trajview is to its limit)")
        lines.append(line)
    return lines


# ----------------------------------------------------------------------------------------- (b) slices + stacks

def episode_td(k0: int, n: int, traj: int, frames: Callable[[np.ndarray], np.ndarray]) -> Any:
    """Steps k0 .. k0 + n - 1, one episode (id ``traj``) that terminates at its last step, in TorchRL's layout."""
    import torch
    from tensordict import TensorDict

    k = np.arange(k0, k0 + n)
    obs = torch.from_numpy(frames(np.arange(k0, k0 + n + 1)))
    end = torch.zeros(n, 1, dtype=torch.bool)
    end[-1] = True
    no = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict({
        "observation": obs[:-1],
        "action": torch.from_numpy(k % 4),
        "done": no, "terminated": no.clone(), "truncated": no.clone(),
        "collector": {"traj_ids": torch.full((n,), traj, dtype=torch.int64)},
        "next": {"observation": obs[1:], "reward": torch.ones(n, 1), "done": end, "terminated": end.clone(),
                 "truncated": no.clone()},
    }, batch_size=[n])


def make_buffers(steps: int, num_slices: int, slice_len: int, extra_rows: int | None, scratch: str,
                 drop_next: bool) -> dict[str, Any]:
    from torchrl.data import LazyMemmapStorage, SliceSampler, TensorDictReplayBuffer

    import trajview as tv
    from trajview.torchrl import TrajviewSliceSampler, TrajviewStorage

    kw = dict(num_slices=num_slices, traj_key=("collector", "traj_ids"), strict_length=True, cache_values=True)
    ours = TensorDictReplayBuffer(
        storage=TrajviewStorage(steps, views={"stack": tv.ViewRequirement("observation", shift="-3:0")},
                                extra_rows=extra_rows),
        sampler=TrajviewSliceSampler(**kw), batch_size=num_slices * slice_len)
    theirs = TensorDictReplayBuffer(storage=LazyMemmapStorage(steps, scratch_dir=scratch),
                                    sampler=SliceSampler(**kw), batch_size=num_slices * slice_len)
    return {"trajview": ours, "torchrl": theirs, "drop_next": drop_next}


def catframes() -> Any:
    from torchrl.envs import CatFrames, Compose, UnsqueezeTransform

    return Compose(UnsqueezeTransform(-3, in_keys=["observation"], out_keys=["frame"]),
                   CatFrames(N=N_STACK, dim=-3, in_keys=["frame"], out_keys=["stack"], padding="constant"))


def samplers(bufs: dict[str, Any], num_slices: int, slice_len: int) -> dict[str, Callable[[], Any]]:
    cat = catframes()

    def torchrl_sample() -> Any:
        s = bufs["torchrl"].sample().reshape(num_slices, slice_len).refine_names(None, "time")
        return cat(s)

    def trajview_sample() -> Any:  # the stack is in the sample already; [256, 32] as TorchRL's side is shaped
        return bufs["trajview"].sample().reshape(num_slices, slice_len)

    return {"trajview": trajview_sample, "torchrl": torchrl_sample}


def fill(bufs: dict[str, Any], steps: int, episode_len: int, frames: Callable[[np.ndarray], np.ndarray],
         progress: bool) -> None:
    t0 = time.perf_counter()
    for traj, k0 in enumerate(range(0, steps, episode_len)):
        td = episode_td(k0, min(episode_len, steps - k0), traj, frames)
        bufs["trajview"].extend(td)
        bufs["torchrl"].extend(td.exclude(("next", "observation")) if bufs["drop_next"] else td)
        done = k0 + td.batch_size[0]
        if progress and (done % max(steps // 10, episode_len) < episode_len or done == steps):
            print(f"  filled {done:,} / {steps:,} steps ({time.perf_counter() - t0:.0f} s)", flush=True)


def stored_frames_per_step(bufs: dict[str, Any]) -> dict[str, float]:
    tv_storage = bufs["trajview"].storage
    trl = bufs["torchrl"].storage
    trl_bytes = sum(v.element_size() * v.numel() for v in trl._storage.values(True, True))
    return {"trajview": tv_storage.replay_buffer.nbytes() / len(tv_storage) / FRAME_BYTES,
            "torchrl": trl_bytes / len(trl) / FRAME_BYTES}


def check_stacks(scratch: str) -> None:
    """On a small buffer of distinct random frames: TorchRL's CatFrames stacks vs trajview's view, same steps."""
    import torch

    rng = np.random.default_rng(5)
    lens = [37, 50, 23, 61, 45]
    total = sum(lens)
    all_frames = rng.integers(0, 256, (total + 1, *FRAME), dtype=np.uint8)
    bufs = make_buffers(total, 4, 8, extra_rows=256, scratch=scratch, drop_next=False)
    starts = np.cumsum([0] + lens[:-1])
    for traj, (k0, n) in enumerate(zip(starts, lens)):
        td = episode_td(int(k0), n, traj, lambda k: all_frames[k])
        bufs["trajview"].extend(td)
        bufs["torchrl"].extend(td)
    ep_start = np.repeat(starts, lens)  # each step's episode start

    def reference(k: int) -> np.ndarray:  # the 4-frame stack of step k: zeros before its episode's start
        return np.stack([all_frames[u] if u >= ep_start[k] else np.zeros(FRAME, np.uint8) for u in range(k - 3, k + 1)])

    torch.manual_seed(0)
    theirs = samplers(bufs, 4, 8)["torchrl"]()
    idx = theirs["index"].reshape(4, 8)
    ours = bufs["trajview"].storage.get(idx.reshape(-1)).reshape(4, 8)  # trajview's stacks of the same steps
    got_tv = ours["stack"].numpy()
    got_trl = theirs["stack"].numpy()
    assert got_trl.shape == got_tv.shape == (4, 8, N_STACK, *FRAME), (got_trl.shape, got_tv.shape)
    assert torch.equal(ours["observation"], theirs["observation"])
    assert torch.equal(ours["next", "observation"], theirs["next", "observation"])
    padded = 0
    for i in range(4):
        for j in range(8):
            k = int(idx[i, j])
            ref = reference(k)
            np.testing.assert_array_equal(got_tv[i, j], ref, err_msg=f"trajview step {k}")
            for s in range(N_STACK):  # stack entry s holds step k - 3 + s
                if j - 3 + s >= 0 or k - 3 + s < ep_start[k]:
                    np.testing.assert_array_equal(got_trl[i, j, s], ref[s], err_msg=f"torchrl step {k} entry {s}")
                else:  # before the slice, inside the episode: CatFrames pads, trajview has the true frame
                    assert not got_trl[i, j, s].any(), (k, s)
                    padded += 1
    print(f"check: on {total} distinct frames, 4 slices x 8, both stacks = the reference where CatFrames sees the "
          f"frame; {padded} entries before a slice's start are CatFrames' zeros (trajview: the true frames)")
    for b in ("trajview", "torchrl"):
        bufs[b].empty()


def bench_replay(args: argparse.Namespace) -> list[str]:
    import torch

    scratch = tempfile.mkdtemp(prefix="torchrl_dropin_", dir=args.scratch)
    try:
        check_stacks(os.path.join(scratch, "check"))
        pool = np.random.default_rng(0).integers(0, 256, (POOL, *FRAME), dtype=np.uint8)
        bufs = make_buffers(args.steps, args.num_slices, args.slice_len, args.extra_rows,
                            os.path.join(scratch, "memmap"), args.torchrl_drop_next)
        st = bufs["trajview"].storage
        print(f"TrajviewStorage({args.steps:,}): extra_rows {st.extra_rows:,} "
              f"({'--extra-rows' if args.extra_rows is not None else 'the default'}), {st.rows:,} rows = "
              f"{st.rows / args.steps:.4f} rows per step", flush=True)
        print(f"filling both buffers with {args.steps:,} steps ({args.episode_len}-step episodes; TorchRL's memmap "
              f"files in {scratch})", flush=True)
        fill(bufs, args.steps, args.episode_len, lambda k: pool[k % POOL], progress=True)
        fps = stored_frames_per_step(bufs)
        fns = samplers(bufs, args.num_slices, args.slice_len)
        torch.manual_seed(0)
        outs = {name: fn() for name, fn in fns.items()}  # warm-up (TorchRL's sampler caches its trajectories here)
        for name, out in outs.items():
            assert out["stack"].shape == (args.num_slices, args.slice_len, N_STACK, *FRAME), (name, out["stack"].shape)
            k = out["index"].reshape(-1).numpy()  # frame of step k is pool[k % 7] (the buffers have not wrapped)
            last = out["stack"][..., -1, :, :].reshape(-1, *FRAME).numpy()
            np.testing.assert_array_equal(last, pool[k % POOL], err_msg=name)
        ts = interleaved(fns, args.rounds)
        ratio = [b / a for a, b in zip(ts["trajview"], ts["torchrl"])]
        print(f"slices: {args.num_slices} x {args.slice_len} steps with a {N_STACK}-frame stack, "
              f"{args.steps:,}-step buffers, {args.rounds} rounds")
        for name, v in ts.items():
            print(f"  {name:9s} ms per sample() {spread([t * 1e3 for t in v])}; "
                  f"frames stored per step {fps[name]:.4f}")
        mark = "meets" if statistics.median(ratio) >= GOAL_SLICES else "MISSES"
        print(f"  torchrl / trajview time: {spread(ratio)}x; goal >= {GOAL_SLICES:g}x: {mark}")
        mark = "meets" if fps["trajview"] <= GOAL_FRAMES_PER_STEP else "MISSES"
        print(f"  trajview frames stored per step {fps['trajview']:.4f} (torchrl {fps['torchrl']:.4f}); goal <= "
              f"{GOAL_FRAMES_PER_STEP}: {mark}")
        for b in ("trajview", "torchrl"):
            bufs[b].empty()
        return [f"| slices {args.num_slices}x{args.slice_len} + 4-frame stack, {args.steps:,} steps | >= {GOAL_SLICES:g}x | "
                f"**{statistics.median(ratio):.1f}x** ({min(ratio):.1f}-{max(ratio):.1f}) |",
                f"| frames stored per step, {args.steps:,} steps | <= {GOAL_FRAMES_PER_STEP} | "
                f"**{fps['trajview']:.4f}** (TorchRL's: {fps['torchrl']:.4f}) |"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["collector", "replay"], help="run one part")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds per comparison")
    p.add_argument("--batches", type=int, default=5, help="(a) collector batches per round")
    p.add_argument("--fpb1", type=int, default=1000, help="(a) frames_per_batch at 1 env")
    p.add_argument("--fpb8", type=int, default=8000, help="(a) frames_per_batch at 8 envs")
    p.add_argument("--torchrl-batched", nargs="+", choices=["serial", "parallel"], default=["serial"],
                   help="(a) TorchRL's 8-env form(s): SerialEnv (this process, as trajview's) and/or ParallelEnv")
    p.add_argument("--steps", type=int, default=None, help="(b) steps in each buffer (default 1,000,000; --quick 20,000)")
    p.add_argument("--episode-len", type=int, default=1000, help="(b) steps per episode (one write each)")
    p.add_argument("--num-slices", type=int, default=256)
    p.add_argument("--slice-len", type=int, default=32)
    p.add_argument("--extra-rows", type=int, default=None,
                   help="(b) TrajviewStorage extra_rows (default: the storage's own default)")
    p.add_argument("--torchrl-drop-next", action="store_true",
                   help="(b) leave ('next', 'observation') out of TorchRL's buffer (1 frame per step)")
    p.add_argument("--scratch", default=None, help="(b) folder for TorchRL's memmap files (default: the temp dir)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    p.add_argument("--quick", action="store_true",
                   help="smoke: 2 rounds, 1 batch of 200 / 800 frames, 32 slices, 20k steps (unless --steps)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.batches, args.fpb1, args.fpb8 = 2, 1, 200, 800
        args.num_slices = 32
    if args.steps is None:
        args.steps = 20_000 if args.quick else 1_000_000
    try:
        import tensordict  # noqa: F401
        import torch
        import torchrl
    except ImportError as e:
        print(f"needs torchrl and tensordict (pip install 'trajview[torchrl]'): {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, torchrl {torchrl.__version__}, tensordict {tensordict.__version__}, "
          f"{args.threads} torch thread(s)")
    rows = []
    if args.only in (None, "collector"):
        rows += bench_collectors(args)
    if args.only in (None, "replay"):
        rows += bench_replay(args)
    print("\n| claim | target | figure: median (min-max) |\n|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
