"""Where `WorkerSet`'s workers run: one small interface (`Backend`), one class per kind (processes, Ray actors).

A worker is a `RolloutWorker` inside `ServedWorker`, which answers commands
("pid", "sample", "sample_with", "sample_with_metrics", "set_weights", "get_weights", "metrics",
"get_filters", "sync_filters", "stop") by name:
the body of a Ray actor and of a worker process alike. A backend only knows
how to start one worker, send it one command, await its answer (with a
deadline) and kill it; what to do when a worker fails (raise, or replace it)
is `WorkerSet`'s, the same for every backend.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import random
import select
import signal
import struct
import sys
import threading
import time
import traceback
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from .._extras import require
from .worker import RolloutWorker

__all__ = ["Backend", "ProcessBackend", "RayBackend", "ServedWorker", "WorkerFailed"]


class WorkerFailed(Exception):
    """`Backend.receive`: the worker gave no answer.

    ``reason``: ``"died"`` (``detail``: how), ``"timeout"`` (no answer by the
    deadline; the worker may still run: kill it) or ``"raised"`` (the command
    raised in the worker; ``detail``: its traceback; the worker still answers).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


def _seed_worker(kwargs: dict, incarnation: int = 0) -> None:
    """Seeds this worker process's global RNGs (random, numpy, torch) apart from every other worker's.

    Forked workers inherit the driver's RNG states, and fresh processes all
    start torch's generator at the same default seed: without this, every
    worker would draw the same "random" actions. With ``seed`` given, each
    worker's seed follows from it and its ``worker_index`` (reproducible); a
    replacement of a failed worker (``incarnation`` 1, 2, ...) draws apart
    from the worker it replaces.
    """
    seed = kwargs.get("seed")
    index = int(kwargs["worker_index"])
    if seed is None:
        s = int.from_bytes(os.urandom(8), "little") >> 1
    elif incarnation == 0:
        s = (int(seed) * 1_000_003 + index) % 2**63
    else:
        digest = hashlib.blake2b(f"{int(seed)}:{index}:{incarnation}".encode(), digest_size=8).digest()
        s = int.from_bytes(digest, "little") >> 1
    random.seed(s)
    np.random.seed(s % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(s)


class _StartError(RuntimeError):
    """Building the worker failed: raised by every command of that worker."""


class ServedWorker:
    """One worker: its RolloutWorker and the commands it answers.

    An error while building the RolloutWorker is not raised here but by the
    worker's first command (with the build's traceback), so that every
    backend reports it as the answer to a command.
    """

    def __init__(self, env_creator: Callable, policy: Any, kwargs: dict, incarnation: int = 0) -> None:
        self.worker: RolloutWorker | None = None
        self.start_error: str | None = None
        self.sample_s = 0.0  # seconds in RolloutWorker.sample since the last "metrics"
        self.sample_steps = 0  # ... and the env steps it returned
        try:
            _seed_worker(kwargs, incarnation)
            self.worker = RolloutWorker(env_creator, policy, **kwargs)
        except Exception:
            self.start_error = traceback.format_exc()

    def run(self, cmd: str, arg: Any) -> Any:
        if cmd == "pid":
            if self.start_error is not None:
                raise _StartError(f"building the RolloutWorker failed:\n{self.start_error}")
            return os.getpid()
        w = self.worker
        if w is None:
            raise _StartError(f"building the RolloutWorker failed:\n{self.start_error}")
        if cmd == "sample":
            return self._timed_sample(w)
        if cmd in ("sample_with", "sample_with_metrics"):
            # Asynchronous sampling: the weights the learner set since the last sample, then one sample (with the
            # worker's metrics since the last report: "sample_with_metrics").
            w.set_weights(dict(arg))
            batch = self._timed_sample(w)
            return (batch, self._metrics(w)) if cmd == "sample_with_metrics" else batch
        if cmd == "set_weights":
            w.set_weights({arg[0]: arg[1]})
            return None
        if cmd == "get_weights":
            return w.get_weights()
        if cmd == "metrics":
            return self._metrics(w)
        if cmd == "get_filters":
            return w.get_filters(flush_after=bool(arg))
        if cmd == "sync_filters":
            w.sync_filters(arg)
            return None
        if cmd == "stop":
            w.stop()
            return None
        raise ValueError(f"unknown WorkerSet command {cmd!r}")

    def _timed_sample(self, w: RolloutWorker) -> Any:
        t0 = time.perf_counter()
        batch = w.sample()
        self.sample_s += time.perf_counter() - t0
        self.sample_steps += int(batch.env_steps())
        return batch

    def _metrics(self, w: RolloutWorker) -> dict:
        """The worker's metrics since the last report, with its sampling time and env steps (one-item lists:
        `WorkerSet.get_metrics` joins them in worker order) and the observations its filters skipped for a NaN or
        an infinity (summed)."""
        m = w.get_metrics()
        m["sample_time_s"] = [self.sample_s]
        m["sample_env_steps"] = [self.sample_steps]
        m["num_nonfinite_obs_skipped"] = sum(f.pop_nonfinite_skipped() for f in w.filters.values())
        self.sample_s, self.sample_steps = 0.0, 0
        return m

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()


class Backend(ABC):
    """Starts, commands and kills single workers; a worker is whatever handle `start` returns.

    Commands to one worker are answered in order: `receive` returns the answer
    to the command `send` sent last (answers to earlier commands not yet
    received are skipped).
    """

    @abstractmethod
    def start(self, index: int, incarnation: int = 0, overrides: dict | None = None) -> Any:
        """Starts worker ``index`` (its ``worker_index``) and returns its handle, without waiting for it to be built.

        ``incarnation``: 0 for a first worker, ``k`` for a replacement
        (seeds its RNGs apart); ``overrides``: RolloutWorker arguments that
        replace the set's for this worker. A build error is the answer to its
        first command.
        """

    @abstractmethod
    def send(self, worker: Any, cmd: str, arg: Any = None) -> None:
        """Sends one command without waiting for its answer; never raises for a dead worker (`receive` does)."""

    @abstractmethod
    def receive(self, worker: Any, timeout: float | None) -> Any:
        """The answer to the command sent last, waiting at most ``timeout`` s (``None``: no limit).

        Raises `WorkerFailed` when the worker died, gave no answer in time, or
        its command raised.
        """

    @abstractmethod
    def kill(self, worker: Any) -> None:
        """Ends the worker now, whatever its state (a process is killed and reaped)."""

    @abstractmethod
    def wait_any(self, workers: list[Any], timeout: float | None) -> list[int]:
        """Positions in ``workers`` (each with exactly one command in flight) whose answer is in, or that died.

        Waits at most ``timeout`` s (``None``: until one is) and returns ``[]`` when none is.
        """


# -- processes ------------------------------------------------------------------------

#: The driver's ends of every worker pipe of this process (all `ProcessBackend` s): a forked worker closes its
#: copies, so that a worker sees EOF on its pipe when the driver is gone.
_DRIVER_ENDS: weakref.WeakSet[Any] = weakref.WeakSet()

#: Commands pickled larger than this are sent by a thread: a hung worker cannot block the driver on a full pipe.
_INLINE_SEND_BYTES = 32 * 1024


#: Seconds an answer that has begun may go without a byte more (beyond the caller's deadline) before its worker
#: counts as hung: one stopped halfway through writing it (SIGSTOP, a frozen machine) would hold ``recv`` forever.
_STALL_S = 5.0


def _recv_by(conn: Any, deadline: float) -> Any:
    """``conn.recv()`` (a `multiprocessing` connection's message: a 4-byte size, or -1 and an 8-byte one, then the
    pickle), read in pieces as they come: `WorkerFailed` ("timeout") when, after ``deadline`` (`time.monotonic`),
    no byte came for `_STALL_S` s (the worker is then killed: the pipe is not read again). A message that keeps
    coming is read whole, however long it takes. ``recv`` itself waits for the rest without a limit."""
    fd = conn.fileno()
    last = time.monotonic()

    def read(n: int) -> bytes:
        nonlocal last
        buf = bytearray()
        while len(buf) < n:
            remaining = max(deadline, last + _STALL_S) - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise WorkerFailed("timeout")
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
            last = time.monotonic()
        return bytes(buf)

    (size,) = struct.unpack("!i", read(4))
    if size == -1:
        (size,) = struct.unpack("!Q", read(8))
    # (a pickle from this process's own worker, through the pipe it made for it: what conn.recv() unpickles too)
    return ForkingPickler.loads(read(size))


def _exit_with(parent_pid: int, poll_s: float = 0.25) -> None:
    """Starts a daemon thread that ends this process (``os._exit``) once its parent is no longer ``parent_pid``."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="trajview-driver-watchdog", daemon=True).start()


def _one_torch_thread_after_fork() -> None:
    """A forked worker runs torch on one intra-op thread: OpenMP's thread pool does not survive ``fork`` (only the
    forking thread does), so the first parallel op of a child whose driver had run one would wait forever for
    threads that are not there. (A worker's batches are small, and the workers are the parallelism; for more
    threads per worker, ``start_method="spawn"``.)"""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _serve(
    conn: Any, inherited: list[Any], parent_pid: int | None, env_creator: Callable, policy: Any, kwargs: dict,
    incarnation: int,
) -> None:
    """A worker process: build the worker, then answer commands until "stop" (or the driver is gone).

    ``inherited``: the driver's pipe ends this process got by fork (closed at
    once). ``parent_pid``: the driver (``None``: this process's parent, e.g.
    the forkserver); the process exits when its parent changes. Ctrl-C in a
    terminal (SIGINT to the whole process group) is the driver's to handle:
    the worker ignores it and is stopped by the driver, as
    ``multiprocessing.Pool`` workers are (else each would die mid-command
    with a traceback of its own).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM ends a worker (a fork inherits the driver's Python handler, e.g. `trajview train`'s, which would
    # turn it into an exception inside whatever the worker was doing).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for c in inherited:
        c.close()
    _exit_with(parent_pid if parent_pid is not None else os.getppid())
    if inherited:  # (forked: the driver's pipe ends came with it)
        _one_torch_thread_after_fork()
    served = ServedWorker(env_creator, policy, kwargs, incarnation)
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            served.stop()
            return
        try:
            answer = ("ok", served.run(cmd, arg))
        except BaseException:
            answer = ("error", traceback.format_exc())
        try:
            buf = ForkingPickler.dumps(answer)
        except Exception:  # an answer that does not pickle
            buf = ForkingPickler.dumps(("error", traceback.format_exc()))
        try:
            conn.send_bytes(buf)
        except OSError:  # the driver is gone
            served.stop()
            return
        if (cmd == "stop" and answer[0] == "ok") or served.worker is None:  # stopped, or its build failed (reported)
            return


def _exit_description(code: int | None) -> str:
    if code is None:
        return "its pipe closed while the process still ran"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by signal {name} (exit code {code})"
    return f"exited with exit code {code}"


class _ProcessWorker:
    """A worker process and the driver's end of its pipe."""

    def __init__(self, proc: Any, conn: Any) -> None:
        self.proc = proc
        self.conn = conn
        self.pending = 0  # commands sent whose answers are not yet received
        self.broken = False  # a send failed: the process is gone
        self.sender: threading.Thread | None = None
        self.last_cmd = ""


class ProcessBackend(Backend):
    """Each worker in a process of this machine, answering over a pipe.

    ``start_method``: ``"fork"`` (``env_creator`` may be a lambda) or
    ``"spawn"`` / ``"forkserver"`` (then ``env_creator`` and ``policy`` must
    pickle). A worker process ends within about 0.25 s of its driver's death.
    """

    def __init__(self, env_creator: Callable, policy: Any, worker_kwargs: dict, start_method: str) -> None:
        try:
            self._ctx: Any = mp.get_context(start_method)
        except ValueError as e:
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            ) from e
        self._fork = start_method == "fork"
        self._env_creator = env_creator
        self._policy = policy
        self._kwargs = worker_kwargs

    def start(self, index: int, incarnation: int = 0, overrides: dict | None = None) -> _ProcessWorker:
        parent, child = self._ctx.Pipe()
        # A forked child holds copies of every driver end open now (its own included): it closes them.
        inherited = [*_DRIVER_ENDS, parent] if self._fork else []
        proc = self._ctx.Process(
            target=_serve,
            args=(
                child, inherited, os.getpid() if self._ctx.get_start_method() != "forkserver" else None,
                self._env_creator, self._policy, dict(self._kwargs, **(overrides or {}), worker_index=index), incarnation,
            ),
            name=f"trajview-worker-{index}",
            daemon=True,
        )
        try:
            proc.start()
        finally:
            child.close()
        _DRIVER_ENDS.add(parent)
        return _ProcessWorker(proc, parent)

    def send(self, worker: _ProcessWorker, cmd: str, arg: Any = None) -> None:
        worker.pending += 1
        worker.last_cmd = cmd
        if worker.broken:
            return
        buf = bytes(ForkingPickler.dumps((cmd, arg)))
        prev = worker.sender
        if len(buf) <= _INLINE_SEND_BYTES and (prev is None or not prev.is_alive()):
            # The worker read every earlier command before answering it, so the pipe is empty now: a small command
            # never blocks.
            worker.sender = None
            self._send_bytes(worker, buf)
        else:
            worker.sender = threading.Thread(
                target=self._send_bytes, args=(worker, buf, prev), name="trajview-worker-send", daemon=True
            )
            worker.sender.start()

    @staticmethod
    def _send_bytes(worker: _ProcessWorker, buf: bytes, after: threading.Thread | None = None) -> None:
        if after is not None:
            after.join()  # commands reach the worker in order
        try:
            worker.conn.send_bytes(buf)
        except (OSError, ValueError, TypeError):  # the worker is gone (or killed meanwhile)
            worker.broken = True

    def receive(self, worker: _ProcessWorker, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while worker.pending > 0:
            if worker.broken:
                raise self._died(worker)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if not worker.conn.poll(remaining):
                    raise WorkerFailed("timeout")
                # (the whole answer within the deadline: a worker stopped halfway through writing a big one
                # must not hold recv() forever)
                status, value = worker.conn.recv() if deadline is None else _recv_by(worker.conn, deadline)
            except (EOFError, OSError):
                raise self._died(worker) from None
            worker.pending -= 1
            if worker.pending == 0:
                if status == "error":
                    raise WorkerFailed("raised", value)
                return value
        raise RuntimeError("receive() without a command sent")  # pragma: no cover - WorkerSet always sends first

    def wait_any(self, workers: list[_ProcessWorker], timeout: float | None) -> list[int]:
        from multiprocessing.connection import wait

        gone = [k for k, w in enumerate(workers) if w.broken]
        if gone:
            return gone
        ready = set(map(id, wait([w.conn for w in workers], timeout)))
        return [k for k, w in enumerate(workers) if id(w.conn) in ready]

    @staticmethod
    def _died(worker: _ProcessWorker) -> WorkerFailed:
        worker.broken = True
        worker.proc.join(timeout=2)
        return WorkerFailed("died", _exit_description(worker.proc.exitcode))

    def kill(self, worker: _ProcessWorker) -> None:
        proc = worker.proc
        if worker.last_cmd == "stop" and not worker.broken:
            proc.join(timeout=2)  # it answered "stop" and is exiting on its own
        if proc.is_alive():
            proc.kill()  # SIGKILL: ends a stopped (SIGSTOP) process too
        proc.join()  # reaped: no zombie
        if worker.sender is not None:
            worker.sender.join(timeout=5)  # its write fails now that the worker is gone
        _DRIVER_ENDS.discard(worker.conn)
        worker.conn.close()
        worker.broken = True


# -- Ray ------------------------------------------------------------------------------


class _RayWorker:
    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.ref: Any = None


class RayBackend(Backend):
    """Each worker a Ray actor, on any machine of the Ray cluster (``ray.init()`` first to join one).

    ``options`` (e.g. ``{"num_cpus": 1}``) go to ``.options()``; Ray pickles
    ``env_creator`` and ``policy`` (lambdas are fine). The actors belong to
    the driver's Ray session: they end with it.
    """

    def __init__(self, env_creator: Callable, policy: Any, worker_kwargs: dict, options: dict) -> None:
        ray = require("ray", "WorkerSet(backend='ray')")
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(ServedWorker)
        self._actor_class = actor.options(**options) if options else actor
        self._env_creator = env_creator
        self._policy = policy
        self._kwargs = worker_kwargs

    def start(self, index: int, incarnation: int = 0, overrides: dict | None = None) -> _RayWorker:
        kwargs = dict(self._kwargs, **(overrides or {}), worker_index=index)
        return _RayWorker(self._actor_class.remote(self._env_creator, self._policy, kwargs, incarnation))

    def send(self, worker: _RayWorker, cmd: str, arg: Any = None) -> None:
        worker.ref = worker.actor.run.remote(cmd, arg)

    def receive(self, worker: _RayWorker, timeout: float | None) -> Any:
        import ray

        try:
            return ray.get(worker.ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise WorkerFailed("timeout") from None
        except ray.exceptions.RayTaskError as e:  # the command's exception, with its traceback
            raise WorkerFailed("raised", str(e)) from None
        except ray.exceptions.RayError as e:  # the actor died (killed, its process or node lost)
            raise WorkerFailed("died", str(e)) from None

    def wait_any(self, workers: list[_RayWorker], timeout: float | None) -> list[int]:
        import ray

        ready, _ = ray.wait([w.ref for w in workers], num_returns=1, timeout=timeout)
        done = set(ready)
        return [k for k, w in enumerate(workers) if w.ref in done]

    def kill(self, worker: _RayWorker) -> None:
        import ray

        try:
            ray.kill(worker.actor)
        except Exception:
            pass  # already gone
