"""Files at rest, the second red team's findings (2026-11-26), each against its plain rule:

- a manifest's own entries (a checkpoint's settings and counters) carry a checksum: one changed byte is refused,
  never read as another value (an earlier trajview's manifest, without one, reads as before);
- a file of lines (a run's metrics) that is a FIFO, a device or a link to one is refused without blocking or
  reading without end; so is appending to one;
- a file rewritten atomically keeps its permissions; a plot is written atomically, never through a link;
- temporary files of killed writers are removed by the next writer of the folder;
- a `TrajviewStorage` dump whose state does not hold together is refused naming the manifest, and a refused load
  leaves the storage as it was, a memory-mapped one too;
- a torch file with compressed entries (a zip bomb) is refused before torch reads it;
- an exported policy is checked against its checksums before it is loaded.
"""

from __future__ import annotations

import io
import json
import os
import stat
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajview import _io
from trajview.errors import FileIntegrityError

FMT = "trajview.test"
ROOT = Path(__file__).resolve().parents[1]

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


def _commit(folder: Path, meta: dict) -> None:
    _io.commit_folder(folder, FMT, 1, {"a": lambda f: f.write(b"123")}, meta)


# -- the manifest's own checksum ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(meta=st.dictionaries(st.text(max_size=6), _json, max_size=5))
def test_a_manifest_reads_back_its_metadata_whatever_json_it_holds(tmp_path_factory, meta):
    folder = tmp_path_factory.mktemp("m")
    _commit(folder, meta)
    assert _io.read_manifest(folder, FMT, (1,)).meta == json.loads(json.dumps(meta))


def test_every_changed_digit_of_the_metadata_is_refused(tmp_path):
    """Each digit of the metadata's values changed to another (still valid JSON, another number): refused, naming
    the manifest (before: read as the other number)."""
    _commit(tmp_path, {"config": {"gamma": 0.99, "lr": 0.0003}, "counters": {"env_steps": 608, "iteration": 7}})
    mpath = tmp_path / _io.MANIFEST
    good = mpath.read_bytes()
    start = good.index(b'"meta"')
    digits = [i for i in range(start, len(good)) if chr(good[i]).isdigit()]
    assert len(digits) >= 10
    for i in digits:
        other = b"1" if good[i:i + 1] != b"1" else b"2"
        mpath.write_bytes(good[:i] + other + good[i + 1:])
        with pytest.raises(FileIntegrityError, match="manifest.json: crc32 of its entries"):
            _io.read_manifest(tmp_path, FMT, (1,))
    mpath.write_bytes(good)
    assert _io.read_manifest(tmp_path, FMT, (1,)).meta["counters"]["env_steps"] == 608


def test_a_manifest_of_an_earlier_trajview_still_reads_and_a_renamed_checksum_is_refused(tmp_path):
    """A manifest without ``crc32`` (trajview's before the checksum) reads as before; one whose ``crc32`` key was
    changed (one byte: ``crc33``) is refused for the unknown entry, not read unchecked."""
    _commit(tmp_path, {"n": 1})
    mpath = tmp_path / _io.MANIFEST
    good = mpath.read_text()
    body = json.loads(good)
    del body["crc32"]
    mpath.write_text(json.dumps(body))
    assert _io.read_manifest(tmp_path, FMT, (1,)).meta == {"n": 1}
    mpath.write_text(good.replace('"crc32": ', '"crc33": '))
    with pytest.raises(FileIntegrityError, match="unknown entries \\['crc33'\\]"):
        _io.read_manifest(tmp_path, FMT, (1,))


# -- files of lines, plots, permissions, temporary files -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "devzero", "folder"])
def test_lines_of_a_non_regular_file_are_refused_without_blocking(tmp_path, kind):
    p = tmp_path / "metrics.csv"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "devzero":
        p.symlink_to("/dev/zero")
    else:
        p.mkdir()
    with pytest.raises(FileIntegrityError, match="expected a regular file"):
        _io.read_lines(p)
    with pytest.raises(FileIntegrityError, match="expected a regular file"):
        _io.append_line(p, "x")


def test_lines_above_the_limit_are_refused_before_they_are_read(tmp_path):
    p = tmp_path / "m.csv"
    p.write_bytes(b"a\nb\n")
    assert _io.read_lines(p, limit=4) == (["a", "b"], False)
    with pytest.raises(FileIntegrityError, match="holds 4 bytes, expected at most 3"):
        _io.read_lines(p, limit=3)


def test_report_and_resume_refuse_a_fifo_as_metrics(tmp_path):
    """`trajview report` on a run whose metrics.csv is a FIFO: a one-line error, not a process blocked forever."""
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.csv")
    from train_runs import cli_env

    done = subprocess.run([sys.executable, "-m", "trajview", "report", str(run)], capture_output=True, text=True,
                          timeout=60, env=cli_env())
    assert done.returncode != 0
    assert "expected a regular file, got a FIFO" in done.stderr


def test_an_atomic_rewrite_keeps_the_files_permissions(tmp_path):
    p = tmp_path / "f"
    _io.atomic_write(p, b"1")
    os.chmod(p, 0o600)
    _io.atomic_write(p, b"2")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600 and p.read_bytes() == b"2"


def test_the_learning_curve_is_written_atomically_not_through_a_link(tmp_path):
    pytest.importorskip("matplotlib")
    from trajview.train.metrics import plot_learning_curve

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "learning_curve.png"
    link.symlink_to(victim)
    rows = [{"env_steps": 100 * i, "episode_return_mean": float(i)} for i in range(1, 4)]
    plot_learning_curve(rows, link, "t")
    assert victim.read_text() == "keep"
    assert not link.is_symlink() and link.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_killed_writers_temporary_manifest_goes_at_the_next_commit(tmp_path):
    _commit(tmp_path, {"n": 1})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    left = tmp_path / f".{_io.MANIFEST}.tmp-{dead}-0badc0de"
    recent = tmp_path / f".{_io.MANIFEST}.tmp-{dead}-00c0ffee"  # (dead here, but written just now: kept)
    mine = tmp_path / f".{_io.MANIFEST}.tmp-{os.getppid()}-00000000"  # (a live process's: kept)
    for p in (left, recent, mine):
        p.write_bytes(b"{")
    hour_ago = time.time() - 2 * 3600
    for p in (left, mine):
        os.utime(p, (hour_ago, hour_ago))
    _commit(tmp_path, {"n": 2})
    assert not left.exists() and recent.exists() and mine.exists()


def test_a_killed_loads_staged_rings_go_when_a_buffer_takes_the_folder(tmp_path):
    import trajview as tv

    folder = tmp_path / "rings"
    folder.mkdir()
    staged = folder / ".ring_0.bin.loading"
    staged.write_bytes(b"\0" * 4096)
    buf = tv.ReplayBuffer(16, storage="memmap", path=folder)
    assert not staged.exists()
    buf.close()


# -- a torch file with compressed entries ------------------------------------------------------------------------


def test_compressed_entries_in_a_torch_file_are_refused_before_torch_reads_them():
    torch = pytest.importorskip("torch")
    from trajview.train.checkpoint import _check_stored_zip

    raw = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(4096)}}, raw)
    data = raw.getvalue()
    _check_stored_zip(Path("weights.pt"), data)  # torch.save's own: stored entries
    packed = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    assert len(packed.getvalue()) < len(data) // 4  # (the zeros compress: what a zip bomb does at scale)
    with pytest.raises(FileIntegrityError, match="weights.pt: entry .* is compressed"):
        _check_stored_zip(Path("weights.pt"), packed.getvalue())


# -- TrajviewStorage dumps ------------------------------------------------------------------------------------------


def _storage_dump(tmp_path: Path, **kw):
    pytest.importorskip("torchrl")
    from test_torchrl_storage import episode_data
    from trajview.torchrl import TrajviewStorage

    a = TrajviewStorage(32, **kw)
    a.set(range(20), episode_data([8, 12]))
    d = tmp_path / "d"
    a.dumps(d)
    return d, episode_data


def _edit_manifest(d: Path, edit) -> None:
    body = json.loads((d / _io.MANIFEST).read_text())
    edit(body["meta"]["torchrl"])
    (d / _io.MANIFEST).write_bytes(_io.manifest_bytes(body))  # (signed: a crafted dump)


def _swap_action_and_count(meta: dict) -> None:
    for e in meta["schema"]:
        if e[0] == "action":
            e[1] = ["count"]
        elif e[0] == "count":
            e[1] = ["action"]


def _object_dtype(meta: dict) -> None:
    for e in meta["schema"]:
        if e[0] == "count":
            e[2] = "|O"


def _len_past_max_size(meta: dict) -> None:
    meta["len"] = 999


@pytest.mark.parametrize("edit, match", [
    (_swap_action_and_count, "schema entry 'action' is for key \\('count',\\)"),
    (_object_dtype, "replay stores bool, int and float columns only"),
])
def test_a_crafted_storage_schema_is_refused_naming_the_manifest(tmp_path, edit, match):
    from trajview.torchrl import TrajviewStorage

    d, episode_data = _storage_dump(tmp_path)
    _edit_manifest(d, edit)
    b = TrajviewStorage(32)
    b.set(range(5), episode_data([5], start=500))
    before = b[:]
    with pytest.raises(FileIntegrityError, match=f"manifest.json: .*{match}"):
        b.loads(d)
    assert (b[:]["observation"] == before["observation"]).all() and len(b) == 5


def _slot_array(d: Path, name: str, edit) -> None:
    """Rewrites the dump's ``torchrl.<name>.npy`` through ``edit`` with its manifest entry updated (a crafted
    dump every checksum passes)."""
    import zlib

    body = json.loads((d / _io.MANIFEST).read_text())
    p = d / body["generation"] / f"torchrl.{name}.npy"
    a = np.load(p)
    edit(a)
    buf = io.BytesIO()
    np.save(buf, a)
    p.write_bytes(buf.getvalue())
    body["files"][p.name] = {"size": len(buf.getvalue()), "crc32": zlib.crc32(buf.getvalue())}
    (d / _io.MANIFEST).write_bytes(_io.manifest_bytes(body))


def _dup(a):
    a[1:4] = a[0]


def _far(a):
    a[:20] = 10**15


@pytest.mark.parametrize("name, edit, match", [
    ("slot_row", _dup, "slot_row names a row for two slots"),
    ("slot_first", _far, "slot_first must be a row at or before"),
])
def test_crafted_slots_are_refused(tmp_path, name, edit, match):
    from trajview.torchrl import TrajviewStorage

    d, _ = _storage_dump(tmp_path)
    _slot_array(d, name, edit)
    with pytest.raises(FileIntegrityError, match=match):
        TrajviewStorage(32).loads(d)


def test_a_huge_npy_header_is_refused_naming_the_file(tmp_path):
    """A slot array whose header declares 2**40 rows (its size and crc32 updated): refused from its size, before
    anything is allocated (before: numpy's MemoryError naming no file)."""
    import zlib

    from trajview.torchrl import TrajviewStorage

    d, _ = _storage_dump(tmp_path)
    body = json.loads((d / _io.MANIFEST).read_text())
    p = d / body["generation"] / "torchrl.slot_row.npy"
    raw = p.read_bytes().replace(b"(32,)", b"(1099511627776,)")
    p.write_bytes(raw)
    body["files"][p.name] = {"size": len(raw), "crc32": zlib.crc32(raw)}
    (d / _io.MANIFEST).write_bytes(_io.manifest_bytes(body))
    with pytest.raises(FileIntegrityError, match="torchrl.slot_row.npy"):
        TrajviewStorage(32).loads(d)


def _set_next_ikey_to_an_open_key(meta: dict) -> None:
    meta["next_ikey"] = meta["open"][0][1]


def _open_first_row_mid_trajectory(meta: dict) -> None:
    meta["open"][0][3] += 1


def _infinite_fallback(meta: dict) -> None:
    meta["fallback"] = float("inf")


@pytest.mark.parametrize("edit, match", [
    (_set_next_ikey_to_an_open_key, "next_ikey .* must be >= 0 and above every open trajectory's store key"),
    (_open_first_row_mid_trajectory, "an open trajectory's first row is not the first step"),
    (_infinite_fallback, "malformed meta \\(OverflowError"),
])
def test_crafted_trajectory_bookkeeping_is_refused(tmp_path, edit, match):
    """The reviewer's cases: a next store key equal to an open trajectory's (the next write was joined onto it), an
    open trajectory starting mid-trajectory, an infinite counter (an OverflowError escaped)."""
    pytest.importorskip("torchrl")
    from test_torchrl_storage import episode_data
    from trajview.torchrl import TrajviewStorage

    a = TrajviewStorage(32)
    data = episode_data([8, 12])
    data["next", "done"][-1] = False  # the second trajectory stays open
    data["next", "terminated"][-1] = False
    a.set(range(20), data)
    d = tmp_path / "d"
    a.dumps(d)
    assert json.loads((d / _io.MANIFEST).read_text())["meta"]["torchrl"]["open"]
    _edit_manifest(d, edit)
    with pytest.raises(FileIntegrityError, match=match):
        TrajviewStorage(32).loads(d)


def test_a_held_slots_first_row_must_be_its_trajectorys_first(tmp_path):
    from trajview.torchrl import TrajviewStorage

    d, _ = _storage_dump(tmp_path)
    _slot_array(d, "slot_first", _later_first)
    with pytest.raises(FileIntegrityError, match="slot_first must name the first step"):
        TrajviewStorage(32).loads(d)


def _later_first(a):
    a[10:20] += 1  # (slots 10-19 hold the second trajectory: its first row moved on by one, still inside it)


@pytest.mark.parametrize("seed", range(6))
def test_a_storage_written_at_random_loads_back_whole(tmp_path, seed):
    """Random writes (1-3 envs interleaved, episodes of random length continuing across writes, the ring wrapping):
    after every write, its state dict loads into a fresh storage with the same steps, and every few writes its dump
    loads too, in memory and memory-mapped: the checks above never refuse what a storage wrote."""
    pytest.importorskip("torchrl")
    torch = pytest.importorskip("torch")
    from tensordict import TensorDict
    from trajview.torchrl import TrajviewStorage

    rng = np.random.default_rng(seed)
    size = int(rng.integers(8, 48))
    nenv = int(rng.integers(1, 4))
    st = TrajviewStorage(size, extra_rows=int(rng.integers(size // 2 + 4, 2 * size + 8)))
    envs = [{"tid": i, "T": int(rng.integers(1, 30)), "t": 0, "o": float(i * 10**6)} for i in range(nenv)]
    next_tid, cursor = nenv, 0
    for w in range(24):
        rows = []
        for e in envs:
            for _ in range(int(rng.integers(1, max(2, size // nenv)))):
                e["t"] += 1
                done = e["t"] >= e["T"]
                rows.append((e["o"], e["o"] + 1, done, e["tid"]))
                e["o"] += 1
                if done:
                    e.update(tid=next_tid, T=int(rng.integers(1, 30)), t=0)
                    next_tid += 1
        d_ = torch.tensor([r[2] for r in rows])[:, None]
        td = TensorDict({"observation": torch.tensor([r[0] for r in rows])[:, None].float(),
                         "next": {"observation": torch.tensor([r[1] for r in rows])[:, None].float(),
                                  "reward": torch.ones(len(rows), 1), "done": d_, "terminated": d_.clone(),
                                  "truncated": torch.zeros_like(d_)},
                         "collector": {"traj_ids": torch.tensor([r[3] for r in rows])}}, batch_size=[len(rows)])
        try:
            st.set(np.arange(cursor, cursor + len(rows)) % size, td)
        except ValueError as e:
            assert "extra_rows" in str(e)
            continue
        cursor = (cursor + len(rows)) % size
        twin = TrajviewStorage(size, extra_rows=st.extra_rows)
        twin.load_state_dict(st.state_dict())
        assert (twin[: len(st)]["observation"] == st[: len(st)]["observation"]).all()
        if w % 8 == 7:
            st.dumps(tmp_path / f"d{w}")
            for kw in ({}, {"storage": "memmap", "path": tmp_path / f"m{w}"}):
                back = TrajviewStorage(size, extra_rows=st.extra_rows, **kw)
                back.loads(tmp_path / f"d{w}")
                assert (back[: len(st)]["next", "observation"] == st[: len(st)]["next", "observation"]).all()


def test_a_refused_load_leaves_a_memory_mapped_storage_as_it_was(tmp_path):
    """The red team's case: a memory-mapped storage's rows were swapped in before the state's checks refused it."""
    from trajview.torchrl import TrajviewStorage

    d, episode_data = _storage_dump(tmp_path, storage="memmap", path=tmp_path / "a")
    _edit_manifest(d, _len_past_max_size)
    b = TrajviewStorage(32, storage="memmap", path=tmp_path / "b")
    b.set(range(20), episode_data([10, 10], start=5000))
    before = b[:]["observation"].clone()
    with pytest.raises(FileIntegrityError, match="len must be an int in"):
        b.loads(d)
    assert (b[:]["observation"] == before).all()
    assert not list((tmp_path / "b").glob(".ring_*.loading"))


def test_a_refused_state_dict_leaves_a_memory_mapped_storage_as_it_was(tmp_path):
    pytest.importorskip("torchrl")
    from test_torchrl_storage import episode_data
    from trajview.torchrl import TrajviewStorage

    a = TrajviewStorage(32)
    a.set(range(20), episode_data([8, 12]))
    sd = a.state_dict()
    sd["arrays"]["slot_row"][1:4] = sd["arrays"]["slot_row"][0]
    b = TrajviewStorage(32, storage="memmap", path=tmp_path / "b")
    b.set(range(20), episode_data([10, 10], start=5000))
    before = b[:]["observation"].clone()
    with pytest.raises(ValueError, match="slot_row names a row for two slots"):
        b.load_state_dict(sd)
    assert (b[:]["observation"] == before).all()


# -- exported policies ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_damaged_exported_policy_is_refused_before_it_is_loaded(tmp_path, fmt):
    torch = pytest.importorskip("torch")
    if fmt == "onnx":
        pytest.importorskip("onnx")
        pytest.importorskip("onnxruntime")
    import gymnasium as gym

    import trajview as tv
    from trajview.train.export import export_policy

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from serve_exported import ExportedPolicy, read_checked
    finally:
        sys.path.remove(str(ROOT / "examples"))
    torch.manual_seed(0)
    policy = tv.PPOPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), {"model": "framestack"})
    path = tmp_path / ("p.onnx" if fmt == "onnx" else "p.pt")
    export_policy(policy, path, fmt)
    good = path.read_bytes()
    assert read_checked(path) == good
    ExportedPolicy(path).act(np.zeros(4, np.float32))
    if fmt == "onnx":
        where = np.arange(len(good))  # every byte
    else:  # every byte of the stored zip entries' data (the weights and the spec: their crc32s cover each byte; not
        # the headers' dates and padding, nor the deflated code entries, where a flip in a block's spare bits leaves
        # what unpacks, and so the crc32's input, unchanged: harmless)
        with zipfile.ZipFile(io.BytesIO(good)) as z:
            where = np.concatenate([_entry_data(good, i) for i in z.infolist()
                                    if i.file_size and i.compress_type == zipfile.ZIP_STORED])
    rng = np.random.default_rng(0)
    for i in rng.choice(where, 40, replace=False).tolist():  # a bit flipped: refused
        path.write_bytes(good[:i] + bytes([good[i] ^ 0x40]) + good[i + 1:])
        with pytest.raises(ValueError, match=str(path)):
            read_checked(path)
    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(ValueError, match=re.escape(str(path))) as e:
        read_checked(path)
    assert "truncated" in str(e.value)  # (an ONNX file's digest entry is near its end: gone; a zip's directory too)


def _entry_data(data: bytes, info: zipfile.ZipInfo) -> np.ndarray:
    """The offsets of a stored zip entry's data (after its local header: 30 bytes, the name, the extra field)."""
    name_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    return np.arange(start, start + info.compress_size)
