#!/usr/bin/env bash
# The GPU check, made for the lent device machine as it is: one NVIDIA GPU, Python 3.12 with jax/jaxlib
# 0.11.2 + jax-cuda13-plugin/-pjrt, flax, onnx, onnxruntime 1.30 (CPU build), ... and no network, no
# TensorFlow, IREE, OpenVINO or LiteRT (shared/GPU.md). Nothing is installed from a registry there:
# multiexport goes in with `pip install --no-deps -e .` over the machine's packages, plus the small
# pure-Python wheels listed in benchmarks/gpu_wheels.txt, carried in .whl/ with the PJRT C API header
# (.whl/include/pjrt_c_api.h, from this machine's xla-cpu-pjrt or tensorflow wheel) that the native
# consumer compiles against.
#
#   bash benchmarks/gpu_check.sh --fetch          # here, once: fill .whl/ (about 9 MiB, gitignored)
#   bash benchmarks/gpu_check.sh OUT_DIR [ARGS]    # there: install, check, write OUT_DIR/results.json + summary.md
#
# OUT_DIR gets at most 6 files (the device returns 8): results.json, summary.md, log.txt, install.log and,
# with a GPU, compare-gpu.md and compare-gpu.log; artifacts and builds stay in a temporary directory.
#   bash benchmarks/gpu_check.sh --help
#
# The device command (after --fetch here):
#   run(command='bash benchmarks/gpu_check.sh "$OUT"', carry=[".whl"], timeout_s=480)
#
# ARGS go to `python -m benchmarks.gpu_check` (--models, --batch-sizes, --bench-time, --min-iters, --no-native).
# Environment: GPU_CHECK_PYTHON (default python3; a virtual environment is installed into as it is, any
# other Python gets a --system-site-packages venv in a temporary directory, removed at exit),
# GPU_CHECK_TIMEOUT (seconds for the check itself, default 400), GPU_CHECK_COMPARE (1: also run
# `multiexport compare --device gpu --native` on mlp_dynamic when time is left; default: when nvidia-smi exists).
# On a machine without a GPU every GPU row is a `no-gpu` row with JAX's reason (the CPU rehearsal,
# tests/test_gpu_check.py). Exit status: the check's (0 all ok, 1 a failed or parity-failed row), 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wheels="$here/.whl"
list="$here/benchmarks/gpu_wheels.txt"
limit_mib=48  # the device call carries at most 64 MiB with the working tree

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

fetch() {
  local py=${GPU_CHECK_FETCH_PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x "$here/.venv/bin/python" ]; then py="$here/.venv/bin/python"; else py=python3; fi
  fi
  mkdir -p "$wheels/include"
  grep -v '^\s*\(#\|$\)' "$list" >"$wheels/requirements.txt"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" -r "$wheels/requirements.txt"
  local header
  header=$("$py" -c 'from multiexport.backends.xla.runtime import find_pjrt_header; print(find_pjrt_header())') || {
    echo "gpu_check --fetch: no pjrt_c_api.h here: install multiexport[native] (xla-cpu-pjrt) or tensorflow" >&2
    exit 1
  }
  cp "$header/pjrt_c_api.h" "$wheels/include/pjrt_c_api.h"
  local bytes
  bytes=$(du -sb "$wheels" | cut -f1)
  echo "gpu_check --fetch: $(ls "$wheels"/*.whl | wc -l) wheels + pjrt_c_api.h in $wheels, $((bytes / 1048576)) MiB"
  if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
    echo "gpu_check --fetch: $wheels is over $limit_mib MiB: it must travel with the tree (64 MiB per call)" >&2
    exit 1
  fi
}

case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --fetch) fetch; exit 0 ;;
  "" | -*) usage >&2; echo "error: OUT_DIR is required (or --fetch / --help)" >&2; exit 2 ;;
esac
out=$1
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
  echo "error: no wheels in $wheels: run 'bash benchmarks/gpu_check.sh --fetch' on a machine with a package index" \
       "and carry .whl (run(..., carry=[\".whl\"]))" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/multiexport-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
python=${GPU_CHECK_PYTHON:-python3}
# No index: every dependency must already be there or in .whl/ (build isolation takes setuptools from it).
pip_offline=(--no-index --find-links "$wheels" --no-deps --no-compile --disable-pip-version-check)
if "$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  py=$python  # a virtual environment (the device's python3 is one): install into it as it is
elif "$python" -m venv --system-site-packages "$work/venv" >/dev/null 2>&1 && "$work/venv/bin/python" -c 'import jax'
then
  py="$work/venv/bin/python"  # sees the machine's packages, adds ours
else
  py=$python  # no venv module, or packages the venv cannot see (a user site): into this Python itself
  pip_offline+=(--user)
  "$py" -m pip install --help 2>/dev/null | grep -q break-system-packages && pip_offline+=(--break-system-packages)
fi
echo "[gpu_check] Python: $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')"

# The carried wheels as minimums: a package the machine already has at that version or newer stays as it is.
grep -v '^\s*\(#\|$\)' "$list" | grep -v "^setuptools" | sed 's/==/>=/' >"$work/runtime.txt"
{
  "$py" -m pip install "${pip_offline[@]}" -r "$work/runtime.txt"
  "$py" -m pip install "${pip_offline[@]}" -e "$here"
} >"$out/install.log" 2>&1 || { tail -20 "$out/install.log" >&2; echo "error: install failed (see install.log)" >&2; exit 3; }
echo "[gpu_check] installed in $(($(date +%s) - start)) s: multiexport (--no-deps) + $(tr '\n' ' ' <"$work/runtime.txt")"

[ -f "$wheels/include/pjrt_c_api.h" ] && export MULTIEXPORT_PJRT_INCLUDE="$wheels/include"
export MULTIEXPORT_NATIVE_CACHE=${MULTIEXPORT_NATIVE_CACHE:-$work/native-cache}
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the native program and compare's workers share the GPU

status=0
(cd "$here" && timeout "${GPU_CHECK_TIMEOUT:-400}" "$py" -m benchmarks.gpu_check "$out" --artifacts "$work/artifacts" \
  "$@") || status=$?
echo "[gpu_check] check done in $(($(date +%s) - start)) s (exit $status)"

compare=${GPU_CHECK_COMPARE:-$(command -v nvidia-smi >/dev/null 2>&1 && echo 1 || echo 0)}
if [ "$compare" = 1 ] && [ $(($(date +%s) - start)) -lt 300 ]; then
  # The product's own path on the GPU: workers per backend, the device probe, compare --native.
  (cd "$here" && timeout 150 "$py" -m multiexport compare multiexport.examples:mlp_dynamic --device gpu \
    --backends xla,onnx --native --trials 1 --bench-time 0.3 --batch-sizes 1,8,64 --timeout 120 \
    --allow-fail onnx --out "$work/compare-gpu") >"$out/compare-gpu.log" 2>&1 || echo "[gpu_check] compare exited $?"
  cp "$work/compare-gpu/report.md" "$out/compare-gpu.md" 2>/dev/null || true  # OUT keeps <= 8 files
  tail -25 "$out/compare-gpu.log"
fi
echo "[gpu_check] done in $(($(date +%s) - start)) s"
exit "$status"
