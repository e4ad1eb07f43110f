"""Fixtures of the Python package's tests: a real `deltakv sidecar` process (DELTAKV_BIN), with
or without a KV pool. The package itself comes from PYTHONPATH (the build tree's
<build>/python, or an installed wheel)."""
from __future__ import annotations

import os
from typing import Iterator, List

import pytest

from sidecar_proc import TOKEN, Sidecar  # noqa: F401 (TOKEN is used by the tests)


@pytest.fixture
def deltakv_bin() -> str:
    path = os.environ.get("DELTAKV_BIN")
    if not path:
        pytest.skip("DELTAKV_BIN (the deltakv binary) is not set")
    return path


@pytest.fixture
def sidecar_factory(deltakv_bin: str, tmp_path) -> Iterator:
    started: List[Sidecar] = []

    def start(kv_block_bytes: int = 0, kv_slots: int = 0) -> Sidecar:
        s = Sidecar(str(tmp_path), kv_block_bytes, kv_slots)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
