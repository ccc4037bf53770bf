"""Module paths of trajview 0.1, before the layered layout: each old path imports its new module.

``import trajview.ppo`` (or ``from trajview.collector import Collector``) keeps
working and gives the module at its new path (``trajview.algorithms.ppo``).
Deprecated: these aliases go in a later 0.x release (see CHANGELOG.md). Paths
that are packages now (``trajview.policy``, ``trajview.replay``,
``trajview.envs``, ``trajview.train``) need no alias: the package exports the
old module's public names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: old module path -> new module path
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


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths; loading one puts the new module in ``sys.modules`` under the old name too."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns sys.modules[name] after this call: the real module.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
