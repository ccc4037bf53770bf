"""`tv.ReplayServer` writers that die, stall or send what cannot be sent (issue 23, item 5).

A property test kills writer processes (SIGKILL) at random points, mid-batch too (big batches span many socket
writes), while a thread samples: every batch arrives whole or not at all, in each writer's order; with
``trajs_per_batch`` only complete trajectories are ever sampled, each exactly once; survivors' batches all
arrive; ``close(timeout)`` returns in time; ``server.metrics`` counts the dead. Plain tests: a batch that
cannot be sent raises in ``add``; a writer killed or stopped mid-batch (forced: the server is not reading yet)
never wedges ``close``; batches arrive as the buffer would store them from a direct ``add``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.replay import wire

sys.path.insert(0, os.path.dirname(__file__))
from test_replay_writers import make_fragment, two_env_batches  # noqa: E402

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

CTX = multiprocessing.get_context("fork")
BIG = 8192  # float64 per row of the "pad" column of big batches: 64 KiB a row, batches of ~600 KiB


def writer_batches(w: int, seed: int, n_adds: int, big: bool) -> list[dict]:
    """What writer ``w`` adds: each batch holds a fragment of each of its 2 envs' episodes (as a rollout worker
    with 2 envs); episode e of writer w has id (w + 1) << 20 | e, rows encode (writer, episode, t)."""
    batches = two_env_batches(w, np.random.default_rng([seed, w]), max_len=25, max_chunk=10)
    out = []
    for _ in range(n_adds):
        batch = next(batches)
        if big:
            batch["pad"] = np.broadcast_to(batch["obs"][:, 3:4], (len(batch["t"]), BIG)).copy()
        out.append(batch)
    return out


def write(w: int, handle, seed: int, n_adds: int, big: bool, adds=None) -> None:
    for i, b in enumerate(writer_batches(w, seed, n_adds, big)):
        if adds is not None:
            adds.value = i  # adds done
            time.sleep(0.002)  # a killer can catch up
        handle.add(tv.SampleBatch(b))
    if handle.trajs_per_batch is not None:
        handle.flush()


def reference_messages(w: int, seed: int, n_adds: int, big: bool, tpb: int | None) -> list[set[tuple[int, int]]]:
    """The (episode, t) rows of each batch writer ``w`` sends, in order (its handle, with the wire recorded)."""
    handle = tv.replay.ReplayWriter("never connected", "token", 4, tpb)
    sent: list[set[tuple[int, int]]] = []

    def record(kind, header, arrays, size):
        if kind == wire.BATCH:
            cols = {c[0]: a for c, a in zip(header["columns"], arrays)}
            sent.append(set(zip(cols["eps_id"].tolist(), cols["t"].tolist())))

    handle._send = record
    write(w, handle, seed, n_adds, big)
    return sent


def stored_rows(rb: tv.ReplayBuffer) -> dict[int, list[tuple[int, int, dict]]]:
    """Per writer: (episode, t) of every stored row, and the trajectory it is in."""
    out: dict[int, list] = {}
    for tr in rb.trajectories():
        b, _ = rb._gather([(tr["uid"], 0, tr["steps"])], tr["steps"])
        for eps, t in zip(b["eps_id"].tolist(), b["t"].tolist()):
            out.setdefault((eps >> 20) - 1, []).append((eps, t, tr))
        if "pad" in b:
            assert (b["pad"] == b["obs"][:, 3:4]).all(), "a torn row"
    return out


@settings(max_examples=8, deadline=None)
@given(
    tpb=st.sampled_from([None, 2]),
    big=st.booleans(),
    seed=st.integers(0, 2**16),
    plan=st.lists(st.tuples(st.integers(2, 25), st.one_of(st.none(), st.tuples(st.floats(0.0, 0.99),
                                                                                 st.floats(0.0, 0.004)))),
                  min_size=2, max_size=3),
)
def test_writers_killed_at_random_points(tpb, big, seed, plan):
    """``plan``: per writer, its number of adds and None (it lives) or when it is killed: after that many adds
    returned (a fraction of its adds), plus a delay (mid-add, often mid-batch with big batches)."""
    rb = tv.ReplayBuffer(2_000, sampler=tv.SliceSampler(slice_len=2, seed=0))  # never wraps
    server = tv.ReplayServer(rb, maxsize=4)
    refs = [reference_messages(w, seed, n, big, tpb) for w, (n, _) in enumerate(plan)]
    adds = [CTX.Value("i", 0) for _ in plan]
    procs = [CTX.Process(target=write, args=(w, server.writer(tpb), seed, n, big, adds[w]))
             for w, (n, _) in enumerate(plan)]
    for p in procs:  # fork before any thread of this process starts
        p.start()
    server.start()
    lengths: dict[int, int] = {}  # with trajs_per_batch, every episode sent is sent whole
    for ref in refs:
        for msg in ref:
            for eps, t in msg:
                lengths[eps] = max(lengths.get(eps, 0), t + 1)
    problems: list[str] = []
    stop = threading.Event()

    def sampler() -> None:  # with trajs_per_batch, a partial trajectory must never be sampled
        try:
            while not stop.is_set():
                if len(rb) == 0:
                    time.sleep(0.002)
                    continue
                b, info = rb.sample(32, return_info=True)
                trajs = {tr["uid"]: tr for tr in rb.trajectories()}
                for uid in info["slices"][:, 0].tolist():
                    tr = trajs[uid]
                    if tpb is not None and (tr["open"] or not tr["starts_episode"]
                                            or tr["steps"] != lengths[tr["key"]]):
                        problems.append(f"partial trajectory sampled: {tr}")
        except Exception as e:  # a sampler that stopped checks nothing: a failure
            problems.append(f"sampler: {e!r}")

    th = threading.Thread(target=sampler)
    th.start()
    targets = {w: (int(kill[0] * n), kill[1]) for w, (n, kill) in enumerate(plan) if kill is not None}
    while targets:
        for w, (after, delay) in list(targets.items()):
            if adds[w].value >= after or procs[w].exitcode is not None:
                time.sleep(delay)
                procs[w].kill()  # SIGKILL (nothing if it has exited)
                del targets[w]
        time.sleep(0.0005)
    for p in procs:
        p.join(60)
    t0 = time.monotonic()
    server.close(timeout=10)
    assert time.monotonic() - t0 < 10
    stop.set()
    th.join()
    assert problems == [] and server.errors == []

    rows = stored_rows(rb)
    killed = [p.exitcode == -signal.SIGKILL for p in procs]
    assert all(p.exitcode in (0, -signal.SIGKILL) for p in procs)
    added = 0
    for w, ref in enumerate(refs):
        got = rows.get(w, [])
        pairs = [(e, t) for e, t, _ in got]
        assert len(pairs) == len(set(pairs)), "a row stored twice"
        # Whole batches, a prefix of what the writer sent, in order; all of it from a survivor.
        union: set = set()
        m = 0
        while m < len(ref) and union != set(pairs):
            union |= ref[m]
            m += 1
        assert union == set(pairs), f"writer {w}: stored rows are not whole batches of its first ones"
        if not killed[w]:
            assert m == len(ref)
        added += m
        if tpb is not None:  # every stored trajectory complete, each exactly once
            for _, _, tr in got:
                assert not tr["open"] and tr["starts_episode"] and tr["steps"] == lengths[tr["key"]]
            assert len({tr["uid"] for _, _, tr in got}) == len({e for e, _ in pairs})
    mt = server.metrics
    assert mt["batches_added"] == added and mt["batches_failed"] == 0, (mt, added, killed)
    assert mt["steps_added"] == sum(len(v) for v in rows.values())
    # A writer killed after its goodbye (on its way out) counts as closed.
    assert sum(not k for k in killed) <= mt["writers_closed"] <= len(procs)
    assert mt["writers_lost"] == mt["writers_connected"] - mt["writers_closed"] <= sum(killed)
    assert mt["batches_torn"] <= mt["writers_lost"] and mt["writers_active"] == 0


def _wait(flag, what: str) -> None:
    end = time.monotonic() + 30
    while not flag.value:
        assert time.monotonic() < end, what
        time.sleep(0.01)


def _stuck_writer(handle, flag) -> None:
    """One incomplete trajectory held, one complete batch sent, then a 40 MB batch: the server is not reading
    yet, so the send blocks mid-batch once the socket's buffer is full."""
    handle.add(tv.SampleBatch(make_fragment(0, 1 << 20 | 1, 0, 3, False)))  # held: incomplete
    handle.add(tv.SampleBatch(make_fragment(0, 1 << 20 | 2, 0, 4, True)))  # sent whole
    big = make_fragment(0, 1 << 20 | 3, 0, 400_000, True)  # ~40 MB
    flag.value = 1
    handle.add(tv.SampleBatch(big))
    flag.value = 2


def _good_writer(handle) -> None:
    for e in range(1, 4):
        handle.add(tv.SampleBatch(make_fragment(1, 2 << 20 | e, 0, 5, True)))


def _start_stuck(server):
    flag = CTX.Value("i", 0)
    stuck = CTX.Process(target=_stuck_writer, args=(server.writer(trajs_per_batch=1), flag))
    good = CTX.Process(target=_good_writer, args=(server.writer(),))
    stuck.start()
    good.start()
    good.join(30)
    _wait(flag, "the stuck writer never began its big batch")
    time.sleep(1.0)  # encoding the batch takes milliseconds; sending it blocks until the server reads
    assert flag.value == 1 and stuck.is_alive()  # blocked mid-send
    return stuck


def test_writer_killed_mid_batch_loses_only_its_own():
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb)
    stuck = _start_stuck(server)
    os.kill(stuck.pid, signal.SIGKILL)
    stuck.join(10)
    server.start()
    t0 = time.monotonic()
    server.close(timeout=10)  # returns: a dead writer is no reason to wait
    assert time.monotonic() - t0 < 10 and server.errors == []
    assert sorted((d["key"], d["steps"]) for d in rb.trajectories()) == [(1 << 20 | 2, 4)] + [
        (2 << 20 | e, 5) for e in range(1, 4)]
    m = server.metrics
    assert (m["writers_connected"], m["writers_closed"], m["writers_lost"]) == (2, 1, 1)
    assert (m["batches_added"], m["batches_torn"], m["batches_failed"], m["steps_added"]) == (4, 1, 0, 19)
    assert m["trajectories_lost"] == 2  # the held incomplete one and the torn batch's one
    with pytest.raises(RuntimeError, match="closed"):
        server.writer()
    with pytest.raises(ConnectionError, match="cannot reach the ReplayServer"):
        tv.replay.ReplayWriter(server.address, "x").add(make_fragment(0, 5, 0, 2, True))


def test_close_returns_in_time_with_a_stalled_writer():
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb)
    stuck = _start_stuck(server)
    os.kill(stuck.pid, signal.SIGSTOP)
    try:
        server.start()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="1 writer.*still sending a batch after 1.5 s"):
            server.close(timeout=1.5)
        assert time.monotonic() - t0 < 4
        assert rb.num_trajectories() == 4  # every whole batch sent before close() was added
        assert server.metrics["batches_torn"] == 1 and server.errors == []
    finally:
        os.kill(stuck.pid, signal.SIGKILL)
        stuck.join(10)


def test_batch_that_cannot_be_sent_raises_in_add():
    rb = tv.ReplayBuffer(100)
    with tv.ReplayServer(rb) as server:
        w, w2 = server.writer(), server.writer(trajs_per_batch=2)
        bad = make_fragment(0, 7, 0, 3, True)
        bad["what"] = np.zeros(3, dtype=[("a", "i4"), ("b", "f4")])
        for h in (w, w2):
            with pytest.raises(TypeError, match="column 'what' has dtype .* cannot be sent as raw bytes"):
                h.add(bad)
        bad["what"] = np.array([object(), None, 1], dtype=object)
        with pytest.raises(TypeError, match="column 'what' has dtype object"):
            w.add(bad)
        assert w2._pending == {} and w2._complete == []  # nothing held
        with pytest.raises(TypeError, match="SampleBatch or a mapping"):
            w.add([1, 2, 3])
        with pytest.raises(TypeError, match="MultiAgentBatch"):
            w.add(tv.MultiAgentBatch({"p": make_fragment(0, 7, 0, 3, True)}, 3))
        w.add(make_fragment(0, 7, 0, 3, True))
    assert server.errors == [] and server.batches_added == 1 and rb.num_trajectories() == 1
    with pytest.raises(ConnectionError, match="closed"):
        w.add(make_fragment(0, 8, 0, 3, True))


def test_stores_what_a_direct_add_stores():
    """Through the server or straight into the buffer: the same rows, trajectories and samples (a SampleBatch
    with nested obs, view columns, infos and new_obs; a plain dict; a torch-free mapping of lists)."""
    frags = [make_fragment(0, 1 << 20 | e, 0, 4 + e, e % 2 == 0) for e in range(1, 6)]
    batches = []
    for i, f in enumerate(frags):
        f = dict(f)
        f["obs"] = {"a": f["obs"], "b": (f["obs"][:, :2].astype(np.float32), f["t"] % 3)}
        f["new_obs"] = {"a": f["new_obs"], "b": (f["new_obs"][:, :2].astype(np.float32), (f["t"] + 1) % 3)}
        f["infos"] = [{"i": i}] * len(f["t"])
        if i % 2:
            b = tv.SampleBatch(f)
            b["prev_rewards"] = np.concatenate([[0.0], b["rewards"][:-1]])
            b.view_columns = frozenset({"prev_rewards"})
            batches.append(b)
        else:
            batches.append(f)
    direct = tv.ReplayBuffer(200, sampler=tv.SliceSampler(slice_len=3, seed=4))
    served = tv.ReplayBuffer(200, sampler=tv.SliceSampler(slice_len=3, seed=4))
    for b in batches:
        direct.add(b)
    with tv.ReplayServer(served) as server:
        w = server.writer()
        for b in batches:
            w.add(b)
    assert server.errors == []
    assert served.trajectories() == direct.trajectories() and served.columns == direct.columns
    for _ in range(5):
        a, b = direct.sample(12), served.sample(12)
        assert sorted(a.keys()) == sorted(b.keys())
        for k in a.keys():
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            assert a[k].dtype == b[k].dtype


def test_foreign_bytes_are_refused():
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb).start()
    for payload in (wire.frame(wire.HELLO, {"token": "0" * 32, "pid": 1}),  # a wrong token
                    b"GET / HTTP/1.0\r\n\r\n" + bytes(64)):
        s = socket.socket(socket.AF_UNIX)
        s.connect(server.address)
        s.sendall(payload)
        try:
            assert s.recv(10) == b""  # dropped
        except ConnectionResetError:  # dropped with bytes unread
            pass
        s.close()
    w = server.writer()
    w.add(make_fragment(0, 3, 0, 2, True))
    server.close()
    assert [type(e).__name__ for e in server.errors] == ["ProtocolError"] * 2
    assert "wrong token" in str(server.errors[0]) and "TVRW" in str(server.errors[1])
    assert rb.num_trajectories() == 1 and server.metrics["writers_connected"] == 1


def test_decoding_checks_the_header():
    header, arrays, size = wire.encode_batch({"x": np.arange(3)}, {})
    assert wire.payload_size(header) == size
    for bad in ({"type": "dict", "columns": [["x", "|O", [3], 0]]},
                {"type": "dict", "columns": [["x", "<i8", [-1], 0]]},
                {"type": "dict", "columns": [["x", "<i8", [3], 3]]},
                {"type": "dict", "columns": [["x", "numpy.core.multiarray._reconstruct", [3], 0]]},
                {"type": "pickle", "columns": []}):
        with pytest.raises(wire.ProtocolError):
            wire.payload_size(bad)
    with pytest.raises(wire.ProtocolError, match="starts with"):
        wire.parse_prefix(b"\x80\x04" + bytes(wire.PREFIX.size - 2))


def _spawned_writer(handle, w: int) -> None:
    for e in range(1, 4):
        handle.add(tv.SampleBatch(make_fragment(w, (w + 1) << 20 | e, 0, 3, True)))
    handle.close()  # goodbye before exit (exit says it too)


def test_spawned_writers_and_goodbyes():
    """A handle pickles (spawn): it connects from the process that uses it; close() and exit say goodbye."""
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb).start()
    procs = [multiprocessing.get_context("spawn").Process(target=_spawned_writer, args=(server.writer(), w))
             for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    server.close(timeout=10)
    assert server.errors == [] and rb.num_trajectories() == 6
    m = server.metrics
    assert (m["writers_connected"], m["writers_closed"], m["writers_lost"], m["batches_added"]) == (2, 2, 0, 6)


@pytest.mark.parametrize("rows", [1 << 47, 1 << 60])  # 1 PiB (MemoryError), 8 EiB (more than an array holds)
def test_a_batch_too_big_for_memory_is_refused(rows):
    rb = tv.ReplayBuffer(100)
    server = tv.ReplayServer(rb).start()
    header = {"type": "dict", "columns": [["x", "<f8", [rows], 0]]}
    s = socket.socket(socket.AF_UNIX)
    s.connect(server.address)
    s.sendall(wire.frame(wire.HELLO, {"token": server._token, "pid": 1})
              + wire.frame(wire.BATCH, header, wire.payload_size(header)))
    try:
        assert s.recv(10) == b""
    except ConnectionResetError:
        pass
    s.close()
    server.writer().add(make_fragment(0, 3, 0, 2, True))  # the server goes on
    server.close()
    assert [str(e) for e in server.errors] == [
        f"ReplayServer: writer pid 1: a batch of {8 * rows} bytes does not fit in memory; dropped it"]
    assert rb.num_trajectories() == 1
