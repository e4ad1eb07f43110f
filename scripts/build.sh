#!/usr/bin/env bash
# Configures and builds deltakv into ${BUILD_DIR:-build} with Ninja (and ccache when present).
# Extra arguments are passed to `cmake --build` (for example a target name).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
    -DDELTAKV_WERROR=${DELTAKV_WERROR:-ON} -DDELTAKV_PYTHON=${DELTAKV_PYTHON:-ON} ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" ${1:+--target "$@"}
