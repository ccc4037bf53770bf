"""A run folder (``trajview train --out``): one owner at a time, what it must hold to be resumed or started,
and what to do when one of its files is damaged.

No torch here beyond what reading a checkpoint's manifest needs (`trajview.train.checkpoint`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from .._io import MANIFEST, PathLock, atomic_write, read_json
from ..errors import FileIntegrityError, PathInUseError
from .checkpoint import FOLDER, LEGACY_FILE, Checkpoint, read_checkpoint

__all__ = ["CONFIG_FILE", "RUN_FILES", "RunFolder", "RunFolderError", "config_from", "damaged_advice"]

CONFIG_FILE = "config.json"
#: What a run leaves in its folder: a new run is not started over them.
RUN_FILES = (FOLDER, LEGACY_FILE, "metrics.csv", "metrics.jsonl", CONFIG_FILE)
#: What `trajview._io.PathLock` says the lock is for.
LOCK_WHAT = "trajview train --out"


class RunFolderError(Exception):
    """Why a run folder cannot be used as asked (one line, what to do included): ``trajview train`` exits 2."""


def damaged_advice(e: FileIntegrityError, out: str | os.PathLike[str], use: str = "resumed") -> str:
    """A damaged file of the run ``out`` (`FileIntegrityError`): the error and what to do, in one line (``use``:
    what the checkpoint cannot be: "resumed", "evaluated", "exported")."""
    out = Path(out)
    path = Path(e.path)
    msg = " ".join(str(e).split())
    if path.name == LEGACY_FILE:  # its message says what to do
        return msg
    if out / FOLDER in path.parents or path == out / FOLDER / MANIFEST:
        return (f"{msg}; the run's checkpoint cannot be {use}: put back a copy of {out / FOLDER}"
                f"{', or start the run afresh in another --out' if use == 'resumed' else ''}")
    if path.name.startswith("metrics."):
        return (f"{msg}; repair or remove that line (rows after the checkpoint's iteration are dropped by --resume "
                f"anyway), or move {path} away and --resume starts a new one")
    if path.name == CONFIG_FILE:
        return f"{msg}; the checkpoint holds the run's settings: remove {path} and --resume writes it anew"
    return msg


def config_from(cls: Any, ck: Checkpoint, out: str, timesteps: int | None, overrides: dict | None = None) -> Any:
    """``cls`` (the run's config class) made from the checkpoint's settings with ``overrides`` (this session's),
    ``timesteps`` replaced when given and ``out_dir`` = ``out``; settings that do not make one are a
    `FileIntegrityError` naming the manifest."""
    saved = {**ck.config, **(overrides or {})}
    if timesteps is not None:
        saved["timesteps"] = timesteps
    saved["out_dir"] = str(out)
    try:
        return cls(**saved)
    except (TypeError, ValueError) as e:
        if any(f"{k} (" in str(e) or f"{k} must" in str(e) for k in (overrides or {})) or (
                timesteps is not None and "timesteps (" in str(e)):
            raise  # an option of this session's, not the checkpoint
        raise FileIntegrityError(ck.manifest_path, f"its settings do not make a {cls.__name__}: "
                                                   f"{' '.join(str(e).split())}") from None


class RunFolder:
    """``out`` held by this process (`trajview._io.PathLock`) for a run: checked to hold a run to resume
    (``resume``: its checkpoint's manifest and settings read, `checkpoint`) or none to start over. `close`
    releases it and, when this object created the folder and nothing else was written, removes it (a run that
    fails before its first iteration leaves no folder behind). `RunFolderError` (one line) when the folder
    cannot be used; `FileIntegrityError` when a file in it is damaged (`damaged_advice` says what to do)."""

    def __init__(self, out: str | os.PathLike[str], resume: bool) -> None:
        self.out = Path(out)
        self.checkpoint: Checkpoint | None = None
        self._lock: PathLock | None = None
        if self.out.exists() and not self.out.is_dir():
            raise RunFolderError(f"--out {self.out} is a file, not a folder: give the run's folder (a new one, or "
                                 f"an earlier run's to --resume)")
        self.created = not self.out.exists()
        try:
            self._lock = PathLock(self.out, LOCK_WHAT)
        except PathInUseError as e:
            raise RunFolderError(f"--out {self.out} is in use by process {e.holder} (another trajview train): one "
                                 f"run per folder; stop that one or choose another --out") from None
        except OSError as e:
            raise RunFolderError(f"--out {self.out}: cannot create or lock it: {e.strerror or e}") from None
        try:
            if resume:
                self._check_resumable()
            else:
                found = [name for name in RUN_FILES if (self.out / name).exists()]
                if found:
                    raise RunFolderError(f"--out {self.out} holds an earlier run ({', '.join(found)}): --resume "
                                         f"continues it; to start a new run, choose another --out or remove that one")
        except BaseException:
            self.close()
            raise

    def _check_resumable(self) -> None:
        try:
            self.checkpoint = ck = read_checkpoint(self.out / FOLDER, weights=False)
        except FileNotFoundError:
            left = [name for name in RUN_FILES if (self.out / name).exists()]
            how = (f"start the run afresh without --resume in another --out (or remove {self.out}: it holds "
                   f"{', '.join(left)} of a run killed before its first checkpoint)" if left
                   else "start the run without --resume")
            raise RunFolderError(f"--resume: no checkpoint in {self.out} ({self.out / FOLDER}): nothing to continue; "
                                 f"{how}") from None
        cfg = self.out / CONFIG_FILE
        if cfg.exists():
            value = read_json(cfg, "the run's settings")
            if not isinstance(value, dict):
                raise FileIntegrityError(cfg, f"expected a JSON object of the run's settings, got "
                                              f"{type(value).__name__}")
        else:  # written again from the checkpoint, which holds the settings
            atomic_write(cfg, json.dumps(ck.config, indent=2).encode())

    @property
    def algo(self) -> str | None:
        return None if self.checkpoint is None else self.checkpoint.algo

    def close(self) -> None:
        """Releases the folder; removes it when this object created it and nothing but the lock is in it."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        with contextlib.suppress(OSError):
            if self.created and [p.name for p in self.out.iterdir()] == [PathLock.NAME]:
                (self.out / PathLock.NAME).unlink()  # while held: no other process takes it meanwhile
                lock.release()
                self.out.rmdir()
        lock.release()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
