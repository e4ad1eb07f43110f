#!/usr/bin/env bash
# Packs the binaries tools/device-check.sh runs into one folder that can be copied to a GPU
# machine lacking this project's build dependencies: stripped copies of cuda_backend_test,
# gpu_scatter_bench, deltakv and deltakv-demo-engine from a CUDA-enabled build, plus every
# shared library they load except the C/C++ runtime's own (libc, libm, libstdc++, libgcc_s and
# the loader, which any Linux with a newer glibc provides), with rpath $ORIGIN/lib.
#
#   tools/device-bundle.sh [BUILD_DIR (default build)] [OUT_DIR (default device-bundle)]
# then, on the GPU machine:  BUNDLE=device-bundle tools/device-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
OUT_DIR=${2:-device-bundle}
command -v patchelf >/dev/null || { echo "device-bundle: needs patchelf (apt-get install patchelf)" >&2; exit 1; }
bins=(tests/shim/cuda_backend_test bench/gpu_scatter_bench sidecar/deltakv shim/deltakv-demo-engine)
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/lib"
for b in "${bins[@]}"; do
  src="$BUILD_DIR/$b"
  [ -x "$src" ] || { echo "device-bundle: missing $src (build it with CUDA on)" >&2; exit 1; }
  strip -o "$OUT_DIR/$(basename "$b")" "$src"
  patchelf --set-rpath '$ORIGIN/lib' "$OUT_DIR/$(basename "$b")"
  ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libnss_*|libutil.so*) ;;
      *) [ -e "$OUT_DIR/lib/$(basename "$lib")" ] || cp -L "$lib" "$OUT_DIR/lib/" ;;
    esac
  done
done
# The libraries find each other through the same rpath.
for lib in "$OUT_DIR"/lib/*; do patchelf --set-rpath '$ORIGIN' "$lib"; done
du -sh "$OUT_DIR"
