"""A Dict observation (84x84 uint8 image + float32[8] vector) against the same workload with a flat image.

Both workloads: 64 envs whose ``step`` returns precomputed observations
(their own cost is almost nothing), a constant policy that reads a 4-frame
stack of the image (``ViewRequirement("obs", shift="-3:0")``; for the Dict
observation the stack is per leaf: ``stack["image"]`` is ``[B, 4, 84, 84]``),
``RolloutWorker.sample()`` of 200-step fragments with the training views
(``obs``, ``new_obs``, ``stack``). Per env step we time:

* ``plain``: the bare loop (each ``env.step``, the policy's call on a stacked
  observation), which any collector must at least do;
* ``worker``: ``RolloutWorker.sample()``;

and report the worker's own cost, ``worker - plain``, per env step, for both
observation kinds side by side in one run (alternating rounds), their ratio,
and the image frames the store and the batch hold per step.

    python bench/nested_obs.py               # 5 rounds, prints a markdown table
    python bench/nested_obs.py --rounds 1 --fragments 1   # quick
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import trajview as tv

NUM_ENVS = 64
FRAGMENT = 200
EPISODE_LEN = 200
FRAME = (84, 84)
FRAME_BYTES = 84 * 84


class ImageEnv(gym.Env):
    """``dict_obs``: Dict(image uint8[84, 84], vec float32[8]); else Box uint8[84, 84]. Episodes of 200 steps."""

    def __init__(self, dict_obs: bool, seed: int) -> None:
        img = gym.spaces.Box(0, 255, FRAME, np.uint8)
        self.dict_obs = dict_obs
        self.observation_space = gym.spaces.Dict({"image": img, "vec": gym.spaces.Box(-1, 1, (8,), np.float32)}) if dict_obs else img
        self.action_space = gym.spaces.Discrete(4)
        rng = np.random.default_rng(seed)
        frames = rng.integers(0, 256, (8, *FRAME), dtype=np.uint8)
        vecs = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
        self._obs = [{"image": f, "vec": v} for f, v in zip(frames, vecs)] if dict_obs else list(frames)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs[0], {}

    def step(self, action):
        self.t += 1
        return self._obs[self.t % 8], 1.0, self.t >= EPISODE_LEN, False, {}


class StackPolicy(tv.Policy):
    """Action 0 for every row; reads the 4-frame stack of the image (per leaf for a Dict observation)."""

    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = tv.ViewRequirement("obs", shift="-3:0")

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        stack = input_dict["stack"]
        image = stack["image"] if isinstance(stack, dict) else stack
        return np.zeros(len(image), np.int64), [], {}

    def loss(self, batch):
        return [batch[k] for k in ("obs", "new_obs", "stack", "actions", "rewards", "terminateds", "truncateds")]


def plain_loop(envs: list, policy: StackPolicy, steps: int) -> None:
    """The bare loop: every env.step, the observations stacked per leaf, the policy called on them."""
    obs = [env.reset()[0] for env in envs]
    dict_obs = envs[0].dict_obs
    for _ in range(steps):
        if dict_obs:
            batch = {"image": np.stack([o["image"] for o in obs]), "vec": np.stack([o["vec"] for o in obs])}
            actions = np.zeros(len(batch["image"]), np.int64)
        else:
            actions = np.zeros(len(np.stack(obs)), np.int64)
        obs = []
        for env, a in zip(envs, actions.tolist()):
            o, _r, te, tr, _ = env.step(a)
            if te or tr:
                o, _ = env.reset()
            obs.append(o)


def measure(dict_obs: bool, fragments: int) -> dict[str, float]:
    """Seconds per env step of the plain loop and of the worker, and frames per step (store, batch)."""
    envs = [ImageEnv(dict_obs, i) for i in range(NUM_ENVS)]
    it = iter(envs)
    w = tv.RolloutWorker(lambda cfg: next(it), StackPolicy, num_envs=NUM_ENVS, rollout_fragment_length=FRAGMENT)
    w.sample()  # warm-up: the pruning pass, the store's first blocks
    steps = fragments * FRAGMENT * NUM_ENVS
    t0 = time.perf_counter()
    for _ in range(fragments):
        b = w.sample()
    worker = (time.perf_counter() - t0) / steps
    coll = w.sampler.collector  # type: ignore[attr-defined]
    # The store with a whole fragment held, just before sample() builds the batch (bytes of every column).
    for _ in range(FRAGMENT):
        w.sampler._step()  # type: ignore[attr-defined]
    store_frames = coll.nbytes() / coll.num_steps() / FRAME_BYTES
    stack = dict.__getitem__(b, "stack.image" if dict_obs else "stack")
    batch_frames = len(stack.base) / len(b)
    w.stop()
    penv = [ImageEnv(dict_obs, i) for i in range(NUM_ENVS)]
    pol = StackPolicy(penv[0].observation_space, penv[0].action_space)
    t0 = time.perf_counter()
    plain_loop(penv, pol, fragments * FRAGMENT)
    plain = (time.perf_counter() - t0) / steps
    return {"worker": worker, "plain": plain, "own": worker - plain, "store_frames": store_frames,
            "batch_frames": batch_frames}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of each workload")
    ap.add_argument("--fragments", type=int, default=3, help="timed sample() calls per round")
    args = ap.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"flat image": [], "Dict(image, vec)": []}
    for r in range(args.rounds):
        for name, dict_obs in (("flat image", False), ("Dict(image, vec)", True)):
            runs[name].append(measure(dict_obs, args.fragments))
            m = runs[name][-1]
            print(f"round {r + 1}/{args.rounds} {name}: own {m['own'] * 1e9:.0f} ns/env-step", flush=True)
    print(f"\n64 envs, 4-frame stack of an 84x84 uint8 image, fragments of {FRAGMENT}; medians of {args.rounds} rounds\n")
    print("| observation | worker (ns/env-step) | plain loop (ns/env-step) | worker's own cost (ns/env-step) | image frames stored per step | image frames per step in the batch |")
    print("|---|---|---|---|---|---|")
    med = {}
    for name, ms in runs.items():
        med[name] = {k: statistics.median(m[k] for m in ms) for k in ms[0]}
        d = med[name]
        print(f"| {name} | {d['worker'] * 1e9:.0f} | {d['plain'] * 1e9:.0f} | {d['own'] * 1e9:.0f} | "
              f"{d['store_frames']:.3f} | {d['batch_frames']:.3f} |")
    ratio = med["Dict(image, vec)"]["own"] / med["flat image"]["own"]
    print(f"\nworker's own cost, Dict / flat: {ratio:.2f}x (target: at most 1.3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
