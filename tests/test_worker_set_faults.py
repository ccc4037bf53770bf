"""`tv.WorkerSet` fault tolerance (process backend): dead, hung and failing workers; workers die with the driver.

RLlib's semantics: ``recreate_failed_workers=True`` replaces a failed worker
(same worker_index, the last weights) and the call goes on with the healthy
workers' answers; otherwise (or once ``max_restarts`` are used up) a
`WorkerError` names the worker and what happened.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import trajview as tv
from rollout_helpers import CounterPolicy, FaultOnFileEnv, ObsActionPolicy, ScriptedEnv, pid_gone
from trajview.errors import WorkerError

pytestmark = pytest.mark.timing  # wall-clock limits: scripts/test.sh runs it after the concurrent passes

FRAGMENT = 5
_ENV_INDEX = itertools.count()


def env_creator(cfg):
    return ScriptedEnv(lengths=(4, 6), env_index=next(_ENV_INDEX))


def workers(policy=ObsActionPolicy, creator=env_creator, **kwargs):
    return tv.WorkerSet(creator, policy, num_workers=2, rollout_fragment_length=FRAGMENT, **kwargs)


def worker_indices(batch) -> set[int]:
    return set((np.asarray(batch["eps_id"]) >> 40).tolist())


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + 5
        while not pid_gone(pid) and time.monotonic() < deadline:
            time.sleep(0.01)


def test_a_killed_worker_is_replaced_and_sampling_goes_on():
    with workers(recreate_failed_workers=True) as ws:
        assert worker_indices(ws.sample()) == {1, 2}
        p1, p2 = ws.worker_pids()
        kill(p2)
        b = ws.sample()  # worker 2 died: this call has worker 1's batch only
        assert len(b) == FRAGMENT and worker_indices(b) == {1}
        b = ws.sample()
        assert len(b) == 2 * FRAGMENT and worker_indices(b) == {1, 2}  # the replacement, with worker_index 2
        q1, q2 = ws.worker_pids()
        assert q1 == p1 and q2 != p2
        assert not os.path.exists(f"/proc/{p2}")  # reaped
        m = ws.get_metrics()
        assert m["num_worker_restarts"] == ws.num_worker_restarts == 1
        assert m["num_healthy_workers"] == 2
        assert {"episodes_dropped", "num_faulty_episodes", "num_env_restarts"} <= set(m)
        kill(q1)
        each = ws.sample_each()  # a failed worker's place holds None
        assert each[0] is None and worker_indices(each[1]) == {2}
        assert ws.num_worker_restarts == 2


def test_without_recreation_a_killed_worker_is_a_clear_error_on_the_next_call():
    ws = workers()
    try:
        ws.sample()
        kill(ws.worker_pids()[1])
        for call in (ws.sample, lambda: ws.set_weights({})):
            with pytest.raises(WorkerError, match=r"rollout worker 2 (is down(.|\n)*)?died: killed by signal SIGKILL"
                                                  r"(.|\n)*recreate_failed_workers=True") as e:
                call()
            assert isinstance(e.value, RuntimeError)
            assert (e.value.worker_index, e.value.reason) == (2, "died")
        assert ws.num_healthy_workers == 1
    finally:
        ws.stop()
    with pytest.raises(RuntimeError, match="WorkerSet is stopped"):
        ws.sample()


def test_a_hung_worker_is_killed_reaped_and_replaced():
    with workers(recreate_failed_workers=True, sample_timeout_s=1.5) as ws:
        ws.sample()
        p1, p2 = ws.worker_pids()
        os.kill(p2, signal.SIGSTOP)
        t0 = time.monotonic()
        b = ws.sample()
        assert 1.5 <= time.monotonic() - t0 < 5
        assert worker_indices(b) == {1}
        assert not os.path.exists(f"/proc/{p2}")  # killed and reaped: no zombie
        assert worker_indices(ws.sample()) == {1, 2}
        assert ws.num_worker_restarts == 1


def test_a_hung_worker_without_recreation():
    with workers(sample_timeout_s=1) as ws:
        p2 = ws.worker_pids()[1]
        os.kill(p2, signal.SIGSTOP)
        with pytest.raises(WorkerError, match=r"rollout worker 2 gave no answer within sample_timeout_s=1 s") as e:
            ws.sample()
        assert e.value.reason == "timeout"
        assert not os.path.exists(f"/proc/{p2}")


def test_max_restarts_used_up():
    with workers(recreate_failed_workers=True, max_restarts=1) as ws:
        kill(ws.worker_pids()[1])
        ws.sample()
        kill(ws.worker_pids()[1])
        with pytest.raises(WorkerError, match=r"rollout worker 2 died(.|\n)*max_restarts=1 worker restarts are used up"):
            ws.sample()
        assert ws.num_worker_restarts == 1
        with pytest.raises(WorkerError, match="rollout worker 2 is down"):
            ws.get_metrics()


def test_a_replacement_gets_the_last_weights():
    with workers(CounterPolicy, recreate_failed_workers=True) as ws:
        ws.set_weights({"count": np.array([6], np.int64)})
        ws.set_weights({"count": np.array([7], np.int64)})
        kill(ws.worker_pids()[1])
        ws.sample()
        assert [w["default_policy"]["count"].tolist() for w in ws.get_weights()] == [[7], [7]]
        b = ws.sample_each()[1]
        assert (np.asarray(b["actions"]) == 7 % 5).all()  # it acts with them


def test_a_worker_whose_sample_raises_is_replaced(tmp_path: Path):
    counter = itertools.count()
    creator = lambda cfg: FaultOnFileEnv(tmp_path, lengths=(4, 6), env_index=next(counter))  # noqa: E731
    with workers(creator=creator, recreate_failed_workers=True) as ws:
        p1, p2 = ws.worker_pids()
        (tmp_path / f"fail-{p1}").touch()
        each = ws.sample_each()
        assert each[0] is None and worker_indices(each[1]) == {2}
        assert ws.get_metrics()["num_worker_restarts"] == 1
        assert worker_indices(ws.sample()) == {1, 2}
    with workers(creator=creator) as ws:  # without recreation: the worker's traceback, and it stays in service
        p1, p2 = ws.worker_pids()
        (tmp_path / f"fail-{p2}").touch()
        with pytest.raises(WorkerError, match=rf"rollout worker 2 failed:(.|\n)*injected fault in process {p2}") as e:
            ws.sample()
        assert e.value.reason == "raised" and "Traceback" in e.value.detail
        (tmp_path / f"fail-{p2}").unlink()
        assert ws.worker_pids() == [p1, p2]


def _driver_ends(ws) -> set[int]:
    return {os.fstat(w.conn.fileno()).st_ino for w in ws._workers}


def _open_sockets(pid: int) -> set[int]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def test_forked_workers_hold_no_driver_end_of_any_pipe():
    with workers(recreate_failed_workers=True) as ws:
        kill(ws.worker_pids()[0])
        ws.sample()  # worker 1 is replaced: forked after worker 2, it got a copy of worker 2's driver end
        ends = _driver_ends(ws)
        for pid in ws.worker_pids():
            assert not _open_sockets(pid) & ends


DRIVER = textwrap.dedent("""
    import os, signal
    import trajview as tv
    from rollout_helpers import ObsActionPolicy, ScriptedEnv

    ws = tv.WorkerSet(lambda cfg: ScriptedEnv(), ObsActionPolicy, num_workers=2, rollout_fragment_length=5,
                      start_method="fork")
    ws.sample()
    print(*ws.worker_pids(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_workers_exit_when_the_driver_is_killed():
    root = Path(__file__).resolve().parent
    # trajview as this test process imports it (the installed wheel, or a PYTHONPATH build), plus the test helpers.
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *inherited]))
    # The workers inherit the driver's stdout: read the line, not up to EOF.
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert driver.wait(timeout=30) == -signal.SIGKILL
        assert len(pids) == 2
        deadline = time.monotonic() + 5
        while not all(pid_gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p for p in pids if not pid_gone(p)] == []
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()
        for p in pids:  # a failed test leaves no orphans
            if not pid_gone(p):
                os.kill(p, signal.SIGKILL)


def hang_while(flag: Path):
    """An env creator that hangs (sleeps) while the file ``flag`` exists: a worker that cannot be built."""

    def creator(cfg):
        while flag.exists():
            time.sleep(0.05)
        return env_creator(cfg)

    return creator


def test_a_worker_not_built_within_start_timeout_s_is_killed_and_named(tmp_path):
    import multiprocessing

    flag = tmp_path / "hang"
    flag.touch()
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=r"^rollout worker 1 was not ready within start_timeout_s=1 s \(building its "
                                          r"envs and policy; killed\)") as e:
        workers(creator=hang_while(flag), start_timeout_s=1, sample_timeout_s=30)
    assert 1 <= time.monotonic() - t0 < 6  # bounded by start_timeout_s, not sample_timeout_s
    assert (e.value.worker_index, e.value.reason) == (1, "timeout")
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not multiprocessing.active_children()  # every worker killed and reaped
    flag.unlink()
    with workers(creator=hang_while(flag), start_timeout_s=30) as ws:  # built in time: samples as any
        assert worker_indices(ws.sample()) == {1, 2}


def test_a_replacement_not_built_within_start_timeout_s_counts_as_a_failed_restart(tmp_path):
    flag = tmp_path / "hang"
    with workers(creator=hang_while(flag), recreate_failed_workers=True, max_restarts=1, start_timeout_s=1) as ws:
        ws.sample()
        flag.touch()  # the replacement of worker 2 cannot be built
        kill(ws.worker_pids()[1])
        t0 = time.monotonic()
        with pytest.raises(WorkerError, match=r"rollout worker 2 was not ready within start_timeout_s=1 s") as e:
            ws.sample()
        assert 1 <= time.monotonic() - t0 < 6
        assert e.value.reason == "timeout" and e.value.restarts_used_up
        assert ws.num_worker_restarts == 1 and ws.num_healthy_workers == 1


def test_options_are_checked():
    for bad in (dict(max_restarts=-1), dict(max_restarts=True), dict(sample_timeout_s=0),
                dict(sample_timeout_s="1"), dict(recreate_failed_workers=1), dict(start_timeout_s=0),
                dict(start_timeout_s=float("inf")), dict(start_timeout_s=True), dict(start_timeout_s="5")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            tv.WorkerSet(env_creator, ObsActionPolicy, **bad)


def test_large_weights_to_a_hung_worker_do_not_block_the_driver():
    big = {"count": np.array([9], np.int64), "pad": np.zeros(1 << 20)}  # 8 MB: more than a pipe holds
    # (2 s: under ASan on CI's slow machine the healthy worker once took over 1 s to take the 8 MB, and was replaced)
    with workers(CounterPolicy, recreate_failed_workers=True, sample_timeout_s=2) as ws:
        p2 = ws.worker_pids()[1]
        os.kill(p2, signal.SIGSTOP)
        t0 = time.monotonic()
        ws.set_weights(big)
        assert time.monotonic() - t0 < 5  # the timeout and a replacement's start, not the hung worker's pipe
        assert not os.path.exists(f"/proc/{p2}") and ws.num_worker_restarts == 1
        assert [w["default_policy"]["count"].tolist() for w in ws.get_weights()] == [[9], [9]]


def test_a_replacement_never_repeats_an_episode_id():
    last_t: dict[int, int] = {}  # eps_id -> the last step seen: an id that comes back must go on from there
    with workers(recreate_failed_workers=True, seed=3) as ws:
        for k in range(7):
            b = ws.sample()
            for e, t in zip(np.asarray(b["eps_id"]).tolist(), np.asarray(b["t"]).tolist()):
                assert last_t.get(e, -1) == t - 1, f"eps_id {e} reused by another episode (t={t} after {last_t.get(e)})"
                last_t[e] = t
            if k in (1, 3):
                kill(ws.worker_pids()[1])  # worker 2, twice: each replacement starts new ids only
        assert ws.num_worker_restarts == 2
