"""A short demo of the collector: CartPole envs, a random policy, frame-stack views.

Run ``python examples/collector_demo.py --help``. It steps ``--num-envs`` gymnasium
CartPole envs, stores every step once in the C++ store, hands a 4-frame stack
and the previous action to the (random) policy at every step, cuts a batch
every ``--fragment`` steps, checks every view of every batch against the data
the envs returned, and reports throughput and memory.
"""

from __future__ import annotations

import argparse
import time
from typing import cast

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from trajview import Collector, ViewRequirement, concat_samples


def _check_batch(batch, log) -> int:
    """Checks the frame stack, new_obs and prev_actions views against the raw log."""
    checked = 0
    for eps_id, t, stack, new_obs, prev_a in zip(
        batch["eps_id"], batch["t"], batch["prev_n_obs"], batch["new_obs"], batch["prev_actions"]
    ):
        obs_log, act_log = log[int(eps_id)]
        for j, s in enumerate(range(-3, 1)):
            want = obs_log[t + s] if t + s >= 0 else np.zeros_like(obs_log[0])
            if not np.array_equal(stack[j], want):
                raise AssertionError(f"episode {eps_id} t={t}: frame {s} differs from the env's observation")
        if not np.array_equal(new_obs, obs_log[t + 1]):
            raise AssertionError(f"episode {eps_id} t={t}: new_obs differs from the env's next observation")
        want_a = act_log[t - 1] if t >= 1 else 0
        if prev_a != want_a:
            raise AssertionError(f"episode {eps_id} t={t}: prev_actions {prev_a} != {want_a}")
        checked += 1
    return checked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python examples/collector_demo.py", description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20_000, help="env steps in total")
    parser.add_argument("--fragment", type=int, default=200, help="steps per env between batches")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_space = cast(gym.spaces.Box, envs.single_observation_space)
    VR = ViewRequirement
    views = {
        "obs": VR("obs"),
        "new_obs": VR("obs", shift=1, used_for_compute_actions=False),
        "prev_n_obs": VR("obs", shift="-3:0"),
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
    log: dict[int, tuple[list[np.ndarray], list[int]]] = {  # the raw data, to check views against
        int(e): ([o.copy()], []) for e, o in zip(eps, obs)
    }
    returns, ep_ret = [], np.zeros(args.num_envs)
    checked = 0
    peak_bytes = 0
    t0 = time.perf_counter()
    steps = 0
    with tqdm(total=args.steps, unit="step", desc="collecting") as bar:
        while steps < args.steps:
            for _ in range(args.fragment):
                inputs = coll.input_dict()
                assert inputs["prev_n_obs"].shape == (args.num_envs, 4, *obs_space.shape)
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
                    log[int(eid)][0].append(new_obs[i].copy())
                    log[int(eid)][1].append(int(actions[i]))
                ep_ret += rew
                if done.any():
                    ids = np.flatnonzero(done)
                    coll.end_episodes(ids)
                    new_eps = coll.begin_episodes(ids, {"obs": obs[ids]})
                    for j, e in zip(ids, new_eps):
                        log[int(e)] = ([obs[j].copy()], [])
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
    print(
        f"{steps} env steps in {dt:.1f} s ({steps / dt:,.0f} steps/s, env and checks included); "
        f"{checked} batch rows checked against the env's data; "
        f"{len(returns)} episodes, mean return {np.mean(returns) if returns else 0:.1f}; "
        f"peak store size {peak_bytes / 1e3:.1f} kB"
    )


if __name__ == "__main__":
    main()
