"""Samplers of `ReplayBuffer`: which steps or slices of the stored trajectories a sample reads
(see docs/contract.md, Replay), with TorchRL's names and semantics.

- `RandomSampler`: transitions uniformly over every stored step (the default).
- `SliceSampler`: slices of trajectories, a trajectory uniformly, then a start.
- `PrioritizedSampler` / `PrioritizedSliceSampler`: transitions / slice starts
  in proportion to ``(priority + eps) ** alpha`` (a C++ sum-tree), with
  importance weights ``(p_i / p_min) ** -beta`` in ``info["_weight"]``.
- `SamplerWithoutReplacement` / `SliceSamplerWithoutReplacement`: epochs that
  visit every stored step (every trajectory) once.

The seam (TorchRL's ``Sampler.sample(storage, batch_size)``): the buffer asks
its sampler `Sampler.draw` ``(store, num_slices, slice_len)`` for a typed
`trajview._core.SliceRequest` (how to pick: a `trajview._core.SampleMode`,
with a fresh seed, and which columns mark slice ends), and the C++ store
picks and builds every view without the GIL. The without-replacement
samplers pick their epochs' slices here and hand them over as the request's
``picks`` (``SampleMode.GIVEN``). A slice never crosses a trajectory boundary,
the write head or the ring's wrap-around: slices are cut from one stored
trajectory's steps.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import _core
from ..views.columns import DONES
from .sampler_settings import _check_batch_size, _check_keys, _PrioritySettings, _real, _SliceSettings, check_alpha

__all__ = [
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
]

#: How the C++ store picks: one enum, defined in C++ (`trajview._core.SampleMode`).
SampleMode = _core.SampleMode
#: What one sample takes (`trajview._core.SliceRequest`): what `Sampler.draw` returns.
SliceRequest = _core.SliceRequest
class Sampler:
    """Base of the samplers (public: subclass it for a sampler of your own).

    The one verb is `draw`: the buffer calls ``draw(store, num_slices,
    slice_len)`` for every `ReplayBuffer.sample` and the C++ store carries
    out the `trajview._core.SliceRequest` it returns. The base's `draw` asks
    the store to pick by `mode` (picking stays in C++ without the GIL); a
    sampler that picks its own slices returns `given` ``(picks, slice_len)``.

    Attributes read by the buffer: ``traj_key`` / ``end_key`` (how added rows
    form trajectories), ``truncated_key`` (the column marked at each slice's
    last step, or ``None``), ``strict_length``, ``pad_output``, ``mode`` and
    ``prioritized``.
    """

    #: How the base's `draw` asks the store to pick.
    mode: _core.SampleMode = SampleMode.PER_TRAJECTORY
    prioritized = False

    def __init__(self, *, seed: int | None = None) -> None:
        self.traj_key: str | None = None
        self.end_key: str | None = None
        self.truncated_key: str | None = None
        self.strict_length = False
        self.pad_output = False
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def slices(self, batch_size: int) -> tuple[int, int]:
        """``(num_slices, slice_len)`` for a batch of ``batch_size`` steps (transitions: ``(batch_size, 1)``)."""
        return _check_batch_size(batch_size), 1

    def draw(self, store: _core._Replay, num_slices: int, slice_len: int) -> _core.SliceRequest:
        """What one sample of ``num_slices`` slices of up to ``slice_len`` steps takes from ``store`` (the
        buffer's C++ store): by default, the store picks by `mode` with a fresh seed from this sampler's
        generator (and ``beta`` for importance weights)."""
        return SliceRequest(
            self.mode, num_slices, slice_len, self.strict_length, self.pad_output, self._next_seed(),
            float(getattr(self, "beta", 0.0)), **self._marks(),
        )

    def given(self, picks: Any, slice_len: int, *, pad_output: bool | None = None) -> _core.SliceRequest:
        """The request for explicitly given slices ``[(trajectory uid, start step, length), ...]`` (at most
        ``slice_len`` steps each), with this sampler's slice-end marks."""
        picks = np.asarray(picks, dtype=np.int64).reshape(-1, 3)
        pad = self.pad_output if pad_output is None else bool(pad_output)
        return SliceRequest(SampleMode.GIVEN, len(picks), slice_len, False, pad, 0, 0.0, **self._marks(),
                            picks=picks)

    def _marks(self) -> dict[str, str | None]:
        """Which columns the store marks at slice ends: ``truncated_key`` (a computed column where it is not
        stored) and, with it, a stored ``dones`` (TorchRL's done key)."""
        tk = self.truncated_key
        return {"truncated_key": tk, "done_key": DONES if tk is not None else None}

    def _next_seed(self) -> int:
        with self._lock:
            return int(self._rng.integers(0, 2**63))

    # -- persistence -----------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The sampler's settings and state (its generator's state included): `load_state_dict` restores it."""
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_rng")}
            state["_rng_state"] = self._rng.bit_generator.state
        return _copy_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a `state_dict` of a sampler of this type; checked whole first (`ValueError` / `TypeError`
        naming the entry), so a state that is refused changes nothing."""
        self._apply_state(self._checked_state(state))

    def _checked_state(self, state: Any) -> dict[str, Any]:
        """``state`` checked against this sampler's own (the same entries, each of the type this sampler's holds
        or ``None`` where either may be, settings in range, a valid generator state): a copy ready for
        `_apply_state`. Nothing in it runs code (plain values, arrays of numbers)."""
        mine = self.state_dict()
        if not isinstance(state, dict) or set(state) != set(mine):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{type(self).__name__} state: expected the entries {sorted(mine)}, got {got}")
        out = _copy_state(state)
        for k, v in out.items():
            cur = mine[k]
            if k == "_rng_state":
                continue
            plain = (bool, int, float, str, np.ndarray)
            if v is None or cur is None:
                ok = v is None or type(v) in plain
            else:
                ok = type(v) is type(cur) or {type(v), type(cur)} == {int, float}
            if isinstance(v, np.ndarray):
                ok = ok and v.ndim == 1 and v.dtype == np.int64
            if not ok:
                raise TypeError(f"{type(self).__name__} state[{k!r}]: expected {type(cur).__name__}, got {v!r:.80}")
        for k in ("num_slices", "slice_len", "max_capacity"):
            v = out.get(k)
            if v is not None and (type(v) is not int or v < 1):
                raise ValueError(f"{type(self).__name__} state[{k!r}] must be an int >= 1 or None, got {v!r}")
        if "num_slices" in out and (out["num_slices"] is None) == (out.get("slice_len") is None):
            raise ValueError(f"{type(self).__name__} state: exactly one of num_slices and slice_len must be set")
        if out.get("strict_length") and out.get("pad_output"):
            raise ValueError(f"{type(self).__name__} state: strict_length and pad_output cannot both be set")
        _check_keys(type(self).__name__, **{k: out[k] for k in ("traj_key", "end_key", "truncated_key") if k in out})
        if "_alpha" in out:
            out["_alpha"] = check_alpha(type(self).__name__, out["_alpha"])
        for k in ("_beta", "_eps"):
            if k in out:
                out[k] = _real(type(self).__name__, k.lstrip("_"), out[k])
        if "_pos" in out:
            n = 0 if out.get("_epoch") is None else len(out["_epoch"])
            if type(out["_pos"]) is not int or not 0 <= out["_pos"] <= n:
                raise ValueError(f"{type(self).__name__} state['_pos'] must be an int in [0, {n}], got {out['_pos']!r}")
        rng = np.random.default_rng()
        try:
            rs = out["_rng_state"]
            if not isinstance(rs, dict) or rs.get("bit_generator") != type(rng.bit_generator).__name__:
                raise ValueError(f"expected a {type(rng.bit_generator).__name__} state")
            rng.bit_generator.state = rs
        except (TypeError, ValueError, KeyError, OverflowError) as e:
            raise ValueError(f"{type(self).__name__} state['_rng_state']: not a generator state ({e})") from None
        out["_rng_state"] = rng  # the generator, ready
        return out

    def _apply_state(self, checked: dict[str, Any]) -> None:
        """Sets a state `_checked_state` returned (cannot fail)."""
        state = dict(checked)
        rng = state.pop("_rng_state")
        with self._lock:
            self.__dict__.update(state)
            self._rng = rng

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling (pickle runs code anyway: nothing to check): the state `__getstate__` gave.
        state = _copy_state(dict(state))
        rng = np.random.default_rng()
        rng.bit_generator.state = state.pop("_rng_state")
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._rng = rng

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _copy_state(state: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}


class RandomSampler(Sampler):
    """Transitions uniformly over every stored step (TorchRL's `RandomSampler`), with replacement.

    Each sampled row is one step; views (frame stacks, ``new_obs``, previous
    actions) are read around it within its trajectory. No column is marked
    at the sampled steps (a transition is not a slice).
    """

    mode = SampleMode.PER_STEP

    def __init__(self, *, seed: int | None = None) -> None:
        super().__init__(seed=seed)


class SliceSampler(_SliceSettings, Sampler):
    """Samples slices of trajectories, with TorchRL's names and semantics.

    Args:
        num_slices: slices per sample; the slice length is then
            ``batch_size // num_slices``. Exclusive with ``slice_len``.
        slice_len: steps per slice; ``num_slices = batch_size // slice_len``.
            The batch size must be divisible by either.
        traj_key: the column holding trajectory ids (default: ``eps_id``, else
            ``traj_ids``, else trajectories are cut at the ``end_key`` flags).
        end_key: a bool column marking a trajectory's last step (default:
            ``terminateds | truncateds``, or ``dones``).
        truncated_key: a bool column set ``True`` at each slice's last real
            step in the output (so that value estimators see where a slice
            stops), as TorchRL does; when the buffer does not store it, the
            sample gets it as a computed column. A stored ``dones`` column
            gets the same mark whether or not this one is stored. ``None``
            marks nothing. Padding rows (``pad_output``) are not marked.
            (One rule, in C++: see docs/contract.md, slice-end marks.)
        strict_length: ``True``: only trajectories of at least ``slice_len``
            steps are sampled. ``False`` (default): shorter trajectories give
            shorter slices (the output then has fewer rows than the batch size).
        pad_output: pad every slice to ``slice_len`` rows by repeating its last
            real step and add a bool ``mask`` column (``False`` on padding).
            Not with ``strict_length=True`` (a ValueError, as in TorchRL).
        seed: seed of the sampler's random generator.

    A slice picks a trajectory uniformly among the eligible ones, then a start
    uniformly among those leaving ``slice_len`` steps. Slices never cross a
    trajectory boundary, the buffer's write head, or a partly overwritten
    trajectory. ``is_init`` is set at each slice's first step and at every
    real episode start.
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: str | None = None,
        end_key: str | None = None,
        truncated_key: str | None = "truncateds",
        strict_length: bool = False,
        pad_output: bool = False,
        seed: int | None = None,
    ) -> None:
        Sampler.__init__(self, seed=seed)
        self._init_slices(
            "SliceSampler", num_slices, slice_len, traj_key, end_key, truncated_key, strict_length, pad_output
        )

    def __repr__(self) -> str:
        return (
            f"SliceSampler({self._size_repr()}, traj_key={self.traj_key!r}, end_key={self.end_key!r}, "
            f"strict_length={self.strict_length}, pad_output={self.pad_output})"
        )


class PrioritizedSampler(_PrioritySettings, Sampler):
    """Transitions in proportion to their priority (TorchRL's `PrioritizedSampler`), with replacement.

    Args:
        max_capacity: ``None`` or the buffer's capacity (TorchRL asks for it;
            the buffer's ``capacity`` is what counts).
        alpha: priority exponent; a step's probability is
            ``(p_i + eps) ** alpha / sum_j (p_j + eps) ** alpha``.
        beta: importance-weight exponent: ``info["_weight"]`` of a sampled
            step is ``(leaf_i / min leaf) ** -beta`` (TorchRL's formula: the
            weights are normalized by the largest possible one).
        eps: added to every priority before the power.
        seed: seed of the sampler's random generator.

    Steps enter with TorchRL's default priority ``(max priority + eps) ** alpha``
    (max priority starts at 1 and grows with `ReplayBuffer.update_priority`),
    so a row that is overwritten gets that default again. The priorities live
    in a C++ sum-tree and min-tree over the ring's rows; sampling and updates
    run without the GIL.
    """

    mode = SampleMode.PRIORITIZED
    prioritized = True

    def __init__(
        self, max_capacity: int | None, alpha: float, beta: float, eps: float = 1e-8, *, seed: int | None = None
    ) -> None:
        Sampler.__init__(self, seed=seed)
        self._init_priorities("PrioritizedSampler", max_capacity, alpha, beta, eps)

    def __repr__(self) -> str:
        return f"PrioritizedSampler({self._priority_repr()})"


class PrioritizedSliceSampler(_SliceSettings, _PrioritySettings, Sampler):
    """Slices whose start step is drawn in proportion to its priority (TorchRL's `PrioritizedSliceSampler`).

    Arguments as `PrioritizedSampler` (``max_capacity, alpha, beta, eps``)
    and `SliceSampler` (``num_slices`` / ``slice_len``, ``traj_key``,
    ``end_key``, ``truncated_key``, ``pad_output``). ``strict_length``
    defaults to ``True`` as in TorchRL: only steps with ``slice_len`` steps of
    their trajectory from them on may start a slice (the start is drawn in
    proportion to priority among those). With ``strict_length=False`` any
    step may start, and the slice is cut at its trajectory's end. Every row of
    a slice gets its start's importance weight in ``info["_weight"]``.
    """

    mode = SampleMode.PRIORITIZED
    prioritized = True

    def __init__(
        self,
        max_capacity: int | None,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: str | None = None,
        end_key: str | None = None,
        truncated_key: str | None = "truncateds",
        strict_length: bool = True,
        pad_output: bool = False,
        seed: int | None = None,
    ) -> None:
        Sampler.__init__(self, seed=seed)
        self._init_priorities("PrioritizedSliceSampler", max_capacity, alpha, beta, eps)
        self._init_slices(
            "PrioritizedSliceSampler", num_slices, slice_len, traj_key, end_key, truncated_key, strict_length,
            pad_output,
        )

    def __repr__(self) -> str:
        return (
            f"PrioritizedSliceSampler({self._size_repr()}, {self._priority_repr()}, traj_key={self.traj_key!r}, "
            f"end_key={self.end_key!r}, strict_length={self.strict_length}, pad_output={self.pad_output})"
        )


class SamplerWithoutReplacement(Sampler):
    """Epochs over the stored steps (TorchRL's `SamplerWithoutReplacement`).

    An epoch is the list of every step stored when it starts, shuffled
    (``shuffle=True``) or oldest first; each `sample` takes the next
    ``batch_size`` of them, so an epoch visits every step once. The last batch
    of an epoch is smaller, unless ``drop_last=True``: then a new epoch starts
    when fewer than ``batch_size`` steps are left (and a buffer with fewer
    steps than ``batch_size`` is a ValueError). ``ran_out`` is ``True`` after
    the sample that ended an epoch. Steps added during an epoch wait for the
    next one; steps overwritten during it are skipped (that batch is smaller).
    """

    mode = SampleMode.PER_STEP

    def __init__(self, drop_last: bool = False, shuffle: bool = True, *, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.drop_last = bool(drop_last)
        self.shuffle = bool(shuffle)
        self._epoch: np.ndarray | None = None  # absolute stored rows (steps) or trajectory uids
        self._pos = 0
        self.ran_out = False

    def _units(self, impl: Any, slice_len: int) -> np.ndarray:
        """What one epoch visits: every stored step's absolute row."""
        return np.asarray(impl.step_rows(), dtype=np.int64)

    def _to_picks(self, impl: Any, units: np.ndarray, slice_len: int) -> np.ndarray:
        picks = np.asarray(impl.locate(units), dtype=np.int64).reshape(-1, 3)
        return picks[picks[:, 0] >= 0]

    def _valid(self, impl: Any, units: np.ndarray) -> np.ndarray:
        """Which units (absolute rows) still hold a sampleable step."""
        return np.asarray(impl.locate(units), dtype=np.int64).reshape(-1, 3)[:, 0] >= 0

    def draw(self, store: _core._Replay, num_slices: int, slice_len: int) -> _core.SliceRequest:
        """The next ``num_slices`` items of the epoch (starting one if due), as given picks."""
        return self.given(self._picks(store, num_slices, slice_len), slice_len)

    def _picks(self, impl: Any, count: int, slice_len: int) -> np.ndarray:
        """``count`` units of the current epoch as ``(uid, start, length)`` picks (starting an epoch if due)."""
        with self._lock:
            fresh_epochs = 0
            while True:
                left = 0 if self._epoch is None else len(self._epoch) - self._pos
                if left == 0 or (self.drop_last and left < count):
                    if fresh_epochs == 2:  # (only if a writer overwrites everything while this runs)
                        raise ValueError("sample: every item of the epoch was overwritten before it was sampled")
                    fresh_epochs += 1
                    units = self._units(impl, slice_len)
                    if len(units) == 0:
                        raise ValueError("sample: the replay buffer holds nothing to sample")
                    if self.drop_last and len(units) < count:
                        raise ValueError(
                            f"sample: drop_last=True needs at least {count} items per epoch, the buffer holds "
                            f"{len(units)}"
                        )
                    self._epoch = self._rng.permutation(units) if self.shuffle else units
                    self._pos = 0
                assert self._epoch is not None
                take = self._epoch[self._pos:self._pos + count]
                self._pos += len(take)
                picks = self._to_picks(impl, take, slice_len)
                if len(picks) == 0:
                    # All of them were overwritten since the epoch began: drop the rest that were too, go on.
                    rest = self._epoch[self._pos:]
                    self._epoch = np.concatenate([self._epoch[:self._pos], rest[self._valid(impl, rest)]])
                    continue
                left = len(self._epoch) - self._pos
                self.ran_out = left == 0 or (self.drop_last and left < count)
                return picks

    def __repr__(self) -> str:
        return f"{type(self).__name__}(drop_last={self.drop_last}, shuffle={self.shuffle})"


class SliceSamplerWithoutReplacement(_SliceSettings, SamplerWithoutReplacement):
    """Slices, each stored trajectory once per epoch (TorchRL's `SliceSamplerWithoutReplacement`).

    Arguments as `SliceSampler` plus ``drop_last`` and ``shuffle`` (as
    `SamplerWithoutReplacement`, counted in trajectories: ``num_slices`` per
    sample). Each slice takes the epoch's next trajectory and a start drawn
    uniformly among those leaving ``slice_len`` steps (shorter trajectories
    give their whole length; with ``strict_length=True`` they are left out).
    """

    mode = SampleMode.PER_TRAJECTORY

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        shuffle: bool = True,
        traj_key: str | None = None,
        end_key: str | None = None,
        truncated_key: str | None = "truncateds",
        strict_length: bool = False,
        pad_output: bool = False,
        seed: int | None = None,
    ) -> None:
        SamplerWithoutReplacement.__init__(self, drop_last=drop_last, shuffle=shuffle, seed=seed)
        self._init_slices(
            "SliceSamplerWithoutReplacement", num_slices, slice_len, traj_key, end_key, truncated_key,
            strict_length, pad_output,
        )

    def _units(self, impl: Any, slice_len: int) -> np.ndarray:
        lengths = np.asarray(impl.trajectory_lengths(), dtype=np.int64).reshape(-1, 2)
        keep = lengths[:, 1] >= (slice_len if self.strict_length else 1)
        return lengths[keep, 0].copy()

    def _valid(self, impl: Any, units: np.ndarray) -> np.ndarray:
        """Which units (trajectory uids) are still stored."""
        lengths = np.asarray(impl.trajectory_lengths(), dtype=np.int64).reshape(-1, 2)
        return np.isin(units, lengths[:, 0])

    def _to_picks(self, impl: Any, units: np.ndarray, slice_len: int) -> np.ndarray:
        lengths = np.asarray(impl.trajectory_lengths(), dtype=np.int64).reshape(-1, 2)
        if len(lengths) == 0:
            return np.zeros((0, 3), np.int64)
        steps = np.zeros(0, np.int64)
        pos = units - lengths[0, 0]
        ok = (pos >= 0) & (pos < len(lengths))
        units, pos = units[ok], pos[ok]
        steps = lengths[pos, 1]
        length = np.minimum(steps, slice_len)
        # A start uniformly among those leaving slice_len steps (0 for a shorter trajectory).
        start = np.floor(self._rng.random(len(units)) * (steps - length + 1)).astype(np.int64)
        return np.stack([units, start, length], axis=1)

    def __repr__(self) -> str:
        return (
            f"SliceSamplerWithoutReplacement({self._size_repr()}, drop_last={self.drop_last}, shuffle={self.shuffle}, "
            f"strict_length={self.strict_length}, pad_output={self.pad_output})"
        )
