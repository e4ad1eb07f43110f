#!/usr/bin/env bash
# The deltakv demo, from a fresh machine: installs dependencies, builds, then runs the real
# system on the CPU: generates a checkpoint and two training steps, publishes the deltas,
# applies them offline with verification, and checks the result byte for byte.
#   DEMO_SIZE_MIB (default 256)   size of the generated checkpoint
#   DEMO_DIR      (default a temporary directory, removed at the end)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh deltakv
K=$PWD/build/sidecar/deltakv
SIZE=${DEMO_SIZE_MIB:-256}
DIR=${DEMO_DIR:-$(mktemp -d -t deltakv-demo-XXXXXX)}
[ -z "${DEMO_DIR:-}" ] && trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR"
cd "$DIR"
rm -rf v1 v2 v3 d12 d23 v2-applied v3-applied

echo "== generate a ${SIZE} MiB checkpoint (v1) and two training steps (v2: 1% of elements, v3: 0.1% + new header metadata)"
"$K" checkpoint generate --out v1 --size-mib "$SIZE" --files 4
"$K" checkpoint mutate --parent v1 --out v2 --density 0.01 --seed 2
"$K" checkpoint mutate --parent v2 --out v3 --density 0.001 --seed 3 --step-metadata step-3
"$K" checkpoint manifest v1

echo; echo "== publish the deltas"
"$K" publish --parent v1 --new v2 --out d12
"$K" publish --parent v2 --new v3 --out d23

echo; echo "== apply them offline (every tensor verified by Adler-32 before and after)"
"$K" apply --parent v1 --delta d12 --out v2-applied
"$K" apply --parent v2-applied --delta d23 --out v3-applied

echo; echo "== check: the rebuilt v3 equals the trainer's v3 byte for byte"
for f in v3/*.safetensors; do cmp "$f" "v3-applied/$(basename "$f")"; done
echo "sizes: checkpoint $(du -sh v1 | cut -f1), delta v1->v2 $(du -sh d12 | cut -f1), delta v2->v3 $(du -sh d23 | cut -f1)"

echo; echo "== a wrong parent is refused and leaves nothing behind"
if "$K" apply --parent v1 --delta d23 --out wrong; then echo "unexpected success"; exit 1; fi
[ ! -e wrong ] && echo "no output written (exit code 2 as documented)"
echo; echo "demo OK"
