"""What every view-fed model shares: the `ViewModel` interface and the layers the models build on.

A model is a ``torch.nn.Module`` with a ``view_requirements`` dict (merged into
the policy's by `TorchPolicy`), so the collector builds exactly what the model
reads from one stored copy of each step. Policy and value function have
separate networks (no shared trunk), so the value loss's scale never competes
with the policy's gradient.

The interface PPO uses:

* ``action_dist``: the model's `ActionHead` (`make_action_head` of the action
  space: categorical, independent categoricals or Bernoullis, a tanh-squashed
  Gaussian with a learned log-std), whose parameters are the model's;
* ``forward_step(input_dict) -> (dist_inputs [B, action_dist.num_inputs],
  value [B], state_outs)``: one step per row, from the compute-actions input
  dict (by default a memoryless model's: ``forward_train`` of it, no state);
* ``forward_train(batch) -> (dist_inputs [N, ...], value [N])``: the flat
  training batch (rows of sequences end to end, ``seq_lens`` and per-sequence
  ``state_in_i`` for the models with memory; docs/contract.md, "Flat layout");
* ``bootstrap_input(segment) -> input_dict``: the input dict of the step after
  a segment's last step (one row), built from the segment's own views, for
  the value that bootstraps a truncated trajectory.

Observations may be any space `SpaceEncoder` reads (Box vectors and images,
Discrete, MultiDiscrete, MultiBinary, nested in Dict / Tuple): the models
read nested columns with `get_nested`, so a batch may hold them nested or as
flat per-leaf columns (``"obs.image"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ...views.sample_batch import SampleBatch
from ...views.view_requirement import ViewRequirement
from ..postprocessing import rows_of
from .distributions import ActionHead, make_action_head
from .encoders import SpaceEncoder
from .spaces import check_supported, get_nested, map_leaves

__all__ = ["ViewModel", "flat_sequence_index"]

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


def _heads(obs_space: Any, action_space: Any, log_std_init: float) -> ActionHead:
    """The action head; raises `UnsupportedSpaceError` for an action or observation space the models cannot use."""
    head = make_action_head(action_space, log_std_init)
    check_supported(obs_space, "observation_space")
    return head


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _f32(x: Any) -> Tensor:
    return torch.as_tensor(x).float()


def _np_rows(batch: Mapping[str, Any], key: str, rows: np.ndarray, space: Any = None) -> Any:
    """Rows ``rows`` of column ``key`` as numpy (``[len(rows), ...]``; for a nested ``space``: the nested value of
    those rows, as `get_nested` reads it)."""
    value = rows_of(batch, key, rows)
    return map_leaves(lambda v: v, space, value) if space is not None else value


def _whole(segment: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of a batch as one segment: what a model's `bootstrap_input` hands its `bootstrap_inputs`."""
    return np.zeros(1, np.int64), np.array([len(segment[SampleBatch.REWARDS])], np.int64)


def flat_sequence_index(seq_lens: Tensor) -> tuple[Tensor, Tensor]:
    """(sequence of each flat row, position of each row in its sequence) for ``seq_lens``, int64 tensors on the
    CPU."""
    seq_of_row, pos = _sequence_index(_np_lens(seq_lens))
    return torch.from_numpy(seq_of_row), torch.from_numpy(pos)


def _np_lens(seq_lens: Any) -> np.ndarray:
    """``seq_lens`` (a tensor on any device, an array or a list) as an int64 numpy array.

    The training passes' index arithmetic (one int per sequence or row, once per minibatch) runs in numpy: each of
    its small operations takes about a microsecond there, 5-15 us as a torch op on the CPU (about 6% of the LSTM
    preset's SGD step went to them)."""
    if isinstance(seq_lens, torch.Tensor):
        seq_lens = seq_lens.detach().cpu().numpy()
    return np.asarray(seq_lens).astype(np.int64, copy=False)


def _sequence_index(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`flat_sequence_index` in numpy, of int64 ``lens``."""
    seq_of_row = np.repeat(np.arange(len(lens)), lens)
    starts = np.cumsum(lens) - lens
    return seq_of_row, np.arange(len(seq_of_row)) - starts[seq_of_row]


def _split_points(batch: Mapping[str, Any], seq_lens: Any) -> tuple[np.ndarray, np.ndarray]:
    """Where the flat rows split into runs: at every sequence start and at every ``is_init`` row.

    Returns (run lengths, for each run the sequence whose ``state_in`` it starts
    from, or -1 where the run starts an episode inside a sequence: the initial state), int64 numpy arrays.
    """
    seq_of_row, pos = _sequence_index(_np_lens(seq_lens))
    n = len(pos)
    start = pos == 0
    is_init = batch.get("is_init")
    if is_init is not None:
        if isinstance(is_init, torch.Tensor):
            is_init = is_init.detach().cpu().numpy()
        is_init = np.asarray(is_init).astype(bool, copy=False)
        if len(is_init) != n:
            raise ValueError(f"seq_lens sum to {n} rows, but the batch has {len(is_init)} rows")
        start |= is_init
    first = np.flatnonzero(start)
    lens = np.diff(first, append=n)
    from_seq = np.where(pos[first] == 0, seq_of_row[first], -1)
    return lens, from_seq


class _PrevActionReward(nn.Module):
    """Features from obs (`SpaceEncoder`) and, optionally, the previous action (one-hot for discrete spaces) and reward."""

    def __init__(self, obs_space: Any, action_space: Any, prev_action: bool, prev_reward: bool) -> None:
        super().__init__()
        self.obs_space = obs_space
        self.action_space = action_space
        self.prev_action = prev_action
        self.prev_reward = prev_reward
        self.obs = SpaceEncoder(obs_space)
        self.act = SpaceEncoder(action_space, what="action_space")
        self.dim = self.obs.dim + (self.act.dim if prev_action else 0) + (1 if prev_reward else 0)

    def view_requirements(self, action_space: Any) -> dict[str, ViewRequirement]:
        vrs = {}
        if self.prev_action:
            vrs["prev_actions"] = VR("actions", space=action_space, shift=-1)
        if self.prev_reward:
            vrs["prev_rewards"] = VR("rewards", shift=-1)
        return vrs

    def forward(self, d: Mapping[str, Any]) -> Tensor:
        parts = [self.obs(get_nested(d, "obs", self.obs_space))]
        if self.prev_action:
            parts.append(self.act(d["prev_actions"]))
        if self.prev_reward:
            parts.append(_f32(d["prev_rewards"])[:, None])
        return torch.cat(parts, -1)

    def bootstrap(self, seg: Mapping[str, Any], rows: np.ndarray) -> dict[str, Any]:
        """The features' inputs of the step after each of ``seg``'s rows ``rows``."""
        out = {"obs": _np_rows(seg, "new_obs", rows, self.obs_space)}
        if self.prev_action:
            out["prev_actions"] = _np_rows(seg, "actions", rows)
        if self.prev_reward:
            out["prev_rewards"] = _np_rows(seg, "rewards", rows)
        return out


class ViewModel(nn.Module):
    """Base of the models PPO trains (see the module docstring for the interface)."""

    view_requirements: dict[str, ViewRequirement]
    action_dist: ActionHead

    def get_initial_state(self) -> list[Tensor]:
        return []

    def forward_step(self, input_dict: Mapping[str, Any]) -> tuple[Tensor, Tensor, list[Tensor]]:
        """A memoryless model's (the default): `forward_train` of the input dict, no state outputs."""
        logits, value = self.forward_train(input_dict)
        return logits, value, []

    def forward_train(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def bootstrap_input(self, segment: Mapping[str, Any]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def bootstrap_inputs(self, batch: Mapping[str, Any], starts: np.ndarray, ends: np.ndarray) -> dict | None:
        """`bootstrap_input` of each segment ``batch[starts[k]:ends[k]]`` of a flat batch, read in one pass where
        the model can (its rows in order, as `bootstrap_input`'s stacked); None (here): the caller takes each
        segment's `bootstrap_input`."""
        return None

    def bootstrap_inputs_if_same(self, batch: Mapping[str, Any], starts: np.ndarray, ends: np.ndarray) -> dict | None:
        """`bootstrap_inputs` where it mirrors this model's `bootstrap_input`: both defined by one class, neither set
        on the instance (a subclass or an instance that changes `bootstrap_input` alone gets None: each segment's
        own call)."""
        if "bootstrap_input" in self.__dict__ or "bootstrap_inputs" in self.__dict__:
            return None
        mro = type(self).__mro__
        if (next(c for c in mro if "bootstrap_input" in c.__dict__)
                is not next(c for c in mro if "bootstrap_inputs" in c.__dict__)):
            return None
        return self.bootstrap_inputs(batch, starts, ends)

    def prepare_train(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The training batch's columns as `forward_train` reads them in every minibatch of every epoch: a
        model may replace columns with what it computes from them without weights (row by row, so a minibatch
        of the result is the result of the minibatch), once per batch instead of once per minibatch. The
        default: the batch as it is."""
        return batch


class _MemoryModel(ViewModel):
    """The layout of the models with memory (LSTM, GTrXL).

    Features from obs and the previous action / reward feed a policy core and
    a value core, each with its linear head. Observation encoders with
    weights (CNNs) are separate for the two (``vf_features``); weightless ones
    (vectors, one-hots) are computed once. The state is ``num_states``
    vectors of ``state_dim`` floats, zeros at an episode's start;
    ``state_in_i = ViewRequirement("state_out_i", shift=state_shift,
    batch_repeat_value=max_seq_len)``: one row per training sequence.
    """

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        max_seq_len: int,
        prev_action: bool,
        prev_reward: bool,
        core: Callable[[int], nn.Module],
        state_dim: int,
        num_states: int,
        state_shift: int | str,
        step_views: Mapping[str, ViewRequirement] | None = None,
        log_std_init: float = 0.0,
        twin_core: bool = False,
        head_dim: int | None = None,
    ) -> None:
        """``core(in_dim)`` builds one core, called twice (``pi_core``, ``vf_core``), or once with ``twin_core``
        (``core``: one module that computes both networks, each with its own weights); ``step_views`` are read
        besides ``obs``; ``head_dim``: the width of the core's output the heads read (default ``state_dim``)."""
        super().__init__()
        self.action_dist = _heads(obs_space, action_space, log_std_init)
        self.max_seq_len = int(max_seq_len)
        self.state_dim, self.num_states = state_dim, num_states
        self.features = _PrevActionReward(obs_space, action_space, prev_action, prev_reward)
        self.vf_features: _PrevActionReward | None = None
        if _has_params(self.features):
            self.vf_features = _PrevActionReward(obs_space, action_space, prev_action, prev_reward)
        if twin_core:
            self.core = core(self.features.dim)
        else:
            self.pi_core = core(self.features.dim)
            self.vf_core = core(self.features.dim)
        head_in = state_dim if head_dim is None else head_dim
        self.pi_head = _init(nn.Linear(head_in, self.action_dist.num_inputs), 0.01)
        self.vf_head = _init(nn.Linear(head_in, 1), 1.0)
        self.view_requirements = {
            "obs": VR(space=obs_space),
            **(step_views or {}),
            **self.features.view_requirements(action_space),
        }
        for i in range(num_states):
            self.view_requirements[f"state_in_{i}"] = VR(
                f"state_out_{i}", shift=state_shift, batch_repeat_value=self.max_seq_len
            )

    def get_initial_state(self) -> list[Tensor]:
        return [torch.zeros(self.state_dim) for _ in range(self.num_states)]

    def _features(self, d: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        """(policy features, value features) of each row."""
        x = self.features(d)
        return x, (x if self.vf_features is None else self.vf_features(d))
