"""A short demo of the collector: CartPole envs, a random policy, frame-stack views.

Run ``python examples/collector_demo.py --help`` (needs trajview, and tqdm from
``pip install 'trajview[train]'``). It steps ``--num-envs`` gymnasium CartPole
envs, stores every step once in the C++ store, hands a 4-frame stack and the
previous action to the (random) policy at every step, cuts a batch every
``--fragment`` steps, checks every view of every batch against the data the
envs returned, and reports throughput and memory. A failed check raises (exit
status 1); on success the last line starts with ``ok: checks passed``.
``--smoke`` runs it in a few seconds (as every example takes). The views
and their shifts are described in docs/contract.md ("Views").
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from trajview import Collector, SampleBatch, ViewRequirement, concat_samples

FRAMES = 4  # prev_n_obs: obs at shifts -3..0


@dataclass
class _Episode:
    """What the env returned in one episode: obs[t] (obs[t + 1] is step t's next observation), and per step t the rest."""

    obs: list[np.ndarray]
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminateds: list[bool] = field(default_factory=list)
    truncateds: list[bool] = field(default_factory=list)


def _check_batch(batch: SampleBatch, log: dict[int, _Episode]) -> int:
    """Checks every view of every row against the raw log; returns the rows checked."""

    def expect(got: Any, want: Any, what: str) -> None:
        if not np.array_equal(got, want):
            raise AssertionError(f"episode {eps_id} t={t}: {what} is {got!r}, the env gave {want!r}")

    columns = ("eps_id", "t", "obs", "new_obs", "prev_n_obs", "actions", "prev_actions", "rewards", "terminateds", "truncateds")
    checked = 0
    for eps_id, t, obs, new_obs, stack, a, prev_a, r, term, trunc in zip(*(batch[c] for c in columns)):
        ep = log[int(eps_id)]
        expect(obs, ep.obs[t], "obs")
        expect(new_obs, ep.obs[t + 1], "new_obs")
        for j, s in enumerate(range(-(FRAMES - 1), 1)):
            expect(stack[j], ep.obs[t + s] if t + s >= 0 else np.zeros_like(ep.obs[0]), f"prev_n_obs frame {s}")
        expect(a, ep.actions[t], "actions")
        expect(prev_a, ep.actions[t - 1] if t >= 1 else 0, "prev_actions")
        expect(r, ep.rewards[t], "rewards")
        expect(term, ep.terminateds[t], "terminateds")
        expect(trunc, ep.truncateds[t], "truncateds")
        checked += 1
    return checked


def _positive(v: str) -> int:
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python examples/collector_demo.py", description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=_positive, default=16)
    parser.add_argument("--steps", type=_positive, default=20_000, help="env steps in total (rounded up to whole batches)")
    parser.add_argument("--fragment", type=_positive, default=200, help="steps per env between batches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: 1,200 steps of 4 envs, a batch every 50 steps, no progress bar")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.num_envs, args.fragment, args.no_progress = 1200, 4, 50, True

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_space = cast(gym.spaces.Box, envs.single_observation_space)
    VR = ViewRequirement
    views = {
        "obs": VR("obs"),
        "new_obs": VR("obs", shift=1, used_for_compute_actions=False),
        "prev_n_obs": VR("obs", shift=f"-{FRAMES - 1}:0"),
        "actions": VR("actions", used_for_compute_actions=False),
        "prev_actions": VR("actions", shift=-1),
        "rewards": VR("rewards", used_for_compute_actions=False),
        "terminateds": VR("terminateds", used_for_compute_actions=False),
        "truncateds": VR("truncateds", used_for_compute_actions=False),
    }
    columns = {
        "obs": (obs_space.dtype, obs_space.shape),
        "actions": (np.int64, ()),
        "rewards": (np.float64, ()),
        "terminateds": (np.bool_, ()),
        "truncateds": (np.bool_, ()),
    }
    coll = Collector(args.num_envs, columns, views, chunk_rows=args.fragment + 4)
    rng = np.random.default_rng(args.seed)
    obs, _ = envs.reset(seed=args.seed)
    eps = coll.begin_episodes(np.arange(args.num_envs), {"obs": obs})
    log = {int(e): _Episode([o.copy()]) for e, o in zip(eps, obs)}  # the raw data, to check views against
    returns, ep_ret = [], np.zeros(args.num_envs)
    checked = 0
    peak_bytes = 0
    t0 = time.perf_counter()
    steps = 0
    with tqdm(total=args.steps, unit="step", desc="collecting", disable=args.no_progress) as bar:
        while steps < args.steps:
            for _ in range(args.fragment):
                inputs = coll.input_dict()
                assert inputs["prev_n_obs"].shape == (args.num_envs, FRAMES, *obs_space.shape)
                actions = rng.integers(0, 2, args.num_envs)
                obs, rew, term, trunc, info = envs.step(actions)
                done = term | trunc
                new_obs = obs.copy()
                if done.any():
                    # SAME_STEP autoreset: obs holds the reset observation, the
                    # episode's final observation is in info.
                    new_obs[done] = np.stack([info["final_obs"][i] for i in np.flatnonzero(done)])
                coll.add_step(
                    {"obs": new_obs, "actions": actions, "rewards": rew, "terminateds": term, "truncateds": trunc}
                )
                for i, eid in enumerate(coll.eps_ids()):
                    ep = log[int(eid)]
                    ep.obs.append(new_obs[i].copy())
                    ep.actions.append(int(actions[i]))
                    ep.rewards.append(float(rew[i]))
                    ep.terminateds.append(bool(term[i]))
                    ep.truncateds.append(bool(trunc[i]))
                ep_ret += rew
                if done.any():
                    ids = np.flatnonzero(done)
                    coll.end_episodes(ids)
                    new_eps = coll.begin_episodes(ids, {"obs": obs[ids]})
                    for j, e in zip(ids, new_eps):
                        log[int(e)] = _Episode([obs[j].copy()])
                    returns.extend(ep_ret[ids].tolist())
                    ep_ret[ids] = 0
                steps += args.num_envs
                bar.update(args.num_envs)
            peak_bytes = max(peak_bytes, coll.nbytes())
            batch = concat_samples(coll.build_batch())
            checked += _check_batch(batch, log)
            finished = set(log) - {int(e) for e in coll.eps_ids()}
            for e in finished:
                del log[e]
            bar.set_postfix(mean_return=f"{np.mean(returns[-100:]) if returns else 0:.1f}", checked=checked)
    dt = time.perf_counter() - t0
    if checked != steps:
        raise AssertionError(f"{steps} env steps taken, but the batches held {checked} rows")
    print(
        f"{steps} env steps in {dt:.1f} s ({steps / dt:,.0f} steps/s, env and checks included); "
        f"{len(returns)} episodes, mean return {np.mean(returns) if returns else 0:.1f}; "
        f"peak store size {peak_bytes / 1e3:.1f} kB"
    )
    print(f"ok: checks passed: {checked} batch rows, every view ({', '.join(views)}) equal to the env's data")


if __name__ == "__main__":
    main()
