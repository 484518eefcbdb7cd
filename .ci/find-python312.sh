#!/usr/bin/env bash
# Print the path of a working Python 3.12 interpreter, or fail naming what was tried.
#
# `command -v python3.12` is not enough: on a pyenv machine it finds the shim ~/.pyenv/shims/python3.12,
# which exits 127 ("pyenv: python3.12: command not found") unless 3.12 is in `pyenv global`. So every
# candidate is run and its version checked. Order: $PYTHON_NEWEST (when set it must work: no silent
# fallback), python3.12 on PATH, pyenv's installed 3.12.x, /usr/local/bin, /usr/bin.
set -u
works() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }
if [ -n "${PYTHON_NEWEST:-}" ]; then
  if works "$PYTHON_NEWEST"; then "$PYTHON_NEWEST" -c 'import sys; print(sys.executable)'; exit 0; fi
  echo "PYTHON_NEWEST=$PYTHON_NEWEST is not a working Python 3.12" >&2
  exit 1
fi
cands=(python3.12)
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root 2>/dev/null) && for c in "$root"/versions/3.12*/bin/python3.12; do [ -e "$c" ] && cands+=("$c"); done
fi
cands+=(/usr/local/bin/python3.12 /usr/bin/python3.12)
for c in "${cands[@]}"; do
  if works "$c"; then "$c" -c 'import sys; print(sys.executable)'; exit 0; fi
done
echo "no working Python 3.12 (tried: ${cands[*]}); install one (pyenv install 3.12, or your distribution's" \
     "python3.12 package) or set PYTHON_NEWEST=/path/to/python3.12" >&2
exit 1
