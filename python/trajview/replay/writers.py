"""Many writers, one `ReplayBuffer`: complete batches from other processes (a `ReplayServer` in the learner)
or from a Ray cluster (the buffer as an actor).

Each writer hands over whole batches (e.g. one `RolloutWorker.sample()`);
the buffer adds each batch whole, under its lock, in the order that writer
sent them. Trajectories are told apart by their ids (``eps_id``: give every
worker its own ``worker_index``), so interleaved writes of different writers
never stitch two trajectories into one slice. Fragments of one episode are
joined when they arrive in order (``t`` continues); a fragment that is not
contiguous with the stored part (steps missing, or an earlier fragment
arriving late) starts a trajectory of its own (see `ReplayBuffer`).

Writers that die never wedge anything: each writer process has its own connection (a Unix stream socket that
it opens itself on its first ``add``), so a writer killed at any point takes only its own bytes with it. Its
batches are framed (`trajview.replay.wire`): a batch cut off mid-transfer is never decoded nor added, only
counted (``server.metrics``). Trust: the server accepts connections from holders of its handle (a random
token, a socket in a folder only this user can open), and decodes raw array bytes, never pickles.
"""

from __future__ import annotations

import hmac
import multiprocessing.util
import os
import secrets
import selectors
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._extras import require
from .._validate import positive_int
from ..views import SampleBatch, concat_samples
from . import wire
from .buffer import ReplayBuffer

__all__ = ["ReplayServer", "ReplayWriter", "ray_replay_buffer"]

_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_WRITERS: weakref.WeakSet[ReplayWriter] = weakref.WeakSet()
_SERVERS: weakref.WeakSet[ReplayServer] = weakref.WeakSet()


class _ServerGone(ConnectionError):
    pass


def _gone(e: BaseException | None = None) -> ConnectionError:
    why = f" ({e})" if e is not None else ""
    return _ServerGone(f"ReplayWriter: the ReplayServer closed this writer's connection{why}; it is closed, "
                           f"or it refused this writer (server.errors says why)")


class _Link:
    """One writer process's connection. Never used by another process: a fork drops the child's copy."""

    __slots__ = ("sock", "pid", "sent", "acked", "_acks", "held")

    def __init__(self, sock: socket.socket, held: int) -> None:
        self.sock: socket.socket | None = sock
        self.pid = os.getpid()
        self.sent = 0  # batches sent
        self.acked = 0  # batches the server has handled
        self._acks = b""
        self.held = held

    def read_acks(self, block: bool) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(4096, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError as e:
            raise _gone(e) from e
        if not data:
            raise _gone()
        buf = self._acks + data
        whole = len(buf) // wire.ACK.size * wire.ACK.size
        if whole:
            self.acked = wire.ACK.unpack_from(buf, whole - wire.ACK.size)[0]
        self._acks = buf[whole:]

    def drop(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def goodbye(self) -> None:
        """Tells the server this writer is done (at process exit, or when its handle goes away), then closes."""
        if self.sock is None or self.pid != os.getpid():
            return
        try:
            self.sock.sendall(wire.frame(wire.BYE, {"held": self.held}), _NOSIGNAL)
        except OSError:
            pass
        self.drop()


class ReplayWriter:
    """A writer's handle (pass it to a `multiprocessing.Process`, any start method): `add` sends a batch whole
    to the learner's `ReplayServer`. ``add`` blocks while ``maxsize`` of this writer's batches are sent but not
    yet added (back-pressure). A batch that cannot be sent (an ``object`` or structured column, something
    that is not an array; ``infos`` is never sent, as no buffer stores it) raises a `TypeError` in ``add``,
    before anything is sent or held; a server that is closed or gone raises a `ConnectionError`. The handle
    connects on its first ``add`` from each process that uses it.

    ``trajs_per_batch=N`` (TorchRL's collector option): only complete trajectories are sent, N per batch.
    The writer keeps each trajectory's rows (by ``traj_key``, default ``eps_id``) until a row with an end
    flag (``terminateds | truncateds``) arrives; `flush` sends the complete ones still held (fewer than N).
    A writer that dies loses what it holds (never visible to samplers); the server counts it
    (``metrics["trajectories_lost"]``). `close` says goodbye (done at process exit too).
    """

    def __init__(self, address: str, token: str, maxsize: int = 64, trajs_per_batch: int | None = None,
                 traj_key: str = "eps_id") -> None:
        if trajs_per_batch is not None and (not isinstance(trajs_per_batch, int) or trajs_per_batch < 1):
            raise ValueError(f"trajs_per_batch must be None or an int >= 1, got {trajs_per_batch!r}")
        self.address = address
        self._token = token
        self.maxsize = positive_int("maxsize", maxsize)
        self.trajs_per_batch = trajs_per_batch
        self.traj_key = traj_key
        self._pending: dict[int, list[SampleBatch]] = {}
        self._complete: list[SampleBatch] = []
        self._lock = threading.Lock()
        self._link: _Link | None = None
        self._fin: Any = None
        _WRITERS.add(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_lock=None, _link=None, _fin=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _WRITERS.add(self)

    def _held(self) -> int:
        return len(self._pending) + len(self._complete)

    def add(self, batch: Mapping[str, Any]) -> None:
        if self.trajs_per_batch is None:
            header, arrays, size = wire.encode_batch(batch, {"held": 0, "trajectories": None})
            self._send(wire.BATCH, header, arrays, size)
            return
        b = batch if isinstance(batch, SampleBatch) else SampleBatch(batch)
        wire.encode_batch(b, {})  # a batch that cannot be sent raises here, before anything is held
        keys = np.asarray(b[self.traj_key])
        n = len(keys)
        ends = np.zeros(n, bool)
        for k in ("terminateds", "truncateds", "dones"):
            if k in b:
                ends |= np.asarray(b[k]).reshape(n, -1).any(axis=1)
        cut = np.ones(n, bool)
        cut[1:] = (keys[1:] != keys[:-1]) | ends[:-1]
        starts = np.flatnonzero(cut).tolist()
        pending = {k: list(v) for k, v in self._pending.items()}
        complete = list(self._complete)
        for a, e in zip(starts, starts[1:] + [n]):
            key = int(keys[a])
            pending.setdefault(key, []).append(b[a:e])
            if ends[e - 1]:
                parts = pending.pop(key)
                complete.append(parts[0] if len(parts) == 1 else concat_samples(parts))
        held_before = self._held()
        self._pending, self._complete = pending, complete  # held from here on: sent below, or when complete
        sent = False
        while len(self._complete) >= self.trajs_per_batch:
            self._send_trajs(self._complete[: self.trajs_per_batch])
            del self._complete[: self.trajs_per_batch]
            sent = True
        if not sent and self._held() != held_before:
            self._send(wire.STATUS, {"held": self._held()}, [], 0)

    def _send_trajs(self, trajs: list[SampleBatch]) -> None:
        batch = trajs[0] if len(trajs) == 1 else concat_samples(trajs)
        extra = {"held": self._held() - len(trajs), "trajectories": len(trajs)}
        header, arrays, size = wire.encode_batch(batch, extra)
        self._send(wire.BATCH, header, arrays, size)

    def flush(self) -> None:
        """Sends the complete trajectories held back (``trajs_per_batch``); incomplete ones stay held."""
        if self._complete:
            self._send_trajs(self._complete)
            self._complete = []

    extend = add  # TorchRL's name

    def close(self) -> None:
        """Says goodbye to the server (its connection closes; a later ``add`` connects again)."""
        with self._lock:
            link, self._link = self._link, None
            if link is not None:
                link.held = self._held()
                link.goodbye()
            if self._fin is not None:
                self._fin.cancel()
                self._fin = None

    def _connect(self) -> _Link:
        link = self._link
        if link is not None and link.sock is not None and link.pid == os.getpid():
            return link
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.address)
            sock.sendall(wire.frame(wire.HELLO, {"token": self._token, "pid": os.getpid(), "held": self._held()}),
                         _NOSIGNAL)
        except OSError as e:
            sock.close()
            raise ConnectionError(f"ReplayWriter: cannot reach the ReplayServer at {self.address!r} ({e}); it is "
                                  f"closed, or this handle comes from another machine") from e
        if self._fin is not None:
            self._fin.cancel()
        self._link = link = _Link(sock, self._held())
        self._fin = multiprocessing.util.Finalize(self, _Link.goodbye, args=(link,), exitpriority=0)
        return link

    def _send(self, kind: int, header: dict[str, Any], arrays: list[np.ndarray], size: int) -> None:
        head = wire.frame(kind, header, size)
        with self._lock:
            link = self._connect()
            assert link.sock is not None
            try:
                if kind == wire.BATCH and link.sent - link.acked >= max(1, self.maxsize // 2):
                    link.read_acks(block=False)
                    while link.sent - link.acked >= self.maxsize:
                        link.read_acks(block=True)
                self._write(link.sock, head, header.get("columns", []), arrays, size)
            except BaseException as e:
                link.drop()  # a batch cut off mid-send: the server drops the part that came, and counts it
                self._link = None
                if isinstance(e, OSError) and not isinstance(e, _ServerGone):
                    raise _gone(e) from e
                raise
            if kind == wire.BATCH:
                link.sent += 1
            link.held = int(header.get("held", 0))

    @staticmethod
    def _write(sock: socket.socket, head: bytes, columns: list[Any], arrays: list[np.ndarray], size: int) -> None:
        parts: list[Any] = [head]
        pos = 0
        for (_, _, _, offset), arr in zip(columns, arrays):
            if offset > pos:
                parts.append(bytes(offset - pos))
            if arr.nbytes:
                parts.append(arr.reshape(-1).view(np.uint8).data)
            pos = offset + arr.nbytes
        if size > pos:
            parts.append(bytes(size - pos))
        if size <= wire.SMALL:
            sock.sendall(b"".join(parts), _NOSIGNAL)
            return
        for part in parts:
            sock.sendall(part, _NOSIGNAL)


def _release(listener: socket.socket, folder: str, owner: int) -> None:
    listener.close()
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


class ReplayServer:
    """Feeds ``buffer`` from writer processes: `writer()` handles send batches over their own connections, and
    a thread of this process adds them (``buffer.add``) as they come, while other threads sample.

    ``maxsize``: batches one writer may have sent and not yet added before its ``add`` blocks. ``context`` is
    accepted for compatibility (writers connect by address, so any start method works). Errors from ``add``
    (a bad batch) are kept in ``errors`` and the server goes on. Use as a context manager, or `start` /
    `close`.

    A writer killed at any point (even mid-batch) loses only what it had not sent whole: a batch cut off is
    dropped, never added; the other writers go on. ``metrics`` counts writers (``writers_connected``,
    ``writers_closed``: said goodbye, ``writers_lost``: went away without one), batches (``batches_added``,
    ``batches_failed``: refused by ``buffer.add``, in ``errors``; ``batches_torn``: cut off), and
    ``trajectories_lost`` (trajectories writers went away holding, unsent, plus those of torn batches).

    Writers connect over a Unix socket (POSIX). Trust: like `multiprocessing` itself, the server takes data
    from its own writer processes (holders of the handle's random token; the socket lives in a folder only
    this user can open). It never unpickles: arrays come as raw bytes with a JSON header of dtypes and shapes.
    """

    def __init__(self, buffer: ReplayBuffer, *, context: Any = None, maxsize: int = 64) -> None:
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer must be a tv.ReplayBuffer, got {type(buffer).__name__}")
        self.buffer = buffer
        self.maxsize = positive_int("maxsize", maxsize)
        folder = tempfile.mkdtemp(prefix="tv-replay-")  # mode 0700
        if len(folder) > 90:  # AF_UNIX paths are short
            shutil.rmtree(folder)
            folder = tempfile.mkdtemp(prefix="tv-replay-", dir="/tmp")
        self.address = os.path.join(folder, "s")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._finalizer = weakref.finalize(self, _release, self._listener, folder, os.getpid())
        self._listener.bind(self.address)
        self._listener.listen(256)
        self._listener.setblocking(False)
        self._token = secrets.token_hex(16)
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        self._peers: list[wire.Peer] = []
        self._close_at: float | None = None
        self._cut = 0
        self._closed = False
        self._mlock = threading.Lock()
        self.errors: list[BaseException] = []
        self.batches_added = 0
        self.steps_added = 0
        self._counts = dict.fromkeys(("writers_connected", "writers_closed", "writers_lost", "batches_failed",
                                      "batches_torn", "trajectories_lost"), 0)
        _SERVERS.add(self)

    @property
    def metrics(self) -> dict[str, int]:
        """Counters (see the class doc), with ``batches_added``, ``steps_added`` and ``writers_active``."""
        with self._mlock:
            out = dict(self._counts, batches_added=self.batches_added, steps_added=self.steps_added)
            out["writers_active"] = sum(p.hello for p in self._peers)
        return out

    def _count(self, **inc: int) -> None:
        with self._mlock:
            for k, v in inc.items():
                self._counts[k] += v

    def writer(self, trajs_per_batch: int | None = None, traj_key: str = "eps_id") -> ReplayWriter:
        """A handle for writer processes (``trajs_per_batch``: send complete trajectories only, see
        `ReplayWriter`)."""
        if self._closed:
            raise RuntimeError("ReplayServer.writer: the server is closed")
        return ReplayWriter(self.address, self._token, self.maxsize, trajs_per_batch, traj_key)

    def start(self) -> ReplayServer:
        """Starts the thread that adds incoming batches (start writer processes that fork before this)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="trajview-replay-server", daemon=True)
            self._thread.start()
        return self

    # -- the server's thread ------------------------------------------------

    def _drain(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        closing = False
        try:
            while True:
                timeout = None
                if self._close_at is not None:
                    if not closing:
                        closing = True
                        self._accept(sel)  # connections made before close(): their batches count
                        sel.unregister(self._listener)
                        for p in self._peers:
                            p.must_read = wire.unread(p.sock)
                    if all(p.must_read <= 0 and not p.partial() for p in self._peers):
                        return
                    timeout = self._close_at - time.monotonic()
                    if timeout <= 0:
                        return
                if any(p.out for p in self._peers):
                    timeout = 0.05 if timeout is None else min(timeout, 0.05)
                for key, _ in sel.select(timeout):
                    if key.data is None:
                        self._accept(sel)
                    elif key.data is self._wake_r:
                        self._wake_r.recv(64)
                    elif not (closing and key.data.must_read <= 0 and not key.data.partial()):
                        self._read(sel, key.data, closing)
                for p in self._peers:
                    if p.out:
                        self._flush(p)
        except BaseException as e:  # a bug here: recorded (never a silent stop), and the server closes
            self.errors.append(e)
        finally:
            sel.close()
            self._shut()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            peer = wire.Peer(sock)
            with self._mlock:
                self._peers.append(peer)
            sel.register(sock, selectors.EVENT_READ, peer)

    def _read(self, sel: selectors.BaseSelector, peer: wire.Peer, closing: bool) -> None:
        try:
            frames = peer.feed(closing)
        except wire.ProtocolError as e:
            frames, peer.error = [], e
        try:
            for frame in frames:
                self._handle(peer, *frame)
        except wire.ProtocolError as e:
            peer.error = e
        if peer.out:
            self._flush(peer)
        if peer.error is not None:
            self.errors.append(wire.ProtocolError(f"ReplayServer: writer pid {peer.pid}: {peer.error}; dropped it"))
            self._end(sel, peer)
        elif peer.eof:
            self._end(sel, peer)

    def _handle(self, peer: wire.Peer, kind: int, header: dict[str, Any], payload: np.ndarray) -> None:
        if not peer.hello:
            if kind != wire.HELLO:
                raise wire.ProtocolError(f"the first frame is a {wire.KINDS[kind]}, expected a hello")
            if not hmac.compare_digest(str(header.get("token", "")).encode(), self._token.encode()):
                raise wire.ProtocolError("a connection with a wrong token (not this server's writer)")
            peer.pid, peer.held, peer.hello = header.get("pid"), wire.held(header), True
            self._count(writers_connected=1)
            return
        if kind == wire.HELLO:
            raise wire.ProtocolError("a second hello")
        peer.held = wire.held(header)
        if kind == wire.BYE:
            peer.bye = True
        if kind != wire.BATCH:
            return
        try:
            steps = self.buffer.add(wire.decode_batch(header, payload))
        except Exception as e:  # a bad batch: kept, the others go on
            self.errors.append(e)
            self._count(batches_failed=1)
        else:
            with self._mlock:
                self.steps_added += steps
                self.batches_added += 1
        peer.handled += 1
        peer.out = wire.ACK.pack(peer.handled)  # only the newest count matters: sent after the read

    @staticmethod
    def _flush(peer: wire.Peer) -> None:
        try:
            n = peer.sock.send(peer.out, _NOSIGNAL)
        except BlockingIOError:
            return
        except OSError:  # the writer is gone: its reads end the connection
            n = len(peer.out)
        peer.out = peer.out[n:]

    def _end(self, sel: selectors.BaseSelector, peer: wire.Peer) -> None:
        """A writer's connection ended: a frame cut off is dropped and counted."""
        sel.unregister(peer.sock)
        peer.sock.close()
        with self._mlock:
            self._peers.remove(peer)
        if not peer.hello:
            return
        torn = peer.partial() and peer.torn_batch()
        in_torn = peer.header.get("trajectories") if torn and peer.stage == 2 else None
        self._count(writers_closed=int(peer.bye), writers_lost=int(not peer.bye), batches_torn=int(torn),
                    trajectories_lost=peer.held + (in_torn if type(in_torn) is int and in_torn > 0 else 0))

    def _shut(self) -> None:
        with self._mlock:
            peers, self._peers = self._peers, []
        for p in peers:
            if p.hello and p.partial() and p.torn_batch():
                self._cut += 1
            elif p.hello and not p.partial():
                try:
                    ended = p.sock.recv(1, socket.MSG_PEEK) == b""  # gone before close() (nothing sent after)
                except BlockingIOError:
                    ended = False
                except OSError:
                    ended = True
                if ended:
                    self._count(writers_closed=int(p.bye), writers_lost=int(not p.bye), trajectories_lost=p.held)
            p.sock.close()
        self._count(batches_torn=self._cut)
        self._finalizer()
        self._wake_r.close()

    # -- the caller's side --------------------------------------------------

    def close(self, timeout: float | None = 60.0) -> None:
        """Adds every batch sent before this call, then stops the thread; returns within ``timeout`` seconds
        (plus the time of one ``buffer.add``). Batches still being sent at the deadline (a writer stalled
        mid-batch) are dropped and counted (``metrics["batches_torn"]``), and a `TimeoutError` says so; a
        writer that died is no reason to wait."""
        if self._closed:
            return
        if self._thread is None:
            self.start()
        assert self._thread is not None
        self._closed = True
        self._close_at = time.monotonic() + (float("inf") if timeout is None else timeout)
        self._wake_w.send(b"x")
        self._thread.join(None if timeout is None else timeout + 5.0)
        self._wake_w.close()
        if self._thread.is_alive():
            raise TimeoutError(f"ReplayServer.close: still adding a batch after {timeout} s")
        if self._cut:
            raise TimeoutError(f"ReplayServer.close: {self._cut} writer(s) were still sending a batch after "
                               f"{timeout} s; those batches were dropped (metrics['batches_torn'])")

    def pending(self) -> bool:
        """Whether batches wait to be added (approximate)."""
        with self._mlock:
            peers = list(self._peers)
        try:
            return any(p.partial() or wire.unread(p.sock) > 0 for p in peers)
        except (OSError, ValueError):
            return False

    def _forget_in_child(self) -> None:
        """In a forked child: close this process's copies of the server's sockets (never the parent's)."""
        self._closed = True
        for s in [self._listener, self._wake_r, self._wake_w] + [p.sock for p in self._peers]:
            s.close()
        self._peers = []

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _after_fork_in_child() -> None:
    for w in list(_WRITERS):
        w._lock = threading.Lock()
        link, w._link = w._link, None
        if link is not None:
            link.drop()  # this process's copy only; the parent's connection stays open
        if w._fin is not None:
            w._fin.cancel()
            w._fin = None
    for s in list(_SERVERS):
        s._forget_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def ray_replay_buffer(capacity: int, *, ray_options: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """A `ReplayBuffer` as a Ray actor: ``buf.add.remote(batch)`` from any worker of the cluster,
    ``ray.get(buf.sample.remote(256))`` in the learner. The actor runs one call at a time, so every batch is
    added whole. ``kwargs`` go to `ReplayBuffer`; ``ray_options`` to ``.options()``. Needs ``ray``."""
    ray = require("ray", "ray_replay_buffer")

    actor = ray.remote(ReplayBuffer)
    if ray_options:
        actor = actor.options(**ray_options)
    return actor.remote(capacity, **kwargs)
