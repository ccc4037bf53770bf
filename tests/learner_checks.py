"""What the numpy learners' tests compare with torch's after several steps: close, but for a few elements.

Adam moves a weight by about its learning rate a step whatever the size of its gradient (with DQN's eps of 1e-8,
any gradient above ~1e-7), and a ReLU unit at its threshold fires or not by float32 rounding. So where a gradient
is near zero, or a pre-activation is, the two learners' rounding can differ by a good fraction of a step for that
weight, and the difference stays. Each step's gradients are compared tightly elsewhere (`test_one_steps_gradients_
are_autograds`, `test_the_numpy_learners_gradients_are_torchs`); here every element must be within ``atol`` of
torch's but at most 5% (and at least two) of them, which must be within ``loose``.
"""

from __future__ import annotations

import numpy as np


def assert_close_but_a_few(pairs: list[tuple[str, np.ndarray, np.ndarray]], *, rtol: float, atol: float,
                           loose: float, frac: float = 0.05) -> None:
    """``pairs`` of (name, actual, desired): the module docstring's rule over all their elements together."""
    total = sum(d.size for _, _, d in pairs)
    allowed = max(2, int(frac * total))
    off = []
    for name, a, d in pairs:
        a, d = np.asarray(a, dtype=np.float64), np.asarray(d, dtype=np.float64)
        assert a.shape == d.shape, f"{name}: shape {a.shape} against {d.shape}"
        err = np.abs(a - d)
        np.testing.assert_array_less(err, loose + rtol * np.abs(d) + 1e-300, err_msg=f"{name}: beyond {loose}")
        off += [(name, float(e)) for e in err[err > atol + rtol * np.abs(d)]]
    assert len(off) <= allowed, f"{len(off)} of {total} elements beyond {atol} (allowed {allowed}): {off[:8]}"
