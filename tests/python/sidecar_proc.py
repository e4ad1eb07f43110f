"""A real `deltakv sidecar` process for tests (DELTAKV_BIN), shared by tests/python and
tests/engines."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Iterator, List, Sequence

import pytest

TOKEN = "python-test-token"


class Sidecar:
    def __init__(self, tmp: str, kv_block_bytes: int = 0, kv_slots: int = 0,
                 extra_args: Sequence[str] = (), shm: str = "") -> None:
        self.shm = shm or f"dkv-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.token_file = os.path.join(tmp, f"{self.shm}.token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        port_file = os.path.join(tmp, f"{self.shm}.port")
        if os.path.exists(port_file):
            os.remove(port_file)  # an earlier sidecar's on this --shm-name
        self.log = os.path.join(tmp, f"{self.shm}.log")
        args: List[str] = [os.environ["DELTAKV_BIN"], "sidecar", "--listen", "127.0.0.1:0",
                           "--port-file", port_file, "--token-file", self.token_file,
                           "--shm-name", self.shm]
        if kv_block_bytes:
            args += ["--kv-block-bytes", str(kv_block_bytes), "--kv-capacity-slots", str(kv_slots)]
        args += list(extra_args)
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(args, stderr=err)
        deadline = time.time() + 20
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError("sidecar did not start: " + open(self.log).read())
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(open(port_file).read())}"
        self.pool = self.shm + ".kv"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The sidecar keeps its control block and pool for engines across its own restarts
        # (shm/PROTOCOL.md); the test is over, so they go.
        remove_segments(self.shm)


def remove_segments(prefix: str) -> None:
    """Removes the shared-memory segments whose names start with `prefix`."""
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            try:
                os.remove(os.path.join("/dev/shm", name))
            except FileNotFoundError:
                pass


@pytest.fixture
def sidecar_factory(tmp_path) -> Iterator:
    """start(kv_block_bytes=0, kv_slots=0, extra_args=(), shm="") starts a sidecar (stopped
    after the test; extra_args are more sidecar flags; shm reuses a --shm-name, a fresh one by
    default); the test is skipped when DELTAKV_BIN is not set."""
    if not os.environ.get("DELTAKV_BIN"):
        pytest.skip("DELTAKV_BIN (the deltakv binary) is not set")
    started: List[Sidecar] = []

    def start(kv_block_bytes: int = 0, kv_slots: int = 0, extra_args: Sequence[str] = (),
              shm: str = "") -> Sidecar:
        s = Sidecar(str(tmp_path), kv_block_bytes, kv_slots, extra_args, shm)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
