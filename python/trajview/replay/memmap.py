"""The files of a ``ReplayBuffer(storage="memmap", path=DIR)``: one memory-mapped ring per column
(``DIR/ring_<i>.bin``, the rows in ring order, sparse until written) and ``DIR/columns.json`` describing them
(written atomically). The buffer holds an exclusive `trajview._io.PathLock` on ``DIR`` for its lifetime (one
owner per path). A load builds its rings beside the live ones (``.ring_<i>.bin.loading``) and renames them over
the live ones only once it succeeded (`trajview.replay.persistence`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import _io

__all__ = ["META", "commit_staged_rings", "drop_staged_rings", "open_rings", "row_bytes"]

#: A `ReplayBuffer` (not imported: the buffer imports this module).
ReplayBuffer = Any
META = "columns.json"


def row_bytes(dt: np.dtype, shape: tuple[int, ...]) -> int:
    """Bytes of one row of a column."""
    return int(dt.itemsize) * int(np.prod(shape, dtype=np.int64))


def _ring_file(folder: Path, i: int, staging: bool) -> Path:
    return folder / (f".ring_{i}.bin.loading" if staging else f"ring_{i}.bin")


def open_rings(buf: ReplayBuffer, staging: bool = False) -> list[np.ndarray]:
    """One memory-mapped file per column (``ring_<i>.bin``, sparse until written; ``staging``: a load's new
    rings, renamed over them once it succeeds), and ``columns.json`` describing them (written atomically)."""
    assert buf._specs is not None and buf._path is not None
    if buf._path_lock is None or not buf._path_lock.held:
        raise ValueError(f"ReplayBuffer on {buf._path}: the buffer was closed")
    rings: list[np.ndarray] = []
    for i, (dt, sh) in enumerate(buf._specs.values()):
        nbytes = buf._capacity * row_bytes(np.dtype(dt), sh)
        if nbytes == 0:
            rings.append(np.zeros(0, np.uint8))
            continue
        rings.append(np.memmap(_ring_file(buf._path, i, staging), dtype=np.uint8, mode="w+", shape=(nbytes,)))
    if not staging:
        _write_ring_meta(buf)
    return rings


def _write_ring_meta(buf: ReplayBuffer) -> None:
    assert buf._specs is not None and buf._path is not None
    cols = [{"name": k, "dtype": np.dtype(dt).str, "shape": list(sh), "file": f"ring_{i}.bin",
             "row_bytes": row_bytes(np.dtype(dt), sh)} for i, (k, (dt, sh)) in enumerate(buf._specs.items())]
    body = {"format": "trajview.replay-memmap", "version": 1, "capacity": buf._capacity, "columns": cols,
            "note": "the rings of a live ReplayBuffer(storage='memmap') (rows in ring order); use dumps() to keep "
                    "a buffer"}
    _io.atomic_write(buf._path / META, json.dumps(body, indent=1).encode())


def commit_staged_rings(buf: ReplayBuffer, tmp: ReplayBuffer) -> None:
    """A load succeeded: its staged rings (``tmp``'s) replace ``buf``'s files (the mappings follow the files)."""
    assert buf._path is not None and tmp._rings is not None
    for r in tmp._rings:
        if isinstance(r, np.memmap):
            r.flush()
    n = len(tmp._rings)
    for i in range(n):
        staged = _ring_file(buf._path, i, True)
        if staged.exists():  # the mapping follows the file: the new store's rows stay where they are
            os.replace(staged, _ring_file(buf._path, i, False))
    for i in range(n, len(buf._rings or ())):
        _ring_file(buf._path, i, False).unlink(missing_ok=True)
    _io.fsync_dir(buf._path)
    tmp._staging = False
    _write_ring_meta(tmp)


def drop_staged_rings(tmp: ReplayBuffer) -> None:
    """A load failed: its staged ring files go."""
    assert tmp._path is not None and tmp._rings is not None
    for i in range(len(tmp._rings)):
        _ring_file(tmp._path, i, True).unlink(missing_ok=True)
