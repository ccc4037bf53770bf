"""trajview's own exceptions (imports nothing from trajview: any layer may raise them)."""

from __future__ import annotations

from typing import Any

__all__ = ["WorkerError"]


class WorkerError(RuntimeError):
    """A rollout worker of a `WorkerSet` failed and was not (or could no longer be) replaced.

    ``worker_index``: the worker's index (``1..num_workers``). ``reason``:
    ``"died"`` (its process exited or was killed, or its Ray actor was lost),
    ``"timeout"`` (no answer within ``sample_timeout_s``: it was killed) or
    ``"raised"`` (its command raised: ``detail`` holds the worker's
    traceback). ``detail``: how it died, or the traceback. The message says
    how to have failed workers replaced (``recreate_failed_workers=True``,
    ``max_restarts``).
    """

    def __init__(self, message: str, *, worker_index: int, reason: str, detail: str = "") -> None:
        super().__init__(message)
        self.worker_index = worker_index
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> Any:
        return _rebuild, (type(self), str(self), self.worker_index, self.reason, self.detail)


def _rebuild(cls: type[WorkerError], message: str, worker_index: int, reason: str, detail: str) -> WorkerError:
    return cls(message, worker_index=worker_index, reason=reason, detail=detail)
