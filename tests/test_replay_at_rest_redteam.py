"""Replay persistence at rest, against what a red team found: concurrent dumps into one folder, links planted in
a memory-mapped buffer's folder, sampler settings of a crafted dump, staged rings left by a failed load, frames
that stopped the ReplayServer, a manifest that is no regular file, a load into a closed buffer, a crafted shape
too big to allocate."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import trajview as tv
from trajview import _io
from trajview.errors import FileIntegrityError, PathInUseError
from trajview.replay import wire
from trajview.replay.persistence import _npy_header

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes


def _batch(n: int = 5, eps: int = 1, *, new_obs: bool = False) -> dict[str, np.ndarray]:
    b = {"obs": np.arange(n, dtype=np.float32) + 10 * eps, "rewards": np.ones(n, np.float32),
         "terminateds": np.r_[np.zeros(n - 1, bool), True], "truncateds": np.zeros(n, bool),
         "eps_id": np.full(n, eps, np.int64), "t": np.arange(n)}
    if new_obs:
        b["new_obs"] = b["obs"] + 0.5
    return b


def _buffer(cap: int = 50, sampler: tv.Sampler | None = None, **kw) -> tv.ReplayBuffer:
    rb = tv.ReplayBuffer(cap, sampler=sampler, **kw)
    rb.add(_batch(10, 1))
    rb.add(_batch(8, 2))
    return rb


def _edit_state(d: Path, edit) -> Path:
    """Rewrites a dump's state.json through ``edit`` and its manifest entry to match (a crc-consistent craft)."""
    man = json.loads((d / "manifest.json").read_text())
    sp = d / man["generation"] / "state.json"
    s = json.loads(sp.read_text())
    edit(s)
    b = json.dumps(s).encode()
    sp.write_bytes(b)
    man["files"]["state.json"] = {"size": len(b), "crc32": zlib.crc32(b)}
    (d / "manifest.json").write_bytes(_io.manifest_bytes(man))
    return sp


def _alarm(seconds: int):
    """Fails (instead of hanging the suite) a call that blocks."""
    def on_alarm(*_):
        raise TimeoutError(f"blocked for {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    return old


def _no_alarm(old) -> None:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# -- 1. concurrent dumps ------------------------------------------------------------------------------------


def test_a_dump_holds_the_folder_a_second_dump_or_a_load_gets_path_in_use(tmp_path):
    d = tmp_path / "dump"
    rb = _buffer()
    rb.dumps(d)
    before = sorted(p.name for p in d.iterdir())
    with _io.PathLock(d, "another dump"):  # a dump under way (here: its lock)
        with pytest.raises(PathInUseError, match=str(d)):
            _buffer().dumps(d)
        other = tv.ReplayBuffer(50)
        with pytest.raises(PathInUseError, match=str(d)):
            other.loads(d)
        assert len(other) == 0
    assert sorted(p.name for p in d.iterdir()) == before
    with _io.PathLock(d, "a load", shared=True):  # a load under way: no dump may remove what it reads
        with pytest.raises(PathInUseError):
            rb.dumps(d)
        with _io.PathLock(d, "another load", shared=True):  # loads side by side
            pass
    rb.dumps(d)
    back = tv.ReplayBuffer(50)
    back.loads(d)
    assert len(back) == len(rb)


def test_commit_folder_never_removes_a_generation_newer_than_its_own(tmp_path):
    d = tmp_path / "c"
    _io.commit_folder(d, "t", 1, {"a": lambda f: f.write(b"old")})
    newer = d / "gen-0123456789abcdef"

    def write(f):  # meanwhile another writer commits its set (newer than this one's start)
        newer.mkdir()
        (newer / "a").write_bytes(b"new")
        f.write(b"mine")

    man = _io.commit_folder(d, "t", 1, {"a": write})
    gens = sorted(p.name for p in d.iterdir() if p.name.startswith("gen-"))
    assert gens == sorted([man.folder.name, newer.name])  # the old one went; the newer one stays


def _dump_loop(d: str, key: int, seconds: float, q) -> None:
    rb = tv.ReplayBuffer(50)
    rb.add(_batch(5, key))
    done = busy = 0
    end = time.time() + seconds
    while time.time() < end:
        try:
            rb.dumps(d)
            done += 1
        except PathInUseError:
            busy += 1
    q.put((done, busy))


def test_two_processes_dumping_into_one_folder_leave_a_loadable_dump(tmp_path):
    d = str(tmp_path / "conc")
    ctx = mp.get_context("spawn")
    for _ in range(2):
        q = ctx.Queue()
        ps = [ctx.Process(target=_dump_loop, args=(d, k, 1.0, q)) for k in (1, 2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(60)
            assert p.exitcode == 0
        results = [q.get(timeout=5) for _ in ps]
        assert sum(done for done, _ in results) > 0
        rb = tv.ReplayBuffer(50)
        rb.loads(d)
        assert rb.trajectories()[0]["key"] in (1, 2)
        gens = [p for p in os.listdir(d) if p.startswith("gen-")]
        assert len(gens) == 1, gens


# -- 2. links planted in a memory-mapped buffer's folder --------------------------------------------------


@pytest.mark.parametrize("name", [".lock", "ring_0.bin", ".ring_0.bin.loading"])
def test_memmap_never_writes_through_a_planted_link(tmp_path, name):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious data outside the folder\n")
    src = _buffer()
    src.dumps(tmp_path / "src")
    d = tmp_path / "mm"
    d.mkdir()
    os.symlink(victim, d / name)
    with pytest.raises(FileIntegrityError, match=str(d / name).replace(".", r"\.")):
        rb = tv.ReplayBuffer(50, storage="memmap", path=d)
        rb.add(_batch(5, 7))
        assert len(rb) == 5
        rb.loads(tmp_path / "src")
    assert victim.read_bytes() == b"precious data outside the folder\n"
    if name.startswith(".ring"):  # the load refused: the buffer as it was
        assert len(rb) == 5 and rb.trajectories()[0]["key"] == 7
        rb.close()


def test_memmap_lock_with_another_hard_link_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    d = tmp_path / "mm"
    d.mkdir()
    os.link(victim, d / ".lock")
    with pytest.raises(FileIntegrityError, match="hard link"):
        tv.ReplayBuffer(50, storage="memmap", path=d)
    assert victim.read_bytes() == b"precious\n"


def test_memmap_rings_replace_a_regular_file_hard_linked_elsewhere(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    d = tmp_path / "mm"
    d.mkdir()
    os.link(victim, d / "ring_0.bin")
    rb = tv.ReplayBuffer(50, storage="memmap", path=d)
    rb.add(_batch(5, 7))
    assert victim.read_bytes() == b"precious\n"
    assert (d / "ring_0.bin").stat().st_size == 50 * 4
    rb.close()


# -- 3. sampler settings of a crafted dump --------------------------------------------------------------


def _prioritized() -> tv.ReplayBuffer:
    return tv.ReplayBuffer(50, sampler=tv.PrioritizedSampler(None, 0.6, 0.4, seed=1))


def _set_alpha(s):
    s["store"]["alpha"] = s["sampler"]["state"]["_alpha"] = 1e300


@pytest.mark.parametrize("edit, match", [
    (_set_alpha, "alpha must be at most"),
    (lambda s: s["sampler"]["state"].update(max_capacity=7), "max_capacity=7 differs from the buffer's capacity 50"),
    (lambda s: s["sampler"]["state"].update(truncated_key="obs"), "'obs' is the sampler's truncated_key"),
    (lambda s: s["sampler"]["state"].update(traj_key="rewards"), "'rewards' is the sampler's traj_key"),
    (lambda s: s["sampler"]["state"].update(traj_key=5), "traj_key must be a column name"),
])
def test_a_dumps_sampler_settings_get_the_constructors_checks(tmp_path, edit, match):
    d = tmp_path / "d"
    rb = _prioritized()
    rb.add(_batch(10, 1))
    rb.dumps(d)
    sd = rb.state_dict()
    sp = _edit_state(d, edit)
    dst = _prioritized()
    dst.add(_batch(3, 9))
    with pytest.raises(FileIntegrityError, match=match) as e:
        dst.loads(d)
    assert str(sp) in str(e.value)
    edit(sd["state"])
    with pytest.raises(ValueError, match=match):
        dst.load_state_dict(sd)
    assert len(dst) == 3 and dst.sampler.alpha == 0.6 and dst.sampler.traj_key is None


def test_the_constructor_path_applies_the_same_key_column_check():
    rb = tv.ReplayBuffer(50, sampler=tv.SliceSampler(slice_len=2, truncated_key="obs"))
    with pytest.raises(ValueError, match="'obs' is the sampler's truncated_key"):
        rb.add(_batch(5, 1))
    with pytest.raises(ValueError, match="alpha must be at most"):
        tv.PrioritizedSampler(None, 1e300, 0.4)
    with pytest.raises(ValueError, match="max_capacity=7 differs"):
        tv.ReplayBuffer(50, sampler=tv.PrioritizedSampler(7, 0.6, 0.4))


# -- 4. staged rings of a failed load --------------------------------------------------------------------


def test_a_failed_memmap_load_leaves_no_staged_rings(tmp_path):
    d = tmp_path / "d"
    _buffer().dumps(d)
    man = json.loads((d / "manifest.json").read_text())
    col = d / man["generation"] / "col.0.npy"
    b = bytearray(col.read_bytes())
    b[-1] ^= 1
    col.write_bytes(bytes(b))
    mm = tmp_path / "mm"
    rb = tv.ReplayBuffer(50, storage="memmap", path=mm)
    rb.add(_batch(5, 7))
    before = sorted(os.listdir(mm))
    with pytest.raises(FileIntegrityError, match="col.0.npy"):
        rb.loads(d)
    assert sorted(os.listdir(mm)) == before
    # A staged ring that cannot be made (a planted link at the second): the first one made goes too.
    src = tmp_path / "src"
    _buffer().dumps(src)
    os.symlink(tmp_path / "nowhere", mm / ".ring_1.bin.loading")
    with pytest.raises(FileIntegrityError, match="ring_1"):
        rb.loads(src)
    assert not (mm / ".ring_0.bin.loading").exists()
    assert len(rb) == 5
    rb.close()


# -- 5. frames that stopped the ReplayServer --------------------------------------------------------------


def test_parse_failures_are_protocol_errors():
    from trajview.replay.schema import dtype_from_str

    with pytest.raises(wire.ProtocolError, match="RecursionError"):
        wire.parse_header(b"[" * 100000)
    with pytest.raises(wire.ProtocolError):
        wire.parse_header(b"\xff\xfe")
    for bad in ["(1,2,3", "f4,f4", "[('a','<f4')]", "(2,)f4", "<f4 ", "O", "", "<f4\n"]:
        with pytest.raises(wire.ProtocolError, match="dtype"):
            wire.payload_size({"type": "dict", "columns": [["x", bad, [1], 0]]})
        assert dtype_from_str(bad) is None or dtype_from_str(bad).hasobject
    for good in ["<f4", "|b1", "<i8", "<M8[ns]", "<U5"]:
        assert dtype_from_str(good) == np.dtype(good)


@pytest.mark.parametrize("kind", ["nested", "dtype"])
def test_one_malformed_frame_drops_only_its_connection(kind):
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb).start()
    try:
        good = server.writer()
        good.add(_batch(5, 1))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(server.address)
        if kind == "nested":
            body = b"[" * 100000
            s.sendall(wire.PREFIX.pack(wire.MAGIC, wire.HELLO, len(body), 0) + body)
        else:
            body = b'{"type":"dict","columns":[["x","(1,2,3",[1],0]]}'
            s.sendall(wire.PREFIX.pack(wire.MAGIC, wire.BATCH, len(body), 64) + body)
        end = time.time() + 5
        while not server.errors and time.time() < end:
            time.sleep(0.02)
        assert server._thread.is_alive()
        assert [type(e) for e in server.errors] == [wire.ProtocolError]
        good.add(_batch(5, 2))
        good.flush()
        end = time.time() + 5
        while len(rb) < 10 and time.time() < end:
            time.sleep(0.02)
        assert len(rb) == 10
        s.close()
        good.close()
    finally:
        server.close()


# -- 6. a manifest that is no regular file ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "zero", "big"])
def test_dumps_refuses_a_manifest_that_is_no_regular_file(tmp_path, kind, monkeypatch):
    d = tmp_path / "d"
    d.mkdir()
    m = d / "manifest.json"
    if kind == "fifo":
        os.mkfifo(m)
        match = "FIFO"
    elif kind == "zero":
        os.symlink("/dev/zero", m)
        match = "character device"
    else:
        m.write_bytes(b" " * 100)
        monkeypatch.setattr(_io, "MAX_MANIFEST", 64)
        match = "holds 100 bytes, expected at most 64"
    old = _alarm(10)
    try:
        with pytest.raises(FileIntegrityError, match=match):
            _buffer().dumps(d)
    finally:
        _no_alarm(old)
    assert sorted(p.name for p in d.iterdir()) == [".lock", "manifest.json"]


def test_dumps_still_replaces_a_damaged_manifest(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "manifest.json").write_bytes(b"not json")
    rb = _buffer()
    rb.dumps(d)
    back = tv.ReplayBuffer(50)
    back.loads(d)
    assert len(back) == len(rb)


# -- 7. a load into a closed buffer -----------------------------------------------------------------------


def test_a_closed_buffer_refuses_a_load_naming_itself_not_the_file(tmp_path):
    d = tmp_path / "d"
    rb = _buffer()
    rb.dumps(d)
    sd = rb.state_dict()
    closed = tv.ReplayBuffer(50)
    closed.close()
    with pytest.raises(ValueError, match="closed") as e:
        closed.loads(d)
    assert not isinstance(e.value, FileIntegrityError)
    with pytest.raises(ValueError, match="closed") as e:
        closed.loads(tmp_path / "no-such-dump")  # checked before anything is read
    assert not isinstance(e.value, (FileIntegrityError, FileNotFoundError))
    with pytest.raises(ValueError, match="closed"):
        closed.load_state_dict(sd)


# -- 8. a crafted shape too big to allocate -----------------------------------------------------------------


def _bomb(d: Path, per_row: int) -> Path:
    """A crc-consistent dump with no rows stored whose column 'obs' takes ``per_row`` float32 a row."""
    _buffer().dumps(d)

    def edit(s):
        s["columns"][0][2] = [per_row]
        s["store"].update(head=0, next_uid=0)
        s["open"] = []
        g = d / json.loads((d / "manifest.json").read_text())["generation"]
        for k, a in s["arrays"].items():
            a["shape"] = [0] + ([per_row] if k == "col.0" else a["shape"][1:])
            (g / f"{k}.npy").write_bytes(_npy_header(np.dtype(a["dtype"]), tuple(a["shape"])))

    sp = _edit_state(d, edit)
    man = json.loads((d / "manifest.json").read_text())
    for p in (d / man["generation"]).iterdir():
        b = p.read_bytes()
        man["files"][p.name] = {"size": len(b), "crc32": zlib.crc32(b)}
    (d / "manifest.json").write_bytes(_io.manifest_bytes(man))
    return sp


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under ASan (the suite's second pass) the child cannot limit its address space: ASan's "
                           "shadow memory needs terabytes of it; the plain pass runs this test")
def test_a_crafted_shape_too_big_to_allocate_names_the_file_and_the_column(tmp_path):
    # 50 rows of 2**27 float32 (25 GiB), in a child limited to 4 GiB of address space: the allocation fails.
    sp = _bomb(tmp_path / "bomb", 1 << 27)
    code = (
        "import resource, sys, numpy as np, trajview as tv\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "rb = tv.ReplayBuffer(50)\n"
        "rb.add({'obs': np.zeros(3, np.float32), 'eps_id': np.zeros(3, np.int64), 'terminateds': np.array([0, 0, 1], bool)})\n"
        "try:\n"
        "    rb.loads(sys.argv[1])\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "print('len', len(rb))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "bomb")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    first, last = out.stdout.strip().splitlines()[-2:]
    assert first.startswith("FileIntegrityError") and str(sp) in first, out.stdout
    assert "column 'obs'" in first and str(1 << 27) in first and str(50 * 4 << 27) in first, first
    assert last == "len 3"
