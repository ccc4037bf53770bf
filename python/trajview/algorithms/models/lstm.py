"""`LSTMModel`: LSTM policy and value function whose state is read back through views.

The training pass splits the flat batch into runs at each sequence start and
each ``is_init`` (docs/contract.md, "Flat layout"), lays the runs out as the
columns of one time-major ``[T, runs]`` tensor (zeros after a run's end) and
runs ``nn.LSTM`` over it in one call: a run's outputs never read the padding
after it, and on the CPU this is 2-3x faster than ``pack_sequence``, whose
kernel slices a shrinking batch at every time step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from ..._validate import int_at_least, positive_int
from .base import Tensor, _f32, _init, _MemoryModel, _np_lens, _np_rows, _sequence_index, _split_points, _whole

__all__ = ["LSTMModel"]


def _padded_layout(lens: Any, device: torch.device) -> tuple[Tensor, int, int]:
    """The time-major padded layout of runs ``lens`` long: (for each flat row its place among the ``T * n_runs``
    padded rows, on ``device``; ``n_runs``; ``T``, the longest run). Row r goes to time pos[r] of column
    run_of_row[r]; the padding after a run's end is never read back."""
    lens = _np_lens(lens)
    run_of_row, pos = _sequence_index(lens)
    return torch.from_numpy(pos * len(lens) + run_of_row).to(device), len(lens), int(lens.max())


class _LSTMCore(nn.Module):
    """Linear + tanh (none when ``hidden`` is 0), then one LSTM layer, then tanh layers of ``post_hidden`` sizes
    (none by default); state (h, c)."""

    def __init__(self, in_dim: int, hidden: int, cell: int, post_hidden: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.fc = _init(nn.Linear(in_dim, hidden), float(np.sqrt(2))) if hidden else None
        self.lstm = nn.LSTM(hidden or in_dim, cell)
        self.cell = cell
        post: list[nn.Module] = []
        d = cell
        for size in post_hidden:
            post += [_init(nn.Linear(d, size), float(np.sqrt(2))), nn.Tanh()]
            d = size
        self.post = nn.Sequential(*post) if post else None

    def _pre(self, x: Tensor) -> Tensor:
        return x if self.fc is None else torch.tanh(self.fc(x))

    def step(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = self._pre(x)
        # One cell step (nn.LSTM's own weights): nn.LSTM's module call costs more than the step at action time.
        w = [cast(Tensor, getattr(self.lstm, k)) for k in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")]
        h1, c1 = torch.lstm_cell(z, (h, c), w[0], w[1], w[2], w[3])
        return (h1 if self.post is None else self.post(h1)), h1, c1

    def flat(self, x: Tensor, seq_lens: Tensor, h0: Tensor, c0: Tensor,
             layout: tuple[Tensor, int, int] | None = None) -> Tensor:
        """Output for every flat row: sequences end to end, ``seq_lens`` long, starting from (h0, c0).
        ``layout``: `_padded_layout` of ``seq_lens`` when the caller has it (the two networks share it)."""
        z = self._pre(x)
        at, n_runs, t_max = _padded_layout(seq_lens, z.device) if layout is None else layout
        d = z.shape[1]
        padded = z.new_zeros(t_max * n_runs, d).index_copy(0, at, z).view(-1, n_runs, d)
        out, _ = self.lstm(padded, (h0[None].contiguous(), c0[None].contiguous()))
        rows = out.reshape(-1, out.shape[-1]).index_select(0, at)
        return rows if self.post is None else self.post(rows)


class LSTMModel(_MemoryModel):
    """An LSTM policy and an LSTM value function, state read back through views.

    ``state_in_{0,1}`` (policy h, c) and ``state_in_{2,3}`` (value h, c) are
    ``ViewRequirement("state_out_i", shift=-1, batch_repeat_value=max_seq_len)``:
    at action time the previous step's state_out (the initial state at t = 0),
    in training batches one row per sequence of up to ``max_seq_len`` steps.

    Each network: a ``hidden``-unit tanh layer over the features (none when
    ``hidden`` is 0: the LSTM reads the features), an LSTM of ``cell_size``,
    then tanh layers of the ``post_hidden`` sizes (none by default), then its
    linear head. sb3-contrib's ``RecurrentPPO("MlpLstmPolicy")`` is
    ``hidden=0, post_hidden=(64, 64)``; RLlib's ``use_lstm`` wrapper puts its
    ``fcnet_hiddens`` before the LSTM (``hidden``).
    """

    pi_core: _LSTMCore
    vf_core: _LSTMCore

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        max_seq_len: int = 20,
        hidden: int = 64,
        cell_size: int = 64,
        prev_action: bool = True,
        prev_reward: bool = False,
        log_std_init: float = 0.0,
        post_hidden: Sequence[int] = (),
    ) -> None:
        hidden = int_at_least("LSTMModel: hidden", hidden, 0)
        cell_size = positive_int("LSTMModel: cell_size", cell_size)
        if isinstance(post_hidden, (str, bytes)) or not isinstance(post_hidden, Sequence):
            raise ValueError(f"LSTMModel: post_hidden must be a list of ints >= 1 (the tanh layers after the LSTM), "
                             f"got {post_hidden!r}")
        post = tuple(positive_int(f"LSTMModel: post_hidden[{i}]", v) for i, v in enumerate(post_hidden))
        super().__init__(
            obs_space, action_space, max_seq_len, prev_action, prev_reward,
            core=lambda in_dim: _LSTMCore(in_dim, hidden, cell_size, post),
            state_dim=cell_size, num_states=4, state_shift=-1, log_std_init=log_std_init,
            head_dim=post[-1] if post else None,
        )
        self.cell_size = cell_size

    def forward_step(self, input_dict):
        x, xv = self._features(input_dict)
        s = [_f32(input_dict[f"state_in_{i}"]) for i in range(4)]
        po, h0, c0 = self.pi_core.step(x, s[0], s[1])
        vo, h1, c1 = self.vf_core.step(xv, s[2], s[3])
        return self.pi_head(po), self.vf_head(vo)[:, 0], [h0, c0, h1, c1]

    def forward_train(self, batch):
        seq_lens = _np_lens(batch["seq_lens"])  # the runs' index arithmetic: in numpy (`_np_lens`)
        x, xv = self._features(batch)
        # Runs of rows: each sequence, split again where an episode starts inside it (is_init);
        # such a run starts from the initial state, the others from their sequence's state_in row.
        lens, from_seq = _split_points(batch, seq_lens)
        s = [_f32(batch[f"state_in_{i}"]) for i in range(4)]
        if len(from_seq) != len(seq_lens) or (from_seq != np.arange(len(seq_lens))).any():
            # (else each run is its sequence, in order: the state_in rows as they are)
            init = self.get_initial_state()
            # Row n_seq, appended: the initial state (where from_seq is -1).
            index = torch.from_numpy(np.where(from_seq < 0, len(seq_lens), from_seq)).to(s[0].device)
            s = [torch.cat([rows, init[i].to(rows)[None]]).index_select(0, index) for i, rows in enumerate(s)]
        layout = _padded_layout(lens, x.device)  # one layout, both networks
        po = self.pi_core.flat(x, lens, s[0], s[1], layout)
        vo = self.vf_core.flat(xv, lens, s[2], s[3], layout)
        return self.pi_head(po), self.vf_head(vo)[:, 0]

    def bootstrap_input(self, segment):
        return self.bootstrap_inputs(segment, *_whole(segment))

    def bootstrap_inputs(self, batch, starts, ends):
        """Each segment's next-step inputs: the features' after its last row, and the state that row's step left."""
        rows = np.asarray(ends, np.int64) - 1
        out = self.features.bootstrap(batch, rows)
        for i in range(4):
            out[f"state_in_{i}"] = _np_rows(batch, f"state_out_{i}", rows)
        return out
