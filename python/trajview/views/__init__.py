"""Layer 1, the data model: columns of experience and the views of them.

`ViewRequirement` says which rows of which column a consumer reads;
`SampleBatch` (and `LazyView`, `MultiAgentBatch`, `concat_samples`) holds
what it gets; `columns` is the vocabulary every layer shares (column names,
boundary columns, ``(dtype, shape)`` of a column). numpy only: nothing here
imports the C++ core, an env or torch at import time.
"""

from .view_requirement import ViewRequirement
from .lazy_view import LazyView
from .sample_batch import SampleBatch
from .multi_agent_batch import MultiAgentBatch
from .concat import concat_samples

__all__ = ["LazyView", "MultiAgentBatch", "SampleBatch", "ViewRequirement", "concat_samples"]
