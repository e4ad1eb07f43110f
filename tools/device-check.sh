#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU: builds the CUDA targets (unless they are
# already built in $BUILD_DIR and no compiler is present), runs the CUDA tests and the GPU
# benchmarks, and writes every result under $OUT (default ./device-check-out):
#   nvidia-smi.txt, cuda_backend_test.{log,json}, gpu_scatter_bench.jsonl, summary.txt
# Environment: BUILD_DIR (default build-cuda), SIZE_MIB (model size for the scatter bench,
# default 4096), JOBS. Exits non-zero if a test fails or a benchmark fails verification.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-check-out}
BUILD_DIR=${BUILD_DIR:-build-cuda}
SIZE_MIB=${SIZE_MIB:-4096}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
status=0
log() { echo "device-check: $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed (no driver?)"
targets="cuda_backend_test gpu_scatter_bench"
if command -v cmake >/dev/null && command -v nvcc >/dev/null; then
  log "building $targets in $BUILD_DIR"
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DDELTAKV_CUDA=ON \
      -DDELTAKV_WERROR=ON >"$OUT/configure.log" 2>&1 || { log "configure failed"; exit 1; }
  fi
  cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target $targets >"$OUT/build.log" 2>&1 ||
    { log "build failed (see build.log)"; tail -30 "$OUT/build.log"; exit 1; }
else
  log "no cmake/nvcc here: using the binaries already in $BUILD_DIR"
fi

test_bin="$BUILD_DIR/tests/shim/cuda_backend_test"
bench_bin="$BUILD_DIR/bench/gpu_scatter_bench"
for b in "$test_bin" "$bench_bin"; do
  [ -x "$b" ] || { log "missing $b"; exit 1; }
  if ldd "$b" | grep -q "not found"; then log "$b lacks shared libraries:"; ldd "$b" | grep "not found"; fi
done

log "running cuda_backend_test"
if "$test_bin" --gtest_output=json:"$OUT/cuda_backend_test.json" >"$OUT/cuda_backend_test.log" 2>&1; then
  log "cuda_backend_test: $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/cuda_backend_test.log" | tr '\n' ' ')"
else
  log "cuda_backend_test FAILED"; tail -40 "$OUT/cuda_backend_test.log"; status=1
fi

log "running gpu_scatter_bench --size-mib $SIZE_MIB"
if "$bench_bin" --size-mib "$SIZE_MIB" >"$OUT/gpu_scatter_bench.jsonl" 2>"$OUT/gpu_scatter_bench.err"; then
  log "gpu_scatter_bench: ok"
else
  log "gpu_scatter_bench FAILED (rc $?)"; cat "$OUT/gpu_scatter_bench.err"; status=1
fi
cat "$OUT/gpu_scatter_bench.jsonl"
exit $status
