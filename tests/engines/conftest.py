"""Engine interoperability tests (scripts/test-engines.sh runs them inside the cached engine
venvs): real vLLM / SGLang classes, CPU tensors, a real sidecar (DELTAKV_BIN)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from sidecar_proc import sidecar_factory  # noqa: E402,F401 (the shared fixture)
