#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for
# SECONDS (default 60) over its committed corpus in tests/fuzz/corpus/<name>/ (or the
# corpus of its family, e.g. walker/ for walker_crash), starting from
# a scratch copy so the committed seeds stay as they are, with tests/fuzz/<name>.dict when
# present. Fails on any crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
FUZZ_BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -G Ninja -S . -B "$FUZZ_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDELTAKV_BUILD_FUZZ=ON -DDELTAKV_BUILD_BENCH=OFF -DDELTAKV_CUDA=OFF
fi
cmake --build "$FUZZ_BUILD" -j "$(nproc)" --target fuzzers
work=$(mktemp -d -t deltakv-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
for bin in $(find "$FUZZ_BUILD/tests/fuzz" -maxdepth 1 -type f -name '*_fuzz' -perm -u+x | sort); do
  name=$(basename "$bin" _fuzz)
  mkdir -p "$work/$name"
  corpus="tests/fuzz/corpus/$name"
  [ -d "$corpus" ] || corpus="tests/fuzz/corpus/${name%%_*}"  # walker_crash -> walker
  if [ -d "$corpus" ]; then cp -r "$corpus/." "$work/$name/"; fi
  dict=()
  if [ -f "tests/fuzz/$name.dict" ]; then dict=(-dict="tests/fuzz/$name.dict"); fi
  echo "fuzz: $name for ${SECONDS_PER_TARGET}s"
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=4096 -timeout=20 "${dict[@]}" \
    -print_final_stats=1 "$work/$name" 2>"$work/$name.log" || { tail -50 "$work/$name.log"; exit 1; }
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/$name.log" | sed "s/^/  /"
done
