"""The architecture's rules, checked on the source: who may import whom, and how big a module may grow.

- The report side (multiexport.report, multiexport.results) imports no JAX and no backend: a results.json
  re-renders anywhere.
- No core module imports a backend: the core knows backends only through the registry.
- A backend imports only the contract and the shared stages, never another backend.
- No module is over 400 lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

CORE = REPO / "multiexport"
BACKENDS = REPO / "backends"
MAX_LINES = 400
# What a backend may import from multiexport: the contract, the shared stages, and plain utilities.
BACKEND_MAY_IMPORT = ("multiexport.errors", "multiexport.dtypes", "multiexport.files", "multiexport.export",
                      "multiexport.signature", "multiexport.versions", "multiexport.run.supervisor",
                      "multiexport.native")
HEAVY = ("jax", "jaxlib", "tensorflow", "onnx", "onnxruntime", "jax2onnx", "iree", "flax", "openvino", "ai_edge_litert")


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _package(path: Path) -> str:
    """The dotted package a file's relative imports resolve against (backends/ installs as multiexport.backends)."""
    if path.is_relative_to(BACKENDS):
        parts = ["multiexport", "backends", *path.relative_to(BACKENDS).parts]
    else:
        parts = ["multiexport", *path.relative_to(CORE).parts]
    parts[-1] = parts[-1][:-3]
    return ".".join(parts[:-1]) if parts[-1] != "__init__" else ".".join(parts[:-1])


def imports(path: Path) -> list[str]:
    """Every module `path` imports, absolute, at any depth of the file (function-level imports included)."""
    found = []
    package = _package(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append(module)
            found += [f"{module}.{alias.name}" for alias in node.names]
    return found


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in _modules(CORE) + _modules(BACKENDS)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_core_module_imports_a_backend():
    offenders = {str(p.relative_to(REPO)): m for p in _modules(CORE) for m in imports(p)
                 if m.startswith("multiexport.backends")}
    assert not offenders, offenders


@pytest.mark.parametrize("path", _modules(BACKENDS), ids=lambda p: str(p.relative_to(BACKENDS)))
def test_a_backend_imports_only_the_contract_and_shared_stages(path):
    own = _package(path).split(".")[:3]  # multiexport.backends.<name>
    for module in imports(path):
        if not module.startswith("multiexport"):
            continue
        if module.startswith("multiexport.backends"):
            assert module.split(".")[:3] == own, f"{path.name} imports another backend: {module}"
            continue
        assert module.startswith(BACKEND_MAY_IMPORT), f"{path.relative_to(REPO)} imports core module {module}"


@pytest.mark.parametrize("path", _modules(CORE / "report") + _modules(CORE / "results"),
                         ids=lambda p: str(p.relative_to(CORE)))
def test_the_report_side_imports_no_jax_and_no_backend(path):
    for module in imports(path):
        root = module.split(".")[0]
        assert root not in HEAVY, f"{path.relative_to(REPO)} imports {module}"
        assert not module.startswith(("multiexport.backends", "multiexport.export", "multiexport.measure",
                                      "multiexport.signature")), f"{path.relative_to(REPO)} imports {module}"


def test_rendering_a_report_loads_no_heavy_library(tmp_path):
    """The runtime check behind the static one: re-render a real results.json in a fresh process."""
    from .report.builders import results, row

    path = tmp_path / "results.json"
    results(row("xla"), row("onnx", "parity-failed")).write(path)
    code = (f"import sys\nfrom multiexport.results import load_results\nfrom multiexport.report.render import "
            f"write_reports\nwrite_reports(load_results({str(path)!r}), {str(tmp_path)!r})\n"
            f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('multiexport.backends')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]" and (tmp_path / "report.html").is_file()
