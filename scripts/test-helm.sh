#!/usr/bin/env bash
# Tests of the Helm chart helm/deltakv (tests/helm), with no helm binary and no cluster: Helm's
# own engine renders and lints the chart (PyPI helm-python-sdk, which bundles Helm's Go SDK as
# libhelm_c), kubernetes-validate checks the manifests against the Kubernetes API schemas it
# ships, jsonschema checks the values files against values.schema.json. Offline once the venv
# exists.
#
# The venv is cached at ${DELTAKV_HELM_VENV:-$HOME/.cache/deltakv-venvs/helm} and skipped when
# its marker file .deltakv-ready holds the same pinned spec string; otherwise it is rebuilt
# from scratch and the marker is written last, so an interrupted install is redone on the next
# run. The first run downloads about 80 MB (helm-python-sdk is a linux x86_64 / macOS / Windows
# wheel; there is none for linux aarch64), takes about 30 s and leaves ~400 MB (the wheel
# unpacks its library three times); later runs take about 5 s.
#
# The flags the chart gives the sidecar are checked against cmd_sidecar.cc and sidecar_config.cc, and against
# `deltakv sidecar --help` when ${DELTAKV_BIN:-${BUILD_DIR:-build}/sidecar/deltakv} exists (this
# script builds nothing).
#
# Usage: scripts/test-helm.sh [--setup-only | --if-ready] [PYTEST ARGS...]
#   --setup-only  make the venv (when it is not ready) and stop; scripts/setup-deps.sh runs this
#   --if-ready    never install: exit 77 (CTest's "skipped") when the venv is not ready; the CTest
#                 entry helm_chart_test (tests/helm/CMakeLists.txt) runs this
#
# Environment:
#   DELTAKV_HELM_VENV  the venv (default ~/.cache/deltakv-venvs/helm)
#   PYTHON             interpreter the venv is made from (default python3, >= 3.10)
#   DELTAKV_BIN        the deltakv binary the flag tests run (default: BUILD_DIR's, if built)
#   BUILD_DIR          a deltakv build tree whose sidecar binary the flag test may run
# Other arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${DELTAKV_HELM_VENV:-$HOME/.cache/deltakv-venvs/helm}
PY=${PYTHON:-python3}

# Pinned versions, dependencies included. kubernetes-validate 1.37.0 ships the schemas of
# Kubernetes 1.25 to 1.37; the tests validate against 1.30.
SPEC="helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.4 \
pytest==9.2.0 attrs==26.1.0 importlib_resources==7.1.0 iniconfig==2.3.1 \
jsonschema-specifications==2025.9.1 packaging==26.4 pluggy==1.7.0 Pygments==2.21.0 \
referencing==0.37.0 rpds-py==2026.9.1 typing_extensions==4.16.0"

log() { echo "test-helm: $*" >&2; }

mode=run
case "${1:-}" in
  --setup-only) mode=setup; shift ;;
  --if-ready) mode=if-ready; shift ;;
esac

marker="$VENV/.deltakv-ready"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$SPEC" ]; then
  log "venv ready ($VENV)"
elif [ "$mode" = if-ready ]; then
  log "skipped: no ready venv at $VENV (scripts/setup-deps.sh or scripts/test-helm.sh makes it)"
  exit 77
else
  log "installing into $VENV: $SPEC"
  start=$(date +%s)
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
  # shellcheck disable=SC2086  # SPEC is a list of requirements
  "$VENV/bin/python" -m pip install --progress-bar off --quiet $SPEC >&2
  "$VENV/bin/python" -c 'import helm_python as h; print("helm-python-sdk: Helm SDK", h.helm_sdk_version(), "libhelm_c", h.helm_c_version())' >&2
  echo "$SPEC" >"$marker"
  log "venv done in $(($(date +%s) - start)) s, $(du -sh "$VENV" | cut -f1)"
fi
[ "$mode" = setup ] && exit 0

bin=${DELTAKV_BIN:-${BUILD_DIR:-build}/sidecar/deltakv}
if [ -x "$bin" ]; then
  export DELTAKV_BIN
  DELTAKV_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
else
  log "no deltakv binary at $bin: the tests that run it are skipped"
  export DELTAKV_BIN=""
fi
# No bytecode or pytest cache in the source tree.
exec env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m pytest -q \
  -p no:cacheprovider tests/helm "$@"
