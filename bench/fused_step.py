"""Would one batched policy+value network make PPO's SGD step faster? (issue 25, deliverable 3)

The frame stack's two networks (64x64 tanh policy and value MLPs over 16 x 2 stacked observations, the zoo's
settings: minibatch 256) trained by the same PPO loss, gradient clip and fused Adam, written two ways in plain
torch (no trajview):

* ``separate``: two ``nn.Sequential`` MLPs, as trajview's `FrameStackModel` and SB3's policy have them;
* ``fused``: the same layers as one network: both first layers as one ``Linear`` (its output split in two), the
  second layers and the heads as batched matmuls (``baddbmm``) over weights stacked on a first dimension.
  Half the ops per forward and backward, the same arithmetic (checked: both give the same loss and gradients on
  the same weights).

Alternating rounds of ``--steps`` minibatch steps each (after a warm-up), one torch thread; it prints the median
and the spread of each round's ms per step. The answer decides whether fusing trajview's networks is worth a
change of its models' layout: it is when the step is bound by eager torch's per-op cost, not when it is bound by
the ops' own work (``torch.tanh``'s kernel above all).

    python bench/fused_step.py             # 7 rounds of 1,000 steps
    python bench/fused_step.py --quick     # a smoke (timings meaningless)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

BATCH, IN, HIDDEN, ACTIONS = 256, 32, 64, 2


class Separate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                                nn.Linear(HIDDEN, ACTIONS))
        self.vf = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                                nn.Linear(HIDDEN, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pi(x), self.vf(x)[:, 0]


class Fused(nn.Module):
    """`Separate`'s two networks as one: the heads padded to ``ACTIONS`` outputs (the value head's second output is
    held at zero weight and never read, so it gets no gradient)."""

    def __init__(self, like: Separate) -> None:
        super().__init__()
        pi, vf = like.pi, like.vf
        with torch.no_grad():
            self.w1 = nn.Parameter(torch.cat([pi[0].weight, vf[0].weight]).T.contiguous())  # [IN, 2H]
            self.b1 = nn.Parameter(torch.cat([pi[0].bias, vf[0].bias]))
            self.w2 = nn.Parameter(torch.stack([pi[2].weight.T, vf[2].weight.T]).contiguous())  # [2, H, H]
            self.b2 = nn.Parameter(torch.stack([pi[2].bias, vf[2].bias])[:, None])  # [2, 1, H]
            w3 = torch.zeros(2, HIDDEN, ACTIONS)
            w3[0], w3[1, :, :1] = pi[4].weight.T, vf[4].weight.T
            b3 = torch.zeros(2, 1, ACTIONS)
            b3[0, 0], b3[1, 0, :1] = pi[4].bias, vf[4].bias
            self.w3, self.b3 = nn.Parameter(w3), nn.Parameter(b3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(torch.addmm(self.b1, x, self.w1)).view(len(x), 2, HIDDEN).transpose(0, 1)  # [2, B, H]
        h = torch.tanh(torch.baddbmm(self.b2, h, self.w2))
        out = torch.baddbmm(self.b3, h, self.w3)
        return out[0], out[1, :, 0]


def ppo_loss(model: nn.Module, batch: dict[str, torch.Tensor], clip: float = 0.2) -> torch.Tensor:
    logits, values = model(batch["x"])
    logp = torch.log_softmax(logits, -1).gather(1, batch["actions"][:, None])[:, 0]
    adv = batch["adv"]
    adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    ratio = torch.exp(logp - batch["old_logp"])
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    return -surrogate.mean() + 0.5 * torch.mean((values - batch["targets"]) ** 2)


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(BATCH, IN, generator=g), "actions": torch.randint(0, ACTIONS, (BATCH,), generator=g),
            "adv": torch.randn(BATCH, generator=g), "old_logp": -torch.rand(BATCH, generator=g),
            "targets": torch.randn(BATCH, generator=g)}


def sgd_step(model: nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> None:
    loss = ppo_loss(model, batch)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()


def same_arithmetic() -> float:
    """The largest difference between the two networks' losses and their first layers' gradients on the same
    weights and batch."""
    torch.manual_seed(0)
    sep = Separate()
    fused = Fused(sep)
    batch = make_batch(1)
    ls, lf = ppo_loss(sep, batch), ppo_loss(fused, batch)
    gs = torch.autograd.grad(ls, [sep.pi[0].weight, sep.vf[0].weight])
    (gf,) = torch.autograd.grad(lf, [fused.w1])
    return max(float((ls - lf).abs().detach()), float((torch.cat(gs).T - gf).abs().max()))


def measure(rounds: int, steps: int, warmup: int = 200) -> dict[str, list[float]]:
    torch.manual_seed(0)
    sep = Separate()
    models = {"separate": sep, "fused": Fused(sep)}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-5, fused=True) for k, m in models.items()}
    batch = make_batch()
    for k in models:
        for _ in range(warmup):
            sgd_step(models[k], opts[k], batch)
    out: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(rounds):
        for k in models:
            t0 = time.perf_counter()
            for _ in range(steps):
                sgd_step(models[k], opts[k], batch)
            out[k].append((time.perf_counter() - t0) / steps * 1e3)
    return out


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=1000, help="minibatch steps per round")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 20 steps (a smoke)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rounds, steps = (2, 20) if args.quick else (args.rounds, args.steps)
    print(f"the two networks' arithmetic differs by at most {same_arithmetic():.1e} (loss, first-layer gradients)")
    out = measure(rounds, steps, warmup=5 if args.quick else 200)
    print(f"ms per SGD step, minibatch {BATCH}, median (min-max) of {rounds} rounds x {steps} steps, 1 torch thread")
    for k, v in out.items():
        print(f"  {k:9s} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
    ratio = statistics.median(out["separate"]) / statistics.median(out["fused"])
    print(f"  fused is {ratio:.2f}x the separate networks' speed")
    return out


if __name__ == "__main__":
    main()
