"""`ReferenceReplay`: a small, obviously correct pure-Python model of `tv.ReplayBuffer`.

It keeps every row ever written in a dict keyed by its absolute row number
(the C++ ring holds row ``g`` at ``g % capacity``; a row is live while
``g >= head - capacity``), trajectories as plain lists of absolute rows, and
builds each sampled view with a loop over rows and offsets. The property
tests drive it and the C++ buffer with the same batches and compare
trajectories, slices and every output array.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, localcontext
from typing import Any

import numpy as np

from ..views.columns import DONES, TERMINATEDS, TRUNCATEDS
from ..views.view_requirement import ViewRequirement

__all__ = ["ReferencePriorities", "ReferenceReplay", "reference_nstep"]

_END_FLAGS = (TERMINATEDS, TRUNCATEDS, DONES)


@dataclass
class RefTrajectory:
    uid: int
    key: int
    first_g: int
    rows: list[int] = field(default_factory=list)  # absolute row of each step
    open: bool = True
    last_t: int = 0
    first_t: int = 0
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
            # (A piece that ends before the open trajectory's first t is an earlier fragment: its own trajectory.)
            span = {x.key: (x.first_t, x.last_t) for x in self.trajs if x.open}
            for a, b in pieces:
                k = keys[a]
                if k in span and t[a] <= span[k][1] and t[b - 1] >= span[k][0]:
                    raise ValueError(f"add: trajectory id {keys[a]} is reused")
                if done[b - 1]:
                    span.pop(k, None)
                elif k in span and t[a] == span[k][1] + 1:
                    span[k] = (span[k][0], t[b - 1])
                else:
                    span[k] = (t[a], t[b - 1])
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
                tr = RefTrajectory(uid=self.next_uid, key=key, first_g=self.head, starts_episode=starts,
                                   first_t=t[a] if t is not None else 0)
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
        # Slice ends (TorchRL's SliceSampler): with a truncated_key, each slice's last real step is marked in that
        # column (a computed one where it is not stored) and, stored or not, in a stored `dones` (a one).
        marks = [] if truncated_key is None else [m for m in (truncated_key, DONES) if m in self.columns]
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

    # -- samplers ------------------------------------------------------------

    def start_steps(self, slice_len: int, strict: bool) -> list[tuple[int, int, int]]:
        """Every ``(uid, start, absolute row)`` a per-step sampler (`RandomSampler`, the prioritized ones) may
        start a slice at: every stored step, or with ``strict`` those with ``slice_len`` steps from them on."""
        out = []
        for tr in self.trajs:
            steps = len(tr.rows)
            for j in range(steps):
                if not strict or j <= steps - slice_len:
                    out.append((tr.uid, j, tr.rows[j]))
        return out

    def step_rows(self) -> list[int]:
        """The absolute row of every sampleable step, oldest trajectory first."""
        return [g for tr in self.trajs for g in tr.rows]


class ReferencePriorities:
    """TorchRL's prioritized sampling, in plain Python over a `ReferenceReplay`'s rows, exactly.

    Call `after_add` after each ``ReferenceReplay.add``: the rows written get
    ``(max_priority + eps) ** alpha``; `update` sets ``(p + eps) ** alpha`` and
    grows the max priority. The leaves are `decimal.Decimal` s of 60 digits
    (exponents to 1e999999: no overflow, no underflow), so `probabilities`
    and `weight` are what the sampler must produce for any finite priority;
    ``leaf`` holds them as floats (``inf`` beyond a double's range).
    """

    def __init__(self, ref: ReferenceReplay, alpha: float, beta: float, eps: float = 1e-8) -> None:
        self.ref = ref
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.max_priority = 1.0
        self.exact: dict[int, Decimal] = {}
        self.seen_head = 0

    def _leaf(self, p: float) -> Decimal:
        with localcontext(_EXACT):
            x = Decimal(p) + Decimal(self.eps)  # exact: both are binary fractions
            if self.alpha == 0:
                return Decimal(1)  # x ** 0 = 1, 0 ** 0 included (as std::pow and torch)
            return Decimal(0) if x == 0 else x ** Decimal(self.alpha)

    @property
    def leaf(self) -> dict[int, float]:
        return {g: _to_float(v) for g, v in self.exact.items()}

    def after_add(self) -> None:
        steps = {g for tr in self.ref.trajs for g in tr.rows}
        for g in range(self.seen_head, self.ref.head):
            self.exact[g] = self._leaf(self.max_priority) if g in steps else Decimal(0)
        self.seen_head = self.ref.head
        self.exact = {g: v for g, v in self.exact.items() if g in steps}

    def update(self, rows: list[int], priorities: list[float]) -> None:
        steps = {g for tr in self.ref.trajs for g in tr.rows}
        for g, p in zip(rows, priorities):
            if g not in steps:
                continue
            self.max_priority = max(self.max_priority, p)
            self.exact[g] = self._leaf(p)

    def probabilities(self, slice_len: int = 1, strict: bool = False) -> dict[int, float]:
        """Absolute row -> probability of starting a sample there."""
        starts = [g for _, _, g in self.ref.start_steps(slice_len, strict) if self.exact.get(g, 0) > 0]
        with localcontext(_EXACT):
            total = sum((self.exact[g] for g in starts), Decimal(0))
            return {g: float(self.exact[g] / total) for g in starts}

    def weight(self, g: int) -> float:
        """TorchRL's importance weight of a sample starting at row g: ``(leaf / min positive leaf) ** -beta``."""
        with localcontext(_EXACT):
            p_min = min(v for v in self.exact.values() if v > 0)
            return float((self.exact[g] / p_min) ** Decimal(-self.beta))

    def weights(self, rows: Iterable[int]) -> list[float]:
        """`weight` of each of ``rows`` (each row once: a draw of many samples repeats rows)."""
        rows = [int(g) for g in rows]
        memo = {g: self.weight(g) for g in set(rows)}
        return [memo[g] for g in rows]


#: Decimal arithmetic for the exact priorities: 60 digits, exponents far beyond any double's.
_EXACT = Context(prec=60, Emax=999_999, Emin=-999_999)


def _to_float(v: Decimal) -> float:
    try:
        return float(v)  # (Decimal -> float rounds correctly; beyond the range: inf or 0)
    except OverflowError:
        return float("inf")


def reference_nstep(
    ref: ReferenceReplay,
    uid: int,
    j: int,
    n: int,
    gamma: float,
    *,
    reward_key: str = "rewards",
    obs_key: str = "obs",
) -> dict[str, Any]:
    """The n-step return at step j of trajectory uid, by a plain loop (RLlib's ``adjust_nstep`` cut at the
    trajectory's end): rewards, new_obs, terminateds, truncateds, discount, steps."""
    tr = ref.traj(uid)
    steps = len(tr.rows)
    ret = 0.0
    k = 0
    for i in range(n):
        if j + i >= steps:
            break
        ret += gamma**i * float(np.asarray(ref.value(tr, j + i, reward_key)))
        k += 1
    last = j + k - 1
    term = bool(np.any(ref.value(tr, last, "terminateds"))) if "terminateds" in ref.columns else False
    trunc = bool(np.any(ref.value(tr, last, "truncateds"))) if "truncateds" in ref.columns else False
    return {
        "rewards": ret,
        "new_obs": ref.value(tr, j + k, obs_key),
        "terminateds": term,
        "truncateds": trunc,
        "discount": gamma**k,
        "steps": k,
    }
