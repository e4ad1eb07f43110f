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
  libcurl4-openssl-dev openssl ca-certificates
  python3 python3-pip
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
if ! "$PY" -c 'import numpy, zstandard, xxhash' 2>/dev/null; then
  echo "setup-deps: installing Python packages numpy zstandard" >&2
  "$PY" -m pip install --quiet numpy zstandard xxhash 2>/dev/null ||
    "$PY" -m pip install --quiet --break-system-packages numpy zstandard xxhash
fi
echo "setup-deps: ok" >&2
