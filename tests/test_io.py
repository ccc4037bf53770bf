"""trajview._io: atomic files, committed folders verified by their manifest, fsynced lines, one owner per path.

The oracle is the plain statement of each guarantee: after a writer is killed at any point, a reader sees the
old complete content or the new complete content; a damaged file is refused naming it; a lock names its holder
and dies with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

from trajview import _core, _io
from trajview.errors import FileIntegrityError, PathInUseError

FMT = "trajview.test"


def _files(contents: dict[str, bytes]) -> dict:
    return {name: (lambda f, b=data: f.write(b)) for name, data in contents.items()}


def _read_all(folder: Path) -> dict[str, bytes]:
    man = _io.read_manifest(folder, FMT, (1,))
    return {name: bytes(_io.read_verified(man, name)) for name in man.files}


names = st.sampled_from(["a.npy", "b.npy", "state.json", "x"])
contents = st.dictionaries(names, st.binary(max_size=300), min_size=1, max_size=4)


@settings(max_examples=30, deadline=None)
@given(first=contents, second=contents)
def test_commit_folder_round_trip_and_replace(tmp_path_factory, first, second):
    folder = tmp_path_factory.mktemp("c")
    _io.commit_folder(folder, FMT, 1, _files(first), {"n": 1})
    assert _read_all(folder) == first
    _io.commit_folder(folder, FMT, 1, _files(second), {"n": 2})
    assert _read_all(folder) == second
    assert _io.read_manifest(folder, FMT, (1,)).meta == {"n": 2}
    # one generation left: the old one is removed once the new one is committed
    assert len([p for p in folder.iterdir() if p.name.startswith("gen-")]) == 1


@settings(max_examples=25, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), pos=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_flipped_or_truncated_file_is_refused_naming_it(tmp_path_factory, data, pos, bit):
    folder = tmp_path_factory.mktemp("f")
    man = _io.commit_folder(folder, FMT, 1, _files({"a.bin": data}))
    p = man.path("a.bin")
    raw = bytearray(p.read_bytes())
    raw[pos % len(raw)] ^= 1 << bit
    p.write_bytes(bytes(raw))
    with pytest.raises(FileIntegrityError, match="a.bin"):
        _read_all(folder)
    p.write_bytes(data[: pos % len(data)])
    with pytest.raises(FileIntegrityError, match="a.bin"):
        _read_all(folder)


def test_manifest_damage_is_refused(tmp_path):
    _io.commit_folder(tmp_path, FMT, 1, _files({"a": b"123"}))
    mpath = tmp_path / _io.MANIFEST
    good = mpath.read_bytes()
    for i in range(len(good)):
        for cut in (True, False):
            mpath.write_bytes(good[:i] if cut else good[:i] + bytes([good[i] ^ 0x20]) + good[i + 1:])
            try:
                got = _read_all(tmp_path)
            except (FileIntegrityError, FileNotFoundError):
                continue
            assert got == {"a": b"123"}  # a change JSON does not see (whitespace, key case that still parses)
    mpath.write_bytes(good)
    with pytest.raises(FileIntegrityError, match="format"):
        _io.read_manifest(tmp_path, "other.format", (1,))
    with pytest.raises(FileIntegrityError, match="version"):
        _io.read_manifest(tmp_path, FMT, (2,))


def test_mixed_generations_are_refused(tmp_path):
    """A file of one dump copied under another dump's manifest (same name, same size) is caught by its crc."""
    a = tmp_path / "a"
    b = tmp_path / "b"
    man_a = _io.commit_folder(a, FMT, 1, _files({"x": b"\x00" * 64}))
    man_b = _io.commit_folder(b, FMT, 1, _files({"x": b"\x01" * 64}))
    man_a.path("x").write_bytes(man_b.path("x").read_bytes())
    with pytest.raises(FileIntegrityError, match="crc32"):
        _read_all(a)


def test_failed_write_leaves_the_old_state(tmp_path, monkeypatch):
    _io.commit_folder(tmp_path, FMT, 1, _files({"a": b"old"}))
    _io.atomic_write(tmp_path / "single", b"old")

    def full(f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")  # what a full disk raises

    with pytest.raises(OSError, match="No space left"):
        _io.commit_folder(tmp_path, FMT, 1, {"a": full})
    with pytest.raises(OSError) as e:
        _io.atomic_write(tmp_path / "single", full)
    assert "single" in str(e.value)
    assert _read_all(tmp_path) == {"a": b"old"}
    assert (tmp_path / "single").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["single", _io.MANIFEST, _io.read_manifest(
        tmp_path, FMT, (1,)).folder.name])  # no temporaries left


def _ref_crc32(data: bytes, crc: int = 0) -> int:
    """The textbook bit-at-a-time reflected crc32 (zlib's), continued from ``crc``."""
    reg = crc ^ 0xFFFFFFFF
    for b in data:
        reg ^= b
        for _ in range(8):
            reg = (reg >> 1) ^ 0xEDB88320 if reg & 1 else reg >> 1
    return reg ^ 0xFFFFFFFF


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=700), start=st.integers(0, 20), crc=st.integers(0, 0xFFFFFFFF))
def test_core_crc32_is_zlibs_at_any_length_offset_and_start(data, start, crc):
    view = memoryview(data)[min(start, len(data)):]  # any alignment
    want = _ref_crc32(bytes(view), crc)
    assert zlib.crc32(view, crc) == want
    assert _core.crc32(view, crc) == want
    assert _core.crc32(bytearray(view), crc) == want  # writable buffers too
    if len(view) >= 8:
        a = np.frombuffer(bytes(view), np.uint8)
        assert _core.crc32(a[3:], crc) == zlib.crc32(bytes(view)[3:], crc)


def test_crc32_of_large_buffers_matches_zlib():
    a = np.random.default_rng(3).integers(0, 256, (3 << 20) + 13, dtype=np.uint8)
    assert _core.crc32(a) == zlib.crc32(a)
    assert _io.crc32_of(a) == zlib.crc32(a)
    assert _core.crc32(a[5:], _core.crc32(a[:5])) == zlib.crc32(a)
    with pytest.raises((BufferError, ValueError)):  # a strided view is not one contiguous run of bytes (as zlib)
        _core.crc32(a[::2])
    assert isinstance(_core.crc32_accelerated(), bool)


def test_large_files_keep_size_and_crc_through_writeback_and_pipe(tmp_path):
    """Files larger than one pipelined chunk (each handed to the disk as written): sizes and crcs recorded
    as zlib computes them, the bytes read back equal."""
    big = np.random.default_rng(4).integers(0, 256, 3 * _io._CrcPipe.STEP + 999, dtype=np.uint8)
    man = _io.commit_folder(tmp_path, FMT, 1, {"big": lambda f: (f.write(b"head"), f.write(big.data)),
                                               "small": lambda f: f.write(b"x")})
    assert man.files["big"] == (4 + big.nbytes, zlib.crc32(big.tobytes(), zlib.crc32(b"head")))
    assert _read_all(tmp_path) == {"big": b"head" + big.tobytes(), "small": b"x"}
    size, crc = _io.atomic_write(tmp_path / "single", big.data)
    assert (size, crc) == (big.nbytes, zlib.crc32(big))
    with open(tmp_path / "single", "rb") as f:
        assert _core.start_writeback(f.fileno(), 0, 0) in (True, False)  # a hint: never raises on a real file


def test_a_failed_fsync_commits_nothing(tmp_path, monkeypatch):
    """The files' and the generation folder's fsyncs run on helper threads while the manifest is written: one
    failing (an I/O error) still leaves the old committed set, no new generation and no temporaries."""
    _io.commit_folder(tmp_path, FMT, 1, _files({"a": b"old"}))
    real_fsync = os.fsync
    for victim in ("file", "folder"):

        def fsync(fd, victim=victim):
            name = Path(os.readlink(f"/proc/self/fd/{fd}")).name  # the file (b) or the new generation folder
            if name == "b" if victim == "file" else name.startswith("gen-"):
                raise OSError(5, "Input/output error")
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(OSError, match="Input/output error"):
            _io.commit_folder(tmp_path, FMT, 1, _files({"a": b"new", "b": b"new", "c": b"new"}))
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert _read_all(tmp_path) == {"a": b"old"}
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [_io.MANIFEST, _io.read_manifest(tmp_path, FMT, (1,)).folder.name])


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_error_at_any_step_of_a_commit_leaves_the_old_set_or_the_new_one(tmp_path, monkeypatch, error):
    """Ctrl-C (KeyboardInterrupt, raised wherever the main thread is) or an I/O error at each step of a commit in
    turn: each file's fsync (on the helper threads), the generation folder's, the manifest's rename, the folder's
    fsync after it, each removal of an old generation. The folder then holds the old set or the new one, whole
    (an error after the manifest's rename once removed the new generation the manifest named), and the next commit
    leaves one generation."""
    old, new = {"a": b"old"}, {"a": b"new", "b": b"new" * 1000}
    steps = {"fsync": os.fsync, "fsync_dir": _io.fsync_dir, "replace": os.replace, "rmtree": _io.shutil.rmtree}
    calls = []

    def patch(countdown):
        def wrap(name, fn):
            def step(*args, **kwargs):
                calls.append(name)
                if len(calls) == countdown:
                    raise error() if error is KeyboardInterrupt else OSError(5, "Input/output error")
                return fn(*args, **kwargs)
            return step

        monkeypatch.setattr(os, "fsync", wrap("fsync", steps["fsync"]))
        monkeypatch.setattr(_io, "fsync_dir", wrap("fsync_dir", steps["fsync_dir"]))
        monkeypatch.setattr(os, "replace", wrap("replace", steps["replace"]))
        monkeypatch.setattr(_io.shutil, "rmtree", wrap("rmtree", steps["rmtree"]))

    folder = tmp_path / "count"
    _io.commit_folder(folder, FMT, 1, _files(old))
    _io.commit_folder(folder, FMT, 1, _files(old))  # (a commit that removes an older generation)
    patch(0)
    _io.commit_folder(folder, FMT, 1, _files(new))
    monkeypatch.undo()
    n = len(calls)
    assert {"fsync", "fsync_dir", "replace", "rmtree"} <= set(calls), calls
    for k in range(1, n + 1):
        folder = tmp_path / f"k{k}"
        _io.commit_folder(folder, FMT, 1, _files(old))
        _io.commit_folder(folder, FMT, 1, _files(old))
        calls.clear()
        patch(k)
        with pytest.raises(error):
            _io.commit_folder(folder, FMT, 1, _files(new))
        monkeypatch.undo()
        assert _read_all(folder) in (old, new), f"an error at step {k} of {n} ({calls[-1]})"
        _io.commit_folder(folder, FMT, 1, _files(new))
        assert _read_all(folder) == new
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [_io.MANIFEST, _io.read_manifest(folder, FMT, (1,)).folder.name])


_WRITER = textwrap.dedent("""
    import sys
    from trajview import _io
    folder, single = sys.argv[1], sys.argv[2]
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        body = str(i).encode() * 20000
        _io.commit_folder(folder, "trajview.test", 1, {"a": lambda f: f.write(body), "b": lambda f: f.write(body)})
        _io.atomic_write(single, body)
""")


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.07, 0.15])
def test_killed_writer_leaves_a_complete_state(tmp_path, delay):
    folder, single = tmp_path / "dump", tmp_path / "single"
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(folder), str(single)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    if not (folder / _io.MANIFEST).exists():
        return  # killed before the first commit: nothing was ever committed
    got = _read_all(folder)
    assert got["a"] == got["b"]  # one generation, never a mix
    body = got["a"]
    n = body[: len(body) // 20000]
    assert body == n * 20000
    if single.exists():
        s = single.read_bytes()
        assert s == s[: len(s) // 20000] * 20000


def test_lines_survive_a_partial_last_line(tmp_path):
    p = tmp_path / "m.csv"
    _io.append_line(p, "a,b")
    _io.append_line(p, "1,2")
    with open(p, "ab") as f:
        f.write(b"3,")  # a write killed midway
    assert _io.read_lines(p) == (["a,b", "1,2"], True)
    _io.append_line(p, "4,5")  # the partial line is closed first: never glued to the next row
    lines, partial = _io.read_lines(p)
    assert lines[-1] == "4,5" and not partial


def test_read_json_names_the_file(tmp_path):
    p = tmp_path / "config.json"
    with pytest.raises(FileIntegrityError, match="config.json.*missing"):
        _io.read_json(p, "a run's settings")
    p.write_text('{"a": ')
    with pytest.raises(FileIntegrityError, match="config.json.*not valid JSON"):
        _io.read_json(p, "a run's settings")
    p.write_text(json.dumps({"a": 1}))
    assert _io.read_json(p, "x") == {"a": 1}


@settings(max_examples=60)
@given(size=st.integers(0, 300), limit=st.integers(0, 300), seen=st.integers(0, 300))
def test_read_regular_reads_the_whole_file_up_to_its_limit(tmp_path_factory, size, limit, seen):
    """The reference: a file of at most ``limit`` bytes is read whole; a larger one is refused naming it. Also when
    the size seen before the read (``seen``, the fstat) is not the size read (a file that grew or shrank in
    between): no read stops at the size seen, none reads past the limit."""
    p = tmp_path_factory.mktemp("r") / "m.json"
    data = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    p.write_bytes(data)
    real_fstat = os.fstat

    def fstat(fd):  # what the read sees first: ``seen`` bytes
        st_ = real_fstat(fd)
        return os.stat_result((*st_[:6], seen, *st_[7:]))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_io.os, "fstat", fstat)
        if size <= limit and seen <= limit:
            assert _io.read_regular(p, limit) == data
        else:
            with pytest.raises(FileIntegrityError, match=f"m.json.*expected at most {limit}"):
                _io.read_regular(p, limit)
    assert _io.read_regular(p) == data


_HOLDER = textwrap.dedent("""
    import sys, time
    from trajview import _io
    lock = _io.PathLock(sys.argv[1], "a test holder")
    print("held", flush=True)
    time.sleep(60)
""")


def test_path_lock_names_the_holder_and_dies_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        with pytest.raises(PathInUseError, match=f"process {proc.pid}") as e:
            _io.PathLock(tmp_path, "a second owner")
        assert e.value.path == str(tmp_path) and e.value.holder == str(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    with _io.PathLock(tmp_path, "the next run") as lock:  # the killed holder's lock is gone with it
        assert lock.held
        with pytest.raises(PathInUseError):
            _io.PathLock(tmp_path, "same process, second owner")
    assert not lock.held
    _io.PathLock(tmp_path, "after release").release()


def _in_thread(fn, timeout=10.0):
    """``fn()``'s exception (or None), failing the test if it blocks (a FIFO opened for reading waits for a writer)."""
    import threading

    out: list = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as e:  # noqa: BLE001
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert out, "the read blocked"
    return out[0]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    """Every committed folder (checkpoints, replay dumps) reads its files through one rule: a FIFO, a folder (or a
    device, a socket) in a file's place is a FileIntegrityError naming it, never opened for a read that blocks."""
    import os

    _io.commit_folder(tmp_path, FMT, 1, _files({"a": b""}))
    man = _io.read_manifest(tmp_path, FMT, (1,))
    target = man.path("a")
    target.unlink()
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    got = "a FIFO (named pipe)" if kind == "fifo" else "a folder"
    e = _in_thread(lambda: _io.read_manifest(tmp_path, FMT, (1,)))
    assert isinstance(e, FileIntegrityError) and f"expected a regular file, got {got}" in str(e) and str(target) in str(e)
    e = _in_thread(lambda: _io.read_verified(man, "a"))
    assert isinstance(e, FileIntegrityError) and f"expected a regular file, got {got}" in str(e)
    json_path = tmp_path / "x.json"
    os.mkfifo(json_path) if kind == "fifo" else json_path.mkdir()
    e = _in_thread(lambda: _io.read_json(json_path, "a JSON file"))
    assert isinstance(e, FileIntegrityError) and f"expected a regular file, got {got}" in str(e)
