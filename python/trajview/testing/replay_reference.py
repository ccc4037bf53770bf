"""`ReferenceReplay`: a small, obviously correct pure-Python model of `tv.ReplayBuffer`.

It keeps every row ever written in a dict keyed by its absolute row number
(the C++ ring holds row ``g`` at ``g % capacity``; a row is live while
``g >= head - capacity``), trajectories as plain lists of absolute rows, and
builds each sampled view with a loop over rows and offsets. The property
tests drive it and the C++ buffer with the same batches and compare
trajectories, slices and every output array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..views.columns import DONES, TERMINATEDS, TRUNCATEDS
from ..views.view_requirement import ViewRequirement

__all__ = ["ReferenceReplay"]

_END_FLAGS = (TERMINATEDS, TRUNCATEDS, DONES)


@dataclass
class RefTrajectory:
    uid: int
    key: int
    first_g: int
    rows: list[int] = field(default_factory=list)  # absolute row of each step
    open: bool = True
    last_t: int = 0
    starts_episode: bool = True
    final: int | None = None  # absolute row of the final observation


class ReferenceReplay:
    """Same trajectory, overwrite and view rules as `tv.ReplayBuffer` (see its module docs).

    ``columns``: the stored column names; ``next_obs``: ``{obs column: next column}``.
    """

    def __init__(
        self,
        capacity: int,
        columns: list[str],
        *,
        next_obs: Mapping[str, str] | None = None,
        traj_key: str | None = None,
        end_key: str | None = None,
    ) -> None:
        self.capacity = capacity
        self.columns = list(columns)
        self.next_obs = dict({"obs": "new_obs"} if next_obs is None else next_obs)
        self.traj_key = traj_key
        self.end_key = end_key
        self.rows: dict[int, dict[str, np.ndarray]] = {}
        self.head = 0
        self.trajs: list[RefTrajectory] = []
        self.next_uid = 0
        self.fallback = 0
        self.has_next: bool | None = None
        self.specs: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}

    # -- writing -------------------------------------------------------------

    def add(self, batch: Mapping[str, Any]) -> None:
        n = len(np.asarray(batch[self.columns[0]]))
        if not self.specs:
            for c in self.columns:
                arr = np.asarray(batch[c])
                self.specs[c] = (arr.dtype, arr.shape[1:])
        obs_cols = [o for o in self.next_obs if o in self.columns]
        if self.has_next is None and n > 0:
            self.has_next = bool(obs_cols) and all(self.next_obs[o] in batch for o in obs_cols)
        with_next = bool(self.has_next)

        ends = [self.end_key] if self.end_key is not None else [k for k in _END_FLAGS if k in batch]
        done = [any(bool(np.any(np.asarray(batch[k])[i])) for k in ends) for i in range(n)]
        key_col = self.traj_key or next((k for k in ("eps_id", "traj_ids") if k in batch), None)
        if key_col is not None:
            keys = [int(k) for k in np.asarray(batch[key_col])]
        else:
            keys = []
            fallback = self.fallback
            for i in range(n):
                keys.append(fallback)
                if done[i]:
                    fallback += 1
        t = [int(x) for x in np.asarray(batch["t"])] if "t" in batch else None

        pieces: list[tuple[int, int]] = []
        for i in range(n):
            if i == 0 or keys[i] != keys[i - 1] or done[i - 1]:
                pieces.append((i, i + 1))
            else:
                pieces[-1] = (pieces[-1][0], i + 1)
        if t is not None and key_col is not None:
            # One writer's t only grows along an id: a piece not after its open trajectory's last step is refused.
            last_t = {x.key: x.last_t for x in self.trajs if x.open}
            for a, b in pieces:
                if keys[a] in last_t and t[a] <= last_t[keys[a]]:
                    raise ValueError(f"add: trajectory id {keys[a]} is reused")
                if done[b - 1]:
                    last_t.pop(keys[a], None)
                else:
                    last_t[keys[a]] = t[b - 1]
        # An add larger than the buffer keeps its newest rows that fit (each piece adds its final row).
        while n + (len(pieces) if with_next else 0) > self.capacity:
            a, b = pieces[0]
            pieces[0] = (a + 1, b)
            if a + 1 == b:
                pieces.pop(0)
            n -= 1
        total = n + (len(pieces) if with_next else 0)
        final_head = self.head + total
        if key_col is None:
            self.fallback = fallback

        for a, b in pieces:
            key = keys[a]
            starts = t is None or t[a] == 0
            tr = None
            old = next((x for x in self.trajs if x.key == key and x.open), None)
            if old is not None:
                continues = t is None or t[a] == old.last_t + 1
                if continues and old.first_g >= final_head - self.capacity:
                    tr = old
                else:
                    old.open = False
                    if continues:
                        starts = False
            if tr is None:
                tr = RefTrajectory(uid=self.next_uid, key=key, first_g=self.head, starts_episode=starts)
                self.next_uid += 1
                self.trajs.append(tr)
            for i in range(a, b):
                self.rows[self.head] = {c: np.array(np.asarray(batch[c])[i]) for c in self.columns}
                tr.rows.append(self.head)
                self.head += 1
            if with_next:
                row = {c: np.zeros(self.specs[c][1], self.specs[c][0]) for c in self.columns}
                for o in obs_cols:
                    row[o] = np.array(np.asarray(batch[self.next_obs[o]])[b - 1])
                self.rows[self.head] = row
                tr.final = self.head
                self.head += 1
            else:
                tr.final = None
            tr.last_t = t[b - 1] if t is not None else tr.last_t + (b - a)
            tr.open = not done[b - 1]
            # A trajectory whose first step is overwritten is dropped whole.
            self.trajs = [x for x in self.trajs if x.first_g >= self.head - self.capacity]

    # -- reading -------------------------------------------------------------

    def live(self, g: int) -> bool:
        return self.head - self.capacity <= g < self.head

    def traj(self, uid: int) -> RefTrajectory:
        return next(x for x in self.trajs if x.uid == uid)

    def value(self, tr: RefTrajectory, j: int, col: str, padding: str = "zero") -> np.ndarray:
        """Column ``col`` at step ``j`` of ``tr`` (a view's single read)."""
        dt, shape = self.specs[col]
        steps = len(tr.rows)
        if j < 0:
            g = tr.rows[0] if padding == "reset" else None
        elif j < steps:
            g = tr.rows[j]
        elif j == steps and col in self.next_obs and tr.final is not None:
            g = tr.final
        else:
            g = None
        if g is None:
            return np.zeros(shape, dt)
        assert self.live(g), f"reference bug: row {g} read after it was overwritten"
        return self.rows[g][col]

    def eligible(self, slice_len: int, strict: bool) -> list[RefTrajectory]:
        return [x for x in self.trajs if x.rows and (not strict or len(x.rows) >= slice_len)]

    def valid_slice(self, uid: int, start: int, length: int, slice_len: int, strict: bool) -> bool:
        """Whether the sampler may return this slice."""
        tr = next((x for x in self.trajs if x.uid == uid), None)
        if tr is None or tr not in self.eligible(slice_len, strict):
            return False
        steps = len(tr.rows)
        want = slice_len if strict else min(slice_len, steps)
        return length == want and 0 <= start <= steps - length

    def expected(
        self,
        picks: list[tuple[int, int, int]],
        slice_len: int,
        views: Mapping[str, ViewRequirement],
        *,
        pad_output: bool = False,
        truncated_key: str | None = "truncateds",
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The sampled batch (every stored column, each view, is_init, mask) and index of ``picks``."""
        out: dict[str, list] = {c: [] for c in self.columns}
        for name in views:
            out[name] = []
        out["is_init"] = []
        if pad_output:
            out["mask"] = []
        index = []
        tk = truncated_key if truncated_key in self.columns and self.specs[truncated_key][0] == np.bool_ else None
        marks = [m for m in (tk, "dones" if tk is not None else None) if m in self.columns and self.specs[m][0] == np.bool_]
        # Not stored: a computed column marks each slice's last real step.
        computed = truncated_key if truncated_key is not None and truncated_key not in self.columns else None
        if computed is not None:
            out[computed] = []
        for uid, start, length in picks:
            tr = self.traj(uid)
            for i in range(slice_len if pad_output else length):
                src = min(i, length - 1)  # padding repeats the last real step
                j = start + src
                for c in self.columns:
                    v = self.value(tr, j, c)
                    if c in marks and i == length - 1:  # the last real step (padding rows are not marked)
                        v = np.ones_like(v)
                    out[c].append(v)
                if computed is not None:
                    out[computed].append(i == length - 1)
                for name, vr in views.items():
                    col = vr.column(name)
                    vals = [self.value(tr, j + int(s), col, vr.padding) for s in vr.shift_arr]
                    out[name].append(np.stack(vals) if vr.adds_axis else vals[0])
                out["is_init"].append(src == 0 or (j == 0 and tr.starts_episode))
                if pad_output:
                    out["mask"].append(i < length)
                index.append(tr.rows[j])
        arrays: dict[str, np.ndarray] = {}
        for k, vals in out.items():
            if k in ("is_init", "mask") or k == computed:
                arrays[k] = np.array(vals, dtype=bool)
                continue
            col = k if k in self.columns else views[k].column(k)
            dt, shape = self.specs[col]
            if k in views and views[k].adds_axis:
                shape = (len(views[k].shift_arr), *shape)
            arrays[k] = np.array(vals, dtype=dt).reshape((len(vals), *shape))
        return arrays, np.array(index, dtype=np.int64)
