"""`WorkerSet`'s asynchronous sampling (RLlib's async sampling, TorchRL's async collectors): `AsyncSampling`.

Every worker always has one sample in flight, sent with the newest weights
it was given; `AsyncSampling.next` hands out whichever worker's batch is in
first (an `AsyncBatch`, tagged with the ``policy_version`` it was sampled
with) and sends that worker its next sample at once, so the learner never
waits for the workers nor they for it. The fleet itself (its workers, how a
command is sent, what a failure does) stays `WorkerSet`'s: this module uses
its backend, its workers' handles and its failure handling (``_recover``,
``_kill``), and owns only the pipelining state.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .backends import Backend, WorkerFailed

if TYPE_CHECKING:
    from ..views import MultiAgentBatch, SampleBatch

__all__ = ["AsyncBatch", "AsyncSampling"]


class Fleet(Protocol):
    """What `AsyncSampling` uses of its `WorkerSet`: the workers, their backend, the weights, failure handling."""

    num_workers: int
    sample_timeout_s: float | None
    policy_version: int
    _weights: dict[str, Any]
    _workers: list[Any]
    _backend: Backend

    def _exchange(self, positions: Iterable[int], cmd: str, arg: Any, timeout: float | None) -> tuple[
        dict[int, Any], dict[int, WorkerFailed]]: ...

    def _recover(self, failed: dict[int, WorkerFailed]) -> None: ...

    def _kill(self, i: int) -> None: ...

    def _note_eps_ids(self, batches: list[Any]) -> None: ...

    def _raise_if_down(self) -> None: ...


class AsyncBatch(NamedTuple):
    """One worker's batch from `WorkerSet.sample_async`."""

    batch: SampleBatch | MultiAgentBatch
    #: The worker that sampled it (1..num_workers).
    worker_index: int
    #: `WorkerSet.policy_version` of the weights it was sampled with (0: the workers' own initial weights).
    policy_version: int
    #: How many `set_weights` calls behind the newest weights it was, when handed out.
    staleness: int
    #: With ``sample_async(with_metrics=True)``: the worker's metrics since its last report (as one worker's
    #: part of `WorkerSet.get_metrics`: ``episode_returns``, ``sample_time_s`` ...), else None.
    metrics: dict[str, Any] | None = None


class AsyncSampling:
    """The samples in flight of a `WorkerSet`'s workers, the batches drained from them, and which weights each
    worker has (positions ``0..num_workers-1``)."""

    def __init__(self, ws: Fleet) -> None:
        self._ws = ws
        #: Per worker: the version of the weights it has (or gets with its next sample).
        self.given = [0] * ws.num_workers
        self._in_flight: dict[int, int] = {}  # position -> the version its sample samples with
        self._sent_at: dict[int, float] = {}  # ... and when it was sent (for sample_timeout_s)
        self._with_metrics: set[int] = set()  # samples in flight that answer (batch, metrics)
        self._done: deque[AsyncBatch] = deque()  # batches drained from the workers, handed out first
        #: Batches dropped for being more than ``max_staleness`` versions behind.
        self.stale_dropped = 0

    @property
    def active(self) -> bool:
        """Whether samples are in flight or drained batches wait: new weights are then only recorded."""
        return bool(self._in_flight or self._done)

    def all_given(self) -> None:
        """Every worker has the newest weights (a synchronous ``set_weights`` reached them all)."""
        self.given = [self._ws.policy_version] * self._ws.num_workers

    def replaced(self, positions: Any) -> None:
        """New workers at ``positions`` were given the newest weights when they started."""
        for i in positions:
            self.given[i] = self._ws.policy_version

    def clear(self) -> None:
        """Forgets every sample in flight and every drained batch (the workers are being stopped)."""
        self._in_flight.clear()
        self._with_metrics.clear()
        self._done.clear()

    # -- before a synchronous command --------------------------------------------------------------

    def drain(self) -> None:
        """Waits for every sample in flight; their batches are kept for `next`, so none is lost."""
        for i in sorted(self._in_flight):
            got = self._collect(i, self._ws.sample_timeout_s)
            if got is not None:
                self._done.append(got)

    def catch_up(self) -> None:
        """Gives the workers the weights set while they sampled asynchronously, before a synchronous command."""
        ws = self._ws
        behind = [i for i in range(ws.num_workers) if self.given[i] != ws.policy_version]
        if not behind:
            return
        for policy_id, weights in ws._weights.items():
            _, failed = ws._exchange(behind, "set_weights", (policy_id, weights), ws.sample_timeout_s)
            if failed:
                ws._recover(failed)
        self.replaced(behind)

    # -- pipelining ---------------------------------------------------------------------------------

    def _updates(self, i: int) -> list[tuple[str, Any]]:
        """The weights worker ``i`` has not got yet (all policies' last weights, if any is newer)."""
        ws = self._ws
        if self.given[i] == ws.policy_version:
            return []
        self.given[i] = ws.policy_version
        return list(ws._weights.items())

    def _dispatch(self, i: int, with_metrics: bool) -> None:
        updates = self._updates(i)
        self._in_flight[i] = self.given[i]
        self._sent_at[i] = time.monotonic()
        if with_metrics:
            self._with_metrics.add(i)
        else:
            self._with_metrics.discard(i)
        ws = self._ws
        ws._backend.send(ws._workers[i], "sample_with_metrics" if with_metrics else "sample_with", updates)

    def _collect(self, i: int, timeout: float | None) -> AsyncBatch | None:
        """Worker ``i``'s answer to its asynchronous sample (None if it failed and was replaced)."""
        ws = self._ws
        version = self._in_flight.pop(i)
        with_metrics = i in self._with_metrics
        self._with_metrics.discard(i)
        try:
            answer = ws._backend.receive(ws._workers[i], timeout)
        except WorkerFailed as f:
            if f.reason != "raised":
                ws._kill(i)
            ws._recover({i: f})  # raises unless the worker was replaced (it then has the last weights)
            self.given[i] = ws.policy_version
            return None
        batch, metrics = answer if with_metrics else (answer, None)
        ws._note_eps_ids([batch if k == i else None for k in range(ws.num_workers)])
        return AsyncBatch(batch, i + 1, version, ws.policy_version - version, metrics)

    def _expire(self, positions: list[int]) -> None:
        """The workers whose sample overran ``sample_timeout_s`` hung: killed, then replaced or raised."""
        ws = self._ws
        assert ws.sample_timeout_s is not None
        now = time.monotonic()
        hung = {i: WorkerFailed("timeout") for i in positions if now - self._sent_at[i] >= ws.sample_timeout_s}
        for i in hung:
            self._in_flight.pop(i)
            self._with_metrics.discard(i)
            ws._kill(i)
        if hung:
            ws._recover(hung)  # raises unless they were replaced
            self.replaced(hung)

    def next(self, timeout: float | None, max_staleness: int | None, with_metrics: bool) -> AsyncBatch:
        """`WorkerSet.sample_async` (its arguments checked there)."""
        ws = self._ws
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while self._done:
                done = self._done.popleft()
                done = done._replace(staleness=ws.policy_version - done.policy_version)
                if max_staleness is not None and done.staleness > max_staleness:
                    self.stale_dropped += 1
                    continue
                return done
            ws._raise_if_down()
            for i in range(ws.num_workers):
                if i not in self._in_flight and ws._workers[i] is not None:
                    self._dispatch(i, with_metrics)
            positions = sorted(self._in_flight)
            now = time.monotonic()
            waits = [] if deadline is None else [deadline - now]
            if ws.sample_timeout_s is not None:
                waits.append(min(self._sent_at[i] for i in positions) + ws.sample_timeout_s - now)
            ready = ws._backend.wait_any([ws._workers[i] for i in positions], max(0.0, min(waits)) if waits else None)
            if not ready:
                if ws.sample_timeout_s is not None:
                    self._expire(positions)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"sample_async: no batch within {timeout:g} s")
                continue
            for k in ready:
                i = positions[k]
                got = self._collect(i, 0 if ws.sample_timeout_s is None else ws.sample_timeout_s)
                if got is not None:
                    self._done.append(got)
                if ws._workers[i] is not None:
                    self._dispatch(i, with_metrics)  # it samples on at once (with the newest weights it was given) while we learn
