"""Quick run of bench/torchrl_dropin.py (``--quick``): what the comparison with TorchRL's collector and replay
buffer rests on, not timings (``python bench/torchrl_dropin.py`` on a quiet machine).

Each side's collector batch is checked against a plain gymnasium loop of the policy, TorchRL's CatFrames stacks
against trajview's view of the same sampled steps and a pure-Python reference, then both parts time a few rounds
and print their rows. Skipped where torchrl is not installed (the ``torchrl`` extra).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("torchrl")

import torchrl_dropin  # noqa: E402


def test_quick_run_checks_both_sides_and_prints_the_rows(capsys, tmp_path):
    assert torchrl_dropin.main(["--quick", "--steps", "4000", "--scratch", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "each side's batch (observation, action, next observation, reward, done) is a plain gymnasium loop" in out
    assert "both stacks = the reference where CatFrames sees the frame" in out
    assert out.count("| collector, ") == 2 and out.count("| slices 32x32 + 4-frame stack, 4,000 steps |") == 1
    assert "| frames stored per step, 4,000 steps |" in out
    assert list(tmp_path.iterdir()) == []  # TorchRL's memmap files are removed


def test_frames_stored_per_step_are_measured_on_both_sides(tmp_path):
    bufs = torchrl_dropin.make_buffers(3000, 4, 8, extra_rows=2048, scratch=str(tmp_path / "m"), drop_next=False)
    pool = torchrl_dropin.np.zeros((1, 84, 84), torchrl_dropin.np.uint8)
    torchrl_dropin.fill(bufs, 3000, 500, lambda k: pool[k * 0], progress=False)
    fps = torchrl_dropin.stored_frames_per_step(bufs)
    # trajview: 3000 + 2048 rows of one frame (and the small columns) for 3000 steps; TorchRL: two frames a step
    assert 5048 / 3000 < fps["trajview"] < 5048 / 3000 + 0.02
    assert 2.0 < fps["torchrl"] < 2.02
