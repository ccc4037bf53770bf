"""The optional dependencies and the extra that brings each (pyproject.toml's ``[project.optional-dependencies]``):
the one place trajview's "needs X: pip install 'trajview[extra]'" hints come from.

`require` imports an optional module or raises a ``ModuleNotFoundError`` (an ``ImportError``) whose one-line
message says what needs it and what to install; `missing` rewrites such an error met inside an import (``import
trajview.algorithms.ppo`` without torch).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRA_OF", "extra_hint", "install_hint", "missing", "require"]

#: Top-level module -> the extra that brings it.
EXTRA_OF = {
    "torch": "torch",
    "tqdm": "train",
    "matplotlib": "train",
    "tensorboard": "tensorboard",
    "pettingzoo": "multiagent",
    "pygame": "multiagent",
    "ray": "ray",
    "onnx": "export",
    "onnxruntime": "export",
    "moviepy": "video",
    "tensordict": "tensordict",
}

#: What an extra needs installed first, said after its hint.
_FIRST = {"torch": " (torch's CPU build: pip install torch==2.13.0)",
          "train": " (torch's CPU build first: pip install torch==2.13.0)",
          "tensordict": " (torch first: pip install torch==2.13.0)"}


def extra_hint(extra: str) -> str:
    """``pip install 'trajview[<extra>]'``, with what to install first where the extra needs it."""
    return f"pip install 'trajview[{extra}]'{_FIRST.get(extra, '')}"


def install_hint(module: str) -> str:
    """`extra_hint` of ``module``'s extra (``pip install <module>`` for one trajview has no extra for)."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    return f"pip install {top}" if extra is None else extra_hint(extra)


def missing(e: ImportError, what: str, extra: str | None = None) -> ImportError:
    """``e`` (an import of an optional module that failed) as one line: ``<what> needs <module>: <hint>`` (the
    hint of ``extra`` when given, else of the module's own extra), its ``__cause__`` set to ``e``: ``raise
    missing(e, ...)`` in the ``except`` block. An error about a module trajview does not know as optional is
    returned as it is (re-raised by that line)."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    if name not in EXTRA_OF:
        return e
    hint = install_hint(name) if extra is None else extra_hint(extra)
    err = ModuleNotFoundError(f"{what} needs {name}, which is not installed: {hint}", name=name)
    err.__cause__ = e
    return err


def require(module: str, what: str) -> ModuleType:
    """``import module``, or a one-line ``ModuleNotFoundError`` saying that ``what`` needs it and how to install
    it (an import error of another module inside it is raised as it is)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if (getattr(e, "name", None) or "").split(".")[0] != module.split(".")[0]:
            raise
        raise missing(e, what)  # chained to e
