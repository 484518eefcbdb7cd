#!/usr/bin/env bash
# The TPU check, made for the lent TPU machine as it is: one TPU v5e chip, Python 3.11 with jax/jaxlib 0.10.2 and
# libtpu preinstalled, no network, nothing else (no rich, flax, TensorFlow, ONNX Runtime, ...; shared/TPU.md).
# Nothing installs from a registry there: a wheel of multiexport and the small pure-Python wheels its core needs
# travel in the gitignored .tpu-wheels/ (about 3 MiB, with the PJRT C API header pjrt_c_api.h that the native
# consumer compiles against), and go into a --system-site-packages venv over the machine's JAX.
#
#   bash benchmarks/tpu_check.sh --fetch          # here, before each device run: fill .tpu-wheels/
#   bash benchmarks/tpu_check.sh OUT_DIR [ARGS]    # there: install, check, write OUT_DIR/results.json + summary.md
#   bash benchmarks/tpu_check.sh --help
#
# The device command (after --fetch here):
#   run(command='bash benchmarks/tpu_check.sh "$OUT"', carry=[".tpu-wheels"], timeout_s=580)
#
# OUT_DIR gets results.json, summary.md, log.txt, install.log and compare.md (the report of `multiexport
# compare` run with no option and no variable set by hand); artifacts and builds stay in a temporary directory.
# ARGS go to `python -m benchmarks.tpu_check` (--models, --bench-time, --no-native, --no-compare).
# Environment: TPU_CHECK_PYTHON (default python3), TPU_CHECK_INSTALL (0: use TPU_CHECK_PYTHON as it is, nothing
# installed: the CPU rehearsal, tests/test_tpu_check.py), TPU_CHECK_TIMEOUT (seconds for the check, default 540);
# TPU_CHECK_DIAG=1 then runs benchmarks/tpu_native_diag.py into OUT_DIR/native_diag (TPU_DIAG_TIMEOUT, default 240;
# TPU_DIAG_ARGS, e.g. "--platform cpu" for the rehearsal); TPU_CHECK_MAIN=0 skips the check itself (the diag alone:
# the native rows of the transformer and the MLP against the runner, issue #45, in about a minute):
#   run(command='TPU_CHECK_MAIN=0 TPU_CHECK_DIAG=1 TPU_DIAG_TIMEOUT=130 TPU_DIAG_ARGS="--models transformer,mlp
#       --variants A --kinds both" bash benchmarks/tpu_check.sh "$OUT"', carry=[".tpu-wheels"], timeout_s=150)
# multiexport runs from the installed wheel (its backends are the package multiexport.backends there: --fetch
# again after a change); only benchmarks/ comes from the tree, through PYTHONPATH. On a machine without a TPU every TPU row is a `no-tpu` row with
# JAX's or libtpu's reason. Exit status: the check's (0 ok, 1 a failed row), 2 usage, 3 install failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
wheels="$here/.tpu-wheels"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

fetch() {
  local py=${TPU_CHECK_FETCH_PYTHON:-$here/.venv/bin/python}
  rm -rf "$wheels"
  mkdir -p "$wheels/include"
  (cd "$here" && "$py" -m pip wheel -q --no-deps . -w "$wheels") >"$wheels/fetch.log" 2>&1 || { tail -5 "$wheels/fetch.log" >&2; exit 1; }
  "$py" -m pip download -q --no-deps -d "$wheels" rich markdown-it-py mdurl pygments flatbuffers >>"$wheels/fetch.log" 2>&1
  local header
  header=$("$py" -c 'from multiexport.backends.xla.runtime import find_pjrt_header; print(find_pjrt_header())') || {
    echo "tpu_check --fetch: no pjrt_c_api.h here: install multiexport[native] (xla-cpu-pjrt) or tensorflow" >&2
    exit 1
  }
  cp "$header/pjrt_c_api.h" "$wheels/include/pjrt_c_api.h"
  echo "tpu_check --fetch: $(ls "$wheels"/*.whl | wc -l) wheels + pjrt_c_api.h in $wheels, $(du -sh "$wheels" | cut -f1)"
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
work=$(mktemp -d "${TMPDIR:-/tmp}/multiexport-tpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
py=${TPU_CHECK_PYTHON:-python3}
case "$py" in */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;; esac  # the check runs from $work
if [ "${TPU_CHECK_INSTALL:-1}" != 0 ]; then
  if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
    echo "error: no wheels in $wheels: run 'bash benchmarks/tpu_check.sh --fetch' on a machine with a package index" \
         "and carry .tpu-wheels (run(..., carry=[\".tpu-wheels\"]))" >&2
    exit 2
  fi
  {
    "$py" -m venv --system-site-packages "$work/venv"
    "$work/venv/bin/pip" install --no-index --no-deps --disable-pip-version-check "$wheels"/*.whl
  } >"$out/install.log" 2>&1 || { tail -20 "$out/install.log" >&2; echo "error: install failed (install.log)" >&2; exit 3; }
  py="$work/venv/bin/python"
  echo "[tpu_check] installed in $(($(date +%s) - start)) s into $work/venv"
fi
[ -f "$wheels/include/pjrt_c_api.h" ] && export MULTIEXPORT_PJRT_INCLUDE="$wheels/include"
export MULTIEXPORT_NATIVE_CACHE=${MULTIEXPORT_NATIVE_CACHE:-$work/native-cache}
mkdir -p "$work/path" && ln -s "$here/benchmarks" "$work/path/benchmarks"  # benchmarks/ alone, not the tree's multiexport
export PYTHONPATH="$work/path${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$(dirname "$py"):$PATH"  # `multiexport` of this venv for the default compare
status=0
if [ "${TPU_CHECK_MAIN:-1}" != 0 ]; then
(cd "$work" && timeout "${TPU_CHECK_TIMEOUT:-540}" "$py" -m benchmarks.tpu_check "$out" "$@") >"$out/log.txt" 2>&1 \
  || status=$?
tail -60 "$out/log.txt"
echo "[tpu_check] done in $(($(date +%s) - start)) s (exit $status)"
fi
if [ "${TPU_CHECK_DIAG:-0}" != 0 ]; then  # the native consumer's compile options against jax's (issue #45, item 4)
  (cd "$work" && timeout "${TPU_DIAG_TIMEOUT:-240}" "$py" -m benchmarks.tpu_native_diag "$out/native_diag" \
    ${TPU_DIAG_ARGS:-}) >"$out/native_diag.log" 2>&1 || { rc=$?; echo "[tpu_check] native diag exit $rc"; [ "${TPU_CHECK_MAIN:-1}" != 0 ] || status=$rc; }
  tail -30 "$out/native_diag.log"
  echo "[tpu_check] native diag done at $(($(date +%s) - start)) s"
fi
exit "$status"
