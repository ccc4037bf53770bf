"""MetricsLog: a run's rows appended through a file kept open, with append_metrics' file as the reference; and the
windows' means a row reports (`RunCounters`)."""

from __future__ import annotations

import math
import os
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajview.train.loop import RunCounters
from trajview.train.metrics import METRIC_FIELDS, MetricsLog, append_metrics, read_metrics


def _row(i: int) -> dict:
    return {k: (i if k in ("iteration", "env_steps", "episodes") else i + 0.25) for k in METRIC_FIELDS}


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 12), fmt=st.sampled_from(["csv", "jsonl"]), removed_at=st.integers(0, 14),
       failed_at=st.integers(0, 14), data=st.data())
def test_a_metrics_log_writes_the_file_append_metrics_writes(tmp_path_factory, n, fmt, removed_at, failed_at, data):
    """The same bytes as `append_metrics` row by row, whatever happens in between: the file removed (written again
    as a new one, a CSV with its header), a write that raised after part of its line (the next row ends it first,
    as `append_metrics` does)."""
    folder = tmp_path_factory.mktemp("m")
    path, ref = folder / f"metrics.{fmt}", folder / f"reference.{fmt}"
    log = MetricsLog(path, fmt)
    first, damaged = 1, False  # the file's first row; whether a partial line stays in it
    for i in range(1, n + 1):
        if i == removed_at:
            path.unlink(missing_ok=True)
            ref.unlink(missing_ok=True)
            first, damaged = i, False
        elif i == failed_at and log._fd is not None:
            cut = data.draw(st.integers(1, 8))
            real = os.write

            def partial(fd, buf, real=real, cut=cut):
                real(fd, bytes(buf[:cut]))
                raise OSError(28, "No space left on device")

            os.write = partial
            try:
                with pytest.raises(OSError, match="No space"):
                    log.append(_row(i))
            finally:
                os.write = real
            with open(ref, "ab") as f:  # (the reference file gets the same partial line)
                f.write(path.read_bytes()[len(ref.read_bytes()):])
            damaged = True
        log.append(_row(i))
        append_metrics(ref, _row(i), fmt, sync=False)
        assert path.read_bytes() == ref.read_bytes()
    if not damaged:  # (a partial line inside the file: read_metrics refuses it, as it refuses the reference)
        assert [r["iteration"] for r in read_metrics(path)] == list(range(first, n + 1))
    log.close()
    log.close()  # (twice: nothing more)


def test_a_metrics_log_closes_its_file_when_collected(tmp_path):
    log = MetricsLog(tmp_path / "metrics.csv")
    log.append(_row(1))
    log.append(_row(2))
    fd = log._fd
    assert fd is not None and os.fstat(fd)
    del log
    with pytest.raises(OSError):
        os.fstat(fd)


@settings(max_examples=60, deadline=None)
@given(returns=st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=120),
       lengths=st.lists(st.integers(1, 10**6), max_size=120), window=st.integers(1, 100))
def test_the_runs_mean_return_and_length_are_numpys_means_of_their_windows(returns, lengths, window):
    """`RunCounters.mean_return` and the row's ``episode_len_mean``: ``np.mean`` of the last ``window`` episodes
    (NaN before the first), exactly."""
    run = RunCounters.__new__(RunCounters)
    run.returns, run.lengths = deque(returns, maxlen=window), deque(lengths, maxlen=window)
    run.iteration = run.env_steps = run.episodes = 0
    run.elapsed = 1.0
    want_r = float(np.mean(returns[-window:])) if returns else math.nan
    want_l = float(np.mean(lengths[-window:])) if lengths else math.nan
    row = run.progress_row(10, 1.0)
    for got, want in ((run.mean_return, want_r), (row["episode_return_mean"], want_r), (row["episode_len_mean"], want_l)):
        assert (math.isnan(got) and math.isnan(want)) or got == want
