"""``trajview export``: a trained policy's acting network as one file (TorchScript or ONNX) that acts without
trajview, with its view spec (JSON) inside.

The exported function takes the inputs the policy reads to act (after the view-pruning pass: exactly the views
a `RolloutWorker` builds for ``compute_actions_from_input_dict``), one tensor per input leaf, in the order of
the spec's ``inputs``, each with a batch axis of one row (one step of one episode per call), and returns the
deterministic action, then the ``state_out_i`` (recurrent state, attention memory) in order. The view spec
says how to build each input from an episode's history, so a runner rebuilds a frame stack, previous actions
and rewards, recurrent state or attention memory step by step (``examples/serve_exported.py``):

- ``inputs``: one entry per input, in argument order: ``name`` (the view, ``prev_n_obs``; a nested
  observation's leaves ``prev_n_obs.pos``), ``column`` (what it reads: ``obs``, ``obs.pos``, ``actions``,
  ``rewards``, ``t``, ``state_out_<i>``), ``shift`` (the offsets read, relative to the step t being acted
  on), ``stacked`` (whether the offsets are an axis of their own after the batch axis: a list or range shift),
  ``shape`` and ``dtype`` of one step's value of the column.
- ``columns``: per column, its ``shape``, ``dtype`` and ``before_start``, the value a row before the
  episode's first step reads (zeros; a ``state_out_<i>``: the model's initial state, also zeros for trajview's
  models).
- What a column holds at step t: ``obs`` the observation acted on at t; ``actions`` the action taken at t;
  ``rewards`` the reward that action got; ``t`` the step's index in its episode (0 at the first step);
  ``state_out_<i>`` the exported function's i-th state output at t.

TorchScript: ``torch.jit.trace`` of that function, saved with the spec as the extra file ``view_spec.json``
(``torch.jit.load(path, _extra_files={"view_spec.json": ""})``). ONNX: ``torch.onnx.export`` of the same
function (torch's TorchScript-based exporter, opset `ONNX_OPSET`), the spec in the model's metadata under
``view_spec``, the inputs and outputs named as in the spec; its batch axis is fixed at one row. Both are
written atomically (`trajview._io.atomic_write`) and hold no Python pickle, and both are checked when read
(``examples/serve_exported.py``): a TorchScript archive's zip entries against their crc32s, an ONNX file against
the sha256 in its metadata (`ONNX_DIGEST_KEY`). Both are programs, though (a
TorchScript archive holds TorchScript code, an ONNX file a graph), run by torch's or onnxruntime's loader: serve
only files you exported or trust, as with any model file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .._extras import install_hint
from .._io import atomic_write
from ..algorithms.dqn import DQNPolicy
from ..algorithms.models import ViewModel
from ..policy.policy import Policy
from ..policy.pruning import prune_views
from ..views.columns import BOUNDARY_COLUMNS, STATE_OUT_PREFIX
from ..views.nest import Nest, leaf_names
from ..views.sample_batch import SampleBatch
from ..views.view_requirement import space_to_dict

__all__ = ["ExportError", "FORMATS", "ONNX_OPSET", "SPEC_FORMAT", "SPEC_FILE", "check_out_path", "export_policy",
           "view_spec"]

FORMATS = ("torchscript", "onnx")
SPEC_FORMAT = "trajview-exported-policy"
SPEC_VERSION = 1
#: The spec's name inside a TorchScript file (an extra file) and an ONNX model (a metadata key).
SPEC_FILE = "view_spec.json"
ONNX_SPEC_KEY = "view_spec"
#: ONNX: the metadata entry holding the sha256 (hex) of the file's bytes with that digest's 64 characters as "0"s
#: (ONNX has no checksum of its own; a TorchScript archive's zip entries each carry a crc32). Its serialized
#: key and the value's tag and length, which a reader finds once in the file (`stamp_onnx`).
ONNX_DIGEST_KEY = "content_sha256"
ONNX_DIGEST_PREFIX = b"\x0a" + bytes([len(ONNX_DIGEST_KEY)]) + ONNX_DIGEST_KEY.encode() + b"\x12\x40"
ONNX_OPSET = 17
#: The columns an exported policy may read: what a runner knows of its own episode.
RUNNER_COLUMNS = (SampleBatch.OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS, SampleBatch.T)


class ExportError(ValueError):
    """A policy that cannot be exported as asked (one line: what it reads or returns that a file cannot hold)."""


def _base_column(col: str) -> str:
    return col.split(".", 1)[0]


def _column_specs(policy: Policy) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    specs = dict(policy.column_specs())
    for c in BOUNDARY_COLUMNS:
        specs.setdefault(c, (np.dtype(np.int64), ()))
    return specs


def view_spec(policy: Policy, **about: Any) -> dict[str, Any]:
    """The view spec (see the module's doc) of ``policy``'s acting inputs, after its view-pruning pass (run here
    if it has not run). ``about``: extra JSON entries (algo, env, ...). `ExportError` for a policy reading
    something a runner does not know (an env id, infos), or a padding other than zeros."""
    prune_views(policy)
    specs = _column_specs(policy)
    init = [np.asarray(s) for s in policy.get_initial_state()]
    inputs: list[dict[str, Any]] = []
    columns: dict[str, dict[str, Any]] = {}
    for key, vr in policy.view_requirements.items():
        if not vr.used_for_compute_actions:
            continue
        col = vr.column(key)
        if _base_column(col) not in RUNNER_COLUMNS and not col.startswith(STATE_OUT_PREFIX):
            raise ExportError(f"the policy reads view {key!r} (column {col!r}) to act, which a runner outside "
                              f"trajview does not know; exportable columns: {list(RUNNER_COLUMNS)} and "
                              f"state_out_<i>")
        if vr.padding != "zero":
            raise ExportError(f"view {key!r} pads with {vr.padding!r}: an exported policy's runner pads with zeros "
                              f"(padding='zero')")
        leaves = [col] if col in specs else leaf_names(col, specs)
        if not leaves:
            raise ExportError(f"view {key!r} reads column {col!r}, of unknown shape (known: {sorted(specs)})")
        for leaf in leaves:
            dtype, shape = specs[leaf]
            name = key + leaf[len(col):]
            inputs.append({"name": name, "column": leaf, "shift": [int(s) for s in vr.shift_arr],
                           "stacked": bool(vr.adds_axis), "shape": list(shape), "dtype": np.dtype(dtype).name})
            before: Any = "zeros"
            if leaf.startswith(STATE_OUT_PREFIX):
                s0 = init[int(leaf[len(STATE_OUT_PREFIX):])]
                if np.any(s0):
                    before = s0.astype(np.float64).tolist()
            columns[leaf] = {"shape": list(shape), "dtype": np.dtype(dtype).name, "before_start": before}
    states = [f"{STATE_OUT_PREFIX}{i}" for i in range(len(init))]
    for s in states:  # a state output the model does not read back is still an output
        dtype, shape = specs[s]
        columns.setdefault(s, {"shape": list(shape), "dtype": np.dtype(dtype).name, "before_start": "zeros"})
    act_specs = Nest.from_space(policy.action_space, "action_space").specs(SampleBatch.ACTIONS)
    if list(act_specs) != [SampleBatch.ACTIONS]:
        raise ExportError(f"a nested action space ({policy.action_space}) cannot be exported: the exported "
                          f"function returns one action tensor (Discrete, MultiDiscrete, MultiBinary or Box)")
    dtype, shape = act_specs[SampleBatch.ACTIONS]
    return {
        "format": SPEC_FORMAT,
        "version": SPEC_VERSION,
        **about,
        "observation_space": space_to_dict(policy.observation_space),
        "action_space": space_to_dict(policy.action_space),
        "inputs": inputs,
        "columns": columns,
        "outputs": [{"name": SampleBatch.ACTIONS, "shape": list(shape), "dtype": np.dtype(dtype).name},
                    *({"name": s, "shape": columns[s]["shape"], "dtype": columns[s]["dtype"]} for s in states)],
    }


class _ViewModelActing(nn.Module):
    """A PPO model's deterministic acting step on positional inputs (the spec's order)."""

    def __init__(self, model: ViewModel, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d = dict(zip(self.names, xs))
        dist_inputs, _, state_outs = self.model.forward_step(d)
        return (self.model.action_dist(dist_inputs).deterministic(), *state_outs)


class _QActing(nn.Module):
    """DQN's greedy action from its frame-stack view."""

    def __init__(self, q: nn.Module, name: str) -> None:
        super().__init__()
        self.q = q
        self.name = name

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        return self.q(stack.float()).argmax(dim=1)


def _acting_module(policy: Policy, names: list[str]) -> nn.Module:
    if isinstance(policy, DQNPolicy):
        if names != ["stack"]:
            raise ExportError(f"a DQNPolicy acts from its 'stack' view, got inputs {names}")
        return _QActing(policy.q, "stack")
    model = getattr(policy, "model", None)
    if isinstance(model, ViewModel):
        return _ViewModelActing(model, names)
    raise ExportError(f"{type(policy).__name__} cannot be exported: trajview exports PPOPolicy (a ViewModel) and "
                      f"DQNPolicy")


def example_inputs(spec: Mapping[str, Any], batch: int = 1) -> list[np.ndarray]:
    """Zeros of each input's shape and dtype (``batch`` rows)."""
    out = []
    for inp in spec["inputs"]:
        lead = (batch, len(inp["shift"])) if inp["stacked"] else (batch,)
        out.append(np.zeros(lead + tuple(inp["shape"]), dtype=np.dtype(inp["dtype"])))
    return out


def export_policy(policy: Policy, path: str | os.PathLike[str], fmt: str = "torchscript", *, cli: bool = False,
                  **about: Any) -> dict[str, Any]:
    """Writes ``policy``'s acting network with its view spec into ``path`` (``fmt``: "torchscript" or "onnx"),
    atomically; returns the spec. ``about``: extra JSON entries of the spec (algo, env, ...). `ExportError`
    (naming ``path``) for a ``path`` that is a folder or whose folder is missing, checked before the export
    runs, or that cannot be written; and (naming ``fmt``) for a format it does not write. ``cli``: the errors
    name ``trajview export``'s options (``--out``, ``--format``) instead."""
    out_name, fmt_name = ("--out", "--format") if cli else ("path", "fmt")
    if fmt not in FORMATS:
        raise ExportError(f"{fmt_name} must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    check_out_path(path, out_name)
    spec = view_spec(policy, **about)
    names = [inp["name"] for inp in spec["inputs"]]
    module = _acting_module(policy, names).eval()
    args = tuple(torch.from_numpy(x) for x in example_inputs(spec))
    text = json.dumps(spec, indent=1, sort_keys=True)
    data = io.BytesIO()
    was_training = module.training
    with warnings.catch_warnings(), torch.no_grad():
        # Tracing warns about Python values taken as constants (shapes, the initial state); the export is
        # checked against the policy's own actions by the tests instead.
        warnings.simplefilter("ignore")
        if fmt == "torchscript":
            traced = torch.jit.trace(module, args, check_trace=False, strict=False)
            torch.jit.save(traced, data, _extra_files={SPEC_FILE: text})
        else:
            data = _onnx_bytes(module, args, spec, text, fmt_name)
    module.train(was_training)
    try:
        atomic_write(path, data.getvalue())
    except OSError as e:  # its own message names the temporary file it writes first
        raise ExportError(f"{out_name} {path}: cannot write it: {e.strerror or type(e).__name__}") from None
    return spec


def check_out_path(path: Path, name: str = "--out") -> None:
    """`ExportError` naming ``name`` (the option or argument that gave ``path``) when ``path`` cannot take the file
    (checked before any work): a folder, a path whose folder does not exist or is a file, or a folder this process
    cannot write into."""
    if path.is_dir():
        raise ExportError(f"{name} {path} is a folder: give the file to write")
    folder = path.parent
    if not folder.exists():
        raise ExportError(f"{name} {path}: its folder {folder} does not exist: create it or give another {name}")
    if not folder.is_dir():
        raise ExportError(f"{name} {path}: {folder} is a file, not a folder: give a path in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"{name} {path}: its folder {folder} is not writable by this user: give another {name}")


def _onnx_bytes(module: nn.Module, args: tuple[torch.Tensor, ...], spec: Mapping[str, Any], text: str,
                fmt_name: str) -> io.BytesIO:
    try:
        import onnx
    except ImportError:
        raise ExportError(f"{fmt_name} onnx needs the onnx package: {install_hint('onnx')}") from None
    raw = io.BytesIO()
    outputs = [o["name"] for o in spec["outputs"]]
    inputs = [i["name"] for i in spec["inputs"]]
    # torch's TorchScript-based exporter (dynamo=False): the dynamo one needs onnxscript. Its stubs name paths only;
    # it writes to a file object too.
    torch.onnx.export(module, args, raw, input_names=inputs,  # type: ignore[arg-type]
                      output_names=outputs, opset_version=ONNX_OPSET,
                      dynamo=False)
    proto = onnx.load_from_string(raw.getvalue())
    entry = proto.metadata_props.add()
    entry.key, entry.value = ONNX_SPEC_KEY, text
    digest = proto.metadata_props.add()
    digest.key, digest.value = ONNX_DIGEST_KEY, "0" * 64
    return io.BytesIO(stamp_onnx(proto.SerializeToString()))


def stamp_onnx(data: bytes) -> bytes:
    """An ONNX file's bytes with its `ONNX_DIGEST_KEY` entry (64 "0"s) set to the sha256 of those bytes: what a
    reader checks (``examples/serve_exported.py``: the digest's characters as "0"s again, hashed)."""
    at = data.find(ONNX_DIGEST_PREFIX)
    if at < 0 or data.find(ONNX_DIGEST_PREFIX, at + 1) >= 0:
        raise ExportError(f"the ONNX file holds its {ONNX_DIGEST_KEY!r} entry {'twice' if at >= 0 else 'nowhere'}")
    start = at + len(ONNX_DIGEST_PREFIX)
    if data[start:start + 64] != b"0" * 64:
        raise ExportError(f"the ONNX file's {ONNX_DIGEST_KEY!r} entry is not the placeholder")
    return data[:start] + hashlib.sha256(data).hexdigest().encode() + data[start + 64:]
