"""Workloads, data pools, runners and the oracle shared by the benchmarks.

Three implementations do the same work behind one small interface
(``steps``, ``flush``, ``batch``, ``nbytes``, ``steps_held``):

* ``trajview``: `tv.Collector` (``coll.step`` = add_step + input dict in one
  C++ call, ``build_batch`` + ``tv.concat_samples``);
* ``reference``: the pure-Python `trajview.testing.ReferenceCollector`, same API;
* ``numpy``: what a user writes by hand, vectorized over the ``B`` envs:
  preallocated ``[T, B, ...]`` arrays written one step at a time
  (``buf[t] = x`` per column), the inference dict built by indexing
  (``obs_buf[t]``), the frame stack gathered with fancy indexing, zeros before
  the episode start.

Every step's data comes from a small pool of arrays generated up front, cycled
through, so that the timings measure the collector, not the random number
generator. Episodes are long (never reset): global step ``k`` feeds
``pool.steps[k % P]`` to every env, so episode row ``j`` of every column is
known in closed form and `expected_input_dict` / `expected_batch` rebuild what
any implementation must return from the pool alone (the oracle of the checks).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Any

import numpy as np

import trajview as tv
from trajview.testing import ReferenceCollector

#: Workloads. W1: CartPole-like float32[4] obs. W2: Atari-like uint8[84, 84]
#: obs read through a 4-frame stack view ``prev_n_obs = obs@"-3:0"``.
OBS_SPECS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "W1": (np.float32, (4,)),
    "W2": (np.uint8, (84, 84)),
}
STEP_COLUMNS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "actions": (np.int64, ()),
    "rewards": (np.float32, ()),
    "terminateds": (np.bool_, ()),
    "truncateds": (np.bool_, ()),
}
FRAME_STACK = "-3:0"
FRAME_OFFSETS = np.arange(-3, 1)
FRAME_BYTES = 84 * 84  # one uint8[84, 84] frame
POOL_SIZE = 7  # distinct pre-generated steps, cycled through
IMPLS = ("trajview", "numpy", "reference")


def has_stack(workload: str) -> bool:
    return workload == "W2"


def columns(workload: str) -> dict[str, tuple[Any, tuple[int, ...]]]:
    return {"obs": OBS_SPECS[workload], **STEP_COLUMNS}


def view_requirements(workload: str) -> dict[str, tv.ViewRequirement]:
    vrs = {
        "obs": tv.ViewRequirement("obs"),
        "actions": tv.ViewRequirement("actions"),
        "rewards": tv.ViewRequirement("rewards"),
        "terminateds": tv.ViewRequirement("terminateds"),
        "truncateds": tv.ViewRequirement("truncateds"),
        "new_obs": tv.ViewRequirement("obs", shift=1, used_for_compute_actions=False),
    }
    if has_stack(workload):
        vrs["prev_n_obs"] = tv.ViewRequirement("obs", shift=FRAME_STACK)
    return vrs


def _input_dict_has_boundary() -> bool:
    """Whether the installed trajview's input dict carries ``t`` and ``eps_id`` unasked.

    Earlier versions always added them; later ones only when a view asks. The
    numpy baseline builds them only when trajview does, so both do the same work.
    """
    coll = tv.Collector(1, columns("W1"), view_requirements("W1"))
    coll.begin_episodes(np.arange(1), {"obs": np.zeros((1, 4), dtype=np.float32)})
    return "t" in coll.input_dict()


INPUT_DICT_HAS_BOUNDARY = _input_dict_has_boundary()
#: Input-dict keys compared only where an implementation returns them.
OPTIONAL_INPUT_KEYS = ("t", "eps_id")


# ----------------------------------------------------------------------------- data


@dataclass
class Pool:
    """First observations plus ``P`` pre-generated steps (every column, ``[B, ...]``)."""

    workload: str
    num_envs: int
    begin: dict[str, np.ndarray]
    steps: list[dict[str, np.ndarray]]

    def obs_row(self, j: int) -> np.ndarray:
        """Episode row ``j`` of ``obs`` for every env, ``[B, *shape]`` (zeros before row 0)."""
        if j < 0:
            return np.zeros_like(self.begin["obs"])
        if j == 0:
            return self.begin["obs"]
        return self.steps[(j - 1) % len(self.steps)]["obs"]

    def step_row(self, col: str, j: int) -> np.ndarray:
        """Episode row ``j`` of step column ``col`` for every env, ``[B]``."""
        return self.steps[j % len(self.steps)][col]


def make_pool(workload: str, num_envs: int, size: int = POOL_SIZE, seed: int = 0) -> Pool:
    rng = np.random.default_rng(seed)
    dtype, shape = OBS_SPECS[workload]

    def obs() -> np.ndarray:
        if dtype == np.uint8:
            return rng.integers(0, 256, (num_envs, *shape), dtype=np.uint8)
        return rng.standard_normal((num_envs, *shape), dtype=np.float32)

    steps = []
    for _ in range(size):
        steps.append(
            {
                "obs": obs(),
                "actions": rng.integers(0, 6, num_envs, dtype=np.int64),
                "rewards": rng.standard_normal(num_envs, dtype=np.float32),
                # Long episodes: never done inside the benchmarks.
                "terminateds": np.zeros(num_envs, dtype=np.bool_),
                "truncateds": np.zeros(num_envs, dtype=np.bool_),
            }
        )
    return Pool(workload, num_envs, {"obs": obs()}, steps)


# ----------------------------------------------------------------------------- runners


class CollectorRunner:
    """`tv.Collector` or `ReferenceCollector` (same API) driven through the pool."""

    def __init__(self, pool: Pool, cls: type, chunk_rows: int = 256) -> None:
        self.pool = pool
        B = pool.num_envs
        self.coll = cls(B, columns(pool.workload), view_requirements(pool.workload), chunk_rows=chunk_rows)
        self.eps_ids = np.asarray(self.coll.begin_episodes(np.arange(B), pool.begin), dtype=np.int64)
        self.k = 0  # steps taken (= every env's episode timestep)

    def steps(self, n: int) -> dict[str, np.ndarray]:
        """``n`` env steps (add the step, build the next inference dict); returns the last dict."""
        step = self.coll.step
        data = self.pool.steps
        P = len(data)
        k = self.k
        d = None
        for i in range(k, k + n):
            d = step(data[i % P])
        self.k = k + n
        return d

    def flush(self) -> None:
        """Emit everything (frees what the views can no longer read)."""
        self.coll.build_batch()

    def batch(self) -> tv.SampleBatch:
        """The training batch of every step not emitted before."""
        return tv.concat_samples(self.coll.build_batch())

    def nbytes(self) -> int:
        return self.coll.nbytes()

    def steps_held(self) -> int:
        return self.coll.num_steps()


class NumpyRunner:
    """The hand-written numpy collector: ``[T, B, ...]`` buffers, vectorized over the envs.

    ``obs`` has ``lookback + capacity + 1`` rows: buffer row ``lookback + i``
    holds the obs after ``i`` of the buffer's steps; step columns have
    ``capacity`` rows. ``flush`` carries the ``lookback + 1`` newest obs rows to
    the front (what the frame stack still needs) and starts over.
    """

    def __init__(self, pool: Pool, capacity: int) -> None:
        self.pool = pool
        B = pool.num_envs
        dtype, shape = OBS_SPECS[pool.workload]
        self.stack = has_stack(pool.workload)
        self.lb = 3 if self.stack else 0
        self.capacity = capacity
        self.obs = np.zeros((self.lb + capacity + 1, B, *shape), dtype=dtype)
        self.cols = {c: np.zeros((capacity, B, *s), dtype=dt) for c, (dt, s) in STEP_COLUMNS.items()}
        self.envs = np.arange(B)
        self.env_col = self.envs[:, None]
        self.eps_ids = np.arange(B, dtype=np.int64)
        # begin_episodes
        self.obs[self.lb] = pool.begin["obs"]
        self.ep_t = np.zeros(B, dtype=np.int64)  # per env: episode timestep
        self.i = 0  # steps in the buffer
        self.k = 0  # steps taken

    def _step(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        i = self.i
        self.obs[self.lb + i + 1] = data["obs"]
        cols = self.cols
        cols["actions"][i] = data["actions"]
        cols["rewards"][i] = data["rewards"]
        cols["terminateds"][i] = data["terminateds"]
        cols["truncateds"][i] = data["truncateds"]
        self.i = i = i + 1
        self.ep_t += 1
        r = self.lb + i
        d = {"obs": self.obs[r]}
        if self.stack:
            stack = self.obs[r + FRAME_OFFSETS, self.env_col]  # [B, 4, 84, 84]
            before = self.ep_t[:, None] + FRAME_OFFSETS < 0  # before the episode start
            if before.any():
                stack[before] = 0
            d["prev_n_obs"] = stack
        if INPUT_DICT_HAS_BOUNDARY:
            d["t"] = self.ep_t.copy()
            d["eps_id"] = self.eps_ids
        return d

    def steps(self, n: int) -> dict[str, np.ndarray]:
        step = self._step
        data = self.pool.steps
        P = len(data)
        k = self.k
        d = None
        for j in range(k, k + n):
            d = step(data[j % P])
        self.k = k + n
        return d

    def flush(self) -> None:
        n = self.i
        self.obs[: self.lb + 1] = self.obs[n : n + self.lb + 1]
        self.i = 0

    def batch(self) -> dict[str, np.ndarray]:
        """The training batch, env-major like the collector's, by fancy indexing; then ``flush``."""
        n, B = self.i, len(self.envs)
        t_idx = np.tile(np.arange(n), B)
        env_idx = np.repeat(self.envs, n)
        r = self.lb + t_idx
        ep_t = self.ep_t[env_idx] - n + t_idx  # episode timestep of each row
        out = {
            "obs": self.obs[r, env_idx],
            "actions": self.cols["actions"][t_idx, env_idx],
            "rewards": self.cols["rewards"][t_idx, env_idx],
            "terminateds": self.cols["terminateds"][t_idx, env_idx],
            "truncateds": self.cols["truncateds"][t_idx, env_idx],
            "new_obs": self.obs[r + 1, env_idx],
        }
        if self.stack:
            stack = self.obs[r[:, None] + FRAME_OFFSETS, env_idx[:, None]]  # [n * B, 4, 84, 84]
            before = ep_t[:, None] + FRAME_OFFSETS < 0
            if before.any():
                stack[before] = 0
            out["prev_n_obs"] = stack
        out["eps_id"] = self.eps_ids[env_idx]
        out["env_id"] = env_idx
        out["t"] = ep_t
        out["is_init"] = ep_t == 0
        self.flush()
        return out

    def nbytes(self) -> int:
        return self.obs.nbytes + sum(a.nbytes for a in self.cols.values())

    def steps_held(self) -> int:
        return self.i * len(self.envs)


def make_runner(impl: str, pool: Pool, *, capacity: int, chunk_rows: int = 256) -> CollectorRunner | NumpyRunner:
    """``capacity``: the most steps held between flushes (the numpy buffers' ``T``)."""
    if impl == "trajview":
        return CollectorRunner(pool, tv.Collector, chunk_rows=chunk_rows)
    if impl == "trajview-lazy":  # batches hold big columns' views as tv.LazyView (each frame once + indices)
        return CollectorRunner(pool, functools.partial(tv.Collector, lazy_views=True), chunk_rows=chunk_rows)
    if impl == "reference":
        return CollectorRunner(pool, ReferenceCollector, chunk_rows=chunk_rows)
    if impl == "numpy":
        return NumpyRunner(pool, capacity)
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


# ----------------------------------------------------------------------------- oracle


def expected_input_dict(pool: Pool, t: int, eps_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The compute-actions dict at episode timestep ``t`` (every env), from the pool alone."""
    B = pool.num_envs
    out = {"obs": pool.obs_row(t)}
    if has_stack(pool.workload):
        out["prev_n_obs"] = np.stack([pool.obs_row(t + int(s)) for s in FRAME_OFFSETS], axis=1)
    out["t"] = np.full(B, t, dtype=np.int64)
    out["eps_id"] = np.asarray(eps_ids, dtype=np.int64)
    return out


def expected_batch(pool: Pool, t0: int, t1: int, eps_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The training batch of episode steps ``[t0, t1)`` of every env, env-major."""
    B, n = pool.num_envs, t1 - t0
    obs = np.stack([pool.obs_row(j) for j in range(t0 - 3, t1 + 1)], axis=1)  # [B, n + 4, ...], row 3 = t0

    def flat(a: np.ndarray) -> np.ndarray:  # [B, n, ...] -> [B * n, ...]
        return a.reshape(B * n, *a.shape[2:])

    out = {"obs": flat(obs[:, 3 : 3 + n])}
    for c in STEP_COLUMNS:
        out[c] = flat(np.stack([pool.step_row(c, j) for j in range(t0, t1)], axis=1))
    out["new_obs"] = flat(obs[:, 4 : 4 + n])
    if has_stack(pool.workload):
        out["prev_n_obs"] = flat(np.stack([obs[:, 3 + s : 3 + s + n] for s in FRAME_OFFSETS], axis=2))
    out["eps_id"] = np.repeat(np.asarray(eps_ids, dtype=np.int64), n)
    out["env_id"] = np.repeat(np.arange(B, dtype=np.int64), n)
    out["t"] = np.tile(np.arange(t0, t1, dtype=np.int64), B)
    out["is_init"] = out["t"] == 0
    return out


def assert_columns_equal(got: Any, expected: dict[str, np.ndarray], what: str, optional: tuple[str, ...] = ()) -> None:
    """Every expected column is in ``got`` (those in ``optional`` only if present) with the same dtype, shape and values."""
    missing = sorted(set(expected) - set(got.keys()) - set(optional))
    assert not missing, f"{what}: missing columns {missing}; got {sorted(got.keys())}"
    for k, want in expected.items():
        if k not in got.keys():
            continue
        arr = np.asarray(got[k])
        assert arr.dtype == want.dtype, f"{what}[{k!r}]: dtype {arr.dtype}, expected {want.dtype}"
        assert arr.shape == want.shape, f"{what}[{k!r}]: shape {arr.shape}, expected {want.shape}"
        assert np.array_equal(arr, want), f"{what}[{k!r}]: values differ from the expected ones"


def batch_nbytes(batch: Any) -> int:
    """Bytes of every array of a batch (what building it wrote): a lazy column's index, and its base once."""
    seen: set[int] = set()
    total = 0
    for v in dict.values(batch):  # dict.values: reading would materialize lazy columns
        if isinstance(v, tv.LazyView):
            total += v.index.nbytes + (v.base.nbytes if id(v.base) not in seen else 0)
            seen.add(id(v.base))
        else:
            total += np.asarray(v).nbytes
    return int(total)


def median_s(benchmark: Any) -> float | None:
    """The benchmark's median round time, or None when benchmarks are disabled."""
    meta = getattr(benchmark, "stats", None)
    return None if meta is None else float(meta.stats.median)
