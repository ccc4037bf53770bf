"""`trajview train --backend ray --ray-address ...` joining a Ray cluster that `ray start --head` started, as on a
real cluster (docs/guides/scaling.md): by its GCS address (``HOST:PORT``) and through Ray Client (``ray://``),
synchronous and ``--async``; with Ray's token authentication on, as ``ray start`` turns it on wherever a token
exists; and the error, naming ``RAY_AUTH_MODE``, when the trainer does not send the cluster's token.

The head and every trainer run in processes of their own (Ray's authentication mode is per process).
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

from trajview.train.sampling import ray_auth_hint  # noqa: E402
from train_runs import popen_in_group  # noqa: E402

pytestmark = pytest.mark.ray

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
SMALL = ["--model", "mlp", "--envs-per-worker", "2", "--train-batch-size", "400", "--minibatch-size", "100",
         "--num-sgd-iter", "1"]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def head():
    """A one-node cluster of `ray start --head --block` with token authentication; its addresses and token."""
    if not os.path.exists(RAY):
        pytest.skip(f"no `ray` command next to {sys.executable}")
    token = secrets.token_hex(32)
    temp = tempfile.mkdtemp(prefix="tvray")  # short: Ray's unix sockets live under it
    gcs, client = _free_ports(2)  # from the ephemeral range: apart from Ray's worker ports (10002-19999) and its
    # Ray Client servers' (23000-23999)
    proc = popen_in_group(  # (a group of its own, SIGINT handled: how the head is stopped, below)
        [RAY, "start", "--head", "--block", f"--port={gcs}", f"--ray-client-server-port={client}",
         "--num-cpus=2", "--include-dashboard=false",
         f"--temp-dir={temp}", "--disable-usage-stats"],
        env=_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # up once the Ray Client server answers (it starts last)
            if proc.poll() is not None:
                pytest.fail(f"`ray start --head` exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", client), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("`ray start --head` did not come up within 120 s")
                time.sleep(0.5)
        yield {"gcs": f"127.0.0.1:{gcs}", "client": f"ray://127.0.0.1:{client}", "token": token, "temp": temp}
    finally:
        # SIGINT to the head's process group: `ray start --block` and the Ray processes it started end within
        # seconds (SIGTERM: about 30 s). Never `ray stop`: that stops every Ray on the machine.
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _train(out, address: str, *flags: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trajview.train.cli", "train", "--workers", "2", "--backend", "ray",
         "--ray-address", address, "--timesteps", "1200", "--out", str(out), *SMALL, *flags],
        env=_env(**env), capture_output=True, text=True, timeout=timeout,
    )


def _head_log(head, name: str = "ray_client_server.err") -> str:
    """The end of the head's log ``name`` (for a failure's message: what the head saw)."""
    logs = [os.path.join(d, name) for d, _, files in os.walk(head["temp"]) if name in files]
    return "".join(f"\n--- {path}:\n" + open(path, errors="replace").read()[-3000:] for path in logs)


def _check_run(out, proc, address: str, asynchronous: bool, head) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:] + _head_log(head)
    config = json.loads((out / "config.json").read_text())
    assert (config["backend"], config["ray_address"], config["async_sampling"]) == ("ray", address, asynchronous)
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # 3 iterations of 400 env steps (2 workers' batches of 200); with --async, a batch more than 1 version
    # behind (a worker the other outran twice) is dropped, its 200 env steps counted.
    steps = [0] + [int(r["env_steps"]) for r in rows]
    assert len(rows) == 3
    for k, r in enumerate(rows):
        assert steps[k + 1] - steps[k] == 400 + 200 * int(r["stale_batches_dropped"])
    last = rows[-1]
    assert float(last["worker_steps_per_s"]) > 0 and int(last["weights_sync_bytes"]) > 0
    if asynchronous:
        assert 0 <= float(last["staleness_max"]) <= 1


@pytest.mark.parametrize("via", ["client", "gcs"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_train_joins_a_started_cluster(head, tmp_path, via, asynchronous):
    address = head[via]
    out = tmp_path / "run"
    proc = _train(out, address, *(["--async"] if asynchronous else []), RAY_AUTH_MODE="token",
                  RAY_AUTH_TOKEN=head["token"])
    _check_run(out, proc, address, asynchronous, head)


def test_a_trainer_without_the_clusters_token_is_told_about_ray_auth_mode(head, tmp_path):
    out = tmp_path / "run"
    # Ray retries a refused connection once a second for RAY_gcs_server_port_wait_time_s (default about 20): 2 here,
    # the same failure 20 s sooner.
    proc = _train(out, head["gcs"], RAY_AUTH_MODE="disabled", RAY_gcs_server_port_wait_time_s="2")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"trajview train: error: --ray-address {head['gcs']}: "), last
    assert "run with RAY_AUTH_MODE=token and the cluster's token" in last and "RAY_AUTH_MODE here: disabled" in last
    assert not out.exists()  # nothing written for a run that never started


def test_ray_auth_hint_names_the_setting_to_change():
    assert "RAY_AUTH_MODE here: unset" in ray_auth_hint({})
    assert "run with RAY_AUTH_MODE=token" in ray_auth_hint({"RAY_AUTH_MODE": "disabled"})
    hint = ray_auth_hint({"RAY_AUTH_MODE": "token"})
    assert "RAY_AUTH_MODE=token is set here" in hint and "RAY_AUTH_TOKEN" in hint
