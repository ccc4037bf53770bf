"""A smoke of `bench/persistence.py` for ``pytest bench/``: one small size, each side's bandwidth computed and
trajview's load checked against its dump (the script asserts it)."""

from __future__ import annotations

import persistence


def test_dumps_loads_rows_are_computed(tmp_path, capsys):
    rows = persistence.measure([1], ["frames", "float32"], repeats=1, where=tmp_path)
    assert [(r["kind"], r["side"]) for r in rows] == [
        (k, s) for k in ("frames", "float32") for s in ("trajview", "numpy", "numpy+fsync")]
    assert all(r["total_median"] > 0 and r["share_of_numpy"] > 0 for r in rows)
    persistence.print_table(rows)
    assert "| 1 MiB | frames | trajview |" in capsys.readouterr().out
