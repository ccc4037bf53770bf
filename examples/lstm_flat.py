"""An LSTM policy trained on flat batches: no [B, T] padding anywhere.

The recurrent state is a view: each step's ``state_out_i`` is stored once, and
``state_in_i = ViewRequirement("state_out_i", shift=-1, batch_repeat_value=T)``
reads it back one step later (the initial state at t = 0). In training batches
the rows stay flat, one per step, and ``state_in_i`` has one row per sequence of
up to ``T`` steps, with ``seq_lens``. The training pass splits the flat rows at
the sequence starts, packs them (``torch.nn.utils.rnn.pack_sequence``), runs
the LSTM from each sequence's ``state_in``, and puts the outputs back in row
order.

The task, ``trajview/RepeatPrevious-v0``: reward 1 for repeating the bit shown
one step before, which needs memory.

Checks: the training pass reproduces, row by row, the logits computed step by
step during the rollout (stored as ``action_dist_inputs``), and the loss on a
fixed batch decreases; without ``--smoke`` the policy also learns the task
(mean reward per step above 0.9 over the last 5 batches).

    python examples/lstm_flat.py            # trains for 60 iterations
    python examples/lstm_flat.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

import trajview as tv

MAX_SEQ_LEN = 10


class LSTMModel(nn.Module):
    def __init__(self, num_actions: int, cell: int = 16) -> None:
        super().__init__()
        self.cell = cell
        self.lstm = nn.LSTM(input_size=1, hidden_size=cell, batch_first=True)
        self.head = nn.Linear(cell, num_actions)
        VR = tv.ViewRequirement
        self.view_requirements = {
            # h and c, read back one step after they were output; per sequence in training batches.
            f"state_in_{i}": VR(f"state_out_{i}", shift=-1, batch_repeat_value=MAX_SEQ_LEN) for i in range(2)
        }

    def get_initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros(self.cell), torch.zeros(self.cell)]

    def forward_step(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One step for every row of the compute-actions input dict."""
        h, c = batch["state_in_0"][None], batch["state_in_1"][None]  # [1, B, cell]
        out, (h, c) = self.lstm(batch["obs"].float()[:, None], (h, c))
        return self.head(out[:, 0]), [h[0], c[0]]

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits for every flat row: each sequence from its own state_in row."""
        seq_lens = batch["seq_lens"].long()
        runs = torch.split(batch["obs"].float(), seq_lens.tolist())  # the flat rows, cut at sequence starts
        packed = pack_sequence(list(runs), enforce_sorted=False)
        h0, c0 = batch["state_in_0"][None], batch["state_in_1"][None]  # [1, S, cell]: one row per sequence
        out, _ = self.lstm(packed, (h0, c0))
        padded, _ = pad_packed_sequence(out, batch_first=True)  # [S, T_max, cell], only to index back
        seq_of_row = torch.repeat_interleave(torch.arange(len(seq_lens)), seq_lens)
        pos = torch.arange(int(seq_lens.sum())) - (torch.cumsum(seq_lens, 0) - seq_lens)[seq_of_row]
        logits: torch.Tensor = self.head(padded[seq_of_row, pos])  # back to the flat rows, in order
        return logits


def categorical(logits: torch.Tensor, actions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(actions, their log-probabilities): sampled from ``logits`` unless given."""
    logp_all = torch.log_softmax(logits, -1)
    if actions is None:
        actions = torch.multinomial(logp_all.exp(), 1)[:, 0]
    return actions, logp_all.gather(1, actions.long()[:, None])[:, 0]


class LSTMPolicy(tv.TorchPolicy):
    model: LSTMModel

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any] | None = None) -> None:
        super().__init__(observation_space, action_space, {"lr": 1e-2, **(config or {})},
                         model=LSTMModel(int(action_space.n)))

    def action_sampler(
        self, input_dict: tv.SampleBatch, explore: bool | None
    ) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, torch.Tensor]]:
        logits, state_outs = self.model.forward_step(input_dict)
        actions, _ = categorical(logits)
        return actions, state_outs, {tv.SampleBatch.ACTION_DIST_INPUTS: logits}

    def loss(self, train_batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        actions = train_batch["actions"]
        _, logp = categorical(self.model.forward_train(train_batch), actions)
        # The rollout's logits (an extra fetch the loss reads, so the pruning pass keeps it): importance ratios.
        _, behaviour = categorical(train_batch["action_dist_inputs"], actions)
        ratio = torch.exp(logp - behaviour).clamp(max=2.0)
        # Each reward depends only on its own action here: the reward minus the 0.5 of a random guess.
        return -(ratio * (train_batch["rewards"].float() - 0.5)).mean()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds: no training run")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)

    env = gym.make("trajview/RepeatPrevious-v0")
    policy = LSTMPolicy(env.observation_space, env.action_space)
    worker = tv.RolloutWorker(
        lambda cfg: gym.make("trajview/RepeatPrevious-v0"), policy, num_envs=4, rollout_fragment_length=50,
        seed=args.seed,
    )
    batch = worker.sample()

    # Flat: one row per step; one state_in row per sequence, sequences never longer than MAX_SEQ_LEN.
    seq_lens = batch["seq_lens"]
    assert len(batch) == 200 and int(seq_lens.sum()) == 200 and seq_lens.max() <= MAX_SEQ_LEN
    assert len(batch["state_in_0"]) == len(seq_lens)

    # The training pass equals the rollout, row by row.
    tensors = {k: torch.from_numpy(np.asarray(batch[k])) for k in batch.keys()}  # zero copy
    with torch.no_grad():
        train_logits = policy.model.forward_train(tensors)
    np.testing.assert_allclose(train_logits.numpy(), batch["action_dist_inputs"], atol=1e-5)
    print(f"training pass == rollout on {len(batch)} rows in {len(seq_lens)} sequences")

    with torch.no_grad():
        before = float(policy.loss(tensors))
    for _ in range(10):
        policy.learn_on_batch(batch)
    with torch.no_grad():
        after = float(policy.loss(tensors))
    print(f"loss on a fixed batch: {before:.4f} -> {after:.4f}")
    assert after < before

    if not args.smoke:
        rewards: list[float] = []
        for it in range(60):
            batch = worker.sample()
            for _ in range(3):
                policy.learn_on_batch(batch)
            rewards.append(float(batch["rewards"].mean()))
            print(f"iteration {it + 1}: mean reward per step {rewards[-1]:.3f}")
        assert np.mean(rewards[-5:]) > 0.9, "the LSTM should have learned to repeat the previous bit"
    worker.stop()
    print("ok: flat recurrent batches, training pass equals rollout, loss decreased")


if __name__ == "__main__":
    main()
