"""A smoke of `bench/learner_profile.py` for ``pytest bench/``: its ``--quick`` mode on the zoo frame stack and DQN,
one short run each (the figures are not checked: only that every part is measured and the minimal loops compute
trajview's losses)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

import learner_profile  # noqa: E402


def test_quick_mode_measures_every_part(capsys, tmp_path):
    png = tmp_path / "shares.png"
    out = learner_profile.main(["--quick", "--models", "framestack-zoo", "dqn", "--iterations", "1", "--sgd-reps", "1",
                                "--top", "3", "--plot", str(png)])
    printed = capsys.readouterr().out
    sgd = {r["setting"]: r for r in out["sgd"]}
    assert sgd["framestack-zoo"]["same_size"] and sgd["dqn"]["same_size"]
    # The minimal loops' losses are trajview's (same weights, same batch): relative differences printed as 1e-07
    # etc. (a model whose weights are laid out otherwise than the minimal loop's layers is said so, not compared).
    for r in sgd.values():
        assert r["loss_check"].startswith("not compared (trajview's layout differs)") or \
            float(r["loss_check"].split()[0]) < 1e-4, r["loss_check"]
    for r in out["sgd"]:
        for _, ours, minimal in r["rows"]:
            assert len(ours) == len(minimal) == 1 and ours[0] > 0 and minimal[0] > 0
    for r in out["share"]:
        assert r["total"][0] > 0 and 0 < r["env"][0] < 100 and 0 < r["torch_direct"][0] < 100
        assert 0 <= r["torch_prof"][0] < 100 and r["steps"][0] > 0
        # The framework's share split by phase: each phase's part is its own time (none negative beyond the
        # clocks' rounding), and with the loop's they make the whole share.
        parts = [r[f"fw_{p}"][0] for p in (*learner_profile.PHASES, "loop")]
        assert all(x > -0.5 for x in parts) and abs(sum(parts) - r["rest_direct"][0]) < 1e-6
        assert r["fw_sampling"][0] > 0 and r["fw_learner"][0] > 0 and r["fw_checkpoint"][0] > 0
    dqn = next(r for r in out["share"] if r["setting"] == "dqn")
    assert dqn["fw_replay"][0] > 0 and next(r for r in out["share"] if r["setting"] == "framestack-zoo")["fw_replay"] == [0.0]
    assert png.stat().st_size > 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| setting | trajview+Python % (direct) | sampling | replay | learner | checkpoint | the loop |" in printed
    assert set(out["cprofile"]) == {"framestack-zoo", "dqn"}
    assert "| framestack-zoo | learn_on_batch | 256 |" in printed and "| dqn | sample + learn_on_replay |" in printed
    assert "cProfile, own time by where the code lives" in printed
