"""`import trajview`: every public name resolves, one name per concept, old names and module paths warn.

The deprecated names live in one table each (`trajview._compat.MOVED`, `RENAMED`); every entry is checked
here against the object at its canonical path, with the `DeprecationWarning` naming that path and pointing at
the caller's line.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import warnings

import pytest

import trajview as tv
from trajview import _compat, _core


def test_import_trajview_imports_no_torch_and_installs_one_finder():
    code = (
        "import sys, trajview, trajview._compat as c\n"
        "assert 'torch' not in sys.modules, 'import trajview imported torch'\n"
        "assert 'tensordict' not in sys.modules\n"
        "assert sum(isinstance(f, c._MovedModules) for f in sys.meta_path) == 1\n"
        "assert isinstance(sys.meta_path[-1], c._MovedModules), 'the finder must come after Python\\'s own'\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)


def test_all_names_resolve_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in tv.__all__:
            assert getattr(tv, name) is not None, name
    assert set(tv.__all__) <= set(dir(tv))
    assert len(set(tv.__all__)) == len(tv.__all__)


def test_every_exported_class_is_defined_in_trajview_once():
    seen: dict[object, str] = {}
    for name in tv.__all__:
        obj = getattr(tv, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("trajview."), (name, obj.__module__)
            assert obj.__name__ == name, f"tv.{name} is {obj.__name__}: one name per concept"
            assert obj not in seen, f"tv.{name} and tv.{seen.get(obj)} are one object"
            seen[obj] = name


def test_bases_and_their_subclasses_are_exported_together():
    samplers = [tv.RandomSampler, tv.SliceSampler, tv.PrioritizedSampler, tv.PrioritizedSliceSampler,
                tv.SamplerWithoutReplacement, tv.SliceSamplerWithoutReplacement]
    assert all(issubclass(s, tv.Sampler) for s in samplers)
    assert issubclass(tv.MeanStdFilter, tv.Filter)
    assert issubclass(tv.ReplayWritingCallbacks, tv.Callbacks)
    assert issubclass(tv.TorchPolicy, tv.Policy)
    assert issubclass(tv.PPOPolicy, tv.TorchPolicy)
    assert issubclass(tv.DQNPolicy, tv.Policy)
    # what the replay buffer is fed by from other processes
    assert tv.ReplayWriter is importlib.import_module("trajview.replay").ReplayWriter


def test_the_trajectory_store_has_one_compiled_name():
    # C++ TrajectoryStore, compiled as the private _TrajectoryStore; its one public face is tv.Collector
    assert hasattr(_core, "_TrajectoryStore") and not hasattr(_core, "_Store")
    assert "TrajectoryStore" not in tv.__all__ and "Collector" in tv.__all__


def test_algorithms_submodules_load_on_first_use():
    import trajview.algorithms as algorithms

    assert algorithms.ppo.PPOPolicy is tv.PPOPolicy
    assert algorithms.dqn.DQNPolicy is tv.DQNPolicy
    assert algorithms.models is importlib.import_module("trajview.algorithms.models")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        algorithms.nope  # noqa: B018


@pytest.mark.parametrize("old", sorted(_compat.MOVED))
def test_old_module_paths_warn_and_give_the_new_module(old):
    new = _compat.MOVED[old]
    sys.modules.pop(old, None)  # imported by an earlier test: import it afresh
    with pytest.warns(DeprecationWarning, match=rf"module {old} is deprecated .* 1\.0: import {new}") as rec:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert sys.modules[old] is module
    # attributed to the importer (here importlib.import_module's frame), never to trajview's own files
    assert not rec[0].filename.startswith(os.path.dirname(tv.__file__))


def test_an_old_path_in_a_from_import_warns_at_the_importing_line():
    sys.modules.pop("trajview.collector", None)
    with pytest.warns(DeprecationWarning, match="trajview.collect.collector") as rec:
        from trajview.collector import Collector
    assert Collector is tv.Collector
    assert rec[0].filename == __file__


def test_a_missing_module_is_still_an_import_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("trajview.no_such_module")


@pytest.mark.parametrize("package, name", sorted(_compat.RENAMED))
def test_renamed_attributes_warn_and_give_the_canonical_object(package, name):
    new = _compat.RENAMED[(package, name)]
    parent, _, attr = new.rpartition(".")
    expected = getattr(importlib.import_module(parent), attr)
    module = importlib.import_module(package)
    # an old module path imported earlier (trajview.models) is bound on its parent by the import system: unbind
    vars(module).pop(name, None)
    with pytest.warns(DeprecationWarning, match=rf"{package}\.{name} is deprecated .* 1\.0: use {new}$") as rec:
        got = getattr(module, name)
    assert got is expected
    assert rec[0].filename == __file__
    assert name not in getattr(module, "__all__", ())


def test_a_from_import_of_a_renamed_name_warns_once_at_the_importing_line():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("default")
        from trajview import WriteToReplay  # noqa: F401
    assert [str(w.message) for w in rec] == [
        "trajview.WriteToReplay is deprecated and will be removed in trajview 1.0: use trajview.ReplayWritingCallbacks"
    ]
    assert rec[0].filename == __file__


@pytest.mark.parametrize("package", ["trajview", "trajview.rollout", "trajview.train", "trajview.views.sample_batch"])
def test_unknown_attributes_are_attribute_errors_without_a_warning(package):
    module = importlib.import_module(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
            getattr(module, "nope")
        assert not hasattr(module, "nope")
