"""`GTrXLModel`: a gated transformer (GTrXL) whose attention memory is a view.

``state_in_i = ViewRequirement("state_out_i", shift="-{M}:-1",
batch_repeat_value=max_seq_len)``: each step's layer input is stored once as
``state_out_i``; the collector builds the M-row window at each sequence start
(docs/contract.md, "Views" and "Flat layout").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .base import VR, Tensor, _f32, _MemoryModel, _np_last, flat_sequence_index

__all__ = ["GTrXLModel"]


class _GRUGate(nn.Module):
    """GTrXL's GRU-type gating of a residual connection (gate bias 2: starts near identity)."""

    def __init__(self, dim: int, bias: float = 2.0) -> None:
        super().__init__()
        self.w = nn.Linear(dim, 3 * dim, bias=False)
        self.u_rz = nn.Linear(dim, 2 * dim, bias=False)
        self.u_h = nn.Linear(dim, dim, bias=False)
        self.bias = bias

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        wr, wz, wh = self.w(y).chunk(3, -1)
        ur, uz = self.u_rz(x).chunk(2, -1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wh + self.u_h(r * x))
        return (1 - z) * x + z * h


class _GTrXLBlock(nn.Module):
    """Pre-norm attention of one query row over its window (M memory rows + itself), gated; then a gated MLP."""

    def __init__(self, dim: int, num_heads: int, memory: int, ff_dim: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"attention_dim {dim} must be divisible by num_heads {num_heads}")
        self.h, self.dh = num_heads, dim // num_heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.o = nn.Linear(dim, dim)
        # Learned relative-position embedding of the window's offsets -M..0.
        self.pos = nn.Parameter(torch.randn(memory + 1, dim) * 0.02)
        self.gate1 = _GRUGate(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Linear(ff_dim, dim))
        self.gate2 = _GRUGate(dim)

    def forward(self, x: Tensor, rows: Tensor, window_at: Tensor, valid: Tensor) -> Tensor:
        """``x`` [n, d]: the query rows; ``rows`` [R, d]: every row a window reads; ``window_at`` [n, M + 1]: where.

        Keys and values are projected once per row of ``rows`` and then gathered into the windows (each row sits
        in up to M + 1 windows): ``kv(ln1(w) + pos) = kv(ln1(w)) + W_kv pos``, the position term added after.
        """
        n, d = x.shape
        w = window_at.shape[1]
        q = self.q(self.ln1(x)).view(n, 1, self.h, self.dh)
        ln_rows = self.ln1(rows)
        wk, wv = self.kv.weight[:d], self.kv.weight[d:]
        k = nn.functional.linear(ln_rows, wk, self.kv.bias[:d])[window_at] + nn.functional.linear(self.pos, wk)
        v = nn.functional.linear(ln_rows, wv, self.kv.bias[d:])[window_at] + nn.functional.linear(self.pos, wv)
        # One query per row: products and sums over [n, w, heads, dh] (batched 1-row matmuls are slower on the CPU).
        scores = (q * k.view(n, w, self.h, self.dh)).sum(-1) / np.sqrt(self.dh)  # [n, w, heads]
        scores = scores.masked_fill(~valid[:, :, None], float("-inf"))
        a = (torch.softmax(scores, 1)[..., None] * v.view(n, w, self.h, self.dh)).sum(1).reshape(n, d)
        x = self.gate1(x, torch.relu(self.o(a)))
        return self.gate2(x, torch.relu(self.ff(self.ln2(x))))


class _GTrXLCore(nn.Module):
    def __init__(self, in_dim: int, dim: int, num_layers: int, num_heads: int, memory: int, ff_dim: int) -> None:
        super().__init__()
        self.memory = memory
        self.inp = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList(_GTrXLBlock(dim, num_heads, memory, ff_dim) for _ in range(num_layers))

    def _valid(self, t: Tensor) -> Tensor:
        # Window slot k holds time t - M + k; slots before t = 0 (the pre-episode pad) are masked.
        return (t[:, None] - self.memory + torch.arange(self.memory + 1)) >= 0

    def step(self, x: Tensor, t: Tensor, mems: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        h = self.inp(x)
        valid = self._valid(t)
        outs = []
        n, w = len(h), self.memory + 1
        window_at = torch.arange(n * w).view(n, w)
        for block, mem in zip(self.blocks, mems):
            outs.append(h)  # this layer's input at this step: the row later steps' memory reads
            h = block(h, torch.cat([mem, h[:, None]], 1).reshape(n * w, -1), window_at, valid)
        return h, outs

    def flat(self, x: Tensor, t: Tensor, seq_lens: Tensor, mems: list[Tensor]) -> Tensor:
        """Every flat row attends to the same window as in `step`: the M rows before it and itself.

        Per layer, one tensor holds each sequence's M memory rows (the stored
        ``state_in_i``) followed by its rows' layer inputs; row r of sequence s
        reads the M + 1 consecutive entries ending at itself. No padding.
        """
        m = self.memory
        h = self.inp(x)
        n, n_seq = len(h), len(seq_lens)
        seq_of_row, _ = flat_sequence_index(seq_lens)
        row_at = m * (seq_of_row + 1) + torch.arange(n)  # where each row sits in the combined tensor
        starts = torch.cumsum(seq_lens.long(), 0) - seq_lens.long()
        mem_at = (m * torch.arange(n_seq) + starts)[:, None] + torch.arange(m)  # [n_seq, M]
        window_at = (row_at - m)[:, None] + torch.arange(m + 1)  # [n, M + 1]
        valid = self._valid(t)
        for block, mem in zip(self.blocks, mems):
            d = h.shape[1]
            combined = h.new_zeros(n_seq * m + n, d)
            combined = combined.index_copy(0, mem_at.reshape(-1), mem.reshape(-1, d)).index_copy(0, row_at, h)
            h = block(h, combined, window_at, valid)
        return h


class GTrXLModel(_MemoryModel):
    """A GTrXL (gated transformer-XL) policy and value function; memory read through views.

    With ``L`` layers per network, ``state_out_i`` (i < L: policy, L <= i < 2L:
    value function) is layer ``i``'s input at each step, ``attention_dim``
    floats, stored once. ``state_in_i = ViewRequirement("state_out_i",
    shift="-{M}:-1", batch_repeat_value=max_seq_len)`` reads the M rows before
    each step at action time, and one M-row window per sequence start in
    training batches. Window slots before the episode's start are masked
    (they would read the zero pad).
    """

    pi_core: _GTrXLCore
    vf_core: _GTrXLCore

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        max_seq_len: int = 20,
        memory: int = 16,
        attention_dim: int = 32,
        num_layers: int = 1,
        num_heads: int = 2,
        ff_dim: int = 64,
        prev_action: bool = True,
        prev_reward: bool = False,
        log_std_init: float = 0.0,
    ) -> None:
        m = int(memory)
        if m < 1:
            raise ValueError(f"memory must be >= 1, got {memory}")
        super().__init__(
            obs_space, action_space, max_seq_len, prev_action, prev_reward,
            core=lambda in_dim: _GTrXLCore(in_dim, attention_dim, num_layers, num_heads, m, ff_dim),
            state_dim=attention_dim, num_states=2 * num_layers, state_shift=f"-{m}:-1", step_views={"t": VR()},
            log_std_init=log_std_init,
        )
        self.memory, self.dim, self.num_layers = m, attention_dim, num_layers

    def forward_step(self, input_dict):
        x, xv = self._features(input_dict)
        t = torch.as_tensor(input_dict["t"]).long()
        L = self.num_layers
        mems = [_f32(input_dict[f"state_in_{i}"]) for i in range(2 * L)]
        po, ps = self.pi_core.step(x, t, mems[:L])
        vo, vs = self.vf_core.step(xv, t, mems[L:])
        return self.pi_head(po), self.vf_head(vo)[:, 0], ps + vs

    def forward_train(self, batch):
        # An episode start inside a sequence needs no split here: its rows' windows mask every
        # slot before their own t = 0, so they never read the previous episode.
        seq_lens = torch.as_tensor(batch["seq_lens"])
        x, xv = self._features(batch)
        t = torch.as_tensor(batch["t"]).long()
        L = self.num_layers
        mems = [_f32(batch[f"state_in_{i}"]) for i in range(2 * L)]
        po = self.pi_core.flat(x, t, seq_lens, mems[:L])
        vo = self.vf_core.flat(xv, t, seq_lens, mems[L:])
        return self.pi_head(po), self.vf_head(vo)[:, 0]

    def bootstrap_input(self, segment):
        out = self.features.bootstrap(segment)
        out["t"] = _np_last(segment, "t") + 1
        for i in range(2 * self.num_layers):
            first = np.asarray(segment[f"state_in_{i}"])[0]  # the M rows before the segment's first step
            rows = np.asarray(segment[f"state_out_{i}"])
            out[f"state_in_{i}"] = np.concatenate([first, rows])[-self.memory :][None]
        return out
