"""The replay writers' wire format: framed messages on one stream socket per writer, arrays as raw bytes.

A frame is a fixed prefix (magic ``TVRW``, kind, JSON length, payload length), a JSON header and, for a batch,
the payload: every column's bytes, each at an offset aligned to 64 bytes. Nothing is unpickled: a column is
rebuilt from its dtype string (no object dtype), shape and offset, checked against the payload's length. A
frame whose bytes stop early (the writer died mid-send) is never decoded. The server answers each batch with
an acknowledgement: the number of that writer's batches it has handled (added, or refused with an error).
`Peer` is the server's side of one connection: it parses frames as their bytes arrive, never blocking.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import struct
import termios
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..views import MultiAgentBatch, SampleBatch
from ..views.lazy_view import LazyView
from ..views.nest import is_nested_value
from ..views.sample_batch import _rebuild
from .buffer import _as_numpy
from .schema import dtype_from_str

MAGIC = b"TVRW"
PREFIX = struct.Struct("<4sB3xIQ")  # magic, kind, JSON bytes, payload bytes
ACK = struct.Struct("<Q")  # batches of this writer handled so far
HELLO, BATCH, STATUS, BYE = 1, 2, 3, 4
KINDS = {HELLO: "hello", BATCH: "batch", STATUS: "status", BYE: "goodbye"}
ALIGN = 64
MAX_HEADER = 1 << 24


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 1 << 40


#: A batch frame's payload is refused, before anything is allocated, above the machine's physical memory: no such
#: batch could be held (and an allocator may abort rather than fail on an absurd size).
MAX_PAYLOAD = _physical_memory()
#: Payloads this small are joined into one send.
SMALL = 1 << 16
_CHUNK = 1 << 22  # most bytes read per recv
_STAGING = 1 << 18  # a connection's read-ahead buffer (many small frames per recv)
_INFOS = SampleBatch.INFOS


class ProtocolError(ValueError):
    """Bytes from a writer that are not a valid frame (never expected from trajview's own writers)."""


def frame(kind: int, header: Mapping[str, Any], payload_len: int = 0) -> bytes:
    """The prefix and JSON header of a frame (its payload, if any, follows)."""
    text = json.dumps(header, separators=(",", ":")).encode()
    return PREFIX.pack(MAGIC, kind, len(text), payload_len) + text


def parse_prefix(raw: bytes) -> tuple[int, int, int]:
    """(kind, header bytes, payload bytes) of a frame prefix."""
    magic, kind, hlen, plen = PREFIX.unpack(raw)
    if magic != MAGIC:
        raise ProtocolError(f"a frame starts with {magic!r}, expected {MAGIC!r}")
    if kind not in KINDS:
        raise ProtocolError(f"unknown frame kind {kind}")
    if not 0 < hlen <= MAX_HEADER:
        raise ProtocolError(f"a {KINDS[kind]} frame's header has {hlen} bytes, expected 1 to {MAX_HEADER}")
    if kind != BATCH and plen:
        raise ProtocolError(f"a {KINDS[kind]} frame carries {plen} payload bytes, expected none")
    return kind, hlen, plen


def parse_header(raw: bytes | bytearray) -> dict[str, Any]:
    try:
        header = json.loads(bytes(raw))
    except (ValueError, RecursionError) as e:  # (not UTF-8, not JSON, an int too long, nested too deep)
        raise ProtocolError(f"a frame's header is not JSON: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"a frame's header is a JSON {type(header).__name__}, expected an object")
    return header


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def encode_batch(batch: Any, extra: Mapping[str, Any]) -> tuple[dict[str, Any], list[np.ndarray], int]:
    """(header, column arrays in payload order, payload bytes) of a batch, or a `TypeError` naming what cannot
    be sent. Nothing is sent here, so a batch that cannot be sent raises in the writer's own ``add``.

    A `SampleBatch` keeps its per-sequence names, pruned views and view columns; a plain mapping stays a plain
    mapping (one with nested values becomes a `SampleBatch`, as `ReplayBuffer.add` makes it). ``infos`` is not
    sent: no replay buffer stores it.
    """
    if isinstance(batch, MultiAgentBatch):
        raise TypeError("ReplayWriter.add takes a SampleBatch; add each policy batch of a MultiAgentBatch separately")
    if not isinstance(batch, Mapping):
        raise TypeError(f"ReplayWriter.add takes a SampleBatch or a mapping of columns, got {type(batch).__name__}")
    header: dict[str, Any] = dict(extra)
    if not isinstance(batch, SampleBatch) and any(is_nested_value(v) for k, v in batch.items() if k != _INFOS):
        batch = SampleBatch(batch)  # as ReplayBuffer.add would: nested values stored by leaf
    if isinstance(batch, SampleBatch):
        items = [(k, dict.__getitem__(batch, k)) for k in dict.keys(batch)]
        header.update(type="SampleBatch", seq_keys=sorted(batch._extra_seq_keys), pruned=sorted(batch._pruned),
                      view_columns=sorted(batch.view_columns))
    else:
        items = list(batch.items())
        header["type"] = "dict"
    columns, arrays, offset = [], [], 0
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"ReplayWriter.add: column names must be str, got {name!r}")
        if name == _INFOS:
            continue
        try:
            arr = np.asarray(value) if isinstance(value, LazyView) else np.asarray(_as_numpy(value))
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"ReplayWriter.add: column {name!r} cannot be sent as an array: {e}") from e
        if arr.dtype.hasobject or arr.dtype.fields is not None:
            raise TypeError(
                f"ReplayWriter.add: column {name!r} has dtype {arr.dtype}, which cannot be sent as raw bytes; "
                f"a replay buffer stores bool, int and float columns (leave the column out of the batch)"
            )
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        columns.append([name, arr.dtype.str, list(arr.shape), offset])
        arrays.append(arr)
        offset = _aligned(offset + arr.nbytes)
    header["columns"] = columns
    return header, arrays, offset


def _int(x: Any, what: str) -> int:
    if type(x) is not int or x < 0:
        raise ProtocolError(f"{what} must be an int >= 0, got {x!r}")
    return x


def _names(header: Mapping[str, Any], key: str) -> frozenset[str]:
    v = header.get(key, [])
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ProtocolError(f"a batch header's {key!r} must be a list of names, got {v!r}")
    return frozenset(v)


def payload_size(header: Mapping[str, Any]) -> int:
    """The payload bytes a batch header announces (its columns checked: names, dtypes, shapes, offsets)."""
    cols = header.get("columns")
    if header.get("type") not in ("SampleBatch", "dict") or not isinstance(cols, list):
        raise ProtocolError("a batch header needs a 'type' (SampleBatch or dict) and a list of 'columns'")
    end = 0
    for col in cols:
        if not (isinstance(col, list) and len(col) == 4 and isinstance(col[0], str) and isinstance(col[1], str)
                and isinstance(col[2], list)):
            raise ProtocolError(f"a column entry must be [name, dtype, shape, offset], got {col!r}")
        name, dts, shape, offset = col
        dt = dtype_from_str(dts)  # (checked before numpy parses it: never a comma or tuple form)
        if dt is None:
            raise ProtocolError(f"column {name!r}: dtype {dts[:80]!r} is not a numpy dtype string (dtype.str)")
        if dt.hasobject or dt.fields is not None or dt.subdtype is not None:
            raise ProtocolError(f"column {name!r}: dtype {dts!r} cannot be rebuilt from raw bytes")
        n = dt.itemsize
        for d in shape:
            n *= _int(d, f"column {name!r}: a shape entry")
        if _int(offset, f"column {name!r}: the offset") % ALIGN or offset < end:
            raise ProtocolError(f"column {name!r}: offset {offset} is not aligned after the previous column")
        end = _aligned(offset + n)
    return end


def decode_batch(header: Mapping[str, Any], payload: np.ndarray) -> SampleBatch | dict[str, np.ndarray]:
    """The batch a writer encoded (arrays are views of ``payload``; `payload_size` checked the header)."""
    cols: dict[str, np.ndarray] = {}
    for name, dts, shape, offset in header["columns"]:
        dt = dtype_from_str(dts)
        assert dt is not None
        n = math.prod(shape) * dt.itemsize
        arr = np.empty(shape, dt) if n == 0 else payload[offset:offset + n].view(dt).reshape(shape)
        cols[name] = arr
    if header["type"] == "dict":
        return cols
    return _rebuild(SampleBatch, cols, _names(header, "seq_keys"), _names(header, "pruned"),
                    _names(header, "view_columns"))


def unread(sock: socket.socket) -> int:
    """Bytes waiting in a socket's receive queue."""
    raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


class Peer:
    """The server's side of one writer's connection: frames parsed as their bytes arrive."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid: Any = None
        self.hello = self.bye = self.eof = False
        self.error: ProtocolError | None = None
        self._staging = bytearray(_STAGING)
        self.held = 0
        self.handled = 0
        self.out = b""  # acknowledgements not yet sent
        self.must_read = 0  # at close: bytes that were sent before close() and must be read
        self.kind = 0
        self.header: dict[str, Any] = {}
        self._start(0, bytearray(PREFIX.size))

    def _start(self, stage: int, buf: Any) -> None:
        self.stage, self.buf, self.got = stage, buf, 0

    def partial(self) -> bool:
        return self.stage != 0 or self.got > 0

    def torn_batch(self) -> bool:
        """Whether the frame cut off here is a batch (its kind byte arrived)."""
        return self.kind == BATCH if self.stage else self.got > 4 and self.buf[4] == BATCH

    def feed(self, closing: bool) -> list[tuple[int, dict[str, Any], Any]]:
        """Reads what is there and returns the frames it completes (kind, header, payload); sets ``eof`` when
        the writer is gone, ``error`` at bytes that are no frame. Small frames are read many at a time; a big
        payload straight into its array. Closing, it reads no further than the bytes sent before close() and
        the frame they end in."""
        want = len(self.buf) - self.got
        limit = _STAGING if not closing else self.must_read if self.must_read > 0 else want
        direct = self.stage == 2 and want >= _STAGING // 4
        target = memoryview(self.buf)[self.got:] if direct else memoryview(self._staging)
        try:
            n = self.sock.recv_into(target, min(len(target), limit, _CHUNK))
        except BlockingIOError:
            return []
        except OSError:
            n = 0
        if n == 0:
            self.eof = True
            return []
        self.must_read -= n
        if direct:
            self.got += n
            whole = self._next() if self.got == len(self.buf) else None
            return [] if whole is None else [whole]
        frames = []
        pos = 0
        try:
            while pos < n:
                take = min(len(self.buf) - self.got, n - pos)
                memoryview(self.buf)[self.got:self.got + take] = target[pos:pos + take]
                self.got += take
                pos += take
                if self.got == len(self.buf):
                    frame = self._next()
                    if frame is not None:
                        frames.append(frame)
        except ProtocolError as e:
            self.error = e
        return frames

    def _next(self) -> tuple[int, dict[str, Any], Any] | None:
        """The current stage's bytes are all there: the next stage, or a whole frame."""
        if self.stage == 0:
            self.kind, hlen, plen = parse_prefix(bytes(self.buf))
            self._plen = plen
            self._start(1, bytearray(hlen))
            return None
        if self.stage == 1:
            self.header = parse_header(self.buf)
            if self.kind == BATCH:
                size = payload_size(self.header)
                if size != self._plen:
                    raise ProtocolError(f"a batch's columns take {size} bytes, its frame says {self._plen}")
                if size > MAX_PAYLOAD:
                    raise ProtocolError(f"a batch of {size} bytes does not fit in memory")
                if size:
                    try:
                        payload = np.empty(size, np.uint8)
                    except (MemoryError, ValueError):  # too big for this machine, or for an array
                        raise ProtocolError(f"a batch of {size} bytes does not fit in memory") from None
                    self._start(2, payload)
                    return None
            done = (self.kind, self.header, np.empty(0, np.uint8))
        else:
            done = (self.kind, self.header, self.buf)
        self._start(0, bytearray(PREFIX.size))
        return done


def held(header: Mapping[str, Any]) -> int:
    """The trajectories a writer says it holds unsent (its frames carry the count)."""
    n = header.get("held", 0)
    if type(n) is not int or n < 0:
        raise ProtocolError(f"'held' must be an int >= 0, got {n!r}")
    return n
