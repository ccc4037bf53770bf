"""pytest configuration of the benchmarks (see bench/README.md).

Makes ``bench/_common.py`` importable under any ``--import-mode`` and caches
the pre-generated data pools for the session.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Pool, make_pool  # noqa: E402


@pytest.fixture(scope="session")
def pools():
    """``pools(workload, num_envs)``: the session's data pool for that workload and ``B``."""
    cache: dict[tuple[str, int], Pool] = {}

    def get(workload: str, num_envs: int) -> Pool:
        key = (workload, num_envs)
        if key not in cache:
            cache[key] = make_pool(workload, num_envs)
        return cache[key]

    return get
