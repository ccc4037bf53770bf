"""Testing helpers for trajview: a pure-Python reference collector (the oracle of the property tests)."""

from .reference import ReferenceCollector

__all__ = ["ReferenceCollector"]
