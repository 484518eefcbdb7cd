# make demo: set up .venv, then run `multiexport compare` on the built-in seed example.
# make test: set up .venv, then run the whole test suite.
# Both need only Python 3.11 and make; the pinned set is installed from constraints.txt.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= all,test
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast zoo zoo-check zoo-baseline lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found (multiexport needs Python 3.11; set PYTHON=...)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	@touch $@

demo: $(STAMP)
	$(BIN)/multiexport signature
	$(BIN)/multiexport compare --out multiexport-out/seed
	@if command -v chromium >/dev/null 2>&1; then \
	  $(BIN)/multiexport report multiexport-out/seed/results.json --screenshot multiexport-out/seed/report.png; \
	else echo "(no chromium on PATH: skipped the report screenshot)"; fi

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The model zoo through every backend (a few minutes; `make zoo QUICK=` for the full zoo).
QUICK ?= --quick
zoo: $(STAMP)
	$(BIN)/python -m benchmarks $(QUICK) --out multiexport-out/zoo

# CI's regression check: the quick zoo against the committed baseline. A backend that stops working or
# a parity drift fails per model; latency is gated per backend on the geometric mean of its p50 ratios
# over the zoo (above 2.5x, most entries slower beyond their intervals): a real 3x slowdown of a
# backend fails the build, a 10 us call that moved 4x between runs on a shared 2-core machine does not.
zoo-check: $(STAMP)
	$(BIN)/python -m benchmarks --quick --out multiexport-out/zoo-ci --baseline benchmarks/baselines/quick.json \
	  --max-slowdown 2.5 --junit multiexport-out/zoo-ci/junit.xml

# Refresh the committed baseline (run on a quiet machine, then commit benchmarks/baselines/quick.json).
zoo-baseline: $(STAMP)
	$(BIN)/python -m benchmarks --quick --out multiexport-out/zoo-baseline
	mkdir -p benchmarks/baselines && cp multiexport-out/zoo-baseline/zoo-results.json benchmarks/baselines/quick.json

# Re-resolve the pinned set (after changing a pin in pyproject.toml) and write constraints.txt.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade "pip>=24"
	.venv-lock/bin/python -m pip install --quiet -e ".[all,test]"
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^-e' | sort -f > constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) multiexport-out .pytest_cache
