"""Other libraries' layouts of flat columns: padded ``[N, T_max]`` episodes and TorchRL's `TensorDict`.

`SampleBatch.to_padded` and `SampleBatch.to_tensordict` check the batch and call these. numpy only at import
time: torch and tensordict are imported inside `to_tensordict` (see docs/contract.md, Flat layout).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from .._extras import missing
from .columns import ACTIONS, DONES, EPS_ID, INFOS, IS_INIT, NEXT_OBS, OBS, REWARDS, TERMINATEDS, TRUNCATEDS, T
from .nest import SEP

__all__ = ["to_padded", "to_tensordict"]


def to_padded(columns: Mapping[str, Any], episode_lengths: Sequence[int]) -> dict[str, np.ndarray]:
    """One row per episode, padded: ``{column: [N, T_max, *shape], "mask": bool [N, T_max]}``.

    ``columns`` are per-step arrays (or `LazyView` s) holding the episodes end to end, ``episode_lengths``
    their rows, in order; ``columns`` must not have a ``mask`` column. ``T_max`` is the longest episode;
    rows past an episode's end are zeros (``None`` in object columns) and ``mask`` is ``False`` there.
    """
    n = len(episode_lengths)
    t_max = max(episode_lengths, default=0)
    out: dict[str, np.ndarray] = {}
    for k, v in columns.items():
        col = np.asarray(v)
        padded = np.zeros((n, t_max, *col.shape[1:]), dtype=col.dtype)
        if col.dtype == object:
            padded[...] = None
        start = 0
        for i, length in enumerate(episode_lengths):
            padded[i, :length] = col[start : start + length]
            start += length
        out[k] = padded
    mask = np.zeros((n, t_max), dtype=bool)
    for i, length in enumerate(episode_lengths):
        mask[i, :length] = True
    out["mask"] = mask
    return out


def to_tensordict(columns: Mapping[str, Any], count: int, seq_keys: Collection[str] = (), obs_key: str = OBS) -> Any:
    """A `tensordict.TensorDict` of ``count`` rows in TorchRL's layout, zero copy where possible.

    ``new_obs`` -> ``("next", "obs")``; ``rewards`` -> ``("next", "reward")``,
    ``terminateds``/``truncateds`` -> ``("next", "terminated")``/``("next", "truncated")``
    and ``("next", "done")`` (their OR, or ``dones``), each ``[B, 1]``; the
    root ``done``/``terminated``/``truncated`` (the flags before each
    step: always ``False`` inside a trajectory); ``is_init`` ``[B, 1]``, True at
    each trajectory piece's first row (the batch's ``is_init``, else ``t == 0``;
    also where ``eps_id`` changes and at row 0);
    ``eps_id`` -> ``("collector", "traj_ids")``; ``actions`` -> ``action``;
    every other column under its own name. ``infos`` is left out. The leaves
    of a nested column become nested keys: ``obs.image`` -> ``("obs", "image")``,
    ``new_obs.image`` -> ``("next", "obs", "image")``, ``actions.a`` -> ``("action", "a")``.
    ``seq_keys`` (per-sequence columns) must be empty. ``obs_key`` names the observation in the TensorDict
    (``"observation"``, TorchRL's envs' name: ``obs`` -> ``observation``, ``new_obs`` -> ``("next", "observation")``).
    Needs ``torch`` and ``tensordict`` (``pip install tensordict``).
    """
    try:
        import torch
        from tensordict import TensorDict
    except ImportError as e:
        raise missing(e, "SampleBatch.to_tensordict")  # chained to e
    if seq_keys:
        raise ValueError(f"to_tensordict needs per-step columns only, got per-sequence columns {sorted(seq_keys)}")
    n = count

    def tensor(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return a
        arr = np.asarray(a)
        if arr.dtype == object:
            raise ValueError(f"to_tensordict cannot convert a column of dtype object (shape {arr.shape})")
        if not arr.flags.writeable or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr).copy()
        return torch.from_numpy(arr)

    def flag(a: Any) -> Any:
        t = tensor(a)
        t = t.reshape(n, -1).any(dim=1) if t.dim() > 1 else t.bool()
        return t.unsqueeze(-1)

    cols = dict(columns)
    for k in cols:  # a column and one below it ("obs", "obs.x"): a TensorDict key is a tensor or a node, not both
        parts = k.split(SEP)
        for i in range(1, len(parts)):
            above = SEP.join(parts[:i])
            if above in cols and parts[0] != INFOS:
                raise ValueError(f"to_tensordict: columns {above!r} and {k!r}: in a TensorDict {above!r} would be "
                                 f"both a tensor and the node above {k!r}; rename one of them")
    # Nested leaves (``new_obs.image``, ``actions.a``): nested keys under the column's TorchRL name.
    nested: list[tuple[tuple[str, ...], Any]] = []
    renamed = {NEXT_OBS: ("next", obs_key), ACTIONS: ("action",), OBS: (obs_key,)}
    for k in [k for k in cols if SEP in k]:
        top, *rest = k.split(SEP)
        if top == INFOS:
            continue
        nested.append((renamed.get(top, (top,)) + tuple(rest), cols.pop(k)))
    root: dict[str, Any] = {}
    nxt: dict[str, Any] = {}
    collector: dict[str, Any] = {}
    false = torch.zeros(n, 1, dtype=torch.bool)
    if NEXT_OBS in cols:
        nxt[obs_key] = tensor(cols.pop(NEXT_OBS))
    if OBS in cols:
        root[obs_key] = tensor(cols.pop(OBS))
    if REWARDS in cols:
        r = tensor(cols.pop(REWARDS))
        nxt["reward"] = r.unsqueeze(-1) if r.dim() == 1 else r
    term = flag(cols.pop(TERMINATEDS)) if TERMINATEDS in cols else None
    trunc = flag(cols.pop(TRUNCATEDS)) if TRUNCATEDS in cols else None
    dones = flag(cols.pop(DONES)) if DONES in cols else None
    if term is not None:
        nxt["terminated"] = term
    if trunc is not None:
        nxt["truncated"] = trunc
    if dones is not None:
        nxt["done"] = dones
    elif term is not None or trunc is not None:
        nxt["done"] = (term if term is not None else false) | (trunc if trunc is not None else false)
    for k in ("done", "terminated", "truncated"):
        if k in nxt:
            root[k] = torch.zeros(n, 1, dtype=torch.bool)
    # is_init: True at every trajectory piece's first row (TorchRL's recurrent modules reset their state there):
    # the batch's own is_init (else t == 0), and wherever eps_id changes, e.g. where one env's mid-episode
    # segment follows another env's in a rollout batch (its t > 0, its is_init False), and at row 0.
    init = np.zeros(n, dtype=bool)
    known = False
    if IS_INIT in cols:
        init |= np.asarray(cols.pop(IS_INIT)).reshape(n, -1).any(axis=1)
        known = True
    elif T in cols:
        init |= np.asarray(cols[T]).reshape(n) == 0
        known = True
    if EPS_ID in cols:
        eps = np.asarray(cols[EPS_ID]).reshape(n)
        init[1:] |= eps[1:] != eps[:-1]
        known = True
    if known:
        if n:
            init[0] = True
        root["is_init"] = torch.from_numpy(init).unsqueeze(-1)
    if EPS_ID in cols:
        collector["traj_ids"] = tensor(cols.pop(EPS_ID))
    if ACTIONS in cols:
        root["action"] = tensor(cols.pop(ACTIONS))
    cols.pop(INFOS, None)
    for k, v in cols.items():
        root[k] = tensor(v)
    if nxt:
        root["next"] = TensorDict(nxt, batch_size=[n])
    if collector:
        root["collector"] = TensorDict(collector, batch_size=[n])
    td = TensorDict(root, batch_size=[n])
    for key, v in nested:
        td.set(key, tensor(v))
    return td
