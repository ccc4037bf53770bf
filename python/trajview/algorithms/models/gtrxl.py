"""`GTrXLModel`: a gated transformer (GTrXL) whose attention memory is a view.

``state_in_i = ViewRequirement("state_out_i", shift="-{M}:-1",
batch_repeat_value=max_seq_len)``: each step's layer input is stored once as
``state_out_i``; the collector builds the M-row window at each sequence start
(docs/contract.md, "Views" and "Flat layout").

The policy and the value function are two GTrXLs with weights of their own,
computed as one: every layer holds both networks' weights stacked on a first
dimension of size 2 (`_Linears`: one ``baddbmm`` for both), so each step and
each training pass runs every operation once for the two networks. On the CPU
the time of such small networks is per operation, not per number. Attention
scores are one matmul per sequence (its queries against its memory and rows),
of which each query keeps its own window (`_band`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from .base import VR, Tensor, _f32, _MemoryModel, _np_lens, _np_rows, _sequence_index, _whole

__all__ = ["GTrXLModel"]


class _Linears(nn.Module):
    """``G`` independent linear layers applied at once: ``x [G, n, in] -> [G, n, out]`` (``y[g] = x[g] @ W[g] + b[g]``).

    Each layer is initialised as ``nn.Linear``'s default (weight and bias uniform in +-1/sqrt(in)).
    """

    def __init__(self, groups: int, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(groups, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(groups, 1, out_dim).uniform_(-bound, bound)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias, x, self.weight)


class _LayerNorms(nn.Module):
    """``G`` layer norms over the last dimension, each with its own gain and bias: ``x [G, ..., d]``."""

    def __init__(self, groups: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(groups, 1, dim))
        self.bias = nn.Parameter(torch.zeros(groups, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        g = x.shape[0]
        y = nn.functional.layer_norm(x, x.shape[-1:]).reshape(g, -1, x.shape[-1])
        return torch.addcmul(self.bias, y, self.weight).view(x.shape)


class _GRUGate(nn.Module):
    """GTrXL's GRU-type gating of a residual connection (gate bias 2: starts near identity), ``G`` at once."""

    def __init__(self, groups: int, dim: int, bias: float = 2.0) -> None:
        super().__init__()
        self.w = _Linears(groups, dim, 3 * dim, bias=False)
        self.u_rz = _Linears(groups, dim, 2 * dim, bias=False)
        self.u_h = _Linears(groups, dim, dim, bias=False)
        self.bias = bias

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        wr, wz, wh = self.w(y).chunk(3, -1)
        ur, uz = self.u_rz(x).chunk(2, -1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wh + self.u_h(r * x))
        return torch.lerp(x, h, z)  # (1 - z) * x + z * h


def _band(s: Tensor, width: int) -> Tensor:
    """``s [..., T, W]`` -> ``[..., T, width]``: entry (i, k) is ``s[..., i, i + k]`` (needs ``T - 1 + width <= W``)."""
    t, w = s.shape[-2:]
    flat = nn.functional.pad(s.reshape(*s.shape[:-2], t * w), (0, t))
    return flat.view(*s.shape[:-2], t, w + 1)[..., :width]


def _unband(a: Tensor, w: int) -> Tensor:
    """The inverse of `_band`: ``a [..., T, width]`` -> ``[..., T, W]`` with ``a[..., i, k]`` at (i, i + k), zeros
    elsewhere."""
    t, width = a.shape[-2:]
    padded = nn.functional.pad(a, (0, w + 1 - width)).reshape(*a.shape[:-2], t * (w + 1))
    return padded[..., : t * w].view(*a.shape[:-2], t, w)


class _GTrXLBlock(nn.Module):
    """Pre-norm attention of one query row over its window (M memory rows + itself), gated; then a gated MLP.

    ``G`` networks at once, each with its own weights (the first dimension of every tensor).
    """

    def __init__(self, groups: int, dim: int, num_heads: int, memory: int, ff_dim: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"attention_dim {dim} must be divisible by num_heads {num_heads}")
        self.h, self.dh, self.memory = num_heads, dim // num_heads, memory
        self.ln1 = _LayerNorms(groups, dim)
        self.q = _Linears(groups, dim, dim)
        self.kv = _Linears(groups, dim, 2 * dim)
        self.o = _Linears(groups, dim, dim)
        # Learned relative-position embedding of the window's offsets -M..0.
        self.pos = nn.Parameter(torch.randn(groups, memory + 1, dim) * 0.02)
        self.gate1 = _GRUGate(groups, dim)
        self.ln2 = _LayerNorms(groups, dim)
        self.ff1 = _Linears(groups, dim, ff_dim)
        self.ff2 = _Linears(groups, ff_dim, dim)
        self.gate2 = _GRUGate(groups, dim)

    def forward(self, x: Tensor, seqs: Tensor, q_at: Tensor, valid: Tensor) -> Tensor:
        """``x [G, n, d]``: the query rows. ``seqs [G, S, M + T, d]``: S sequences, each its M memory rows and then
        up to T rows (zeros after its end); ``q_at [n]``: where each query row sits among the ``S * T`` row slots
        (``seqs[:, s, M + i] == x[:, q_at == s * T + i]``). ``valid [S, T, M + 1]``: which window slots each slot's
        query reads (its own slot, the last, always).

        The row in slot (s, i) attends to ``seqs[:, s, i : i + M + 1]``, the M rows before it and itself. Keys
        and values are projected once per row of ``seqs``; the scores of all of a sequence's queries against all
        of its rows are one matmul, of which each query keeps its window (`_band`).
        ``kv(ln1(w) + pos) = kv(ln1(w)) + W_kv pos``: the position terms are a second, smaller matmul.
        """
        g, n, d = x.shape
        _, n_seq, w, _ = seqs.shape
        m, h, dh = self.memory, self.h, self.dh
        t = w - m
        ln = self.ln1(seqs).view(g, n_seq * w, d)
        q = self.q(ln.view(g, n_seq, w, d)[:, :, m:].reshape(g, n_seq * t, d))
        q = q.view(g, n_seq, t, h, dh).transpose(2, 3)  # [G, S, h, T, dh]
        kv_pos = torch.bmm(self.pos, self.kv.weight)  # [G, M + 1, 2d]
        if t == 1:  # one query per sequence (acting): its window is the whole sequence, positions added to it
            kv = (self.kv(ln).view(g, n_seq, w, 2 * d) + kv_pos[:, None]).view(g, n_seq, w, 2, h, dh)
            k, v = kv.permute(3, 0, 1, 4, 2, 5).unbind(0)  # [G, S, h, W, dh]
            scores = q @ k.transpose(-1, -2)
        else:
            k, v = self.kv(ln).view(g, n_seq, w, 2, h, dh).permute(3, 0, 1, 4, 2, 5).unbind(0)  # [G, S, h, W, dh]
            k_pos, v_pos = kv_pos.view(g, 1, m + 1, 2, h, dh).permute(3, 0, 1, 4, 2, 5).unbind(0)  # [G, 1, h, M + 1, dh]
            scores = _band(q @ k.transpose(-1, -2), m + 1) + q @ k_pos.transpose(-1, -2)  # [G, S, h, T, M + 1]
        scores = (scores * (1.0 / np.sqrt(dh))).masked_fill(~valid[None, :, None], float("-inf"))
        att = torch.softmax(scores, -1)
        out = att @ v if t == 1 else _unband(att, w) @ v + att @ v_pos  # [G, S, h, T, dh]
        a = out.transpose(2, 3).reshape(g, n_seq * t, d).index_select(1, q_at)
        x = self.gate1(x, torch.relu(self.o(a)))
        return self.gate2(x, torch.relu(self.ff2(torch.relu(self.ff1(self.ln2(x))))))


class _GTrXLCore(nn.Module):
    """``G`` GTrXLs (the policy's and the value function's) computed together: inputs and outputs ``[G, n, ...]``."""

    def __init__(self, groups: int, in_dim: int, dim: int, num_layers: int, num_heads: int, memory: int,
                 ff_dim: int) -> None:
        super().__init__()
        self.memory = memory
        self.inp = _Linears(groups, in_dim, dim)
        self.blocks = nn.ModuleList(_GTrXLBlock(groups, dim, num_heads, memory, ff_dim) for _ in range(num_layers))

    def _valid(self, t: Tensor) -> Tensor:
        # Window slot k holds time t - M + k; slots before t = 0 (the pre-episode pad) are masked.
        return (t[:, None] - self.memory + torch.arange(self.memory + 1, device=t.device)) >= 0

    def step(self, x: Tensor, t: Tensor, mems: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step per row: ``x`` [G, n, in], ``mems`` per layer [G, n, M, d]; returns the output [G, n, d] and
        each layer's input [G, n, d] (the rows later steps' memory reads). Each row is a sequence of one step."""
        h = self.inp(x)
        n = h.shape[1]
        valid = self._valid(t)[:, None]
        q_at = torch.arange(n, device=h.device)
        outs = []
        for block, mem in zip(self.blocks, mems):
            outs.append(h)
            h = block(h, torch.cat([mem, h[:, :, None]], 2), q_at, valid)
        return h, outs

    def flat(self, x: Tensor, t: Tensor, seq_lens: Tensor, mems: list[Tensor]) -> Tensor:
        """Every flat row attends to the same window as in `step`: the M rows before it and itself.

        Per layer, each sequence's M memory rows (the stored ``state_in_i``,
        ``mems`` [G, n_seq, M, d]) are followed by its rows' layer inputs, up to
        the longest sequence's length (zeros after a shorter one's end, never
        read by its rows); row r of sequence s reads the M + 1 consecutive
        entries ending at itself.
        """
        m = self.memory
        h = self.inp(x)
        g = h.shape[0]
        lens = _np_lens(seq_lens)  # the index arithmetic in numpy (`_np_lens`), the indices sent once to h's device
        n_seq, t_max = len(lens), int(lens.max())
        w = m + t_max
        seq_of_row, pos = _sequence_index(lens)
        at = torch.from_numpy(np.concatenate([
            seq_of_row * w + m + pos,  # where each row sits among the S * W entries
            ((np.arange(n_seq) * w)[:, None] + np.arange(m)).reshape(-1),  # the memory rows' [n_seq * M]
            seq_of_row * t_max + pos,  # each row among the S * T query slots
        ])).to(h.device)
        r = len(seq_of_row)
        row_at, mem_at, q_at = at[:r], at[r: r + n_seq * m], at[r + n_seq * m:]
        # Slots after a sequence's end read only their own (zero) row: finite, and never read back.
        row_valid = self._valid(t)
        valid = row_valid.new_zeros(n_seq * t_max, m + 1)
        valid[:, -1] = True
        valid = valid.index_copy(0, q_at, row_valid).view(n_seq, t_max, m + 1)
        for block, mem in zip(self.blocks, mems):
            d = h.shape[2]
            seqs = h.new_zeros(g, n_seq * w, d)
            seqs = seqs.index_copy(1, mem_at, mem.reshape(g, -1, d)).index_copy(1, row_at, h)
            h = block(h, seqs.view(g, n_seq, w, d), q_at, valid)
        return h


def _stack_separate_cores(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """Loads a state dict of the earlier layout, a ``pi_core`` and a ``vf_core`` of ``nn.Linear`` /
    ``nn.LayerNorm`` layers (trajview before the two networks were computed as one), into ``core``: each pair of
    weights stacked (linear weights transposed to ``[in, out]``), the same function."""
    pi, vf = prefix + "pi_core.", prefix + "vf_core."
    if not any(k.startswith(pi) for k in state_dict):
        return
    renames = {"ff.0.": "ff1.", "ff.2.": "ff2."}
    for key in [k for k in state_dict if k.startswith(pi)]:
        rest = key[len(pi):]
        if vf + rest not in state_dict:
            raise ValueError(f"checkpoint of the earlier GTrXL layout: {key!r} has no {vf + rest!r}")
        a, b = state_dict.pop(key), state_dict.pop(vf + rest)
        new = rest
        for old, repl in renames.items():
            new = new.replace(old, repl)
        leaf = new.rsplit(".", 1)[-1]
        owner = new.rsplit(".", 2)[-2] if new.count(".") >= 1 else ""
        if leaf == "pos":
            stacked = torch.stack([a, b])  # [M + 1, d] each
        elif owner.startswith("ln") and leaf in ("weight", "bias"):
            stacked = torch.stack([a, b])[:, None]  # LayerNorm [d] -> [G, 1, d]
        elif leaf == "weight":
            stacked = torch.stack([a.t(), b.t()])  # Linear [out, in] -> [G, in, out]
        else:
            stacked = torch.stack([a, b])[:, None]  # Linear bias [out] -> [G, 1, out]
        state_dict[prefix + "core." + new] = stacked
    #: Read by `PPOPolicy.set_state`: the optimizer state saved with such weights is of the earlier parameters.
    module.loaded_earlier_layout = True  # type: ignore[assignment]


class GTrXLModel(_MemoryModel):
    """A GTrXL (gated transformer-XL) policy and value function; memory read through views.

    With ``L`` layers per network, ``state_out_i`` (i < L: policy, L <= i < 2L:
    value function) is layer ``i``'s input at each step, ``attention_dim``
    floats, stored once. ``state_in_i = ViewRequirement("state_out_i",
    shift="-{M}:-1", batch_repeat_value=max_seq_len)`` reads the M rows before
    each step at action time, and one M-row window per sequence start in
    training batches. Window slots before the episode's start are masked
    (they would read the zero pad). The two networks have separate weights and
    are computed together (``self.core``, the module docstring).
    """

    core: _GTrXLCore

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
            core=lambda in_dim: _GTrXLCore(2, in_dim, attention_dim, num_layers, num_heads, m, ff_dim),
            state_dim=attention_dim, num_states=2 * num_layers, state_shift=f"-{m}:-1", step_views={"t": VR()},
            log_std_init=log_std_init, twin_core=True,
        )
        self.memory, self.dim, self.num_layers = m, attention_dim, num_layers
        self.register_load_state_dict_pre_hook(_stack_separate_cores)

    def _mems(self, d: Any) -> list[Tensor]:
        """Per layer: [2, rows, M, d], the policy's memory then the value function's."""
        L = self.num_layers
        return [torch.stack([_f32(d[f"state_in_{i}"]), _f32(d[f"state_in_{L + i}"])]) for i in range(L)]

    def _inputs(self, d: Any) -> Tensor:
        x, xv = self._features(d)
        return torch.stack([x, xv]) if xv is not x else x[None].expand(2, *x.shape)

    def forward_step(self, input_dict):
        t = torch.as_tensor(input_dict["t"]).long()
        out, outs = self.core.step(self._inputs(input_dict), t, self._mems(input_dict))
        states = [o[0] for o in outs] + [o[1] for o in outs]
        return self.pi_head(out[0]), self.vf_head(out[1])[:, 0], states

    def forward_train(self, batch):
        # An episode start inside a sequence needs no split here: its rows' windows mask every
        # slot before their own t = 0, so they never read the previous episode.
        seq_lens = torch.as_tensor(batch["seq_lens"])
        t = torch.as_tensor(batch["t"]).long()
        out = self.core.flat(self._inputs(batch), t, seq_lens, self._mems(batch))
        return self.pi_head(out[0]), self.vf_head(out[1])[:, 0]

    def bootstrap_input(self, segment):
        return self.bootstrap_inputs(segment, *_whole(segment))

    def bootstrap_inputs(self, batch, starts, ends):
        """Each segment's next-step inputs: the features' after its last row, ``t`` + 1, and each layer's memory:
        the last M rows of (the M rows before the segment's first step, the segment's ``state_out`` rows)."""
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        rows = ends - 1
        out = self.features.bootstrap(batch, rows)
        out["t"] = _np_rows(batch, "t", rows) + 1
        # The sequence each segment begins with (segments begin at a sequence's first row): its state_in.
        seq_lens = _np_lens(batch["seq_lens"])
        seq_starts = np.cumsum(seq_lens) - seq_lens
        first_seq = np.searchsorted(seq_starts, starts, side="right") - 1
        m = self.memory
        q = (ends - starts)[:, None] + np.arange(m)[None, :]  # positions in [M memory rows, then the segment's rows]
        from_memory = q < m
        at_memory = np.minimum(q, m - 1)
        at_rows = np.clip(starts[:, None] + q - m, 0, None)
        for i in range(2 * self.num_layers):
            memory = _np_rows(batch, f"state_in_{i}", first_seq)  # [K, M, d]
            state_out = np.asarray(batch[f"state_out_{i}"])
            mem = np.take_along_axis(memory, at_memory[:, :, None], axis=1)
            seg = state_out[np.minimum(at_rows, len(state_out) - 1)] if len(state_out) else mem
            out[f"state_in_{i}"] = np.where(from_memory[:, :, None], mem, seg)
        return out
