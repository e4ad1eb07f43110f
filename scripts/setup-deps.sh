#!/usr/bin/env bash
# Installs everything deltakv needs to build, test and benchmark on Debian 12.
# Idempotent: packages already present are skipped by apt; safe to re-run.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  clang libclang-rt-14-dev
  libzstd-dev zstd zlib1g-dev libssl-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libcpp-httplib-dev libhwloc-dev libjemalloc-dev libxxhash-dev curl
  libcurl4-openssl-dev openssl ca-certificates etcd-server
  libfuse3-dev fuse3
  python3 python3-pip python3-venv python3-dev
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing Debian packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages used by the interoperability tests (trainer-side delta script,
# plain numpy apply script) and the fixture generators.
PY=${PYTHON:-python3}
# numpy/zstandard/xxhash: tests and examples; nanobind/scikit-build-core/pytest: the Python
# package (python/), its wheel and its tests.
PY_PACKAGES=(numpy zstandard xxhash "nanobind>=2.4" "scikit-build-core>=0.10" pytest)
if ! "$PY" -c 'import numpy, zstandard, xxhash, nanobind, scikit_build_core, pytest' 2>/dev/null; then
  echo "setup-deps: installing Python packages ${PY_PACKAGES[*]}" >&2
  "$PY" -m pip install --quiet "${PY_PACKAGES[@]}" 2>/dev/null ||
    "$PY" -m pip install --quiet --break-system-packages "${PY_PACKAGES[@]}"
fi
# aiperf (PyPI) in its own venv: the independent reference of the theoretical prefix-cache hit
# rate test (tests/kvsim/aiperf_theoretical_test.py). ~1 minute and ~1.2 GB the first time.
AIPERF_VENV=${DELTAKV_AIPERF_VENV:-$HOME/.cache/deltakv-venvs/aiperf}
if [ "${DELTAKV_SKIP_AIPERF:-0}" != 1 ] &&
   ! "$AIPERF_VENV/bin/python" -c 'import aiperf.dataset.loader.weka_metric_prepass' 2>/dev/null; then
  echo "setup-deps: installing aiperf 0.13.0 into $AIPERF_VENV" >&2
  "$PY" -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/pip" install --quiet aiperf==0.13.0
fi
# moto (PyPI, its S3 server) and the aws CLI in their own venv: the S3-API server on loopback and
# the independent client of the S3 volume store tests (tests/store/s3_volume_store_test.cc,
# tests/cli/volume_s3_test.py) and of bench/volume_s3_bench.py. Those tests skip without it.
MOTO_VENV=${DELTAKV_MOTO_VENV:-$HOME/.cache/deltakv-venvs/moto}
if [ "${DELTAKV_SKIP_MOTO:-0}" != 1 ] &&
   ! "$MOTO_VENV/bin/python" -c 'import moto.server, boto3, awscli' 2>/dev/null; then
  echo "setup-deps: installing moto[server] 5.2.1 and awscli 1.46.3 into $MOTO_VENV" >&2
  "$PY" -m venv "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install --quiet "moto[server]==5.2.1" "awscli==1.46.3"
fi
[ "${DELTAKV_SKIP_HELM:-0}" = 1 ] || PYTHON="$PY" "$(dirname "$0")/test-helm.sh" --setup-only || echo "setup-deps: warning: no venv for the Helm chart tests (none on linux aarch64: helm-python-sdk has no wheel there); helm_chart_test is skipped" >&2
echo "setup-deps: ok" >&2
