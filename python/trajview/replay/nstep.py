"""`NStep`: n-step returns as a view built at sample time (nothing extra is stored).

``rb.sample(256, views={"nstep": tv.NStep(3, 0.99)})`` adds, per sampled step
j of a trajectory with ``steps`` stored steps, with ``k = min(n, steps - j)``
(the window is cut at the trajectory's end, as RLlib's ``adjust_nstep`` and
TorchRL's ``MultiStep`` do):

- ``nstep.rewards``: ``sum_{i<k} gamma**i * rewards[j + i]``;
- ``nstep.new_obs`` (leaf by leaf for nested observations:
  ``nstep.new_obs.image``): the observation after step ``j + k - 1``, i.e.
  ``obs[j + k]`` (the trajectory's final observation when the window reaches
  its end);
- ``nstep.terminateds`` / ``nstep.truncateds``: the flags of step
  ``j + k - 1`` (so a window that reaches a terminal step is not
  bootstrapped, and one that reaches a truncation is bootstrapped from the
  final observation);
- ``nstep.discount``: ``gamma**k``, the factor of the bootstrap value, and
  ``nstep.steps``: ``k``.

The one-step target is then ``rewards + discount * (1 - terminateds) * V(new_obs)``.
A trajectory that is still open (its stored part has no end flag yet) cuts
the window at its last stored step too, bootstrapped from the observation
after it (RLlib does the same at a batch's end).
"""

from __future__ import annotations

import numpy as np

from .._validate import positive_int

__all__ = ["NStep"]

#: The longest n-step window (views read at most this far ahead).
MAX_N = 256


class NStep:
    """n-step return view: see the module docs. ``n`` >= 1, ``0 <= gamma <= 1``.

    ``reward_key``, ``obs_key``, ``terminated_key`` and ``truncated_key`` name
    the stored columns it reads (flags that are not stored read ``False``).
    """

    def __init__(
        self,
        n: int,
        gamma: float,
        *,
        reward_key: str = "rewards",
        obs_key: str = "obs",
        terminated_key: str = "terminateds",
        truncated_key: str = "truncateds",
    ) -> None:
        self.n = positive_int("n", n)
        if self.n > MAX_N:
            raise ValueError(f"NStep n must be at most {MAX_N}, got {n}")
        try:
            g = float(gamma)
        except (TypeError, ValueError):
            raise TypeError(f"NStep gamma must be a real number, got {gamma!r}") from None
        if not 0.0 <= g <= 1.0:
            raise ValueError(f"NStep gamma must be in [0, 1], got {gamma!r}")
        self.gamma = g
        for name, key in (("reward_key", reward_key), ("obs_key", obs_key), ("terminated_key", terminated_key),
                          ("truncated_key", truncated_key)):
            if not isinstance(key, str):
                raise TypeError(f"NStep {name} must be a column name (str), got {key!r}")
        self.reward_key = reward_key
        self.obs_key = obs_key
        self.terminated_key = terminated_key
        self.truncated_key = truncated_key

    def compute(
        self,
        rewards: np.ndarray,
        obs: dict[str, np.ndarray],
        terminated: np.ndarray | None,
        truncated: np.ndarray | None,
        steps_left: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The n-step columns from the window views: ``rewards`` ``[B, n, ...]`` (zeros past the trajectory's
        end), ``obs`` ``{suffix: [B, n, ...]}`` read at ``+1 .. +n``, flags ``[B, n]`` read at ``0 .. n-1``,
        ``steps_left`` ``[B]``. Keys are relative (``rewards``, ``new_obs<suffix>``, ...)."""
        b = len(steps_left)
        k = np.minimum(self.n, np.asarray(steps_left, dtype=np.int64))
        last = np.maximum(k - 1, 0)
        rows = np.arange(b)
        powers = self.gamma ** np.arange(self.n, dtype=np.float64)
        r = np.asarray(rewards)
        weights = powers.reshape((1, self.n) + (1,) * (r.ndim - 2))
        ret = (r.astype(np.float64) * weights).sum(axis=1)
        out_dtype = r.dtype if r.dtype.kind == "f" else np.dtype(np.float32)
        out: dict[str, np.ndarray] = {"rewards": ret.astype(out_dtype)}
        for suffix, o in obs.items():
            out["new_obs" + suffix] = np.ascontiguousarray(o[rows, last])
        for name, flags in (("terminateds", terminated), ("truncateds", truncated)):
            if flags is None:
                out[name] = np.zeros(b, dtype=bool)
            else:
                f = np.asarray(flags)[rows, last]
                out[name] = f.reshape(b, -1).any(axis=1) if f.ndim > 1 else f.astype(bool)
        out["discount"] = (self.gamma ** k.astype(np.float64)).astype(np.float32)
        out["steps"] = k
        return out

    def __repr__(self) -> str:
        return f"NStep(n={self.n}, gamma={self.gamma})"
