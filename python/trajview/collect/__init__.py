"""Layer 2, the C++ trajectory store's Python face: `Collector` stores each env step once and builds every view from it."""

from .collector import BOUNDARY_COLUMNS, Collector, column_spec_from_space

__all__ = ["BOUNDARY_COLUMNS", "Collector", "column_spec_from_space"]
