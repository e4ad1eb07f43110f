#!/usr/bin/env bash
# The whole deltakv test suite, from a fresh machine: installs dependencies, builds with
# warnings as errors, runs every test through CTest, builds and tests the Python wheel, then
# runs each libFuzzer target for a
# bounded time over its committed corpus (FUZZ_SECONDS per target, default 20; 0 skips).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
bash scripts/test-wheel.sh
if [ "${FUZZ_SECONDS:-20}" != "0" ]; then
  bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
echo "all tests passed"
