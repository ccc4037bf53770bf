"""The version is written once (python/trajview/_version.py): package metadata, the module and the C++ extension agree."""

from __future__ import annotations

import importlib.metadata

import trajview
from trajview import _core


def test_version_is_single_sourced():
    assert trajview.__version__ == importlib.metadata.version("trajview") == _core.__version__
