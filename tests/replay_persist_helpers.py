"""Random replay buffers and the checks the persistence tests share: two buffers hold the same state when they
hold the same trajectories, rows and priorities and give the same samples from here on (same generator)."""

from __future__ import annotations

import numpy as np

import trajview as tv

SAMPLERS = {
    "random": lambda seed: tv.RandomSampler(seed=seed),
    "slice": lambda seed: tv.SliceSampler(slice_len=2, seed=seed),
    "prioritized": lambda seed: tv.PrioritizedSampler(None, 0.7, 0.4, seed=seed),
    "prioritized-slice": lambda seed: tv.PrioritizedSliceSampler(None, 0.6, 0.5, num_slices=2, seed=seed),
    "without-replacement": lambda seed: tv.SamplerWithoutReplacement(seed=seed),
    "slice-without-replacement": lambda seed: tv.SliceSamplerWithoutReplacement(slice_len=2, seed=seed),
}
DTYPES = [np.float32, np.uint8, np.int64, np.bool_, np.float64, np.int16]


class Episodes:
    """``num_envs`` envs of random episode lengths; `batch` gives ``n`` steps of each env's running episode
    (episodes cut across batches), with the given extra columns of random values."""

    def __init__(self, seed: int, num_envs: int, max_len: int, extra: dict[str, tuple[type, tuple[int, ...]]]):
        self.rng = np.random.default_rng(seed)
        self.max_len, self.extra = max_len, extra
        self.next_eps, self.count = 0, 0
        self.envs = [self._new() for _ in range(num_envs)]

    def _new(self) -> list[int]:
        self.next_eps += 1
        return [self.next_eps, 0, int(self.rng.integers(1, self.max_len + 1))]

    def batch(self, n: int) -> dict[str, np.ndarray]:
        rows: dict[str, list] = {k: [] for k in ("obs", "new_obs", "rewards", "terminateds", "truncateds", "eps_id",
                                                 "t")}
        for i, e in enumerate(self.envs):
            for _ in range(n):
                self.count += 1
                end = e[1] == e[2] - 1
                rows["obs"].append(self.count)
                rows["new_obs"].append(self.count + 0.5)
                rows["rewards"].append(float(self.rng.normal()))
                rows["terminateds"].append(end and e[0] % 2 == 0)
                rows["truncateds"].append(end and e[0] % 2 == 1)
                rows["eps_id"].append(e[0])
                rows["t"].append(e[1])
                e[1] += 1
                if end:
                    self.envs[i] = e = self._new()
        m = len(rows["obs"])
        out = {"obs": np.array(rows["obs"], np.float32), "new_obs": np.array(rows["new_obs"], np.float32),
               "rewards": np.array(rows["rewards"], np.float32), "terminateds": np.array(rows["terminateds"]),
               "truncateds": np.array(rows["truncateds"]), "eps_id": np.array(rows["eps_id"], np.int64),
               "t": np.array(rows["t"], np.int64)}
        for k, (dt, shape) in self.extra.items():
            v = self.rng.integers(0, 200, size=(m, *shape))
            out[k] = v.astype(dt) if dt is not np.bool_ else v % 2 == 0
        return out


def make_buffer(kind: str = "prioritized", capacity: int = 40, adds: int = 6, seed: int = 0, frag: int = 4,
                extra: dict | None = None, **kw) -> tuple[tv.ReplayBuffer, Episodes]:
    """A buffer of ``kind``'s sampler after ``adds`` batches (overwritten when they exceed ``capacity``), sampled
    and, when prioritized, with updated priorities."""
    rb = tv.ReplayBuffer(capacity, sampler=SAMPLERS[kind](seed), **kw)
    eps = Episodes(seed, 2, 7, {"actions": (np.int64, ()), **(extra or {})})
    for i in range(adds):
        rb.add(eps.batch(frag))
        touch(rb, i)
    return rb, eps


def touch(rb: tv.ReplayBuffer, i: int) -> None:
    """A sample (the sampler's state moves on) and, when prioritized, priorities updated."""
    if len(rb) == 0:
        return
    try:
        _, info = rb.sample(4, return_info=True)
    except ValueError:  # nothing long enough to sample
        return
    if rb.sampler.prioritized:
        rb.update_priority(info["index"], (np.arange(len(info["index"])) + i) % 5 * 0.7)


def same_state(a: tv.ReplayBuffer, b: tv.ReplayBuffer, samples: int = 3, eps: Episodes | None = None) -> None:
    """``a`` and ``b`` hold the same steps and give the same samples (both move on)."""
    assert len(a) == len(b) and a.rows_written() == b.rows_written()
    assert a.trajectories() == b.trajectories()
    assert a.columns == b.columns and a.batch_size == b.batch_size
    if a.sampler.prioritized and len(a):
        rows = np.concatenate([t["rows"] for t in a.trajectories()]).astype(np.int64)
        np.testing.assert_array_equal(a.priorities(rows), b.priorities(rows))
        assert a.max_priority == b.max_priority
    for _ in range(samples):
        if len(a) == 0:
            break
        try:
            x, xi = a.sample(4, return_info=True)
        except ValueError as e:
            try:
                b.sample(4, return_info=True)
            except ValueError as f:
                assert str(e) == str(f)
            else:
                raise AssertionError(f"only the first buffer refused to sample: {e}") from None
            continue
        y, yi = b.sample(4, return_info=True)
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)
        for k in xi:
            np.testing.assert_array_equal(xi[k], yi[k], err_msg=k)
