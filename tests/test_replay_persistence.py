"""Replay persistence (`trajview.replay.persistence`): dumps, loads and state dicts round-trip exactly (the same
samples follow), nothing read runs code, a damaged, truncated, mixed or crafted dump is refused naming the file
and changes nothing, a dump killed at any byte or out of disk leaves the previous one whole, and a
memory-mapped buffer owns its folder.

The oracle of a round trip is the buffer itself: a copy holds the same trajectories, rows and priorities and
draws the same samples from the same generator state (`replay_persist_helpers.same_state`)."""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from replay_persist_helpers import DTYPES, SAMPLERS, make_buffer, same_state, touch
from trajview import _io
from trajview.errors import FileIntegrityError, PathInUseError
from trajview.replay import persistence

REPO = Path(__file__).resolve().parents[1]
#: Child processes import the trajview these tests import (a source tree on PYTHONPATH or an installed wheel).
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(tv.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}


def twin(rb: tv.ReplayBuffer) -> tv.ReplayBuffer:
    """An independent copy (through pickle, which this test trusts: it made the bytes)."""
    return pickle.loads(pickle.dumps(rb))


def _plain(x, where="state_dict"):
    """Asserts that ``x`` is plain data: dicts with str keys, lists, str/int/float/bool/None, numeric arrays."""
    if isinstance(x, dict):
        for k, v in x.items():
            assert isinstance(k, str), f"{where}: key {k!r}"
            _plain(v, f"{where}[{k!r}]")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _plain(v, f"{where}[{i}]")
    elif isinstance(x, np.ndarray):
        assert x.dtype.kind in "biuf", f"{where}: dtype {x.dtype}"
    else:
        assert x is None or type(x) in (str, int, float, bool), f"{where}: {type(x).__name__}"


# -- round trips ----------------------------------------------------------------------------------------------

columns_st = st.dictionaries(st.sampled_from(["a", "b", "img"]),
                             st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 3), max_size=2)
                                       .map(tuple)), max_size=2)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(sorted(SAMPLERS)), capacity=st.integers(8, 60), adds=st.integers(0, 12),
       frag=st.integers(1, 6), seed=st.integers(0, 2**16), extra=columns_st, how=st.sampled_from(["files", "dict"]))
def test_round_trip_gives_the_same_samples(tmp_path_factory, kind, capacity, adds, frag, seed, extra, how):
    try:
        rb, eps = make_buffer(kind, capacity, adds, seed, frag, extra=extra)
    except ValueError as e:  # one fragment larger than the buffer with its final rows: a valid refusal
        assert "capacity" in str(e)
        return
    copy = tv.ReplayBuffer(capacity, sampler=SAMPLERS[kind](seed + 1))
    if how == "files":
        d = tmp_path_factory.mktemp("dump")
        rb.dumps(d)
        copy.loads(d)
    else:
        sd = rb.state_dict()
        _plain(sd)
        json.dumps(sd["state"], allow_nan=False)
        copy.load_state_dict(sd)
    same_state(rb, copy)
    # the same future: adds (continuing open trajectories, overwriting), samples, priority updates
    for i in range(3):
        b = eps.batch(frag)
        rb.add(b)
        copy.add(b)
        touch(rb, i)
        touch(copy, i)
        same_state(rb, copy)


def test_dump_layout_and_npy_files(tmp_path):
    rb, eps = make_buffer("prioritized", 30, 5, extra={"img": (np.uint8, (2, 3))})
    rb.dumps(tmp_path)
    man = _io.read_manifest(tmp_path, persistence.FORMAT, (persistence.VERSION,))
    assert man.meta == {"format": "trajview.replay", "version": 2, "prefix": ""}
    names = set(man.files)
    assert {"state.json", "trajectories.npy", "pieces.npy", "leaf_mantissas.npy", "leaf_exponents.npy"} <= names
    state = json.loads(man.path("state.json").read_text())
    assert state["version"] == 2 and state["capacity"] == 30
    assert not any(n.endswith(".pkl") for n in names)
    # each column's rows in use, readable by numpy without pickle
    used = min(rb.rows_written(), 30)
    for i, (name, (dt, shape)) in enumerate(rb.columns.items()):
        a = np.load(man.path(f"col.{i}.npy"), allow_pickle=False)
        assert a.dtype == dt and a.shape == (used, *shape), name
        np.testing.assert_array_equal(a.reshape(-1).view(np.uint8),
                                      rb._impl.column_view(i)[: a.nbytes])
    # dumping again replaces the dump as a whole
    rb.add(eps.batch(3))
    rb.dumps(tmp_path)
    back = tv.ReplayBuffer(30, sampler=SAMPLERS["prioritized"](0))
    back.loads(tmp_path)
    same_state(rb, back)


def test_parts_of_a_bigger_committed_set(tmp_path):
    """`dump_parts` / `load_parts`: a buffer's files beside others in one committed folder (a checkpoint)."""
    rb, eps = make_buffer("prioritized-slice", 40, 6)
    with persistence.dump_parts(rb, prefix="replay.") as (files, meta):
        assert all(name.startswith("replay.") for name in files)
        _io.commit_folder(tmp_path, "test.checkpoint", 1, {**files, "other.json": lambda f: f.write(b"{}")},
                          {"replay": meta, "step": 7})
    man = _io.read_manifest(tmp_path, "test.checkpoint", (1,))
    with pytest.raises(ValueError, match="holds a 'test.checkpoint' folder"):
        rb.dumps(tmp_path)  # never over another kind of committed folder
    back = tv.ReplayBuffer(40, sampler=SAMPLERS["prioritized-slice"](9))
    before = twin(back)
    for bad_meta, prefix in (({**man.meta["replay"], "version": 3}, "replay."), (man.meta["replay"], "rb.")):
        with pytest.raises(FileIntegrityError, match="manifest.json"):
            persistence.load_parts(back, man, bad_meta, prefix=prefix)
        same_state(back, before)
    persistence.load_parts(back, man, man.meta["replay"], prefix="replay.")
    same_state(rb, back)


def test_empty_and_unfilled_buffers_round_trip(tmp_path):
    closed = tv.ReplayBuffer(10, sampler=tv.RandomSampler(seed=1), columns={"x": (np.float32, (2,))})
    closed.close()  # its schema, no store
    for rb in (tv.ReplayBuffer(10, sampler=tv.RandomSampler(seed=1), batch_size=4),
               tv.ReplayBuffer(10, sampler=tv.RandomSampler(seed=1), columns={"x": (np.float32, (2,))}), closed):
        rb.dumps(tmp_path / "e")
        back = tv.ReplayBuffer(10, sampler=tv.RandomSampler(seed=5))
        back.loads(tmp_path / "e")
        assert back.batch_size == rb.batch_size and back.columns == rb.columns and len(back) == 0
        assert back.sampler._rng.random() == rb.sampler._rng.random()


def test_views_and_nstep_round_trip_as_json(tmp_path):
    views = {"stack": tv.ViewRequirement("obs", shift="-2:0"), "n3": tv.NStep(3, 0.9)}
    rb, eps = make_buffer("random", 40, 6, views=views)
    sd = rb.state_dict()
    assert sd["state"]["views"]["stack"]["shift"] == "-2:0" and sd["state"]["nsteps"]["n3"]["gamma"] == 0.9
    back = tv.ReplayBuffer(40, sampler=SAMPLERS["random"](3))
    back.load_state_dict(sd)
    same_state(rb, back)
    assert "n3.discount" in back.sample(4)


# -- nothing runs code, a failed load changes nothing ---------------------------------------------------------


def test_an_old_pickle_dump_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "d" / "rows").mkdir(parents=True)
    (tmp_path / "d" / "state.pkl").write_bytes(pickle.dumps({"version": 1, "x": Payload()}))
    rb, _ = make_buffer("random", 20, 3)
    before = twin(rb)
    with pytest.raises(FileIntegrityError, match=r"state\.pkl.*pickle.*run code") as e:
        rb.loads(tmp_path / "d")
    assert e.value.path.endswith("state.pkl")
    assert not marker.exists()
    same_state(rb, before)
    with pytest.raises(ValueError, match="version-1"):
        rb.load_state_dict({"version": 1, "config": {}})


def _damage_cases(rb: tv.ReplayBuffer, tmp: Path):
    """(name, folder, file expected in the error) of damaged dumps of ``rb``."""
    good = tmp / "good"
    rb.dumps(good)
    man = _io.read_manifest(good, persistence.FORMAT, (2,))
    out = []
    for name in sorted(man.files):
        for how in ("flip", "truncate"):
            d = tmp / f"{how}-{name}"
            _copy_dump(good, d)
            p = _io.read_manifest(d, persistence.FORMAT, (2,)).path(name)
            data = bytearray(p.read_bytes())
            if how == "flip":
                data[len(data) // 2] ^= 0x10
            else:
                data = data[: len(data) - 1]
            p.write_bytes(bytes(data))
            out.append((f"{how} {name}", d, name))
    # mixed: one column file from another dump (same size, other rows)
    other, _ = make_buffer("prioritized", rb.capacity, 6, seed=77)
    other.dumps(tmp / "other")
    d = tmp / "mixed"
    _copy_dump(good, d)
    src = _io.read_manifest(tmp / "other", persistence.FORMAT, (2,)).path("col.0.npy")
    dst = _io.read_manifest(d, persistence.FORMAT, (2,)).path("col.0.npy")
    assert src.stat().st_size == dst.stat().st_size
    dst.write_bytes(src.read_bytes())
    out.append(("mixed", d, "col.0.npy"))
    return out


def _copy_dump(src: Path, dst: Path) -> None:
    import shutil
    shutil.copytree(src, dst)


def test_damaged_or_mixed_dumps_are_refused_naming_the_file_and_change_nothing(tmp_path):
    rb, _ = make_buffer("prioritized", 40, 8)
    target, _ = make_buffer("prioritized", 40, 3, seed=5)
    for what, folder, name in _damage_cases(rb, tmp_path):
        before = twin(target)
        with pytest.raises(FileIntegrityError) as e:
            target.loads(folder)
        assert e.value.path.endswith(name), (what, str(e.value))
        same_state(target, before)


def test_a_failed_load_changes_nothing(tmp_path):
    rb, _ = make_buffer("prioritized-slice", 40, 8)
    rb.dumps(tmp_path / "d")
    # other capacity, other sampler type: ValueError naming the difference; nothing changes
    for target, match in ((make_buffer("prioritized-slice", 41, 4)[0], "capacity 40"),
                          (make_buffer("prioritized", 40, 4)[0], "PrioritizedSliceSampler")):
        before = twin(target)
        with pytest.raises(ValueError, match=match):
            target.loads(tmp_path / "d")
        same_state(target, before)
    # a state dict whose last array is wrong: refused after everything else was read
    target, _ = make_buffer("prioritized-slice", 40, 4, seed=3)
    before = twin(target)
    sd = rb.state_dict()
    last = max(k for k in sd["arrays"] if k.startswith("col."))
    sd["arrays"][last] = sd["arrays"][last][:-1]
    with pytest.raises(ValueError, match=rf"arrays\['{last}'\]"):
        target.load_state_dict(sd)
    same_state(target, before)
    # a state dict holding an object that is not plain data
    sd = rb.state_dict()
    sd["state"]["batch_size"] = object()
    with pytest.raises(ValueError, match="plain JSON"):
        target.load_state_dict(sd)
    sd = rb.state_dict()
    sd["arrays"]["col.0"] = sd["arrays"]["col.0"].astype(object)
    with pytest.raises(ValueError, match="col.0"):
        target.load_state_dict(sd)
    same_state(target, before)


def test_crafted_trajectory_tables_are_refused_not_read_out_of_bounds(tmp_path):
    """The issue's case: a restored next_uid that skips ahead (the C++ lookup read past its table)."""
    rb, eps = make_buffer("random", 40, 6)
    for change in ("next_uid", "uid", "pieces", "head"):
        sd = rb.state_dict()
        if change == "next_uid":
            sd["state"]["store"]["next_uid"] += 3
        elif change == "uid":
            sd["arrays"]["trajectories"][-1, 0] += 2
        elif change == "pieces":
            sd["arrays"]["pieces"][0, 1] += 1000
        else:
            sd["state"]["store"]["head"] -= 10  # the newest pieces lie past it
        target = tv.ReplayBuffer(40, sampler=SAMPLERS["random"](0))
        with pytest.raises(ValueError, match="restore|arrays"):
            target.load_state_dict(sd)
        assert len(target) == 0


# -- the fuzz test: every byte of the state and the manifest ---------------------------------------------------


def _resign(folder: Path, name: str, data: bytes) -> None:
    """Writes ``data`` as the committed file ``name`` and updates the manifest to match (a crafted dump)."""
    mpath = folder / _io.MANIFEST
    body = json.loads(mpath.read_text())
    (folder / body["generation"] / name).write_bytes(data)
    body["files"][name] = {"size": len(data), "crc32": zlib.crc32(data) & 0xFFFFFFFF}
    mpath.write_bytes(_io.manifest_bytes(body))


def _signature(rb: tv.ReplayBuffer) -> tuple:
    """What a freshly loaded buffer holds and draws first."""
    batch, info = rb.sample(6, return_info=True)
    rows = np.concatenate([t["rows"] for t in rb.trajectories()]).astype(np.int64)
    return (rb.trajectories(), rb.rows_written(), rb.priorities(rows).tolist(),
            {k: np.asarray(v).tolist() for k, v in batch.items()}, {k: v.tolist() for k, v in info.items()})


def _load_or_refuse(kind: str, folder: Path, expect: tuple | None) -> None:
    """Loads ``folder`` into a fresh buffer: identical to ``expect`` (when given) or refused with a clear error;
    a crafted state that loads then samples and takes adds, or refuses with a ValueError: never a crash."""
    rb = tv.ReplayBuffer(24, sampler=SAMPLERS[kind](0))
    try:
        rb.loads(folder)
    except (FileIntegrityError, ValueError) as e:
        assert str(e)
        return
    if expect is not None:
        assert _signature(rb) == expect
        return
    for size in (4, 6):
        try:
            rb.sample(size, return_info=True)
        except ValueError:
            pass
    try:
        rb.add(make_buffer(kind, 24, 1, seed=5)[1].batch(2))
    except ValueError:
        pass


@pytest.fixture
def ram_path(tmp_path):
    """A folder in RAM (/dev/shm) when there is one: the fuzz test rewrites small files thousands of times, which
    some disk file systems flush on every truncation."""
    import shutil
    import tempfile
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="trajview-fuzz-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_fuzz_every_byte_of_state_and_manifest(ram_path):
    """Every byte of the manifest and of state.json truncated and changed: as written (the checksum catches a
    changed state) and, for the state, with the manifest updated to match (a crafted dump, checked field by
    field and by the C++ restore); then random bytes of the trajectory table and priorities, crafted alike."""
    tmp_path = ram_path
    kind = "prioritized-slice"
    rb, _ = make_buffer(kind, 24, 5, frag=3)
    good = tmp_path / "good"
    rb.dumps(good)
    gen = json.loads((good / _io.MANIFEST).read_text())["generation"]
    files = {"manifest": (good / _io.MANIFEST).read_bytes(), "state": (good / gen / "state.json").read_bytes()}
    fresh = tv.ReplayBuffer(24, sampler=SAMPLERS[kind](0))
    fresh.loads(good)
    expect = _signature(fresh)
    rng = np.random.default_rng(0)
    work = tmp_path / "w"
    _copy_dump(good, work)
    for which, original in files.items():
        for pos in range(len(original) + 1):
            variants = [original[:pos]] if pos < len(original) else []
            if pos < len(original):
                variants.append(original[:pos] + bytes([original[pos] ^ int(rng.integers(1, 256))]) + original[pos + 1:])
            for data in variants:
                if which == "manifest":
                    (work / _io.MANIFEST).write_bytes(data)
                    _load_or_refuse(kind, work, expect)  # the manifest is not signed: identical or refused
                    (work / _io.MANIFEST).write_bytes(original)
                else:
                    (work / gen / "state.json").write_bytes(data)
                    _load_or_refuse(kind, work, expect)  # the checksum catches it
                    _resign(work, "state.json", data)  # crafted: a consistent manifest
                    _load_or_refuse(kind, work, None)
                    _resign(work, "state.json", original)
    # crafted trajectory tables and priorities: random bytes of each array changed
    for name in ("trajectories.npy", "pieces.npy", "leaf_mantissas.npy", "leaf_exponents.npy"):
        original = (work / gen / name).read_bytes()
        header = len(original) - np.load(work / gen / name).nbytes
        for _ in range(100):
            data = bytearray(original)
            at = int(rng.integers(header, len(data)))
            data[at] ^= int(rng.integers(1, 256))
            _resign(work, name, bytes(data))
            _load_or_refuse(kind, work, None)
        _resign(work, name, original)
    _load_or_refuse(kind, work, expect)


def test_crafted_json_is_refused_naming_the_file(tmp_path):
    """JSON a parser chokes on (nested too deep, an int too long) and values numpy refuses (a generator state
    out of range): FileIntegrityError naming the file, like any damage."""
    rb, _ = make_buffer("prioritized", 24, 4)
    rb.dumps(tmp_path)
    gen = json.loads((tmp_path / _io.MANIFEST).read_text())["generation"]
    original = (tmp_path / gen / "state.json").read_bytes()
    st = json.loads(original)
    rng_state = {**st["sampler"]["state"]["_rng_state"], "has_uint32": 2**70}
    cases = {
        "nested too deep": b"[" * 100_000 + b"]" * 100_000,
        "int too long": original.replace(b'"capacity": 24', b'"capacity": ' + b"9" * 5000),
        "generator state": json.dumps({**st, "sampler": {**st["sampler"], "state": {
            **st["sampler"]["state"], "_rng_state": rng_state}}}).encode(),
        "alpha": json.dumps({**st, "store": {**st["store"], "alpha": float("inf")}}).encode(),
        "dtype": original.replace(b'"<f4"', b'"|O"', 1),
        "a view of a column not stored": json.dumps({**st, "views": {"v": {"data_col": "nope", "shift": 1}}}).encode(),
    }
    for what, data in cases.items():
        _resign(tmp_path, "state.json", data)
        target = tv.ReplayBuffer(24, sampler=SAMPLERS["prioritized"](0))
        with pytest.raises(FileIntegrityError, match="state.json") as e:
            target.loads(tmp_path)
        assert e.value.path.endswith("state.json"), what
    (tmp_path / _io.MANIFEST).write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(FileIntegrityError, match="manifest.json"):
        tv.ReplayBuffer(24, sampler=SAMPLERS["prioritized"](0)).loads(tmp_path)


# -- crash safety --------------------------------------------------------------------------------------------

_KILL_CHILD = textwrap.dedent("""
    import os, shutil, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from replay_persist_helpers import make_buffer
    from trajview import _io
    folder, fractions = sys.argv[2], [float(x) for x in sys.argv[3].split(",")]
    rb, eps = make_buffer("prioritized", 200, 40, frag=4, extra={"img": (np.uint8, (64,))})
    rb.add(eps.batch(3))
    real = _io._CrcFile.write
    state = {"written": 0, "limit": -1}
    def write(self, data):  # a process killed mid-write: its last write stops at the limit, nothing cleans up
        n = memoryview(data).nbytes
        if state["limit"] >= 0 and state["written"] + n > state["limit"]:
            real(self, memoryview(data).cast("B")[: state["limit"] - state["written"]])
            self._f.flush()
            os._exit(9)
        state["written"] += n
        return real(self, data)
    _io._CrcFile.write = write
    rb.dumps(folder + ".probe")  # how many bytes a whole dump writes
    total = state["written"]
    for k, frac in enumerate(fractions):
        state["written"], state["limit"] = 0, min(total - 1, int(frac * total))
        pid = os.fork()
        if pid == 0:
            rb.dumps(folder)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 9, status
        shutil.copytree(folder, f"{folder}.{k}")  # what the killed dump left
    print(total)
""")


def test_a_dump_killed_at_any_byte_leaves_the_old_or_the_new_dump(tmp_path):
    """A writer killed after k bytes (k random, and the first and last byte): the folder loads the old complete
    dump (or the new one, once its manifest was replaced)."""
    old, _ = make_buffer("prioritized", 200, 40, frag=4, extra={"img": (np.uint8, (64,))})
    folder = tmp_path / "d"
    old.dumps(folder)
    new, eps = make_buffer("prioritized", 200, 40, frag=4, extra={"img": (np.uint8, (64,))})
    new.add(eps.batch(3))  # the child's buffer (deterministic)
    fractions = [0.0, 0.999999, *np.random.default_rng(1).uniform(0, 1, 10).tolist()]
    env = CHILD_ENV
    r = subprocess.run([sys.executable, "-c", _KILL_CHILD, str(REPO / "tests"), str(folder),
                        ",".join(map(str, fractions))], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for k in range(len(fractions)):
        back = tv.ReplayBuffer(200, sampler=SAMPLERS["prioritized"](3))
        back.loads(f"{folder}.{k}")  # never an error
        same_state(twin(new) if back.rows_written() == new.rows_written() else twin(old), back, samples=1)
    back = tv.ReplayBuffer(200, sampler=SAMPLERS["prioritized"](3))
    back.loads(f"{folder}.probe")  # the dump the child finished
    same_state(new, back, samples=1)


def test_a_dump_sigkilled_at_a_random_time_leaves_a_complete_dump(tmp_path):
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        from replay_persist_helpers import make_buffer
        rb, eps = make_buffer("random", 3000, 1, frag=4, extra={"img": (__import__("numpy").uint8, (4096,))})
        i = 0
        while True:
            rb.add(eps.batch(20))
            rb.dumps(sys.argv[2])
            i += 1
            print(i, rb.rows_written(), flush=True)
    """)
    env = CHILD_ENV
    folder = tmp_path / "d"
    rng = np.random.default_rng(2)
    for delay in rng.uniform(0.2, 1.0, 3):
        p = subprocess.Popen([sys.executable, "-c", script, str(REPO / "tests"), str(folder)], env=env,
                             stdout=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=float(delay) + 1.5)
        except subprocess.TimeoutExpired:
            pass
        os.kill(p.pid, signal.SIGKILL)
        out = p.communicate()[0].split()
        p.wait()
        if not (folder / _io.MANIFEST).exists():
            continue
        back = tv.ReplayBuffer(3000, sampler=SAMPLERS["random"](0))
        back.loads(folder)  # a complete dump: the last one finished, or the one after it
        done = {int(out[k]) for k in range(1, len(out), 2)}
        assert not done or back.rows_written() >= max(done)
        assert len(back) > 0 and len(back.sample(8)) == 8


def test_out_of_disk_is_an_oserror_naming_the_path_and_keeps_the_old_dump(tmp_path, monkeypatch):
    rb, eps = make_buffer("prioritized", 40, 8)
    rb.dumps(tmp_path)
    before = twin(rb)
    rb.add(eps.batch(3))
    real = _io._CrcFile.write
    budget = [5000]

    def full_disk(self, data):
        budget[0] -= memoryview(data).nbytes
        if budget[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(_io._CrcFile, "write", full_disk)
    with pytest.raises(OSError) as e:
        rb.dumps(tmp_path)
    assert e.value.errno == errno.ENOSPC and str(tmp_path) in str(e.value)
    monkeypatch.undo()
    back = tv.ReplayBuffer(40, sampler=SAMPLERS["prioritized"](1))
    back.loads(tmp_path)
    same_state(before, back)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gen-")] == [
        json.loads((tmp_path / _io.MANIFEST).read_text())["generation"]]


def test_a_real_full_disk_keeps_the_old_dump(tmp_path):
    """The same on a 1 MiB tmpfs (needs the right to mount one, e.g. root in a container; the test above fakes
    the full disk everywhere)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (the faked full disk above covers this)")
    try:
        rb, eps = make_buffer("random", 600, 10, frag=10, extra={"img": (np.uint8, (1500,))})
        rb.dumps(mnt / "d")
        before = twin(rb)
        for _ in range(30):
            rb.add(eps.batch(10))
        with pytest.raises(OSError) as e:
            rb.dumps(mnt / "d")
        assert e.value.errno == errno.ENOSPC and str(mnt / "d") in str(e.value)
        back = tv.ReplayBuffer(600, sampler=SAMPLERS["random"](1))
        back.loads(mnt / "d")
        same_state(before, back)
        assert sorted(p.name.split("-")[0] for p in (mnt / "d").iterdir()) == [".lock", "gen", "manifest.json"]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_read_verified_into_several_buffers(tmp_path):
    man = _io.commit_folder(tmp_path, "t", 1, {"x": lambda f: f.write(b"headerrows!")})
    a, b = bytearray(6), np.zeros(5, np.uint8)
    _io.read_verified(man, "x", into=[a, b])
    assert bytes(a) == b"header" and b.tobytes() == b"rows!"
    with pytest.raises(ValueError, match="buffer holds 10 bytes"):
        _io.read_verified(man, "x", into=[bytearray(5), bytearray(5)])


@settings(max_examples=60, deadline=None)
@given(a=st.binary(max_size=3000), b=st.binary(max_size=3000))
def test_crc32_combine_matches_zlib(a, b):
    assert _io.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_large_files_are_summed_in_parallel_parts_exactly(ram_path):
    """Files past the pipelined sizes (several chunks, each in parts on helper threads): the manifest's crc32 is
    zlib's, and a flipped byte anywhere is still caught."""
    rng = np.random.default_rng(4)
    data = rng.integers(0, 256, 2 * _io._CrcPipe.STEP + 3 * _io._CrcPipe.MIN + 7).astype(np.uint8)
    man = _io.commit_folder(ram_path, "t", 1, {"big": lambda f: f.write(data), "small": lambda f: f.write(data[:99])})
    assert man.files["big"] == (data.nbytes, zlib.crc32(data))
    out = np.empty_like(data)
    _io.read_verified(_io.read_manifest(ram_path, "t", (1,)), "big", into=out)
    np.testing.assert_array_equal(out, data)
    p = man.path("big")
    raw = bytearray(p.read_bytes())
    raw[_io._CrcPipe.STEP + 5] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(FileIntegrityError, match="crc32"):
        _io.read_verified(_io.read_manifest(ram_path, "t", (1,)), "big")


# -- one owner per memory-mapped folder ------------------------------------------------------------------------


def test_memmap_buffer_owns_its_folder(tmp_path):
    path = tmp_path / "mm"
    rb = tv.ReplayBuffer(20, columns={"x": (np.float32, (2,))}, storage="memmap", path=path)
    with pytest.raises(PathInUseError, match=str(os.getpid())) as e:
        tv.ReplayBuffer(20, storage="memmap", path=path)
    assert e.value.path == str(path) and e.value.holder == str(os.getpid())
    meta = json.loads((path / "columns.json").read_text())
    assert meta["columns"] == [{"name": "x", "dtype": "<f4", "shape": [2], "file": "ring_0.bin", "row_bytes": 8}]
    rb.close()
    with pytest.raises(ValueError, match="closed"):
        rb.add({"x": np.zeros((2, 2), np.float32), "terminateds": np.array([False, True])})
    again = tv.ReplayBuffer(20, storage="memmap", path=path)
    del again
    import gc
    gc.collect()
    tv.ReplayBuffer(20, storage="memmap", path=path).close()


def test_memmap_lock_held_by_another_process_and_released_when_it_is_killed(tmp_path):
    path = tmp_path / "mm"
    script = textwrap.dedent("""
        import sys, time
        import trajview as tv
        rb = tv.ReplayBuffer(20, storage="memmap", path=sys.argv[1])
        print("ready", flush=True)
        time.sleep(60)
    """)
    env = CHILD_ENV
    p = subprocess.Popen([sys.executable, "-c", script, str(path)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        with pytest.raises(PathInUseError, match=f"process {p.pid}"):
            tv.ReplayBuffer(20, storage="memmap", path=path)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.communicate()
    tv.ReplayBuffer(20, storage="memmap", path=path).close()  # the killed holder does not block


def test_loads_into_a_memmap_buffer_replaces_its_rings_only_on_success(tmp_path):
    rb, _ = make_buffer("random", 40, 8)
    rb.dumps(tmp_path / "d")
    mm, _ = make_buffer("random", 40, 3, seed=4, storage="memmap", path=tmp_path / "mm")
    before = twin(mm)
    (_io.read_manifest(tmp_path / "d", persistence.FORMAT, (2,)).path("col.1.npy")).write_bytes(b"x")
    with pytest.raises(FileIntegrityError, match="col.1.npy"):
        mm.loads(tmp_path / "d")
    same_state(mm, before)
    assert not [p for p in (tmp_path / "mm").iterdir() if "loading" in p.name]
    rb.dumps(tmp_path / "d")
    mm.loads(tmp_path / "d")
    same_state(rb, mm)
    assert not [p for p in (tmp_path / "mm").iterdir() if "loading" in p.name]
    # the rows live in the ring files
    ring = np.fromfile(tmp_path / "mm" / "ring_0.bin", np.uint8)
    np.testing.assert_array_equal(ring, rb._impl.column_view(0))
