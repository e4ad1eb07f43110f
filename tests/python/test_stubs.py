"""The committed typed stub of deltakv._native is the one nanobind generates from the built
module (regenerate: python -m nanobind.stubgen -m deltakv._native -o python/deltakv/_native.pyi)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import deltakv

HERE = os.path.dirname(os.path.abspath(__file__))
COMMITTED = os.path.join(HERE, "..", "..", "python", "deltakv", "_native.pyi")


def test_stub_matches_the_module(tmp_path):
    pytest.importorskip("nanobind.stubgen")
    out = tmp_path / "_native.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "deltakv._native", "-o",
                    str(out)], check=True)
    assert out.read_text() == open(COMMITTED).read(), "python/deltakv/_native.pyi is stale"


def test_package_is_typed():
    assert os.path.exists(os.path.join(os.path.dirname(deltakv.__file__), "py.typed"))
