#!/usr/bin/env bash
# Builds the Python wheel as `pip install .` does (scikit-build-core + nanobind, offline: the
# build requirements come from scripts/setup-deps.sh), installs it into a fresh virtual
# environment and runs the package's tests (tests/python) against that installed copy and the
# sidecar of the build tree (${BUILD_DIR:-build}).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "test-wheel: building the wheel" >&2
"$PY" -m pip wheel --quiet --no-build-isolation --no-deps -w "$WORK/dist" .
WHEEL=$(ls "$WORK"/dist/deltakv-*.whl)
echo "test-wheel: $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))" >&2
# numpy and pytest come from the interpreter's site-packages; deltakv only from the wheel.
"$PY" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --no-deps --no-index "$WHEEL"
cd "$WORK"
env -u PYTHONPATH "$WORK/venv/bin/python" - <<PYEOF
import deltakv, os, sys
from importlib.metadata import entry_points
assert deltakv.__file__.startswith("$WORK/venv/"), deltakv.__file__
print("test-wheel: deltakv", deltakv.__version__, "ABI", deltakv.abi_version(), file=sys.stderr)
# vLLM loads this entry point in every process it starts (the "deltakv" weight transfer backend).
plugins = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
assert plugins.get("deltakv") == "deltakv.vllm_plugin:register", plugins
PYEOF
env -u PYTHONPATH DELTAKV_BIN="$BUILD_DIR/sidecar/deltakv" \
  DELTAKV_DEMO_ENGINE="$BUILD_DIR/shim/deltakv-demo-engine" \
  "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$REPO/tests/python"
echo "test-wheel: ok" >&2
