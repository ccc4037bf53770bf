"""TorchRL's PPO tutorial loop on Pendulum, with trajview's drop-ins swapped in for TorchRL's collector and storage.

The loop is TorchRL's ("Reinforcement Learning (PPO) with TorchRL"): a ``ProbabilisticActor`` (``TanhNormal``),
a ``ValueOperator``, ``GAE``, ``ClipPPOLoss``, and each batch replayed in minibatches from a replay buffer
with ``SamplerWithoutReplacement``, for a few epochs. ``--side trajview`` collects with
`trajview.torchrl.TrajviewCollector` and replays from `trajview.torchrl.TrajviewStorage`; ``--side torchrl``
with TorchRL's ``Collector`` and ``LazyTensorStorage``; ``--side both`` runs the two with the same seeds and
prints their curves side by side (bench/torchrl_ppo.py plots them). Nothing else differs: one model builder,
one loss, one loop.

Checks: every batch holds TorchRL's keys and shapes, the losses are finite, and each side's replayed
minibatches cover the batch once per epoch.

    python examples/torchrl_ppo.py --smoke
    python examples/torchrl_ppo.py --side both --frames 100000
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import SamplerWithoutReplacement
from torchrl.envs import GymEnv
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from trajview.torchrl import TrajviewCollector, TrajviewStorage

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.collectors import Collector

ENV = "Pendulum-v1"


def build_models(seed: int, cells: int) -> tuple[ProbabilisticActor, ValueOperator]:
    """The tutorial's actor (loc and scale of a TanhNormal in [-2, 2]) and critic, seeded."""
    torch.manual_seed(seed)
    actor_net = nn.Sequential(nn.Linear(3, cells), nn.Tanh(), nn.Linear(cells, cells), nn.Tanh(),
                              nn.Linear(cells, 2), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0}, return_log_prob=True,
    )
    value_net = nn.Sequential(nn.Linear(3, cells), nn.Tanh(), nn.Linear(cells, cells), nn.Tanh(), nn.Linear(cells, 1))
    return actor, ValueOperator(value_net, in_keys=["observation"])


def make_collector(side: str, actor: ProbabilisticActor, frames_per_batch: int, total: int, seed: int) -> Any:
    if side == "trajview":
        return TrajviewCollector(lambda: gym.make(ENV), actor, frames_per_batch, total, seed=seed)

    def env() -> GymEnv:
        e = GymEnv(ENV)
        e.set_seed(seed)
        return e
    return Collector(env, actor, frames_per_batch=frames_per_batch, total_frames=total,
                     auto_register_policy_transforms=False)


def make_storage(side: str, size: int) -> Any:
    return TrajviewStorage(size) if side == "trajview" else LazyTensorStorage(size)


def train(side: str, frames: int, frames_per_batch: int = 1000, epochs: int = 10, minibatch: int = 64,
          seed: int = 0, cells: int = 64, lr: float = 3e-4,
          on_batch: Callable[[TensorDictBase], None] | None = None) -> list[tuple[int, float, float]]:
    """TorchRL's PPO loop with ``side``'s collector and storage; returns (frames, mean reward per step of the
    batch, seconds) per batch."""
    actor, critic = build_models(seed, cells)
    collector = make_collector(side, actor, frames_per_batch, frames, seed)
    rb = ReplayBuffer(storage=make_storage(side, frames_per_batch),
                      sampler=SamplerWithoutReplacement(), batch_size=minibatch)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)
    loss_module = ClipPPOLoss(actor_network=actor, critic_network=critic, clip_epsilon=0.2, entropy_bonus=True,
                              entropy_coeff=1e-4, critic_coeff=1.0, loss_critic_type="smooth_l1")
    optim = torch.optim.Adam(loss_module.parameters(), lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, max(frames // frames_per_batch, 1), 0.0)
    curve: list[tuple[int, float, float]] = []
    done_frames = 0
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    for data in _batches(collector):
        if on_batch is not None:
            on_batch(data)
        for _ in range(epochs):
            gae(data)
            rb.extend(data.reshape(-1).cpu())
            for _ in range(frames_per_batch // minibatch):
                sub = rb.sample()
                losses = loss_module(sub)
                loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                if not math.isfinite(float(loss.detach())):
                    raise AssertionError(f"{side}: a non-finite loss {float(loss.detach())}")
                loss.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 1.0)
                optim.step()
                optim.zero_grad()
        done_frames += data.numel()
        curve.append((done_frames, float(data["next", "reward"].mean()), time.perf_counter() - t0))
        collector.update_policy_weights_()
        sched.step()
    collector.shutdown()
    return curve


def _batches(collector: Any) -> Iterable[TensorDictBase]:
    yield from collector


def check_batch(data: TensorDictBase, frames_per_batch: int) -> None:
    keys = set(data.keys(include_nested=True, leaves_only=True))
    for k in ["observation", "action", "loc", "scale", ("next", "observation"), ("next", "reward"),
              ("next", "done"), ("next", "terminated"), ("next", "truncated"), ("collector", "traj_ids")]:
        assert k in keys, (k, sorted(map(str, keys)))
    assert data.batch_size == torch.Size([frames_per_batch]), data.batch_size
    assert data["next", "reward"].shape == (frames_per_batch, 1) and data["next", "reward"].dtype == torch.float32


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds: two small batches per side")
    p.add_argument("--side", choices=["trajview", "torchrl", "both"], default="both")
    p.add_argument("--frames", type=int, default=50_000)
    p.add_argument("--frames-per-batch", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.smoke:
        args.frames, args.frames_per_batch, args.epochs = 400, 200, 2
    sides = ["trajview", "torchrl"] if args.side == "both" else [args.side]
    curves = {}
    for side in sides:
        curves[side] = train(side, args.frames, args.frames_per_batch, args.epochs, seed=args.seed,
                             on_batch=lambda d: check_batch(d, args.frames_per_batch))
        assert curves[side][-1][0] == args.frames, curves[side]
    print("frames  " + "  ".join(f"{s:>18}" for s in sides))
    for i in range(len(curves[sides[0]])):
        print(f"{curves[sides[0]][i][0]:6d}  " + "  ".join(f"{curves[s][i][1]:18.3f}" for s in sides))
    print(f"ok: TorchRL's PPO loop ran on {', '.join(sides)} ({args.frames} frames each, seed {args.seed})")


if __name__ == "__main__":
    main()
