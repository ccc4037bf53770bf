"""Torch models for PPO whose every input is a view requirement.

Each model is a ``torch.nn.Module`` with a ``view_requirements`` dict (merged
into the policy's by `TorchPolicy`), so the collector builds exactly what the
model reads from one stored copy of each step:

* `MLPModel`: ``obs`` only (the memoryless control).
* `FrameStackModel`: ``prev_n_obs`` (``obs`` at ``"-{n-1}:0"``),
  ``prev_n_actions`` and ``prev_n_rewards`` (``"-{n}:-1"``).
* `LSTMModel`: ``state_in_i`` read from ``state_out_i`` at ``-1`` with
  ``batch_repeat_value=max_seq_len`` (one row per training sequence), plus
  ``prev_actions`` / ``prev_rewards``. The training pass runs over the flat
  batch with ``torch.nn.utils.rnn.pack_sequence`` (no padding), split at each
  sequence start and each ``is_init``.
* `GTrXLModel`: a gated transformer (GTrXL) whose memory is the view
  ``state_in_i = ViewRequirement("state_out_i", shift="-{M}:-1",
  batch_repeat_value=max_seq_len)``: each step's layer input is stored once as
  ``state_out_i``; the collector builds the M-row window at each sequence start.

Policy and value function have separate networks (no shared trunk), so the
value loss's scale never competes with the policy's gradient.

The interface PPO uses:

* ``forward_step(input_dict) -> (logits [B, A], value [B], state_outs)``: one
  step per row, from the compute-actions input dict.
* ``forward_train(batch) -> (logits [N, A], value [N])``: the flat training
  batch (rows of sequences end to end, ``seq_lens`` and per-sequence
  ``state_in_i`` for the recurrent models).
* ``bootstrap_input(segment) -> input_dict``: the input dict of the step after
  a segment's last step (one row), built from the segment's own views, for
  the value that bootstraps a truncated trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence

from ...views.view_requirement import ViewRequirement

__all__ = ["MLPModel", "FrameStackModel", "LSTMModel", "GTrXLModel", "MODELS", "make_model", "flat_sequence_index"]

VR = ViewRequirement
Tensor = torch.Tensor


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [_init(nn.Linear(d, h), float(np.sqrt(2))), nn.Tanh()]
        d = h
    layers.append(_init(nn.Linear(d, out_dim), out_gain))
    return nn.Sequential(*layers)


def _spaces(obs_space: Any, action_space: Any) -> tuple[int, int]:
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"action_space: trajview's models need a Discrete action space, got {action_space!r}")
    shape = getattr(obs_space, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(f"observation_space: trajview's models need a 1-D Box, got {obs_space!r}")
    return int(shape[0]), int(action_space.n)


def _f32(x: Any) -> Tensor:
    return torch.as_tensor(x).float()


def _np_last(batch: Mapping[str, Any], key: str) -> np.ndarray:
    v = batch[key]
    v = v.detach().cpu().numpy() if isinstance(v, Tensor) else np.asarray(v)
    return v[-1:]


def flat_sequence_index(seq_lens: Tensor) -> tuple[Tensor, Tensor]:
    """(sequence of each flat row, position of each row in its sequence) for ``seq_lens``."""
    seq_lens = seq_lens.long()
    n_seq = len(seq_lens)
    seq_of_row = torch.repeat_interleave(torch.arange(n_seq), seq_lens)
    starts = torch.cumsum(seq_lens, 0) - seq_lens
    pos = torch.arange(int(seq_lens.sum())) - starts[seq_of_row]
    return seq_of_row, pos


def _split_points(batch: Mapping[str, Any], seq_lens: Tensor) -> tuple[Tensor, Tensor]:
    """Where the flat rows split into runs: at every sequence start and at every ``is_init`` row.

    Returns (run lengths, for each run the sequence whose ``state_in`` it starts
    from, or -1 where the run starts an episode inside a sequence: the initial state).
    """
    seq_of_row, pos = flat_sequence_index(seq_lens)
    n = len(pos)
    start = pos == 0
    is_init = batch.get("is_init")
    if is_init is not None:
        is_init = torch.as_tensor(is_init, dtype=torch.bool)
        if len(is_init) != n:
            raise ValueError(f"seq_lens sum to {n} rows, but the batch has {len(is_init)} rows")
        start = start | is_init
    first = torch.nonzero(start)[:, 0]
    lens = torch.diff(first, append=torch.tensor([n]))
    from_seq = torch.where(pos[first] == 0, seq_of_row[first], torch.full_like(first, -1))
    return lens, from_seq


class _PrevActionReward(nn.Module):
    """Features from obs and, optionally, the previous action (one-hot) and reward."""

    def __init__(self, obs_dim: int, n_actions: int, prev_action: bool, prev_reward: bool) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.prev_action = prev_action
        self.prev_reward = prev_reward
        self.dim = obs_dim + (n_actions if prev_action else 0) + (1 if prev_reward else 0)

    def view_requirements(self, action_space: Any) -> dict[str, ViewRequirement]:
        vrs = {}
        if self.prev_action:
            vrs["prev_actions"] = VR("actions", space=action_space, shift=-1)
        if self.prev_reward:
            vrs["prev_rewards"] = VR("rewards", shift=-1)
        return vrs

    def forward(self, d: Mapping[str, Any]) -> Tensor:
        parts = [_f32(d["obs"])]
        if self.prev_action:
            parts.append(nn.functional.one_hot(torch.as_tensor(d["prev_actions"]).long(), self.n_actions).float())
        if self.prev_reward:
            parts.append(_f32(d["prev_rewards"])[:, None])
        return torch.cat(parts, -1)

    def bootstrap(self, seg: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = {"obs": _np_last(seg, "new_obs")}
        if self.prev_action:
            out["prev_actions"] = _np_last(seg, "actions")
        if self.prev_reward:
            out["prev_rewards"] = _np_last(seg, "rewards")
        return out


class ViewModel(nn.Module):
    """Base of the models PPO trains (see the module docstring for the interface)."""

    view_requirements: dict[str, ViewRequirement]

    def get_initial_state(self) -> list[Tensor]:
        return []

    def forward_step(self, input_dict: Mapping[str, Any]) -> tuple[Tensor, Tensor, list[Tensor]]:
        raise NotImplementedError

    def forward_train(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def bootstrap_input(self, segment: Mapping[str, Any]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class MLPModel(ViewModel):
    """Reads only ``obs``: on Stateless CartPole it cannot see velocities (the control)."""

    def __init__(self, obs_space: Any, action_space: Any, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        self.pi = _mlp(obs_dim, hidden, n, 0.01)
        self.vf = _mlp(obs_dim, hidden, 1, 1.0)
        self.view_requirements = {"obs": VR(space=obs_space)}

    def _forward(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        x = _f32(d["obs"])
        return self.pi(x), self.vf(x)[:, 0]

    def forward_step(self, input_dict):
        logits, value = self._forward(input_dict)
        return logits, value, []

    def forward_train(self, batch):
        return self._forward(batch)

    def bootstrap_input(self, segment):
        return {"obs": _np_last(segment, "new_obs")}


class FrameStackModel(ViewModel):
    """An MLP over the last ``num_frames`` observations, actions and rewards, all views of one stored copy.

    ``prev_n_obs`` = ``obs`` at ``"-{n-1}:0"``, ``prev_n_actions`` and
    ``prev_n_rewards`` = ``actions`` / ``rewards`` at ``"-{n}:-1"`` (RLlib's
    frame-stacking example, n = 16). Before the episode's start they read zeros.
    """

    def __init__(self, obs_space: Any, action_space: Any, num_frames: int = 16, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        if num_frames < 1:
            raise ValueError(f"num_frames must be >= 1, got {num_frames}")
        self.num_frames = k = int(num_frames)
        self.n_actions = n
        in_dim = k * (obs_dim + n + 1)
        self.pi = _mlp(in_dim, hidden, n, 0.01)
        self.vf = _mlp(in_dim, hidden, 1, 1.0)
        self.view_requirements = {
            "prev_n_obs": VR("obs", space=obs_space, shift=f"-{k - 1}:0"),
            "prev_n_actions": VR("actions", space=action_space, shift=f"-{k}:-1"),
            "prev_n_rewards": VR("rewards", shift=f"-{k}:-1"),
        }

    def _forward(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        obs = _f32(d["prev_n_obs"]).flatten(1)
        acts = nn.functional.one_hot(torch.as_tensor(d["prev_n_actions"]).long(), self.n_actions).float().flatten(1)
        rews = _f32(d["prev_n_rewards"])
        x = torch.cat([obs, acts, rews], -1)
        return self.pi(x), self.vf(x)[:, 0]

    def forward_step(self, input_dict):
        logits, value = self._forward(input_dict)
        return logits, value, []

    def forward_train(self, batch):
        return self._forward(batch)

    def bootstrap_input(self, segment):
        def shifted(stack: str, col: str) -> np.ndarray:
            s, c = _np_last(segment, stack), _np_last(segment, col)
            return np.concatenate([s[:, 1:], c[:, None].astype(s.dtype)], axis=1)

        return {
            "prev_n_obs": shifted("prev_n_obs", "new_obs"),
            "prev_n_actions": shifted("prev_n_actions", "actions"),
            "prev_n_rewards": shifted("prev_n_rewards", "rewards"),
        }


class _LSTMCore(nn.Module):
    """Linear + tanh, then one LSTM layer; state (h, c)."""

    def __init__(self, in_dim: int, hidden: int, cell: int) -> None:
        super().__init__()
        self.fc = _init(nn.Linear(in_dim, hidden), float(np.sqrt(2)))
        self.lstm = nn.LSTM(hidden, cell)
        self.cell = cell

    def step(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = torch.tanh(self.fc(x))
        out, (h1, c1) = self.lstm(z[None], (h[None].contiguous(), c[None].contiguous()))
        return out[0], h1[0], c1[0]

    def flat(self, x: Tensor, seq_lens: Tensor, h0: Tensor, c0: Tensor) -> Tensor:
        """Output for every flat row: sequences end to end, ``seq_lens`` long, starting from (h0, c0)."""
        z = torch.tanh(self.fc(x))
        lens = seq_lens.long().tolist()
        packed = pack_sequence(list(torch.split(z, lens)), enforce_sorted=False)
        # h0/c0 in the original sequence order: nn.LSTM permutes them by packed.sorted_indices.
        out, _ = self.lstm(packed, (h0[None].contiguous(), c0[None].contiguous()))
        # Where each flat row sits in the packed (time-major, length-sorted) data.
        where = pack_sequence(list(torch.split(torch.arange(len(z)), lens)), enforce_sorted=False).data
        inverse = torch.empty_like(where)
        inverse[where] = torch.arange(len(where))
        return out.data[inverse]


class LSTMModel(ViewModel):
    """An LSTM policy and an LSTM value function, state read back through views.

    ``state_in_{0,1}`` (policy h, c) and ``state_in_{2,3}`` (value h, c) are
    ``ViewRequirement("state_out_i", shift=-1, batch_repeat_value=max_seq_len)``:
    at action time the previous step's state_out (the initial state at t = 0),
    in training batches one row per sequence of up to ``max_seq_len`` steps.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        max_seq_len: int = 20,
        hidden: int = 64,
        cell_size: int = 64,
        prev_action: bool = True,
        prev_reward: bool = False,
    ) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        self.max_seq_len = int(max_seq_len)
        self.features = _PrevActionReward(obs_dim, n, prev_action, prev_reward)
        self.pi_core = _LSTMCore(self.features.dim, hidden, cell_size)
        self.vf_core = _LSTMCore(self.features.dim, hidden, cell_size)
        self.pi_head = _init(nn.Linear(cell_size, n), 0.01)
        self.vf_head = _init(nn.Linear(cell_size, 1), 1.0)
        self.cell_size = cell_size
        self.view_requirements = {"obs": VR(space=obs_space), **self.features.view_requirements(action_space)}
        for i in range(4):
            self.view_requirements[f"state_in_{i}"] = VR(
                f"state_out_{i}", shift=-1, batch_repeat_value=self.max_seq_len
            )

    def get_initial_state(self) -> list[Tensor]:
        return [torch.zeros(self.cell_size) for _ in range(4)]

    def forward_step(self, input_dict):
        x = self.features(input_dict)
        s = [_f32(input_dict[f"state_in_{i}"]) for i in range(4)]
        po, h0, c0 = self.pi_core.step(x, s[0], s[1])
        vo, h1, c1 = self.vf_core.step(x, s[2], s[3])
        return self.pi_head(po), self.vf_head(vo)[:, 0], [h0, c0, h1, c1]

    def forward_train(self, batch):
        seq_lens = torch.as_tensor(batch["seq_lens"])
        x = self.features(batch)
        # Runs of rows: each sequence, split again where an episode starts inside it (is_init);
        # such a run starts from the initial state, the others from their sequence's state_in row.
        lens, from_seq = _split_points(batch, seq_lens)
        init = self.get_initial_state()
        s = []
        for i in range(4):
            rows = _f32(batch[f"state_in_{i}"])
            rows = torch.cat([rows, init[i].to(rows)[None]])  # index -1: the initial state
            s.append(rows[from_seq])
        po = self.pi_core.flat(x, lens, s[0], s[1])
        vo = self.vf_core.flat(x, lens, s[2], s[3])
        return self.pi_head(po), self.vf_head(vo)[:, 0]

    def bootstrap_input(self, segment):
        out = self.features.bootstrap(segment)
        for i in range(4):
            out[f"state_in_{i}"] = _np_last(segment, f"state_out_{i}")
        return out


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

    def forward(self, x: Tensor, window: Tensor, valid: Tensor) -> Tensor:
        n, w, d = window.shape
        q = self.q(self.ln1(x)).view(n, self.h, 1, self.dh)
        k, v = self.kv(self.ln1(window) + self.pos).chunk(2, -1)
        k = k.view(n, w, self.h, self.dh).transpose(1, 2)
        v = v.view(n, w, self.h, self.dh).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / np.sqrt(self.dh)  # [n, h, 1, w]
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        a = (torch.softmax(scores, -1) @ v).reshape(n, d)
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
        for block, mem in zip(self.blocks, mems):
            outs.append(h)  # this layer's input at this step: the row later steps' memory reads
            h = block(h, torch.cat([mem, h[:, None]], 1), valid)
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
            h = block(h, combined[window_at], valid)
        return h


class GTrXLModel(ViewModel):
    """A GTrXL (gated transformer-XL) policy and value function; memory read through views.

    With ``L`` layers per network, ``state_out_i`` (i < L: policy, L <= i < 2L:
    value function) is layer ``i``'s input at each step, ``attention_dim``
    floats, stored once. ``state_in_i = ViewRequirement("state_out_i",
    shift="-{M}:-1", batch_repeat_value=max_seq_len)`` reads the M rows before
    each step at action time, and one M-row window per sequence start in
    training batches. Window slots before the episode's start are masked
    (they would read the zero pad).
    """

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
    ) -> None:
        super().__init__()
        obs_dim, n = _spaces(obs_space, action_space)
        self.max_seq_len, self.memory, self.dim, self.num_layers = int(max_seq_len), int(memory), attention_dim, num_layers
        if self.memory < 1:
            raise ValueError(f"memory must be >= 1, got {memory}")
        self.features = _PrevActionReward(obs_dim, n, prev_action, prev_reward)
        args = (self.features.dim, attention_dim, num_layers, num_heads, self.memory, ff_dim)
        self.pi_core = _GTrXLCore(*args)
        self.vf_core = _GTrXLCore(*args)
        self.pi_head = _init(nn.Linear(attention_dim, n), 0.01)
        self.vf_head = _init(nn.Linear(attention_dim, 1), 1.0)
        self.view_requirements = {"obs": VR(space=obs_space), "t": VR(), **self.features.view_requirements(action_space)}
        for i in range(2 * num_layers):
            self.view_requirements[f"state_in_{i}"] = VR(
                f"state_out_{i}", shift=f"-{self.memory}:-1", batch_repeat_value=self.max_seq_len
            )

    def get_initial_state(self) -> list[Tensor]:
        return [torch.zeros(self.dim) for _ in range(2 * self.num_layers)]

    def forward_step(self, input_dict):
        x = self.features(input_dict)
        t = torch.as_tensor(input_dict["t"]).long()
        L = self.num_layers
        mems = [_f32(input_dict[f"state_in_{i}"]) for i in range(2 * L)]
        po, ps = self.pi_core.step(x, t, mems[:L])
        vo, vs = self.vf_core.step(x, t, mems[L:])
        return self.pi_head(po), self.vf_head(vo)[:, 0], ps + vs

    def forward_train(self, batch):
        # An episode start inside a sequence needs no split here: its rows' windows mask every
        # slot before their own t = 0, so they never read the previous episode.
        seq_lens = torch.as_tensor(batch["seq_lens"])
        x = self.features(batch)
        t = torch.as_tensor(batch["t"]).long()
        L = self.num_layers
        mems = [_f32(batch[f"state_in_{i}"]) for i in range(2 * L)]
        po = self.pi_core.flat(x, t, seq_lens, mems[:L])
        vo = self.vf_core.flat(x, t, seq_lens, mems[L:])
        return self.pi_head(po), self.vf_head(vo)[:, 0]

    def bootstrap_input(self, segment):
        out = self.features.bootstrap(segment)
        out["t"] = _np_last(segment, "t") + 1
        for i in range(2 * self.num_layers):
            first = np.asarray(segment[f"state_in_{i}"])[0]  # the M rows before the segment's first step
            rows = np.asarray(segment[f"state_out_{i}"])
            out[f"state_in_{i}"] = np.concatenate([first, rows])[-self.memory :][None]
        return out


MODELS = {"mlp": MLPModel, "framestack": FrameStackModel, "lstm": LSTMModel, "attention": GTrXLModel}


def make_model(name: str, obs_space: Any, action_space: Any, **kwargs: Any) -> ViewModel:
    """One of `MODELS` by name (``"mlp"``, ``"framestack"``, ``"lstm"``, ``"attention"``)."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    return MODELS[name](obs_space, action_space, **kwargs)
