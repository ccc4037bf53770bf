"""trajview's own exceptions (imports nothing from trajview: any layer may raise them)."""

from __future__ import annotations

from typing import Any

__all__ = ["FileIntegrityError", "NonFiniteObservationError", "PathInUseError", "WorkerError"]


class WorkerError(RuntimeError):
    """A rollout worker of a `WorkerSet` failed and was not (or could no longer be) replaced.

    ``worker_index``: the worker's index (``1..num_workers``). ``reason``:
    ``"died"`` (its process exited or was killed, or its Ray actor was lost),
    ``"timeout"`` (no answer within ``sample_timeout_s``, or not built within
    ``start_timeout_s``, ``detail`` ``"starting"``: it was killed) or
    ``"raised"`` (its command raised: ``detail`` holds the worker's
    traceback). ``detail``: how it died, or the traceback. ``failure``: what
    happened, the message without its ``hint``, which says how to have failed
    workers replaced (``recreate_failed_workers=True``, ``max_restarts``).
    ``restarts_used_up``: the worker would have been replaced but every
    restart allowed was used.
    """

    def __init__(self, message: str, *, worker_index: int, reason: str, detail: str = "", hint: str = "",
                 restarts_used_up: bool = False) -> None:
        super().__init__(f"{message}\n{hint}" if hint else message)
        self.failure = message
        self.hint = hint
        self.worker_index = worker_index
        self.reason = reason
        self.detail = detail
        self.restarts_used_up = restarts_used_up

    def __reduce__(self) -> Any:
        return _rebuild, (type(self), self.failure, self.worker_index, self.reason, self.detail, self.hint,
                          self.restarts_used_up)


def _rebuild(cls: type[WorkerError], message: str, worker_index: int, reason: str, detail: str, hint: str = "",
             restarts_used_up: bool = False) -> WorkerError:
    return cls(message, worker_index=worker_index, reason=reason, detail=detail, hint=hint,
               restarts_used_up=restarts_used_up)


class FileIntegrityError(ValueError):
    """A file trajview reads is damaged, truncated, mixed with another dump's, of another format, or crafted:
    refused before anything is changed. ``path``: the file; ``problem``: what differs from what was expected."""

    def __init__(self, path: Any, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem

    def __reduce__(self) -> Any:
        return type(self), (self.path, self.problem)


class PathInUseError(RuntimeError):
    """A path (a memory-mapped replay folder, a `trajview train --out` folder) is held by another owner.
    ``path``, ``holder`` (the pid holding it, as the lock file says) and ``what`` (which kind of owner)."""

    def __init__(self, path: Any, holder: str, what: str) -> None:
        super().__init__(
            f"{path} is in use by process {holder}: cannot open it as {what}; one owner per path: stop that process or use another "
            f"path (a lock left by a process that died is released with it)"
        )
        self.path = str(path)
        self.holder = holder
        self.what = what

    def __reduce__(self) -> Any:
        return type(self), (self.path, self.holder, self.what)


class NonFiniteObservationError(ValueError):
    """An observation with a NaN or an infinity reached a `MeanStdFilter` made with ``nonfinite="raise"``: refused
    before its running statistics changed. ``column``: the observation column (``"obs"``, or a nested leaf's
    ``"obs.pos"``); ``found``: what was found where (e.g. ``"nan at [2]"``); ``env_index``: the env that returned
    it (None when the filter was called outside a worker); ``agent``: the agent (multi-agent envs); ``row``: the
    observation's row in the filter's input (None for a single observation)."""

    def __init__(self, column: str, found: str, *, env_index: int | None = None, agent: Any = None,
                 row: int | None = None) -> None:
        if env_index is not None:
            who = f"env {env_index}" if agent is None else f"env {env_index}, agent {agent!r}"
            what = f"{who} returned a non-finite observation"
        else:
            what = "a non-finite observation" + ("" if row is None else f" in row {row}")
        super().__init__(
            f"column {column!r}: {what} ({found}), expected finite values "
            f"(MeanStdFilter(nonfinite='raise'); nonfinite='skip' leaves the running statistics untouched and "
            f"counts the observation)"
        )
        self.column = column
        self.found = found
        self.env_index = env_index
        self.agent = agent
        self.row = row

    def at_env(self, env_index: int, agent: Any = None) -> NonFiniteObservationError:
        """The same error naming the env (and agent) that returned the observation."""
        return type(self)(self.column, self.found, env_index=env_index, agent=agent, row=self.row)

    def __reduce__(self) -> Any:
        return _rebuild_nonfinite, (type(self), self.column, self.found, self.env_index, self.agent, self.row)


def _rebuild_nonfinite(cls: type[NonFiniteObservationError], column: str, found: str, env_index: int | None,
                       agent: Any, row: int | None) -> NonFiniteObservationError:
    return cls(column, found, env_index=env_index, agent=agent, row=row)
