"""Engine interoperability tests (scripts/test-engines.sh runs them inside the cached engine
venvs): real vLLM / SGLang classes, CPU tensors, a real sidecar (DELTAKV_BIN)."""
from __future__ import annotations

import os
import sys
from typing import Iterator, List

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from sidecar_proc import Sidecar  # noqa: E402


@pytest.fixture
def sidecar_factory(tmp_path) -> Iterator:
    if not os.environ.get("DELTAKV_BIN"):
        pytest.skip("DELTAKV_BIN (the deltakv binary) is not set")
    started: List[Sidecar] = []

    def start(kv_block_bytes: int = 0, kv_slots: int = 0) -> Sidecar:
        s = Sidecar(str(tmp_path), kv_block_bytes, kv_slots)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
