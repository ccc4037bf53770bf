"""A run's checkpoint: ``<out>/checkpoint/``, one committed unit (`trajview._io.commit_folder`) that nothing
read from runs code.

- ``manifest.json``: the format (``trajview-train-checkpoint``, version 1), each file's size and crc32, and in
  its JSON metadata the algorithm (``"ppo"`` / ``"dqn"``), the run's settings (its config's fields), the counters
  (iterations, env steps, episodes, seconds, the last episodes' returns and lengths) and the trainer's own JSON
  state (DQN: epsilon, gradient steps, the exploration RNG, the replay buffer's metadata).
- ``weights.pt``: ``torch.save`` of the tensors (the model's and optimizer's state dicts, torch's RNG state),
  read with ``torch.load(weights_only=True)`` from bytes checked against the manifest's size and crc32: a
  file holding anything but tensors and plain containers (a pickle with a ``__reduce__`` payload) is refused
  before any of it runs.
- the trainer's other files (DQN: the replay buffer's arrays), committed with the rest.

A run killed at any byte keeps its last complete checkpoint (the manifest is replaced last, atomically). A
damaged, truncated, mixed or crafted checkpoint is a `FileIntegrityError` naming the file. A checkpoint of an
earlier trajview (``<out>/checkpoint.pt``: one pickled file, which only ``torch.load(weights_only=False)``
reads, and that can run code from the file) is not read: `read_checkpoint` says so.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec

import torch

from .._io import MANIFEST, Manifest, commit_folder, read_manifest, read_verified
from .._version import __version__
from ..errors import FileIntegrityError

__all__ = ["ALGOS", "Checkpoint", "FOLDER", "FORMAT", "LEGACY_FILE", "VERSION", "WEIGHTS", "has_checkpoint",
           "prepare_checkpoint", "read_checkpoint", "write_checkpoint"]

P = ParamSpec("P")

FORMAT = "trajview-train-checkpoint"
VERSION = 1
#: The checkpoint's folder in the run folder.
FOLDER = "checkpoint"
#: The tensors' file in the committed set.
WEIGHTS = "weights.pt"
#: Where trajview before checkpoint format 1 kept a run's checkpoint (a pickle; never read).
LEGACY_FILE = "checkpoint.pt"
ALGOS = ("ppo", "dqn")

#: The counters a checkpoint holds (`RunCounters`): name -> (kind, lowest value).
_COUNTERS = {"iteration": (int, 0), "env_steps": (int, 0), "episodes": (int, 0), "elapsed": (float, 0.0)}


@dataclass
class Checkpoint:
    """What `read_checkpoint` read: checked against the manifest, nothing in it run."""

    algo: str
    #: The run's settings (its config's fields).
    config: dict[str, Any]
    #: `RunCounters.counters_state`'s: checked (ints and finite numbers >= 0, lists of numbers).
    counters: dict[str, Any]
    #: The trainer's own JSON state (a dict).
    extra: dict[str, Any]
    #: ``weights.pt``'s dict (torch state dicts and tensors); empty when read with ``weights=False``.
    weights: dict[str, Any]
    manifest: Manifest

    @property
    def manifest_path(self) -> Path:
        assert self.manifest.folder is not None
        return self.manifest.folder.parent / MANIFEST

    def weights_path(self) -> Path:
        return self.manifest.path(WEIGHTS)


def has_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` (a checkpoint folder) holds a committed checkpoint (its manifest)."""
    return (Path(folder) / MANIFEST).is_file()


def prepare_checkpoint(
    folder: str | Path,
    algo: str,
    config: Mapping[str, Any],
    counters: Mapping[str, Any],
    weights: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    files: Mapping[str, Callable[[Any], None]] | None = None,
    extra_meta: Mapping[str, Any] | None = None,
) -> Callable[[], Manifest]:
    """What `write_checkpoint` commits, taken now (``weights`` serialized, the JSON copied), and the function
    that commits it: called later (in another thread), it writes exactly this state."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    meta = json.loads(json.dumps({"algo": algo, "trajview": __version__, "config": dict(config),
                                  "counters": dict(counters), "extra": dict(extra or {}), **dict(extra_meta or {})}))
    data = io.BytesIO()  # torch's zip writer needs a seekable file with flush: in memory, then written whole
    torch.save(dict(weights), data)
    writers: dict[str, Callable[[Any], None]] = {WEIGHTS: lambda f: f.write(data.getbuffer())}
    for name, w in (files or {}).items():
        if name == WEIGHTS:
            raise ValueError(f"write_checkpoint: {WEIGHTS!r} is the weights' file name")
        writers[name] = w
    return lambda: commit_folder(folder, FORMAT, VERSION, writers, meta)


def _at_once(prepare: Callable[P, Callable[[], Manifest]]) -> Callable[P, Manifest]:
    """``prepare``, with the commit it returns run at once."""

    def write_checkpoint(*args: P.args, **kwargs: P.kwargs) -> Manifest:
        """Commits a checkpoint into ``folder`` (see the module's doc; the arguments are `prepare_checkpoint`'s):
        ``weights`` (tensors and plain containers) into ``weights.pt``, ``files`` (name -> a function writing the
        file's bytes) beside it, the rest (JSON) into the manifest. The previous checkpoint stays until the new one
        is complete."""
        return prepare(*args, **kwargs)()

    return write_checkpoint


write_checkpoint = _at_once(prepare_checkpoint)


def legacy_error(path: Path) -> FileIntegrityError:
    return FileIntegrityError(
        path, "a checkpoint of an earlier trajview (one pickled file, which only torch.load(weights_only=False) "
              "reads, and that runs whatever code the file holds): this trajview reads checkpoints with "
              "weights_only=True and does not read it; continue that run with the trajview that wrote it, or start "
              "a new one in another --out")


def _check_counters(c: Any, mpath: Path) -> dict[str, Any]:
    if not isinstance(c, dict):
        raise FileIntegrityError(mpath, f"'counters' must be a JSON object, got {type(c).__name__}")
    out: dict[str, Any] = {}
    for name, (kind, lo) in _COUNTERS.items():
        v = c.get(name)
        ok = not isinstance(v, bool) and isinstance(v, (int, float) if kind is float else int)
        if not ok or not math.isfinite(v) or v < lo:  # type: ignore[arg-type, operator]
            raise FileIntegrityError(mpath, f"counter {name!r} must be {'an int' if kind is int else 'a number'} "
                                            f">= {lo}, got {v!r}")
        out[name] = kind(v)
    for name, kind in (("returns", float), ("lengths", int)):
        v = c.get(name)
        if not isinstance(v, list) or not all(not isinstance(x, bool) and isinstance(x, (int, float) if kind is float
                                                                                    else int) for x in v):
            raise FileIntegrityError(mpath, f"counter {name!r} must be a list of "
                                            f"{'numbers' if kind is float else 'ints'}, got {v!r:.80}")
        out[name] = [kind(x) for x in v]
    return out


def _load_weights(man: Manifest) -> dict[str, Any]:
    path = man.path(WEIGHTS)
    data = read_verified(man, WEIGHTS)
    try:
        weights = torch.load(io.BytesIO(bytes(data)), weights_only=True, map_location="cpu")
    except Exception as e:
        why = " ".join(str(e).split())
        raise FileIntegrityError(
            path, f"refused by torch.load(weights_only=True): it holds something other than tensors and plain "
                  f"containers (code to run?) or is not a torch file ({type(e).__name__}: {why[:300]})") from None
    if not isinstance(weights, dict):
        raise FileIntegrityError(path, f"expected a dict of tensors and state dicts, got {type(weights).__name__}")
    return weights


def read_checkpoint(folder: str | Path, weights: bool = True) -> Checkpoint:
    """The checkpoint in ``folder`` (a run's ``<out>/checkpoint``), checked: the manifest's format and entries,
    the metadata's kinds, and (``weights``) ``weights.pt``'s size and crc32, loaded with
    ``torch.load(weights_only=True)``. `FileNotFoundError` when there is none (`FileIntegrityError` naming the
    earlier format's ``checkpoint.pt`` when that is there instead); `FileIntegrityError` naming the file for a
    damaged, mixed or crafted one."""
    folder = Path(folder)
    if not has_checkpoint(folder):  # none, or a first one whose writer was killed before its manifest
        legacy = folder.parent / LEGACY_FILE
        if legacy.exists():
            raise legacy_error(legacy)
        raise FileNotFoundError(2, f"no checkpoint at {folder}", str(folder))
    man = read_manifest(folder, FORMAT, (VERSION,))
    mpath = folder / MANIFEST
    meta = man.meta
    algo = meta.get("algo")
    if algo not in ALGOS:
        raise FileIntegrityError(mpath, f"'algo' must be one of {ALGOS}, got {algo!r}")
    config, extra = meta.get("config"), meta.get("extra", {})
    if not isinstance(config, dict) or not isinstance(extra, dict):
        raise FileIntegrityError(mpath, "'config' and 'extra' must be JSON objects")
    counters = _check_counters(meta.get("counters"), mpath)
    if WEIGHTS not in man.files:
        raise FileIntegrityError(mpath, f"names no file {WEIGHTS!r}")
    return Checkpoint(algo, config, counters, extra, _load_weights(man) if weights else {}, man)


def tensor_state(ck: Checkpoint, key: str) -> Any:
    """``weights.pt``'s entry ``key`` (`FileIntegrityError` naming the file when it lacks it)."""
    if key not in ck.weights:
        raise FileIntegrityError(ck.weights_path(), f"holds no {key!r} (it has {sorted(ck.weights)})")
    return ck.weights[key]


def fitting(ck: Checkpoint, what: str, load: Callable[[], None]) -> None:
    """Runs ``load`` (a state going into a model, an optimizer, an RNG); a state that does not fit (missing keys,
    other shapes, other kinds) is a `FileIntegrityError` naming ``weights.pt``."""
    try:
        load()
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as e:
        why = " ".join(str(e).split())
        raise FileIntegrityError(ck.weights_path(), f"{what} does not fit this run ({type(e).__name__}: "
                                                    f"{why[:300]})") from None
