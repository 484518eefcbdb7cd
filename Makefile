# make demo: set up .venv, then run `multiexport compare` on the built-in seed example.
# make test: set up .venv, then run the whole test suite.
# Both need only Python 3.11 and make; the pinned set is installed from constraints.txt.
# make test-newest: the version-sensitive tests and the seed compare on the newest set (Python 3.12,
# constraints-py312.txt) in .venv-py312; make lint: ruff and mypy; make docs: build the docs site (mkdocs,
# strict); make lock: refresh both locks.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= all,openvino-int8,test,lint,zoo,sweep,docs,web
# keras-hub (the zoo's keras_hub_* models) goes in without its declared deps: see [zoo-keras] in pyproject.toml.
ZOO_NODEPS ?= keras-hub
# The newest leg runs no zoo test: its venv gets the zoo only when asked (EXTRAS_NEWEST=all,test,lint,zoo).
EXTRAS_NEWEST ?= all,test,lint
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# The suite runs in PYTEST_JOBS processes (pytest-xdist), one test file per process at a time (a file's
# module fixtures, e.g. the contract test's exports, are built once). 2 matches CI's cores; 1 runs serially.
PYTEST_JOBS ?= 2
PYTEST_PAR  := $(if $(filter-out 1,$(PYTEST_JOBS)),-n $(PYTEST_JOBS) --dist loadfile,-p no:xdist)
# The newest leg: Python 3.12 (jax >= 0.11 needs it), found by running each candidate (a pyenv shim on
# PATH may exist and still not run). Set PYTHON_NEWEST=/path/to/python3.12 to choose one.
VENV_NEWEST  ?= .venv-py312
BIN_NEWEST   := $(VENV_NEWEST)/bin
STAMP_NEWEST := $(VENV_NEWEST)/.installed
FIND_NEWEST  := bash .ci/find-python312.sh
# What the newest leg runs: everything that depends on the JAX, TF, ONNX and IREE versions (the case
# registry through every backend from disk, the backends' own tests, the JAX compatibility checks).
# The rest of the suite and the zoo baseline are calibrated on the pinned set. NEWEST_TESTS=tests: all.
NEWEST_TESTS ?= tests/exporting/test_contract.py tests/backends tests/test_jax_compat.py tests/leaves/test_factory_cache.py

.PHONY: setup demo docs test test-fast zoo zoo-check zoo-baseline setup-newest test-newest lint \
	lock lock-pinned lock-newest clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found (multiexport needs Python 3.11; set PYTHON=...)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	$(if $(findstring zoo,$(EXTRAS)),$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt $(ZOO_NODEPS))
	@# onnxruntime-web for the browser runner (onnx-web), exactly as its npm lock says; without npm that
	@# backend says it is unavailable and why, and everything else works.
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix backends/onnx_web/web --no-audit --no-fund --loglevel=error; \
	  else echo "make setup: npm not found: the onnx-web (browser) backend stays unavailable"; fi
	@touch $@

demo: $(STAMP)
	$(BIN)/multiexport signature
	$(BIN)/multiexport compare --out-dir multiexport-out/seed
	@if command -v chromium >/dev/null 2>&1; then \
	  $(BIN)/multiexport report multiexport-out/seed/results.json --screenshot multiexport-out/seed/report.png; \
	else echo "(no chromium on PATH: skipped the report screenshot)"; fi

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_PAR) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_PAR) -m "not slow" $(PYTEST_ARGS)

# The model zoo through every backend (a few minutes; `make zoo QUICK=` for the full zoo).
QUICK ?= --quick
zoo: $(STAMP)
	$(BIN)/python -m benchmarks $(QUICK) --out multiexport-out/zoo

# CI's regression check: the quick zoo, its latency paired against the artifacts that the code of the commit
# which last changed benchmarks/baselines/quick.json (else HEAD~1) exports, timed in the same interleaved rounds
# (the paired threshold is report.regression's calibrated default: benchmarks/gate.md); a backend that stops
# working, a parity drift, or a >= 2.5x slowdown is judged against the committed baseline (cross-run). A
# shallow clone has no REF: one line says so and latency is judged cross-run only.
zoo-check: $(STAMP)
	$(BIN)/python -m benchmarks.zoo --quick --baseline-ref auto --out multiexport-out/zoo-ci \
	  --baseline benchmarks/baselines/quick.json --max-slowdown 2.5 --junit multiexport-out/zoo-ci/junit.xml

# Refresh the committed baseline (run on a quiet machine, then commit benchmarks/baselines/quick.json).
zoo-baseline: $(STAMP)
	$(BIN)/python -m benchmarks --quick --out multiexport-out/zoo-baseline
	mkdir -p benchmarks/baselines && cp multiexport-out/zoo-baseline/zoo-results.json benchmarks/baselines/quick.json

# The newest set in .venv-py312, from constraints-py312.txt.
setup-newest: $(STAMP_NEWEST)

$(STAMP_NEWEST): pyproject.toml constraints-py312.txt
	@if ! $(BIN_NEWEST)/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then \
	  py=$$($(FIND_NEWEST)) || { echo "make setup-newest: no Python 3.12 for $(VENV_NEWEST)"; exit 2; }; \
	  rm -rf $(VENV_NEWEST) && echo "$$py -m venv $(VENV_NEWEST)" && $$py -m venv $(VENV_NEWEST); \
	fi
	$(BIN_NEWEST)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN_NEWEST)/python -m pip install --quiet -c constraints-py312.txt -e ".[$(EXTRAS_NEWEST)]"
	$(if $(findstring zoo,$(EXTRAS_NEWEST)),$(BIN_NEWEST)/python -m pip install --quiet --no-deps -c constraints-py312.txt $(ZOO_NODEPS))
	@touch $@

# The version-sensitive tests on the newest set, then the seed through every backend.
test-newest: $(STAMP_NEWEST)
	$(BIN_NEWEST)/python -c 'import jax, sys; print(f"newest leg: Python {sys.version.split()[0]}, jax {jax.__version__}")'
	$(BIN_NEWEST)/python -m pytest $(PYTEST_PAR) $(NEWEST_TESTS) $(PYTEST_ARGS)
	$(BIN_NEWEST)/multiexport compare --out-dir multiexport-out/seed-py312

# ruff (rules and why: [tool.ruff] in pyproject.toml) and mypy ([tool.mypy]) on the pinned set.
lint: $(STAMP)
	$(BIN)/ruff check multiexport backends tests benchmarks docs examples
	$(BIN)/mypy

# The docs site (mkdocs.yml; every warning is an error: broken links and anchors, pages missing from the nav,
# docstrings mkdocstrings cannot read). The CLI page is generated from the parsers at build time (docs/hooks.py).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d multiexport-out/site

# Re-resolve both locks from pyproject.toml's ranges (after changing a range), with no JAX pre-pinned:
# Python picks the JAX line. 3.11 resolves jax 0.10.2 (the newest for 3.11) into constraints.txt; 3.12
# resolves the newest releases into constraints-py312.txt. Each lock is what a fresh install there gets.
lock:
	@$(FIND_NEWEST) >/dev/null || { echo "make lock: no Python 3.12, so constraints-py312.txt cannot be refreshed" \
	  "(set PYTHON_NEWEST=..., or run 'make lock-pinned' for constraints.txt alone)"; exit 2; }
	$(MAKE) lock-pinned lock-newest

lock-pinned:
	@command -v $(PYTHON) >/dev/null || { echo "make lock-pinned: $(PYTHON) not found (set PYTHON=...)"; exit 2; }
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade "pip>=24"
	.venv-lock/bin/python -m pip install --quiet -e ".[all,openvino-int8,test,lint,zoo,sweep,docs,web]"
	.venv-lock/bin/python -m pip install --quiet --no-deps $(ZOO_NODEPS)
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^-e' | sort -f > constraints.txt
	rm -rf .venv-lock

lock-newest:
	@py=$$($(FIND_NEWEST)) || { echo "make lock-newest: no Python 3.12, so constraints-py312.txt is unchanged"; exit 2; }; \
	  rm -rf .venv-lock-py312 && $$py -m venv .venv-lock-py312
	.venv-lock-py312/bin/python -m pip install --quiet --upgrade "pip>=24"
	.venv-lock-py312/bin/python -m pip install --quiet -e ".[all,openvino-int8,test,lint,zoo,sweep,docs,web]"
	.venv-lock-py312/bin/python -m pip install --quiet --no-deps $(ZOO_NODEPS)
	.venv-lock-py312/bin/python -m pip freeze --exclude-editable | grep -v '^-e' | sort -f > constraints-py312.txt
	rm -rf .venv-lock-py312

clean:
	rm -rf $(VENV) $(VENV_NEWEST) .venv-lock .venv-lock-py312 multiexport-out .pytest_cache
