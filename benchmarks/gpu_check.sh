#!/usr/bin/env bash
# The prepared GPU check: install the GPU build set into a fresh environment, run compare with
# --device gpu on the zoo's seed, MLP and transformer, and write results + reports to OUT_DIR.
#
#   bash benchmarks/gpu_check.sh OUT_DIR [WHEEL_DIR]
#
# WHEEL_DIR: a folder of wheels for machines without a package index (pip --no-index --find-links);
# without it pip uses the index. Sized for under 8 minutes on one GPU: short timings, 1 trial.
set -euo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR [WHEEL_DIR]}
wheels=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${GPU_CHECK_VENV:-/tmp/multiexport-gpu-venv}
mkdir -p "$out"
start=$(date +%s)

python3 -m venv "$venv"
pip_args=(--quiet)
[ -n "$wheels" ] && pip_args+=(--no-index --find-links "$wheels")
"$venv/bin/python" -m pip install "${pip_args[@]}" -e "$here[gpu]" 2>&1 | tail -5
echo "[gpu_check] installed in $(( $(date +%s) - start )) s" | tee "$out/log.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$out/log.txt" || true

export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with TF/ORT/IREE workers
for model in seed mlp_dynamic transformer; do
  extra=()
  [ "$model" = mlp_dynamic ] && extra=(--batch-sizes 1,8,64)
  for device in gpu cpu; do
    "$venv/bin/multiexport" compare "multiexport.examples:$model" --device "$device" --trials 1 \
      --bench-time 0.5 --timeout 240 --out "$out/$model-$device" "${extra[@]}" 2>&1 | tee -a "$out/log.txt" || true
  done
done
echo "[gpu_check] done in $(( $(date +%s) - start )) s" | tee -a "$out/log.txt"
# One line per model x device x backend: status, worst parity error, p50 at the first batch size.
"$venv/bin/python" - "$out" <<'PY' | tee "$out/summary.txt"
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/results.json")):
    data = json.loads(path.read_text())
    for name, r in data["backends"].items():
        leaves = (r.get("parity") or {}).get("leaves") or []
        rel = max((float(v["stats"]["max_rel"]) for v in leaves), default=float("nan"))
        sizes = (r.get("bench") or {}).get("sizes") or []
        p50 = sizes[0]["latency"]["p50_ms"] if sizes else float("nan")
        print(f"{path.parent.name:24} {name:11} {r['status']:14} max_rel {rel:9.2e}  p50 {p50:8.4f} ms")
PY
