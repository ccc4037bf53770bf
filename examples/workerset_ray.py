"""Scaling out: a `tv.WorkerSet` of rollout workers as Ray actors (or processes), weights synced from a learner.

Each worker is a `tv.RolloutWorker` with ``worker_index`` 1..N in its own Ray
actor (``backend="ray"``; ``ray.init(address=...)`` first to use a cluster) or
process (``backend="process"``). ``sample()`` asks every worker at once and
concatenates their batches; ``sync_weights(policy)`` sends the learner's
``get_weights()`` to every worker's ``set_weights``.

The policy is linear and greedy (action = argmax(obs @ W)), so the check is
exact: after each sync, every row of every worker's batch was acted with the
learner's new weights. Also checked: the batch size (workers x envs x
fragment), episode ids unique across workers (the worker index sits in their
high bits), and the weights each worker reports.

    python examples/workerset_ray.py --smoke                    # Ray, 2 workers, a few iterations
    python examples/workerset_ray.py --backend process --smoke  # the same with processes
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

import trajview as tv


class LinearPolicy(tv.Policy):
    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any] | None = None) -> None:
        super().__init__(observation_space, action_space, config)
        self.w = np.zeros((4, 2), np.float32)

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        return np.argmax(np.asarray(input_dict["obs"]) @ self.w, axis=1).astype(np.int64), [], {}

    def get_weights(self) -> dict[str, Any]:
        return {"w": self.w.copy()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        self.w = np.asarray(weights["w"], np.float32).copy()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds after start-up: 3 iterations")
    p.add_argument("--backend", choices=("ray", "process"), default="ray")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    num_envs, fragment = 4, 50

    if args.backend == "ray":
        import ray

        ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    learner = LinearPolicy(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
    rng = np.random.default_rng(0)
    try:
        with tv.WorkerSet(lambda cfg: gym.make("CartPole-v1"), LinearPolicy, num_workers=args.workers,
                          backend=args.backend, num_envs=num_envs, rollout_fragment_length=fragment, seed=0) as ws:
            seen: set[int] = set()
            for it in range(3 if args.smoke else 20):
                learner.w = rng.normal(size=(4, 2)).astype(np.float32)  # a stand-in for a learning step
                ws.sync_weights(learner)
                batch = ws.sample()  # a tv.SampleBatch: the set is a WorkerSet[SampleBatch]
                assert len(batch) == args.workers * num_envs * fragment
                np.testing.assert_array_equal(batch["actions"], np.argmax(batch["obs"] @ learner.w, axis=1))
                for got in ws.get_weights():
                    assert got is not None
                    np.testing.assert_array_equal(got["default_policy"]["w"], learner.w)
                eps_ids = np.unique(batch["eps_id"])
                workers = set((eps_ids >> 40).tolist())
                assert workers == set(range(1, args.workers + 1)), workers
                seen |= set(eps_ids.tolist())
                m = ws.get_metrics()
                print(f"iteration {it + 1}: {len(batch)} steps from {len(workers)} workers, "
                      f"{len(m['episode_returns'])} episodes finished")
    finally:
        if args.backend == "ray":
            ray.shutdown()
    print(f"ok: {len(seen)} episode ids, all unique across workers; every action taken with the synced weights")


if __name__ == "__main__":
    main()
