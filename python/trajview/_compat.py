"""Deprecated names of trajview 0.1, each mapped to its canonical one; removal planned for 1.0.

Two kinds, one table each:

- `MOVED`: module paths from before the layered layout. ``import trajview.ppo``
  (or ``from trajview.collector import Collector``) still works: it warns
  with a `DeprecationWarning` naming the new path and gives the module at
  that path (``trajview.algorithms.ppo``), under the old name too.
- `RENAMED`: attributes renamed for one name per concept:
  ``(package, old name) -> canonical path``. The package's module
  ``__getattr__`` calls `renamed` for a name it does not have, which warns
  naming the canonical path and hands out the object found there.

The finder is appended to ``sys.meta_path``, after Python's own finders, so it
is asked only about names no installed module has (an old path, or a real
``ImportError``): one dict lookup, nothing on any import that succeeds. This
module imports nothing but ``sys`` and ``warnings`` at ``import trajview``.
"""

from __future__ import annotations

import sys
import warnings
from types import ModuleType
from typing import Any, cast

#: Removal of every deprecated name below is planned for this release.
REMOVAL = "1.0"

#: old module path -> canonical module path
MOVED = {
    "trajview.view_requirement": "trajview.views.view_requirement",
    "trajview.sample_batch": "trajview.views.sample_batch",
    "trajview.collector": "trajview.collect.collector",
    "trajview.torch_policy": "trajview.policy.torch_policy",
    "trajview.callbacks": "trajview.rollout.callbacks",
    "trajview.rollout_worker": "trajview.rollout.worker",
    "trajview.multi_agent": "trajview.rollout.multi_agent",
    "trajview.worker_set": "trajview.rollout.worker_set",
    "trajview.postprocessing": "trajview.algorithms.postprocessing",
    "trajview.ppo": "trajview.algorithms.ppo",
    "trajview.models": "trajview.algorithms.models",
    "trajview.cli": "trajview.train.cli",
}

#: (package or module, old attribute) -> the canonical path of what it names
RENAMED = {
    # modules that were attributes of the top level: they live in trajview.algorithms
    ("trajview", "postprocessing"): "trajview.algorithms.postprocessing",
    ("trajview", "models"): "trajview.algorithms.models",
    # a Callbacks subclass, named as one
    ("trajview", "WriteToReplay"): "trajview.ReplayWritingCallbacks",
    ("trajview.rollout", "WriteToReplay"): "trajview.ReplayWritingCallbacks",
    # the PPO trainer, named like the DQN one
    ("trajview.train", "Trainer"): "trajview.train.PPOTrainer",
    # names the views package took over when SampleBatch's module was split
    ("trajview.views.sample_batch", "MultiAgentBatch"): "trajview.views.MultiAgentBatch",
    ("trajview.views.sample_batch", "concat_samples"): "trajview.views.concat_samples",
}


def renamed(package: str, name: str) -> Any:
    """The object a deprecated attribute ``package.name`` now names, with a `DeprecationWarning` naming its
    canonical path; for a module's ``__getattr__``. Raises `AttributeError` (as Python does) for a name that
    is neither there nor renamed."""
    new = RENAMED.get((package, name))
    if new is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    import importlib

    parent, _, attr = new.rpartition(".")
    value = getattr(importlib.import_module(parent), attr)
    # stacklevel 3: the line that read the old name (past this function and the module's __getattr__)
    warnings.warn(
        f"{package}.{name} is deprecated and will be removed in trajview {REMOVAL}: use {new}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


class _MovedModules:
    """A meta-path finder and loader for the paths in `MOVED`: loading one warns and puts the module of the
    new path in ``sys.modules`` under the old name too."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> Any:
        if fullname not in MOVED:
            return None
        import importlib.util

        # a loader by duck typing (create_module, exec_module), not importlib.abc.Loader: that import costs
        return importlib.util.spec_from_loader(fullname, cast(Any, self))

    def create_module(self, spec: Any) -> None:
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        import importlib

        old = module.__name__
        new = MOVED[old]
        # stacklevel 2: the import statement (warnings skips the import machinery's own frames)
        warnings.warn(
            f"module {old} is deprecated and will be removed in trajview {REMOVAL}: import {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns sys.modules[name] after this call: the real module.
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
