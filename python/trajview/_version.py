"""trajview's version: the one place it is written (pyproject.toml reads it through scikit-build-core's regex provider)."""

__version__ = "0.1.0"
