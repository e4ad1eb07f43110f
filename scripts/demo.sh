#!/usr/bin/env bash
# The deltakv demo, from a fresh machine: installs dependencies, builds, then runs the real
# system on the CPU: generates a checkpoint and two training steps, publishes the deltas,
# applies them offline with verification and checks the result byte for byte, then makes them
# live in a running engine (the reference engine, 2 tensor-parallel rank processes) through
# the sidecar's HTTP API and shared memory.
#   DEMO_SIZE_MIB (default 256)   size of the generated checkpoint
#   DEMO_DIR      (default a temporary directory, removed at the end)
# Its last part replays a synthetic agentic corpus through a real host KV pool at concurrency
# 16 and 48, with and without the host tier, and prints the capacity plan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh deltakv deltakv-demo-engine
K=$PWD/build/sidecar/deltakv
ENGINE=$PWD/build/shim/deltakv-demo-engine
SIZE=${DEMO_SIZE_MIB:-256}
DIR=${DEMO_DIR:-$(mktemp -d -t deltakv-demo-XXXXXX)}
SHM=deltakv-demo-$$
cleanup() {
  [ -n "${ENGINE_PID:-}" ] && kill "$ENGINE_PID" 2>/dev/null && wait "$ENGINE_PID" 2>/dev/null
  [ -n "${SIDECAR_PID:-}" ] && kill "$SIDECAR_PID" 2>/dev/null && wait "$SIDECAR_PID" 2>/dev/null
  rm -f /dev/shm/"$SHM"*
  [ -z "${DEMO_DIR:-}" ] && rm -rf "$DIR"
}
trap cleanup EXIT
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
echo; echo "== live sync: sidecar + reference engine (TP=2) serving v1"
echo "demo-token" > token
# --verify-checkpoint: once both ranks attach, their live weights are checksummed on every rank
# and compared with v1 (the checksum table every later sync is checked against).
"$K" sidecar --listen 127.0.0.1:0 --port-file sidecar.port --token-file token --shm-name "$SHM" \
  --verify-checkpoint "$DIR/v1" --state-dir state 2>sidecar.log &
SIDECAR_PID=$!
while [ ! -s sidecar.port ]; do sleep 0.1; done
URL=http://127.0.0.1:$(cat sidecar.port)
mkdir -p ports
"$ENGINE" --checkpoint v1 --tp 2 --shm "$SHM" --port-dir ports 2>engine.log &
ENGINE_PID=$!
while [ ! -s ports/rank1.port ]; do sleep 0.1; done
sleep 0.5
answer() { curl -s "http://127.0.0.1:$(cat ports/rank$1.port)/v1/generate"; echo; }
echo "rank 0 answers: $(answer 0)"
checksums() { curl -s "$URL/v1/status" | python3 -c 'import json,sys; c=json.load(sys.stdin)["checksums"]; print("checksum table: version %s, %d tensors, verified against a checkpoint: %s, current: %s%s" % (c["version"], c["tensors"], c["checkpoint_verified"], c["current"], ", DIVERGED: " + c["diverged"] if c["diverged"] else ""))'; }
for _ in $(seq 200); do
  checksums | grep -q "verified against a checkpoint: True, current: True" && break
  sleep 0.05
done
echo "start-up verify: $(checksums)"
# wait_job ID: polls a sync/verify/scrub until it ends; prints its record.
wait_job() {
  while :; do
    rec=$(curl -s "$URL/v1/syncs/$1")
    state=$(echo "$rec" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    case "$state" in live|aborted|verified|diverged|failed) break ;; esac
    sleep 0.05
  done
  echo "$rec"
}
for step in "v2 d12" "v3 d23"; do
  set -- $step
  id=$(curl -s -X POST -H "Authorization: Bearer demo-token" \
       -d "{\"version\":\"$1\",\"delta\":\"$DIR/$2\"}" "$URL/v1/sync" |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  rec=$(wait_job "$id")
  state=$(echo "$rec" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  echo "sync $id to $1: $state; $(echo "$rec" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("request to live %.0f ms, pause %.1f ms" % (r["total_ms"], r["phase_ms"].get("pause", 0)))')"
  [ "$state" = live ] || { echo "$rec"; exit 1; }
done
echo "rank 0 answers: $(answer 0)"
echo "rank 1 answers: $(answer 1)"
echo "after the syncs: $(checksums)"
id=$(curl -s -X POST -H "Authorization: Bearer demo-token" -d "{}" "$URL/v1/scrub" |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
rec=$(wait_job "$id")
echo "scrub $id: $(echo "$rec" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%s, %d MiB read by the ranks in %.0f ms" % (r["state"], r["bytes_checked"] >> 20, r["total_ms"]))')"
echo "$rec" | grep -q '"state":"verified"' || { echo "$rec"; exit 1; }

echo; echo "== host KV tier: an agentic corpus replayed through a real pool segment (AgentX rules),"
echo "   Kimi-K3-like model on two 4-GPU GB300 nodes, host tier = the RAM freed by not keeping a CPU copy of the checkpoint"
"$K" trace generate --out agentic --traces 24 --seed 7
"$K" trace stats agentic
"$K" bench agentx agentic --concurrency 16,48 --duration-s 1800 --plot agentx.svg --no-progress
echo "plot: $DIR/agentx.svg"
"$K" plan --model kimi-k3 --node gb300x4 | head -12
echo; echo "demo OK"
