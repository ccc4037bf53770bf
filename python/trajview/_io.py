"""Files that survive a crash and are verified when read: every file trajview writes goes through here.

- `atomic_write`: a whole file, written to a temporary sibling, fsynced, renamed over the target, and the
  folder fsynced: a process killed at any byte leaves the old complete file or the new complete one.
- `append_line`: one line appended and fsynced (metrics rows); `read_lines` drops a partial last line.
- `Manifest` / `commit_folder` / `read_manifest`: a folder of several files written as one unit. The files go
  into a new generation sub-folder; ``manifest.json`` (each file's size and crc32, a format name and version,
  any JSON metadata, and a crc32 of all of that) is replaced atomically last, and only then are older
  generations removed. Whatever byte a writer is killed at, the manifest names the old complete set or the new
  complete one; a manifest whose own checksum differs, or a file whose size or checksum differs from its
  manifest entry, is refused, naming the file.
- `PathLock`: one owner per path (an exclusive ``fcntl.flock`` on ``<folder>/.lock`` holding the owner's pid).
  The kernel drops the lock when its process dies, so a lock left by a killed process never blocks the next.

Errors: `FileIntegrityError` (a damaged, truncated, mixed or foreign file: names the file and what differs),
`PathInUseError` (names the path and the holder's pid), and `OSError` from the system (a full disk) naming
the path, with the earlier complete state left in place.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import secrets
import shutil
import stat
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import _core
from .errors import FileIntegrityError, PathInUseError

__all__ = [
    "CHUNK",
    "MAX_MANIFEST",
    "manifest_bytes",
    "Manifest",
    "PathLock",
    "append_line",
    "atomic_write",
    "commit_folder",
    "crc32_combine",
    "crc32_of",
    "fsync_dir",
    "fsync_file",
    "read_json",
    "read_lines",
    "read_manifest",
    "read_regular",
    "read_verified",
]

#: Bytes per read/write/checksum step (large enough to run at memory speed, small enough to show progress).
CHUNK = 1 << 24
MANIFEST = "manifest.json"
_GEN_PREFIX = "gen-"


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Makes a rename or a new file in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Makes what was written to the file at ``path`` durable (e.g. lines appended with ``sync=False``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: zlib's crc32 (``crc32(data, crc)``, the GIL released): the C++ core's carry-less multiply folding where the
#: CPU has it (several times zlib's speed: the checksum of a dump or a load then costs far less than its IO).
_crc32: Callable[[Any, int], int] = _core.crc32 if _core.crc32_accelerated() else zlib.crc32


def crc32_of(data: Any, crc: int = 0) -> int:
    """zlib's crc32 of a bytes-like object (any contiguous buffer: a numpy array's memory, no copy)."""
    view = memoryview(data).cast("B")
    for i in range(0, len(view), CHUNK):
        crc = _crc32(view[i:i + CHUNK], crc)
    return crc & 0xFFFFFFFF


_CRC_POLY = 0xEDB88320  # zlib's crc32, reflected


def _mult_mod_p(a: int, b: int) -> int:
    """a(x) * b(x) modulo the crc32 polynomial (reflected: bit 31 holds x^0)."""
    prod = 0
    for i in range(31, -1, -1):
        if a >> i & 1:
            prod ^= b
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1
    return prod


#: x^(2^k) modulo the polynomial, k = 0..63 (x^1 is bit 30).
_X_POW2 = [1 << 30]
for _ in range(63):
    _X_POW2.append(_mult_mod_p(_X_POW2[-1], _X_POW2[-1]))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The crc32 of A + B from crc32(A), crc32(B) and len(B) (zlib's crc32_combine): crc1 shifted by len2 bytes
    (multiplied by x^(8 len2)), plus crc2."""
    xn, k, n = 1 << 31, 3, len2  # x^0; 8 * len2 = len2 << 3
    while n:
        if n & 1:
            xn = _mult_mod_p(_X_POW2[k % 64], xn)
        n >>= 1
        k += 1
    return _mult_mod_p(xn, crc1) ^ crc2


class _CrcPipe:
    """crc32 of consecutive chunks, each summed by helper threads (its parts at once, combined with
    `crc32_combine`) while the caller writes it or reads the next one (the crc32 and file IO release the GIL):
    the checksum costs little beyond the IO. One chunk in flight at a time; small chunks are summed inline."""

    STEP = 1 << 23  # bytes per pipelined chunk
    MIN = 1 << 20  # smaller chunks: no thread
    #: Threads summing one chunk (zlib's crc32 runs ~2.5 GB/s a core; the core's folding ~10: one is enough).
    THREADS = 1 if _crc32 is not zlib.crc32 else max(1, min(4, os.cpu_count() or 1))

    def __init__(self) -> None:
        self.crc = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Future[int], int]] = []

    def push(self, chunk: memoryview) -> None:
        """Starts the crc of ``chunk`` (which must stay unchanged until the next `push` or `result`)."""
        self.result()
        if len(chunk) < self.MIN:
            self.crc = _crc32(chunk, self.crc)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.THREADS, thread_name_prefix="trajview-crc")
        part = -(-len(chunk) // self.THREADS)
        self._pending = [(self._pool.submit(_crc32, chunk[i:i + part], 0), len(chunk[i:i + part]))
                         for i in range(0, len(chunk), part)]

    def result(self) -> int:
        pending, self._pending = self._pending, []
        for done, n in pending:
            self.crc = crc32_combine(self.crc, done.result(), n)
        return self.crc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _CrcFile:
    """A binary file being written that keeps its size and crc32 (what a manifest records). Each large part
    written is handed to the disk at once (`_core.start_writeback`: a hint, not a sync), so the writer's fsync
    finds most of the file already written instead of all of it."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.size = 0
        self.crc = 0
        try:
            self._fd: int | None = f.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        pipe = _CrcPipe()
        pipe.crc = self.crc
        try:
            for at in range(0, len(view), _CrcPipe.STEP):
                part = view[at:at + _CrcPipe.STEP]
                pipe.push(part)  # summed while it is written
                done = 0
                while done < len(part):
                    done += self._f.write(part[done:]) or 0
                if self._fd is not None and len(part) >= _CrcPipe.MIN:
                    _core.start_writeback(self._fd, self.size + at, len(part))
            self.crc = pipe.result()
        finally:
            pipe.close()
        self.size += len(view)
        return len(view)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An `OSError` without a file name (a full disk while writing) gets ``path``'s."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            raise OSError(e.errno, f"{e.strerror or e}: writing {path}", str(path)) from e
        raise


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _keep_mode(path: Path, fd: int) -> None:
    """The permissions of the regular file at ``path`` (if there is one) given to the file open at ``fd``, which
    will replace it: a rewrite keeps what the user set (a new file gets the umask's)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(st.st_mode))


def atomic_write(path: str | os.PathLike[str], data: bytes | Callable[[Any], None],
                 before_rename: Callable[[], None] | None = None) -> tuple[int, int]:
    """Writes ``path`` whole or not at all: ``data`` (bytes, or a function that writes to the file object it is
    given) goes to a temporary sibling, which is fsynced and renamed over ``path``; then the folder is fsynced.
    ``before_rename`` (if given) runs once the sibling is fsynced, just before the rename (e.g. waits for other
    files to be durable); if it raises, nothing is renamed. Returns the file's ``(size, crc32)``. On any error
    before the rename (a full disk: `OSError` naming ``path``) the temporary file is removed and ``path`` is as it
    was; an error after it (the folder's fsync, an interrupt) leaves ``path`` the new file."""
    path = Path(path)
    tmp = _tmp_sibling(path)
    try:
        with open(tmp, "wb") as raw:
            _keep_mode(path, raw.fileno())
            f = _CrcFile(raw)
            if callable(data):
                data(f)
            else:
                f.write(data)
            raw.flush()
            os.fsync(raw.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if e.filename is None:
            raise OSError(e.errno, f"{e.strerror or e}: writing {path}", str(path)) from e
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return f.size, f.crc


def append_line(path: str | os.PathLike[str], line: str, sync: bool = True) -> None:
    """Appends one line (``line`` without its newline) and fsyncs (``sync``; else the line is handed to the OS,
    which keeps it through a crash of the process but not of the machine, until an `fsync_file`): a kill
    mid-write leaves at most a partial last line, which `read_lines` drops. A file whose last line was left
    partial gets a newline first."""
    path = Path(path)
    # A FIFO, device or folder in the file's place: refused without blocking or writing into it (`open_regular`'s rule).
    fd = _open_regular_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    with open(fd, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode() + b"\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())


def open_append(path: str | os.PathLike[str]) -> int:
    """A descriptor appending to the existing regular file ``path`` (`open_regular`'s rule: a FIFO, folder or device
    in its place is a `FileIntegrityError`; FileNotFoundError when there is none), for `write_line`."""
    return _open_regular_fd(Path(path), os.O_WRONLY | os.O_APPEND)


def write_line(fd: int, line: str, sync: bool = True) -> None:
    """Appends ``line`` and its newline through ``fd`` (`open_append`'s: the caller knows the file's last line is
    whole, as `append_line` checks), all its bytes (a short write goes on), fsynced if ``sync``."""
    data = memoryview(line.encode() + b"\n")
    while data:
        data = data[os.write(fd, data):]
    if sync:
        os.fsync(fd)


#: Most bytes a file of lines (`read_lines`: a run's metrics) may hold: a bound, so that a huge file or a device in
#: its place is refused instead of read into memory (a row an iteration: far beyond any run's).
MAX_LINES_FILE = 1 << 30


def read_lines(path: str | os.PathLike[str], limit: int = MAX_LINES_FILE) -> tuple[list[str], bool]:
    """The complete lines of a text file, and whether a partial last line (no newline: a write killed midway)
    was dropped. A FIFO, device or folder in its place, or a file above ``limit`` bytes, is a `FileIntegrityError`
    naming it (`read_regular`), refused without blocking or reading it."""
    data = read_regular(path, limit)
    if not data:
        return [], False
    partial = not data.endswith(b"\n")
    lines = data.split(b"\n")[:-1]
    try:
        return [ln.decode() for ln in lines], partial
    except UnicodeDecodeError as e:
        raise FileIntegrityError(path, f"not UTF-8 text ({e})") from None


#: What a path that is not a regular file is, by its mode.
_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int) -> FileIntegrityError:
    got = next((what for test, what in _NOT_REGULAR if test(mode)), f"a file of mode {stat.filemode(mode)}")
    return FileIntegrityError(path, f"expected a regular file, got {got}")


def check_regular(path: str | os.PathLike[str]) -> None:
    """`FileIntegrityError` naming ``path`` unless it is a regular file (or a link to one); FileNotFoundError when
    there is none."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(Path(path), mode)


def open_regular(path: str | os.PathLike[str]) -> io.FileIO:
    """``path`` opened for reading (unbuffered), if it is a regular file (or a link to one): a FIFO, folder,
    device or socket in a file's place is a `FileIntegrityError` naming it, refused without blocking or reading
    (opened non-blocking; its kind is the open file's own, so nothing can swap it in between). FileNotFoundError
    when there is none."""
    return io.FileIO(_open_regular_fd(Path(path), os.O_RDONLY), "rb", closefd=True)


def _open_regular_fd(path: Path, flags: int) -> int:
    """`open_regular`'s rule for any ``flags`` (e.g. appending, creating): a descriptor of ``path``, blocking, if the
    open file is a regular one; else a `FileIntegrityError` naming it, refused without blocking."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileNotFoundError:
        raise
    except OSError as e:  # (a socket cannot be opened: ENXIO; a folder opened for writing: EISDIR)
        check_regular(path)
        raise FileIntegrityError(path, f"cannot be opened ({e.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


#: Most bytes a manifest may hold (far beyond any committed set's: a bound, so that a huge file or a device in
#: its place is refused instead of read into memory).
MAX_MANIFEST = 1 << 26


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of a regular file (`open_regular`: a FIFO, folder, device or socket is a `FileIntegrityError`
    naming it, refused without blocking); above ``limit`` bytes, a `FileIntegrityError` naming it, refused
    before it is read. FileNotFoundError when there is none."""
    path = Path(path)
    with open_regular(path) as f:
        if limit is None:
            return f.readall()
        size = os.fstat(f.fileno()).st_size
        data = b""
        if size <= limit:
            # The size it has, and a byte more: a buffer of the file's size, not of the limit's (a read of
            # limit + 1 bytes allocates them all first). A file that grew since is read on up to the limit.
            data = f.read(size + 1)
            if len(data) > size:
                data += f.read(limit + 1 - len(data))
        if size > limit or len(data) > limit:
            raise FileIntegrityError(path, f"holds {max(size, len(data))} bytes, expected at most {limit}")
        return data


def read_json(path: str | os.PathLike[str], what: str, limit: int | None = None) -> Any:
    """A JSON file's value; `FileIntegrityError` naming the file (``what`` says what it should be) when it is
    missing, empty, not JSON, not a regular file (`open_regular`) or above ``limit`` bytes (`read_regular`).
    (Parsing JSON runs no code.)"""
    path = Path(path)
    try:
        text = read_regular(path, limit).decode("utf-8")
    except FileNotFoundError:
        raise FileIntegrityError(path, f"missing ({what})") from None
    except UnicodeDecodeError as e:
        raise FileIntegrityError(path, f"not UTF-8 text ({what}): {e}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # (not JSON, an int too long to parse, nested too deep)
        raise FileIntegrityError(path, f"not valid JSON ({what}): {e}") from None


@dataclass
class Manifest:
    """What a committed folder holds: its format and version, each file's ``(size, crc32)`` and JSON
    metadata."""

    format: str
    version: int
    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: The generation sub-folder the files sit in (set by `read_manifest` / `commit_folder`).
    folder: Path | None = None

    def path(self, name: str) -> Path:
        """A file of the committed set (`KeyError`-free: a name the manifest lacks is a `FileIntegrityError`)."""
        assert self.folder is not None
        if name not in self.files:
            raise FileIntegrityError(self.folder.parent / MANIFEST, f"names no file {name!r}")
        return self.folder / name


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\0" not in name


def commit_folder(
    folder: str | os.PathLike[str],
    fmt: str,
    version: int,
    files: Mapping[str, Callable[[Any], None]],
    meta: Mapping[str, Any] | None = None,
) -> Manifest:
    """Writes a set of files into ``folder`` as one unit (see the module's doc): ``files`` maps each file name
    to a function that writes its bytes to the file object it is given. Returns the new `Manifest`. On any
    error the new generation is removed and ``folder`` holds its previous committed set, untouched."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # The generations there before this commit: the only ones it may remove once its manifest is in place (a
    # generation another writer made meanwhile is newer, never this commit's to remove).
    older = {p.name for p in folder.iterdir() if p.name.startswith(_GEN_PREFIX)}
    gen = f"{_GEN_PREFIX}{secrets.token_hex(8)}"
    gdir = folder / gen
    man = Manifest(fmt, int(version), {}, dict(meta or {}), gdir)
    # Each file is fsynced on a helper thread as soon as it is written, while the next one is written (the disk
    # and the CPU work at once; the fsyncs run side by side, so the file system commits them together), then the
    # generation folder, while the manifest is written and fsynced: all of them before the manifest is renamed.
    syncing: list[tuple[Path, IO[bytes], Future[None]]] = []
    dir_synced: Future[None] | None = None
    fsyncer = ThreadPoolExecutor(min(8, len(files) + 1), thread_name_prefix="trajview-fsync")

    def all_synced() -> None:
        while syncing:
            synced, sfile, done = syncing.pop(0)
            with _naming(synced):
                try:
                    done.result()
                finally:
                    sfile.close()
        assert dir_synced is not None
        with _naming(gdir):
            dir_synced.result()

    try:
        gdir.mkdir()
        for name, write in files.items():
            if not _valid_name(name):
                raise ValueError(f"commit_folder: bad file name {name!r}")
            target = gdir / name
            with _naming(target):
                raw: IO[bytes] = open(target, "wb")
                try:
                    f = _CrcFile(raw)
                    write(f)
                    raw.flush()
                except BaseException:
                    raw.close()
                    raise
                syncing.append((target, raw, fsyncer.submit(os.fsync, raw.fileno())))
            man.files[name] = (f.size, f.crc)
        dir_synced = fsyncer.submit(fsync_dir, gdir)  # (every name is in it: each file was created above)
        body = {"format": fmt, "version": int(version), "generation": gen,
                "files": {k: {"size": s, "crc32": c} for k, (s, c) in man.files.items()}, "meta": man.meta}
        atomic_write(folder / MANIFEST, manifest_bytes(body), all_synced)
    except BaseException:
        for _, sfile, done in syncing:  # (a file is closed only once its fsync has returned)
            with contextlib.suppress(BaseException):
                done.result()
            sfile.close()
        if dir_synced is not None:
            with contextlib.suppress(BaseException):
                dir_synced.result()
        # An error after the manifest's rename (the folder's fsync failing, or an interrupt: Ctrl-C) leaves the new
        # set committed: its generation stays, or the manifest would name files that are gone.
        if _named_generation(folder) != gen:
            shutil.rmtree(gdir, ignore_errors=True)
        raise
    finally:
        fsyncer.shutdown(wait=True)
    # The new set is the committed one: the generations that were there before it (earlier sets, and those of
    # killed writers) go; never one the manifest names now (another writer's, had one committed since: callers
    # hold a `PathLock` on the folder so that none does). (Here, not on a thread: a caller removing the folder
    # right after must not race a deletion still under way.)
    for name in older - {gen, _named_generation(folder)}:
        p = folder / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
    _drop_dead_tmp(folder / MANIFEST)
    return man


#: Seconds since its last write after which a dead writer's temporary manifest is removed.
_DEAD_TMP_AGE = 3600.0


def _drop_dead_tmp(path: Path) -> None:
    """The temporary siblings of ``path`` (`_tmp_sibling`) that writers killed before their rename left: those
    of processes no longer running go (a live writer's stays)."""
    prefix = f".{path.name}.tmp-"
    with contextlib.suppress(OSError):
        for p in path.parent.iterdir():
            if not p.name.startswith(prefix):
                continue
            pid = p.name[len(prefix):].split("-", 1)[0]
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                # An hour old too: a writer in another pid namespace or on another host sharing the folder looks
                # dead here, but a manifest is written in well under a second.
                if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > _DEAD_TMP_AGE:
                    p.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


#: A manifest's entries (``crc32``: absent from those of trajview before 2026-11-26, which are read unchecked).
_MANIFEST_KEYS = frozenset({"format", "version", "generation", "files", "meta", "crc32"})
_NO_CRC = object()


def _body_crc(body: Mapping[str, Any]) -> int:
    """The crc32 of a manifest's entries other than its own ``crc32``, over their canonical JSON (keys sorted, no
    spaces): what a reader recomputes from the parsed file."""
    rest = {k: v for k, v in body.items() if k != "crc32"}
    return crc32_of(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def manifest_bytes(body: Mapping[str, Any]) -> bytes:
    """A manifest file's bytes: ``body`` (format, version, generation, files, meta), as JSON, with ``crc32``, the
    checksum of the rest (`_body_crc`), which `read_manifest` checks: a changed byte anywhere in the manifest (its
    metadata included: a checkpoint's settings and counters) is refused, not read as other values."""
    plain = json.loads(json.dumps({k: v for k, v in body.items() if k != "crc32"}))  # (as a reader parses it)
    plain["crc32"] = f"{_body_crc(plain):08x}"  # (fixed width: a manifest's size does not vary with its checksum)
    return json.dumps(plain, indent=1, sort_keys=True).encode()


def _named_generation(folder: Path) -> str | None:
    """The generation ``folder``'s manifest names (None: no readable manifest)."""
    try:
        body = read_json(folder / MANIFEST, "a manifest", MAX_MANIFEST)
    except (FileIntegrityError, OSError):
        return None
    gen = body.get("generation") if isinstance(body, dict) else None
    return gen if isinstance(gen, str) else None


def read_manifest(folder: str | os.PathLike[str], fmt: str, versions: tuple[int, ...]) -> Manifest:
    """The committed set of ``folder``: its manifest parsed and checked (format, a known version, well-formed
    entries, every file present with its recorded size). Checksums are checked by `read_verified`."""
    folder = Path(folder)
    mpath = folder / MANIFEST
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"no such folder: {folder}", str(folder))
    body = read_json(mpath, f"a {fmt} manifest", MAX_MANIFEST)
    if not isinstance(body, dict):
        raise FileIntegrityError(mpath, f"expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - _MANIFEST_KEYS)
    if unknown:  # (a changed byte in a key's name: "crc32" read as "crc33" would otherwise skip the check)
        raise FileIntegrityError(mpath, f"unknown entries {unknown} (damaged, or of a newer trajview)")
    crc = body.get("crc32", _NO_CRC)  # (none: a manifest of a trajview before 2026-11-26's, read as before)
    if crc is not _NO_CRC and crc != f"{_body_crc(body):08x}":
        raise FileIntegrityError(mpath, f"crc32 of its entries {_body_crc(body):08x} differs from the one it records "
                                        f"({crc!r}): the manifest is damaged")
    if body.get("format") != fmt:
        raise FileIntegrityError(mpath, f"format is {body.get('format')!r}, expected {fmt!r}")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in versions:
        raise FileIntegrityError(mpath, f"version {version!r} is not one this trajview reads ({list(versions)})")
    gen = body.get("generation")
    if not isinstance(gen, str) or not gen.startswith(_GEN_PREFIX) or not _valid_name(gen):
        raise FileIntegrityError(mpath, f"bad generation {gen!r}")
    files = body.get("files")
    meta = body.get("meta", {})
    if not isinstance(files, dict) or not isinstance(meta, dict):
        raise FileIntegrityError(mpath, "'files' and 'meta' must be JSON objects")
    out: dict[str, tuple[int, int]] = {}
    for name, ent in files.items():
        if not _valid_name(name) or not isinstance(ent, dict):
            raise FileIntegrityError(mpath, f"bad entry {name!r}")
        size, crc = ent.get("size"), ent.get("crc32")
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(crc, int)
                or isinstance(crc, bool) or not 0 <= crc <= 0xFFFFFFFF):
            raise FileIntegrityError(mpath, f"entry {name!r}: bad size or crc32 ({ent!r})")
        p = folder / gen / name
        try:
            st = p.stat()
        except FileNotFoundError:
            raise FileIntegrityError(p, "missing (the manifest lists it)") from None
        except OSError as e:  # (the generation is a file, a path too long, ...)
            raise FileIntegrityError(p, f"cannot be read ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(p, st.st_mode)
        got = st.st_size
        if got != size:
            raise FileIntegrityError(p, f"holds {got} bytes, the manifest says {size} (truncated or replaced)")
        out[name] = (size, crc)
    return Manifest(fmt, version, out, meta, folder / gen)


def read_verified(man: Manifest, name: str, into: Any | None = None) -> Any:
    """A committed file's bytes, checked against the manifest's size and crc32 (`FileIntegrityError` naming
    the file otherwise). ``into``: a writable contiguous buffer of exactly the file's size to read into (no
    copy), or a list of such buffers filled one after the other (together the file's size: e.g. a header and
    the rows it describes); returned as given. Else a new ``bytearray``."""
    p = man.path(name)
    size, crc = man.files[name]
    buf = bytearray(size) if into is None else into
    views = [memoryview(b).cast("B") for b in (buf if isinstance(buf, list) else [buf])]
    if sum(len(v) for v in views) != size:
        raise ValueError(f"read_verified: {p}: the buffer holds {sum(len(v) for v in views)} bytes, the file {size}")
    pipe = _CrcPipe()  # each chunk summed while the next one is read
    done = 0
    try:
        with open_regular(p) as f:
            for view in views:
                at = 0
                while at < len(view):
                    chunk = view[at:at + _CrcPipe.STEP]
                    got = 0
                    while got < len(chunk):
                        n = f.readinto(chunk[got:])
                        if not n:
                            break
                        got += n
                    pipe.push(chunk[:got])
                    at += got
                    if got < len(chunk):
                        break
                done += at
                if at < len(view):
                    break
            extra = f.read(1)
        got_crc = pipe.result()
    finally:
        pipe.close()
    if done != size or extra:
        raise FileIntegrityError(p, f"holds {'more than ' if extra else ''}{done} bytes, the manifest says {size}")
    if got_crc & 0xFFFFFFFF != crc:
        raise FileIntegrityError(p, f"crc32 {got_crc & 0xFFFFFFFF:#010x} differs from the manifest's {crc:#010x} "
                                    f"(the file is damaged or from another dump)")
    return buf


class PathLock:
    """An exclusive lock on a folder (``<folder>/.lock``, holding the owner's pid), for as long as the object
    lives or until `release`. A second owner, in this process or another, gets a `PathInUseError` naming the
    path and the holder's pid. The kernel drops the lock when its process dies.

    ``shared=True``: a reader's lock (e.g. a load reading a committed folder while no dump may replace it): any
    number of readers at once, none while an exclusive owner holds it (`PathInUseError` naming the holder), and
    no exclusive owner while a reader holds it. A reader never creates the folder, and where the lock file
    cannot be made (no such folder, a read-only one) holds nothing (no writer can take it there either).

    ``.lock`` is opened without following a symbolic link; one that is a link, or not a regular file, or (for an
    exclusive owner, which writes its pid into it) a file with other hard links, is a `FileIntegrityError`
    naming it: the lock never writes outside its folder."""

    NAME = ".lock"

    def __init__(self, folder: str | os.PathLike[str], what: str, *, shared: bool = False) -> None:
        self._fd: int | None = None
        self.folder = Path(folder)
        self.shared = bool(shared)
        if not shared:
            self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / self.NAME
        flags = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise FileIntegrityError(path, "expected a regular file (a lock), got a symbolic link") from None
            if not shared or e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            try:  # a read-only folder: its lock file, if any
                fd = os.open(path, os.O_RDONLY | flags)
            except OSError as e2:
                if e2.errno == errno.ELOOP:
                    raise FileIntegrityError(path, "expected a regular file (a lock), got a symbolic link") from None
                return  # no lock file, none can be made: no writer can hold one either
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(path, st.st_mode)
            if not shared and st.st_nlink > 1:
                raise FileIntegrityError(path, f"a lock file with {st.st_nlink} hard links, expected 1 (it would "
                                               f"write into another file)")
            os.set_blocking(fd, True)
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise PathInUseError(self.folder, holder, what) from None
        except BaseException:
            os.close(fd)
            raise
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if not self.shared:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> PathLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

