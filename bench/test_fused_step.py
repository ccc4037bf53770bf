"""A smoke of `bench/fused_step.py`: the fused network computes the separate networks' loss and gradients, and the
quick mode times both (the figures are not checked)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fused_step  # noqa: E402


def test_the_fused_network_is_the_separate_networks_arithmetic():
    assert fused_step.same_arithmetic() < 1e-5
    torch.manual_seed(3)
    sep = fused_step.Separate()
    fused = fused_step.Fused(sep)
    x = torch.randn(7, fused_step.IN)
    (lp, vp), (lf, vf) = sep(x), fused(x)
    torch.testing.assert_close(lf, lp)
    torch.testing.assert_close(vf, vp)


def test_quick_mode_times_both(capsys):
    out = fused_step.main(["--quick"])
    assert set(out) == {"separate", "fused"} and all(len(v) == 2 and min(v) > 0 for v in out.values())
    assert "fused is" in capsys.readouterr().out
