"""TorchRL drop-ins over trajview: `TrajviewStorage` (a TorchRL storage over the C++ replay store) and
`TrajviewCollector` (a TorchRL data collector over trajview's rollout workers).

Importable only where torchrl is installed (``pip install 'trajview[torchrl]'``); ``import trajview`` never
imports it. See docs/guides/torchrl.md.
"""

from __future__ import annotations

from .._extras import missing

try:
    import tensordict  # noqa: F401
    import torchrl  # noqa: F401
except ImportError as e:  # tested where torchrl is missing (tests/test_extras.py)
    raise missing(e, "trajview.torchrl", "torchrl") from e

from .collector import TensorDictPolicy, TrajviewCollector
from .samplers import TrajviewPrioritizedSliceSampler, TrajviewSliceSampler, TrajviewSliceSamplerWithoutReplacement
from .storage import TrajviewStorage

__all__ = [
    "TensorDictPolicy",
    "TrajviewCollector",
    "TrajviewPrioritizedSliceSampler",
    "TrajviewSliceSampler",
    "TrajviewSliceSamplerWithoutReplacement",
    "TrajviewStorage",
]
