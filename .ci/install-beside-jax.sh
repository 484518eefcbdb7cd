#!/usr/bin/env bash
# multiexport installs beside the user's JAX instead of replacing it (issue 20):
#   .ci/install-beside-jax.sh PYTHON JAX_VERSION
# makes a fresh venv with PYTHON, installs jax/jaxlib JAX_VERSION first (the user's environment), then
# `pip install -e .` with no constraints (what a user does), and fails unless jax is still JAX_VERSION and
# the seed compare passes on the XLA backend (the one the core install runs).
set -euo pipefail
py=${1:?usage: install-beside-jax.sh PYTHON JAX_VERSION}
want=${2:?usage: install-beside-jax.sh PYTHON JAX_VERSION}
cd "$(dirname "$0")/.."
venv=$(mktemp -d "${TMPDIR:-/tmp}/multiexport-beside-jax.XXXXXX")
trap 'rm -rf "$venv"' EXIT
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade "pip>=24"
"$venv/bin/python" -m pip install --quiet "jax==$want" "jaxlib==$want"
if ! "$venv/bin/python" -m pip install --quiet -e . > "$venv/pip.log" 2>&1; then
  cat "$venv/pip.log" >&2
  exit 1
fi
got=$("$venv/bin/python" -c 'import jax; print(jax.__version__)')
if [ "$got" != "$want" ]; then
  echo "install-beside-jax: pip install -e . replaced jax $want with $got" >&2
  exit 1
fi
echo "install-beside-jax: jax $got kept ($("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'))"
out="$venv/seed"
"$venv/bin/multiexport" compare --backends xla --no-bench --out-dir "$out" | tail -1
"$venv/bin/python" - "$out/results.json" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))["backends"]["xla"]
sys.exit(0 if row["status"] == "ok" else f"install-beside-jax: the seed's xla row is {row['status']}: {row.get('reason', '')}")
PY
