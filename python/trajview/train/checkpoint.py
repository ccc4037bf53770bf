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
damaged, truncated, mixed or crafted checkpoint is a `FileIntegrityError` naming the file: so is a FIFO, folder,
device or socket in a file's place (refused before it is opened), and a state that does not fit the policy it
goes into (`fitting`, `optimizer_fits`: the policy is left as it was). A checkpoint of an
earlier trajview (``<out>/checkpoint.pt``: one pickled file, which only ``torch.load(weights_only=False)``
reads, and that can run code from the file) is not read: `read_checkpoint` says so.
"""

from __future__ import annotations

import copy
import io
import json
import math
import pickle
import pickletools
import re
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, Protocol

import torch

from .._io import MANIFEST, Manifest, check_regular, commit_folder, read_manifest, read_verified
from .._version import __version__
from ..errors import FileIntegrityError

__all__ = ["ALGOS", "Checkpoint", "FOLDER", "FORMAT", "LEGACY_FILE", "VERSION", "WEIGHTS", "fitting", "has_checkpoint",
           "optimizer_fits", "prepare_checkpoint", "read_checkpoint", "tensor_state", "write_checkpoint"]

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


#: The sentences of torch.load's error that are advice, not what it found: above all, to load with
#: weights_only=False (which runs whatever code the file holds), or to allowlist the global it refused.
_TORCH_ADVICE = re.compile(r"weights.only|safe_globals|file an issue|documentation|trusted? |still be loaded|"
                           r"Alternatively|following error message", re.IGNORECASE)


def _torch_reason(message: str) -> str:
    """What torch.load (weights_only=True) found, from its error: its advice (`_TORCH_ADVICE`) left out, one line."""
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", message).split())
    if "WeightsUnpickler error:" in text:  # torch's own finding follows its advice
        text = text.split("WeightsUnpickler error:", 1)[1]
    reason = ""
    for sentence in re.split(r"(?<=\.) +(?=[A-Z`(])", text.strip()):
        if not sentence or _TORCH_ADVICE.search(sentence):
            continue
        if len(reason) + len(sentence) > 200:  # whole sentences (the first one cut at a word)
            reason = reason or sentence[:200].rsplit(" ", 1)[0] + " ..."
            break
        reason = f"{reason} {sentence}".strip()
    return reason


def _pickle_globals(data: bytes) -> list[str]:
    """The globals (``module.name``) a plain pickle names that torch's weights_only loader does not allow, read
    with `pickletools.genops` (which parses the opcodes; it builds and calls nothing). For a pickle torch's loader
    stops at before its first global (protocol 4's framing)."""
    try:
        from torch import _weights_only_unpickler

        allowed = set(_weights_only_unpickler._get_allowed_globals())
    except Exception:  # (a private function of torch's: without it, every global is named)
        allowed = set()
    found: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("GLOBAL", "INST"):
                found.append(".".join(str(arg).split(" ", 1)))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str) and "UNICODE" in op.name:
                strings.append(arg)
            if len(found) >= 16:
                break
    except Exception:  # (not a pickle, or damaged after the globals read so far)
        pass
    return [g for g in dict.fromkeys(found) if g not in allowed][:3]


def _refused(e: Exception, data: bytes) -> str:
    """Why torch.load(weights_only=True) refused ``data`` (its error ``e``), in one line: the global(s) it holds
    when torch's error names one (or, for a plain pickle, `_pickle_globals` finds one), else torch's finding;
    never torch's advice to load with weights_only=False."""
    message = str(e)
    names = list(dict.fromkeys(m.rstrip(".,;:") for m in re.findall(r"GLOBAL (\S+)", message)))
    if not names and isinstance(e, pickle.UnpicklingError) and not data.startswith(b"PK\x03\x04"):
        names = _pickle_globals(data)
    if names:
        return (f"refused by torch.load(weights_only=True): it holds something other than tensors and plain "
                f"containers: the global{'s' if len(names) > 1 else ''} {', '.join(names)} (code that unpickling "
                f"would run; nothing of it ran)")
    reason = _torch_reason(message)
    return (f"refused by torch.load(weights_only=True): it holds something other than tensors and plain containers, "
            f"or is not a torch file ({type(e).__name__}{f': {reason}' if reason else ''})")


def _check_stored_zip(path: Path, data: bytes) -> None:
    """A torch file (a zip archive, as ``torch.save`` writes) must hold its entries stored, uncompressed, as
    ``torch.save`` writes them: then what torch reads from it is at most the file's size. A compressed entry (a
    zip bomb: a few KiB that unpack to GiBs) is a `FileIntegrityError` naming the file, refused before torch reads
    it. (Not a readable zip archive: left to torch.load, which refuses it.)"""
    if not data.startswith(b"PK\x03\x04"):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            entries = z.infolist()
    except (zipfile.BadZipFile, ValueError, OverflowError):
        return  # (not a zip archive: torch.load refuses it, saying what it found)
    total = 0
    for info in entries:
        if info.compress_type != zipfile.ZIP_STORED:
            raise FileIntegrityError(path, f"entry {info.filename!r} is compressed (method {info.compress_type}); "
                                           f"torch.save stores its entries uncompressed")
        total += info.file_size
    if total > len(data):
        raise FileIntegrityError(path, f"its entries claim {total} bytes, more than the file's {len(data)}")


def _load_weights(man: Manifest) -> dict[str, Any]:
    path = man.path(WEIGHTS)
    data = bytes(read_verified(man, WEIGHTS))
    _check_stored_zip(path, data)
    try:
        with warnings.catch_warnings():  # (torch warns of a pickle's protocol before refusing it: the error says it)
            warnings.simplefilter("ignore")
            weights = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as e:
        raise FileIntegrityError(path, _refused(e, data)) from None
    if not isinstance(weights, dict):
        raise FileIntegrityError(path, f"expected a dict of tensors and state dicts, got {type(weights).__name__}")
    return weights


def read_checkpoint(folder: str | Path, weights: bool = True) -> Checkpoint:
    """The checkpoint in ``folder`` (a run's ``<out>/checkpoint``), checked: the manifest's format and entries,
    the metadata's kinds, and (``weights``) ``weights.pt``'s size and crc32, loaded with
    ``torch.load(weights_only=True)``. `FileNotFoundError` when there is none (`FileIntegrityError` naming the
    earlier format's ``checkpoint.pt`` when that is there instead); `FileIntegrityError` naming the file for a
    damaged, mixed or crafted one, or one of whose files (the manifest's included) is not a regular file."""
    folder = Path(folder)
    if not has_checkpoint(folder):  # none, or a first one whose writer was killed before its manifest
        legacy = folder.parent / LEGACY_FILE
        if (folder / MANIFEST).exists():  # there, and not a regular file: a FIFO, a folder, a device
            check_regular(folder / MANIFEST)
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


class _Stateful(Protocol):
    """What `fitting` puts back as it was when a load fails (a policy)."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


def fitting(ck: Checkpoint, what: str, load: Callable[[], None], keep: _Stateful | None = None) -> None:
    """Runs ``load`` (a state going into a model, an optimizer, an RNG); a state that does not fit (missing keys,
    other shapes, other kinds) is a `FileIntegrityError` naming ``weights.pt`` (one ``load`` raises itself goes
    as it is). ``keep``: what ``load`` changes (a policy), its state taken first and put back when ``load``
    raises, so a refused checkpoint leaves it as it was (torch loads a model's matching entries before it
    refuses the rest)."""
    before = copy.deepcopy(keep.get_state()) if keep is not None else None
    try:
        load()
    except BaseException as e:
        if keep is not None:
            keep.set_state(before)
        if isinstance(e, FileIntegrityError) or not isinstance(e, (KeyError, RuntimeError, ValueError, TypeError,
                                                                        IndexError)):
            raise
        why = " ".join(str(e).split())
        raise FileIntegrityError(ck.weights_path(), f"{what} does not fit this run ({type(e).__name__}: "
                                                    f"{why[:300]})") from None


#: The state torch's optimizers keep for each parameter, by class: an entry that is not empty holds these.
#: (Adam also keeps ``max_exp_avg_sq`` when its group has ``amsgrad``.) Every tensor but ``step`` has the shape
#: of its parameter; ``step`` is a scalar.
_PER_PARAMETER: tuple[tuple[type[torch.optim.Optimizer], tuple[str, ...]], ...] = (
    (torch.optim.Adam, ("step", "exp_avg", "exp_avg_sq")),
)


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _setting_fits(key: str, want: Any, got: Any) -> str | None:
    """Why the saved value ``got`` of a param group's setting ``key`` cannot stand for this optimizer's ``want``
    (None when it can): numbers stay finite numbers, tuples of numbers (betas) stay such tuples of their length,
    flags stay flags (or None)."""
    if _real(want):
        return None if _real(got) else f"a finite number, got {got!r:.60}"
    if isinstance(want, tuple) and all(_real(x) for x in want):
        ok = isinstance(got, (tuple, list)) and len(got) == len(want) and all(_real(x) for x in got)
        return None if ok else f"{len(want)} finite numbers, got {got!r:.60}"
    if want is None or isinstance(want, bool):
        return None if got is None or isinstance(got, bool) else f"a bool or None, got {got!r:.60}"
    return None


def optimizer_fits(ck: Checkpoint, what: str, saved: Any, optimizer: torch.optim.Optimizer,
                   module: torch.nn.Module | None = None) -> None:
    """Checks ``saved``, an optimizer's state dict (``weights.pt``'s entry ``what``), against ``optimizer``, the
    one it would be loaded into, before anything is loaded (torch's ``load_state_dict`` checks the param groups'
    sizes only: a moment of another shape would fail at the first step, or broadcast). The param groups: as
    many, of as many parameters each, every id once, the settings of the right kinds (`_setting_fits`); each
    parameter's state: only ids a group lists, every tensor of its parameter's shape and kind of number (floating
    point for a floating-point parameter), ``step`` a finite scalar >= 0, the entries the optimizer keeps
    (`_PER_PARAMETER`) all there. `FileIntegrityError` naming ``weights.pt``, the entry (the parameter's index,
    and its name in ``module``), what was expected and what it holds."""
    path = ck.weights_path()

    def bad(problem: str) -> FileIntegrityError:
        return FileIntegrityError(path, f"{what}: {problem}")

    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict) or not isinstance(
            saved.get("param_groups"), list):
        raise bad(f"expected an optimizer's state dict (a dict with 'state', a dict, and 'param_groups', a list), "
                  f"got {saved!r:.80}")
    groups, live = saved["param_groups"], optimizer.param_groups
    if len(groups) != len(live):
        raise bad(f"{len(groups)} param groups, expected {len(live)} (this run's optimizer)")
    names = {id(p): n for n, p in module.named_parameters()} if module is not None else {}
    params: dict[int, tuple[int, torch.Tensor]] = {}  # saved id -> (its group, the parameter it goes to)
    for gi, (group, own) in enumerate(zip(groups, live)):
        ids = group.get("params") if isinstance(group, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise bad(f"param group {gi}: expected a dict whose 'params' is a list of ints, got {group!r:.80}")
        if len(ids) != len(own["params"]):
            raise bad(f"param group {gi} holds {len(ids)} parameters, expected {len(own['params'])} "
                      f"(this run's model)")
        for key, want in own.items():
            if key in ("params", "param_names"):
                continue
            if key not in group:
                if _real(want):  # (a flag torch fills in when it is missing)
                    raise bad(f"param group {gi} has no {key!r} (expected a finite number)")
                continue
            problem = _setting_fits(key, want, group[key])
            if problem is not None:
                raise bad(f"param group {gi}: {key!r} must be {problem}")
        for i, p in zip(ids, own["params"]):
            if i in params:
                raise bad(f"parameter {i} is listed twice in the param groups")
            params[i] = (gi, p)
    required = next((keys for cls, keys in _PER_PARAMETER if isinstance(optimizer, cls)), ())
    for i, entry in saved["state"].items():
        if i not in params:
            raise bad(f"'state' holds an entry for parameter {i!r}, which no param group lists")
        gi, p = params[i]
        name = names.get(id(p))
        where = f"the state of parameter {i}{f' ({name})' if name else ''}"
        if not isinstance(entry, dict):
            raise bad(f"{where}: expected a dict of tensors, got {entry!r:.60}")
        need = (*required, "max_exp_avg_sq") if required and groups[gi].get("amsgrad") else required
        lacking = [k for k in need if k not in entry]
        if entry and lacking:
            raise bad(f"{where} lacks {', '.join(map(repr, lacking))} (it has {sorted(map(str, entry))})")
        for key, v in entry.items():
            if key == "step":
                scalar = _real(v) or (isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype != torch.bool
                                      and not v.is_complex() and bool(torch.isfinite(v)))
                if not scalar or float(v) < 0:
                    got = (f"a {v.dtype} tensor of shape {list(v.shape)}" if isinstance(v, torch.Tensor) and (
                        v.dim() or v.dtype == torch.bool or v.is_complex()) else f"{v!r:.60}")
                    raise bad(f"{where}: 'step' must be a finite scalar >= 0, got {got}")
            elif not isinstance(v, torch.Tensor):
                raise bad(f"{where}: {key!r} must be a tensor of shape {list(p.shape)}, got {v!r:.60}")
            elif tuple(v.shape) != tuple(p.shape):
                raise bad(f"{where}: {key!r} has shape {list(v.shape)}, expected {list(p.shape)} (the parameter's)")
            elif v.is_floating_point() != p.is_floating_point() or v.is_complex() != p.is_complex():
                raise bad(f"{where}: {key!r} is {v.dtype}, expected a dtype like the parameter's {p.dtype}")
