"""The oracles of the property tests: small, obviously correct pure-Python twins of the C++-backed classes
(`ReferenceCollector` for `tv.Collector`; `replay_reference.ReferenceReplay` for `tv.ReplayBuffer`).

They import only the data model (`trajview.views`), never what they check.
"""

from .reference import ReferenceCollector

__all__ = ["ReferenceCollector"]
