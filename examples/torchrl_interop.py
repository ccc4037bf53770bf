"""TorchRL interop: a rollout batch and a replay sample as TensorDicts in TorchRL's layout.

`tv.SampleBatch.to_tensordict()` maps trajview's flat batch onto TorchRL's names
(needs ``torch`` and ``tensordict``; no torchrl): ``actions`` -> ``action``,
``new_obs`` -> ``("next", "obs")``, ``rewards`` -> ``("next", "reward")`` of shape
[B, 1], the done flags under ``"next"``, ``eps_id`` -> ``("collector", "traj_ids")``,
and ``is_init`` [B, 1]. Both are flat: trajectories end to end, no padding.

Checks: the keys and shapes of the TensorDict, values equal to the batch's
columns, the tensors sharing the batch's memory (no copy), the trajectories
recovered from ``traj_ids`` with tensordict operations, and a replay sample
converted the same way.

    python examples/torchrl_interop.py --smoke
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

import trajview as tv


class RandomPolicy(tv.Policy):
    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        return np.random.randint(0, 2, len(input_dict["obs"])).astype(np.int64), [], {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds (the only mode: this example is small)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    np.random.seed(args.seed)

    worker = tv.RolloutWorker(lambda cfg: gym.make("CartPole-v1"), RandomPolicy, num_envs=4,
                              rollout_fragment_length=100, seed=args.seed)
    batch = worker.sample()
    worker.stop()
    td = batch.to_tensordict()
    assert isinstance(td, TensorDict) and td.batch_size == torch.Size([400])

    keys = set(td.keys(include_nested=True, leaves_only=True))
    for key in ["obs", "action", "is_init", ("next", "obs"), ("next", "reward"), ("next", "done"),
                ("next", "terminated"), ("next", "truncated"), ("collector", "traj_ids")]:
        assert key in keys, (key, sorted(map(str, keys)))
    assert td["next", "reward"].shape == (400, 1) and td["is_init"].shape == (400, 1)
    np.testing.assert_array_equal(td["action"].numpy(), batch["actions"])
    np.testing.assert_array_equal(td["next", "obs"].numpy(), batch["new_obs"])
    np.testing.assert_array_equal(td["next", "done"][:, 0].numpy(), batch["terminateds"] | batch["truncateds"])
    # Zero copy: the TensorDict's obs is the batch's C++-owned array.
    assert np.shares_memory(td["obs"].numpy(), batch["obs"])

    # Trajectories are runs of one traj_id: split the flat TensorDict with tensordict alone.
    traj_ids = td["collector", "traj_ids"]
    change = torch.nonzero(traj_ids[1:] != traj_ids[:-1])[:, 0] + 1
    lengths = torch.diff(torch.cat([torch.tensor([0]), change, torch.tensor([len(td)])])).tolist()
    trajectories = td.split(lengths)
    for traj in trajectories:
        assert len(set(traj["collector", "traj_ids"].tolist())) == 1
        # Inside a trajectory, next obs of step t is the obs of step t + 1.
        torch.testing.assert_close(traj["next", "obs"][:-1], traj["obs"][1:])
    print(f"rollout batch: {len(td)} rows, {len(trajectories)} trajectories, keys {sorted(map(str, keys))}")

    # A replay sample converts the same way (is_init at each slice start).
    rb = tv.ReplayBuffer(10_000, sampler=tv.SliceSampler(slice_len=8, strict_length=True, seed=args.seed))
    rb.add(batch)
    sample = rb.sample(64)
    assert isinstance(sample, tv.SampleBatch)
    std = sample.to_tensordict()
    assert std.batch_size == torch.Size([64]) and bool(std["is_init"][::8].all())
    torch.testing.assert_close(std["next", "obs"].reshape(8, 8, 4)[:, :-1], std["obs"].reshape(8, 8, 4)[:, 1:])
    print("ok: TensorDict keys, shapes, values and zero copy checked; trajectories split; replay sample converted")


if __name__ == "__main__":
    main()
