#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU. Writes every result under $OUT (default
# ./device-check-out): nvidia-smi.txt, summary.txt, cuda_backend_test.{log,json},
# gpu_scatter_bench.jsonl, sync_bench.jsonl and stderr.log (every step's stderr, the sidecar's
# and the engine's included).
#
# Steps:
#  1. cuda_backend_test: the cuda backend's unit tests (gather/scatter, the checksum kernel,
#     StagePart through a real planned delta, compared with the cpu backend).
#  2. gpu_scatter_bench: the commit scatter kernel against cudaMemcpy.
#  3. end to end (bench/sync_bench.py --backend cuda): a real sidecar and a real engine process
#     (deltakv-demo-engine --backend cuda, weights in device memory, TP 1 and 2 on the one GPU)
#     through the startup verify, syncs v1 -> v2 -> v3 -> v4 (0.1 %, 1 %, 5 % of elements), the
#     synced bytes checked against a full load of each new checkpoint, and a closing scrub;
#     request->live, pause vs a full host-to-device reload from pinned memory, staging GB/s vs
#     a host-to-device copy of the same bytes, verify and scrub GB/s vs a device pass.
# Without a GPU, steps 1 and 3 still run (the GPU tests skip; the end-to-end run uses the cpu
# backend at 64 MiB), so the harness itself is exercised anywhere.
#
# Binaries: with BUNDLE=DIR, the ones tools/device-bundle.sh packed (for a machine without this
# project's build dependencies); otherwise they are built in $BUILD_DIR (default build-cuda,
# configured with CUDA on) when cmake and nvcc are present.
# Environment: BUNDLE, BUILD_DIR, SIZE_MIB (end-to-end model size, default 2048),
# SCATTER_SIZE_MIB (default 4096), DECODE_THREADS (sidecar, default 8), TP (default 1,2), JOBS.
# Exits non-zero if a step fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-check-out}
BUILD_DIR=${BUILD_DIR:-build-cuda}
SIZE_MIB=${SIZE_MIB:-2048}
SCATTER_SIZE_MIB=${SCATTER_SIZE_MIB:-4096}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
status=0
log() { echo "device-check: $*" | tee -a "$OUT/summary.txt"; }
ERR="$OUT/stderr.log"
: >"$ERR"
: >"$OUT/summary.txt"

gpu=0
if nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then gpu=1; fi
log "gpu: $([ $gpu = 1 ] && nvidia-smi -L | head -1 || echo none)"

if [ -n "${BUNDLE:-}" ]; then
  test_bin="$BUNDLE/cuda_backend_test"; bench_bin="$BUNDLE/gpu_scatter_bench"
  deltakv_bin="$BUNDLE/deltakv"; engine_bin="$BUNDLE/deltakv-demo-engine"
  log "using the binaries in $BUNDLE"
else
  targets="cuda_backend_test gpu_scatter_bench deltakv deltakv-demo-engine"
  if command -v cmake >/dev/null && command -v nvcc >/dev/null; then
    log "building $targets in $BUILD_DIR"
    if [ ! -f "$BUILD_DIR/build.ninja" ]; then
      cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DDELTAKV_CUDA=ON \
        -DDELTAKV_WERROR=ON >>"$ERR" 2>&1 || { log "configure failed (see stderr.log)"; exit 1; }
    fi
    cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target $targets >>"$ERR" 2>&1 ||
      { log "build failed (see stderr.log)"; tail -30 "$ERR"; exit 1; }
  else
    log "no cmake/nvcc here: using the binaries already in $BUILD_DIR"
  fi
  test_bin="$BUILD_DIR/tests/shim/cuda_backend_test"; bench_bin="$BUILD_DIR/bench/gpu_scatter_bench"
  deltakv_bin="$BUILD_DIR/sidecar/deltakv"; engine_bin="$BUILD_DIR/shim/deltakv-demo-engine"
fi
for b in "$test_bin" "$bench_bin" "$deltakv_bin" "$engine_bin"; do
  [ -x "$b" ] || { log "missing $b"; exit 1; }
  if ldd "$b" | grep -q "not found"; then log "$b lacks shared libraries:"; ldd "$b" | grep "not found" | tee -a "$OUT/summary.txt"; status=1; fi
done

log "1. cuda_backend_test"
if timeout 150 "$test_bin" --gtest_output=json:"$OUT/cuda_backend_test.json" >"$OUT/cuda_backend_test.log" 2>&1; then
  log "cuda_backend_test: $(grep -E '^\[  (PASSED|SKIPPED) ' "$OUT/cuda_backend_test.log" | tr '\n' ' ')"
else
  log "cuda_backend_test FAILED"; grep -E '^\[  FAILED|Failure|error' "$OUT/cuda_backend_test.log" | head -40 | tee -a "$OUT/summary.txt"; status=1
fi

if [ $gpu = 1 ]; then
  log "2. gpu_scatter_bench --size-mib $SCATTER_SIZE_MIB"
  if timeout 90 "$bench_bin" --size-mib "$SCATTER_SIZE_MIB" >"$OUT/gpu_scatter_bench.jsonl" 2>>"$ERR"; then
    log "gpu_scatter_bench: ok"
  else
    log "gpu_scatter_bench FAILED (rc $?)"; status=1
  fi
  backend=cuda; size=$SIZE_MIB
else
  log "2. gpu_scatter_bench: skipped (no GPU)"
  backend=cpu; size=64
fi

log "3. end to end: sync_bench --backend $backend --size-mib $size"
if timeout 330 python3 bench/sync_bench.py --deltakv "$deltakv_bin" --engine "$engine_bin" \
     --backend "$backend" --check-bytes --size-mib "$size" --densities 0.001,0.01,0.05 \
     --tp "${TP:-1,2}" --decode-threads "${DECODE_THREADS:-8}" --log "$ERR" \
     >"$OUT/sync_bench.jsonl" 2>>"$ERR"; then
  log "sync_bench: ok ($(grep -c '"kind": "result"' "$OUT/sync_bench.jsonl") syncs, bytes checked)"
else
  log "sync_bench FAILED (rc $?)"; tail -5 "$ERR" | tee -a "$OUT/summary.txt"; status=1
fi
python3 - "$OUT/sync_bench.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "result":
        keys = ["tp", "element_density", "request_to_live_ms", "pause_ms", "full_reload_pause_ms",
                "pause_vs_full_reload", "staging_gbps", "h2d_copy_gbps", "staging_vs_h2d_copy",
                "pause_vs_touch_bound", "bytes_match_full_load"]
        print("  sync", {k: (round(r[k], 4) if isinstance(r.get(k), float) else r.get(k)) for k in keys if k in r})
    elif r.get("kind") == "checks":
        print("  checks", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k not in ("bench", "kind")})
PY
exit $status
