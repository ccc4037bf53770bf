"""A run's metrics: one row per training iteration in CSV or JSON lines, read back as numbers, plotted as a PNG.

No torch here: ``trajview report`` reads runs with the core dependencies only
(the plot needs matplotlib, imported when called).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import weakref
from pathlib import Path
from typing import Any

from .._extras import require
from .._io import append_line, atomic_write, open_append, open_regular, read_lines, write_line
from ..errors import FileIntegrityError

__all__ = ["METRIC_FIELDS", "REQUIRED_FIELDS", "MetricsLog", "append_metrics", "truncate_metrics", "read_metrics",
           "plot_learning_curve"]

#: The columns of a metrics CSV, in order (JSON lines rows carry the same keys).
METRIC_FIELDS = [
    "iteration",
    "env_steps",
    "episodes",
    "episode_return_mean",
    "episode_len_mean",
    "time_s",
    "steps_per_s",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    # How the iteration's experience was sampled (PPO; see trajview.train.sampling): the learner's SGD seconds,
    # the seconds it waited for the batch, the workers' mean env steps per second of sampling, the bytes of
    # weights sent to the workers and the seconds that took, and (--async) how many policy versions behind the
    # batches were and how many stale ones were dropped.
    "learn_s",
    "learner_idle_s",
    "worker_steps_per_s",
    "weights_sync_bytes",
    "weights_sync_s",
    "staleness_mean",
    "staleness_max",
    "stale_batches_dropped",
    # Failed rollout workers replaced so far in this trainer session (--recreate-failed-workers).
    "worker_restarts",
    # The values of the scheduled settings (--lr-schedule, --clip-schedule, --entropy-schedule) in the iteration's
    # update (PPO).
    "lr",
    "clip_param",
    "entropy_coeff",
]


#: The columns every metrics row must have (what ``--resume``, the summary and ``trajview report`` read).
REQUIRED_FIELDS = ("iteration", "env_steps", "episode_return_mean", "time_s")


def _row_line(row: dict, metrics_format: str, fields: list[str]) -> str:
    """A row's line: JSON (``"jsonl"``), else CSV values in the order of ``fields`` (empty where a row lacks one)."""
    return json.dumps(row) if metrics_format == "jsonl" else _csv_line([row.get(k, "") for k in fields])


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(values)
    return buf.getvalue()


#: Most bytes of a metrics file's header line (its column names: far fewer).
_MAX_HEADER = 1 << 16


def _csv_header(path: Path) -> list[str] | None:
    """A CSV metrics file's columns (its complete first line), or None: no file, or no complete first line (a
    run killed while writing it)."""
    try:
        with io.BufferedReader(open_regular(path)) as f:  # (a FIFO or device in its place: refused, unblocked)
            first = f.readline(_MAX_HEADER + 1)
    except FileNotFoundError:
        return None
    if len(first) > _MAX_HEADER:
        raise FileIntegrityError(path, f"line 1 (the header) is longer than {_MAX_HEADER} bytes: not a metrics file")
    if not first.endswith(b"\n"):
        return None
    try:
        return next(csv.reader([first.decode().rstrip("\r\n")]), [])
    except UnicodeDecodeError as e:
        raise FileIntegrityError(path, f"line 1 (the header) is not UTF-8 text ({e})") from None


def append_metrics(path: str | Path, row: dict, metrics_format: str = "csv", sync: bool = True) -> None:
    """Appends one row to the metrics file at ``path`` (``"csv"``: with a header if the file is new; ``"jsonl"``),
    fsynced unless ``sync`` is False (`trajview._io.append_line`; a run's rows are fsynced with the checkpoint
    that covers them, `RunCounters.commit_checkpoint`, and rows past it are dropped on ``--resume``): a run
    killed mid-write leaves at most a partial last line, which `read_metrics` drops. A CSV file's first row is
    written with its header atomically."""
    path = Path(path)
    if metrics_format == "jsonl":
        append_line(path, _row_line(row, metrics_format, []), sync)
        return
    fields = _csv_header(path)  # a resumed run's file keeps its own columns (those of the trajview that started it)
    if not fields:  # a new file (or only a partial header: a run killed while writing it)
        atomic_write(path, (_csv_line(METRIC_FIELDS) + "\n"
                            + _row_line(row, metrics_format, METRIC_FIELDS) + "\n").encode())
        return
    append_line(path, _row_line(row, metrics_format, fields), sync)


class MetricsLog:
    """A run's rows appended in order to its metrics file, by `append_metrics`' rules, without opening and reading
    the file at every row (opening a file took 40 us here, a row's whole append 165-210 us): the first row (and the
    first after a write that raised, or after the file was removed) goes through `append_metrics` (a CSV header
    written with it, a partial last line ended); the file is then kept open (`open_append`) with its CSV columns
    noted, and each later row is one append of its line (`write_line`). `close` (or the object's collection)
    closes it."""

    __slots__ = ("path", "metrics_format", "_fd", "_fields", "_closer", "__weakref__")

    def __init__(self, path: str | Path, metrics_format: str = "csv") -> None:
        self.path = Path(path)
        self.metrics_format = metrics_format
        self._fd: int | None = None
        self._fields: list[str] = []  # the file's CSV columns while it is open
        self._closer: Any = None

    def append(self, row: dict, sync: bool = False) -> None:
        """`append_metrics(path, row, metrics_format, sync)`."""
        fd = self._fd
        if fd is not None and os.fstat(fd).st_nlink == 0:  # (removed since: written again as a new file)
            self.close()
            fd = None
        if fd is None:
            append_metrics(self.path, row, self.metrics_format, sync)
            fields = [] if self.metrics_format == "jsonl" else _csv_header(self.path)
            if fields is not None:
                self._fd, self._fields = open_append(self.path), fields
                self._closer = weakref.finalize(self, os.close, self._fd)
            return
        line = _row_line(row, self.metrics_format, self._fields)
        try:
            write_line(fd, line, sync)
        except BaseException:
            self.close()  # (a part of the line may be written: the next row ends it first, by `append_metrics`)
            raise

    def close(self) -> None:
        """Closes the file (the next row opens it again)."""
        if self._closer is not None:
            self._closer()
        self._fd, self._closer = None, None


def _number(v: str, path: Path, where: str) -> float | int:
    if v == "":
        return math.nan
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        raise FileIntegrityError(path, f"{where}: not a number: {v!r}") from None


def _parse(path: Path) -> tuple[str | None, list[tuple[str, dict]], bool]:
    """A metrics file's header line (CSV; None for JSON lines or an empty file), its complete rows (each line's
    text and its values) and whether a partial last line was dropped. `FileIntegrityError` naming the file and the
    line for anything else that is not a metrics row."""
    lines, partial = read_lines(path)
    rows: list[tuple[str, dict]] = []
    if path.suffix == ".jsonl":
        header = None
        for n, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise FileIntegrityError(path, f"line {n}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise FileIntegrityError(path, f"line {n}: expected a JSON object, got {type(row).__name__}")
            for k in REQUIRED_FIELDS:
                v = row.get(k)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FileIntegrityError(path, f"line {n}: {k!r} must be a number, got {v!r}")
            rows.append((line, row))
    else:
        if not lines:
            return None, [], partial
        header = lines[0]
        fields = next(csv.reader([header]), [])
        missing = [k for k in REQUIRED_FIELDS if k not in fields]
        if missing:
            raise FileIntegrityError(path, f"line 1: the header lacks the column(s) {', '.join(missing)}: "
                                           f"not a metrics file, or a damaged one")
        for n, line in enumerate(lines[1:], 2):
            values = next(csv.reader([line]), [])
            if len(values) != len(fields):
                raise FileIntegrityError(path, f"line {n}: {len(values)} values, the header has {len(fields)} columns")
            rows.append((line, {k: _number(v, path, f"line {n}, column {k!r}") for k, v in zip(fields, values)}))
    for n, (_, row) in enumerate(rows, 1 if header is None else 2):
        it = row["iteration"]
        if not isinstance(it, int) or it < 1:
            raise FileIntegrityError(path, f"line {n}: 'iteration' must be an int >= 1, got {it!r}")
    return header, rows, partial


def truncate_metrics(path: str | Path, iteration: int, metrics_format: str = "csv") -> tuple[int, bool]:
    """Drops the rows after ``iteration`` (written by a run killed between a metrics row and its checkpoint) and a
    partial last line (a run killed mid-write), rewriting the file atomically (only when something goes). Returns
    the complete rows dropped and whether a partial line was. `FileIntegrityError` when the file is damaged
    otherwise."""
    path = Path(path)
    if not path.exists():
        return 0, False
    header, rows, partial = _parse(path)
    keep = [line for line, row in rows if row["iteration"] <= iteration]
    if partial or len(keep) < len(rows):
        lines = ([header] if header is not None else []) + keep
        atomic_write(path, "".join(line + "\n" for line in lines).encode())
    return len(rows) - len(keep), partial


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics file (CSV or JSON lines), as numbers (empty cells: NaN); a partial last line (a run
    killed mid-write) is left out. `FileIntegrityError` naming the file and line when it is damaged otherwise."""
    path = Path(path)
    if not path.exists():
        return []
    return [row for _, row in _parse(path)[1]]


def plot_learning_curve(rows: list[dict], path: str | Path, title: str, stop_reward: float | None = None) -> None:
    """Mean episode return against env steps, as a PNG."""
    matplotlib = require("matplotlib", "the learning-curve plot")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = [r["env_steps"] for r in rows]
    y = [r["episode_return_mean"] for r in rows]
    ax.plot(x, y, label="mean return (last episodes)")
    if stop_reward is not None:
        ax.axhline(stop_reward, color="gray", linestyle="--", linewidth=1, label=f"target {stop_reward:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    try:  # written whole or not at all, never through a link planted in its place (`atomic_write`)
        fmt = Path(path).suffix[1:].lower() or "png"  # (savefig's rule for a path: its suffix names the format)
        out = io.BytesIO()  # (PDF and SVG writers seek and tell: rendered in memory, then written whole)
        fig.savefig(out, dpi=100, format=fmt)
        atomic_write(path, out.getvalue())
    finally:
        plt.close(fig)
