"""The files of a ``ReplayBuffer(storage="memmap", path=DIR)``: one memory-mapped ring per column
(``DIR/ring_<i>.bin``, the rows in ring order, sparse until written) and ``DIR/columns.json`` describing them
(written atomically). The buffer holds an exclusive `trajview._io.PathLock` on ``DIR`` for its lifetime (one
owner per path). A load builds its rings beside the live ones (``.ring_<i>.bin.loading``) and renames them over
the live ones only once it succeeded (`trajview.replay.persistence`). A ring file is always made anew (a regular
file in its place removed first; created exclusively, never through a symbolic link): an entry of that name
that is a link, a folder or any other non-regular file is a `trajview.errors.FileIntegrityError` naming it, so
nothing planted in ``DIR`` makes the buffer write outside it."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from .. import _io
from ..errors import FileIntegrityError

__all__ = ["META", "commit_staged_rings", "drop_leftover_staging", "drop_staged_rings", "open_rings", "row_bytes"]

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
    try:
        for i, (dt, sh) in enumerate(buf._specs.values()):
            nbytes = buf._capacity * row_bytes(np.dtype(dt), sh)
            if nbytes == 0:
                rings.append(np.zeros(0, np.uint8))
                continue
            rings.append(_new_ring(_ring_file(buf._path, i, staging), nbytes))
    except BaseException:
        if staging:  # (a load's staged rings go; live ones are the buffer's own files)
            _drop_staged(buf._path, len(buf._specs))
        raise
    if not staging:
        _write_ring_meta(buf)
    return rings


def _new_ring(path: Path, nbytes: int) -> np.memmap:
    """A new zero-filled (sparse) file of ``nbytes`` at ``path``, mapped: a regular file there is replaced; a
    link or any other kind of entry is refused, naming it (nothing outside the folder is ever written)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"a file of mode {stat.filemode(st.st_mode)}"
            raise FileIntegrityError(path, f"expected a ring file of this buffer (a regular file) or none, got {kind}")
        path.unlink()  # (a hard link to a file elsewhere: only this name goes)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except FileExistsError:
        raise FileIntegrityError(path, "an entry appeared in the ring file's place while it was made") from None
    try:
        with open(fd, "r+b", closefd=True) as f:
            os.ftruncate(f.fileno(), nbytes)
            return np.memmap(f, dtype=np.uint8, mode="r+", shape=(nbytes,))
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


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
    """A load failed: its staged ring files go (those of every column: some may have been made before it
    failed)."""
    assert tmp._path is not None
    _drop_staged(tmp._path, max(len(tmp._specs or ()), len(tmp._rings or ())))


def drop_leftover_staging(folder: Path) -> None:
    """The staged rings a load killed midway left in ``folder`` (``.ring_<i>.bin.loading``: never live data) go,
    when a buffer takes the folder (it holds its `PathLock`: no load of another buffer runs there)."""
    with contextlib.suppress(OSError):
        for p in folder.glob(".ring_*.bin.loading"):
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(p).st_mode):
                    p.unlink()


def _drop_staged(folder: Path, n: int) -> None:
    for i in range(n):
        p = _ring_file(folder, i, True)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(p).st_mode):
                p.unlink()
