"""deltakv.sidecar.SidecarClient against a real `deltakv sidecar` (DELTAKV_BIN) and one rank of
the demo engine (DELTAKV_DEMO_ENGINE): a sync goes live, a missing delta aborts, verify and
scrub jobs, wait timeouts, and the HTTP errors (404, 400, 401, no connection) as SidecarError."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

from deltakv.sidecar import SidecarClient, SidecarError, SyncFailed

TOKEN = "sidecar-client-test-token"

if not os.environ.get("DELTAKV_BIN") or not os.environ.get("DELTAKV_DEMO_ENGINE"):
    pytest.skip("DELTAKV_BIN (the deltakv binary) and DELTAKV_DEMO_ENGINE "
                "(deltakv-demo-engine) must be set", allow_module_level=True)


def stop(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Cluster:
    """A sidecar and a one-rank demo engine serving checkpoint v1; deltas d12 (v1 -> v2)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: List["subprocess.Popen[bytes]"] = []
        self.shm = f"dkv-pyc-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        deltakv = os.environ["DELTAKV_BIN"]

        def cli(*args: str) -> None:
            subprocess.run([deltakv, *args], check=True, capture_output=True, timeout=60)

        cli("checkpoint", "generate", "--out", str(tmp / "v1"), "--size-mib", "1", "--files", "1")
        cli("checkpoint", "mutate", "--parent", str(tmp / "v1"), "--out", str(tmp / "v2"),
            "--density", "0.01", "--seed", "2")
        cli("publish", "--parent", str(tmp / "v1"), "--new", str(tmp / "v2"),
            "--out", str(tmp / "d12"), "--frame-mib", "1")

        self.token_file = tmp / "token"
        self.token_file.write_text(TOKEN + "\n")
        port_file, self.log = tmp / "sidecar.port", tmp / "sidecar.log"
        with open(self.log, "wb") as err:
            self.sidecar = subprocess.Popen(
                [deltakv, "sidecar", "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                 "--token-file", str(self.token_file), "--shm-name", self.shm], stderr=err)
        self.procs.append(self.sidecar)
        deadline = time.time() + 20
        while not port_file.exists() or port_file.stat().st_size == 0:
            if self.sidecar.poll() is not None or time.time() > deadline:
                raise AssertionError("sidecar did not start: " + self.log.read_text())
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"

        (tmp / "ports").mkdir()
        with open(tmp / "engine.log", "wb") as err:
            self.engine = subprocess.Popen(
                [os.environ["DELTAKV_DEMO_ENGINE"], "--checkpoint", str(tmp / "v1"), "--tp", "1",
                 "--shm", self.shm, "--port-dir", str(tmp / "ports")], stderr=err)
        self.procs.insert(0, self.engine)
        client = SidecarClient(self.url)
        deadline = time.time() + 30
        while len(client.status()["ranks"]) < 1:
            if self.engine.poll() is not None or time.time() > deadline:
                raise AssertionError("engine did not attach: " + (tmp / "engine.log").read_text())
            time.sleep(0.05)

    def close(self) -> None:
        for p in self.procs:  # the engine first, then the sidecar
            stop(p)
        for f in os.listdir("/dev/shm"):
            if f.startswith(self.shm):
                os.remove(os.path.join("/dev/shm", f))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("sidecar-client"))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def client(cluster: Cluster) -> SidecarClient:
    return SidecarClient(cluster.url, token_file=str(cluster.token_file), timeout=10)


def test_sync_and_wait_goes_live_and_status_shows_it(cluster: Cluster,
                                                     client: SidecarClient) -> None:
    rec = client.sync_and_wait("v2", str(cluster.tmp / "d12"), timeout=60)
    assert rec["state"] == "live", rec
    assert rec["kind"] == "sync" and rec["version"] == "v2" and rec["parent_version"] == "v1"
    assert client.get_sync(rec["id"]) == rec
    st = client.status()
    assert st["live_version"] == "v2", st
    assert st["diverged"] == ""
    assert rec["id"] in [h["id"] for h in st["history"]]
    assert 'deltakv_syncs_total{result="live"} 1' in client.metrics()

    # Verify and scrub are jobs too; a scrub stopped for a sync ends failed.
    assert client.wait(client.verify(str(cluster.tmp / "v2")), timeout=60)["state"] == "verified"
    scrub = client.scrub(rate_gbps=1e-5)  # 10 kB/s: minutes for this checkpoint
    with pytest.raises(TimeoutError, match=scrub):
        client.wait(scrub, timeout=0.3)
    again = client.sync_and_wait("v3", str(cluster.tmp / "d12"), timeout=60,
                                 raise_on_failure=False)  # the delta produces v2: refused
    assert again["state"] == "aborted" and "'v3'" in again["error"], again
    rec = client.wait(scrub, timeout=30, raise_on_failure=False)
    assert rec["state"] == "failed" and rec["error"] == f"stopped for sync {again['id']}", rec
    with pytest.raises(SyncFailed) as info:
        client.wait(scrub)
    assert info.value.record == rec and info.value.state == "failed"
    assert client.status()["live_version"] == "v2"


def test_missing_delta_aborts_and_wait_raises(cluster: Cluster, client: SidecarClient) -> None:
    sync_id = client.sync("v9", str(cluster.tmp / "no-such-delta"))
    with pytest.raises(SyncFailed) as info:
        client.wait(sync_id, timeout=60)
    rec = info.value.record
    assert rec["id"] == sync_id and rec["state"] == "aborted", rec
    assert rec["error"], rec
    assert rec["error"] in str(info.value)
    assert isinstance(info.value, SidecarError)
    assert client.wait(sync_id, raise_on_failure=False) == rec


def test_unknown_job_is_404(client: SidecarClient) -> None:
    with pytest.raises(SidecarError) as info:
        client.get_sync("nope")
    assert info.value.http_status == 404
    assert info.value.code == "NOT_FOUND" and "nope" in info.value.message
    assert '"error"' in info.value.body
    with pytest.raises(SidecarError) as info:
        client.get_sync("../status")  # quoted: not another endpoint
    assert info.value.http_status == 404


def test_bad_requests_are_400(cluster: Cluster, client: SidecarClient) -> None:
    with pytest.raises(SidecarError) as info:
        client.sync("", str(cluster.tmp / "d12"))
    assert info.value.http_status == 400 and info.value.code == "INVALID_ARGUMENT"
    assert "'version' must be a non-empty string" in info.value.message
    with pytest.raises(SidecarError) as info:
        client.verify(str(cluster.tmp / "v2"), rate_gbps=-1)
    assert info.value.http_status == 400
    assert "rate_gbps" in info.value.message


def test_mutating_calls_need_the_token(cluster: Cluster) -> None:
    for c in (SidecarClient(cluster.url), SidecarClient(cluster.url, token="wrong")):
        with pytest.raises(SidecarError) as info:
            c.sync("v2", str(cluster.tmp / "d12"))
        assert info.value.http_status == 401 and info.value.code == "UNAUTHENTICATED"
        assert c.status()["live_version"]  # reads need no token


def test_token_files_are_read_as_the_sidecar_reads_them(cluster: Cluster, tmp_path) -> None:
    # Surrounding whitespace and line breaks are not part of the token, on either side.
    padded = tmp_path / "padded"
    padded.write_text("\n  " + TOKEN + " \r\n")
    c = SidecarClient(cluster.url, token_file=str(padded))
    with pytest.raises(SidecarError) as info:
        c.verify(str(cluster.tmp / "v2"), rate_gbps=-1)  # authenticated: refused for the rate
    assert info.value.http_status == 400
    for text in ("", " \n\t\n", TOKEN + "\nsecond\n", "tok en\n"):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(ValueError, match="token file"):
            SidecarClient(cluster.url, token_file=str(bad))


def test_health_and_metrics(client: SidecarClient) -> None:
    assert client.healthy() is True
    m = client.metrics()
    assert "deltakv_http_requests_total " in m
    assert "deltakv_engine_ranks 1" in m


def test_no_connection_is_status_0() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = SidecarClient(f"http://127.0.0.1:{port}", token=TOKEN, timeout=5)
    with pytest.raises(SidecarError) as info:
        c.status()
    assert info.value.http_status == 0 and info.value.body == ""
    with pytest.raises(SidecarError) as info:
        c.sync("v2", "/nowhere")
    assert info.value.http_status == 0
    assert c.healthy() is False
    with pytest.raises(ValueError):
        SidecarClient("127.0.0.1:8470")
