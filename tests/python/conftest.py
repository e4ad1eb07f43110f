"""Fixtures of the Python package's tests: a real `deltakv sidecar` process (DELTAKV_BIN), with
or without a KV pool. The package itself comes from PYTHONPATH (the build tree's
<build>/python, or an installed wheel)."""
from __future__ import annotations

import os

import pytest

# TOKEN is imported by the tests; sidecar_factory is the shared fixture.
from sidecar_proc import TOKEN, sidecar_factory  # noqa: F401


@pytest.fixture
def deltakv_bin() -> str:
    path = os.environ.get("DELTAKV_BIN")
    if not path:
        pytest.skip("DELTAKV_BIN (the deltakv binary) is not set")
    return path
