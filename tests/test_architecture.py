"""The architecture's rules, checked on the source: who may import whom, and how big a module may grow.

- The report side (multiexport.report, multiexport.results) imports no JAX and no backend: a results.json
  re-renders anywhere.
- No core module imports a backend: the core knows backends only through the registry.
- A backend imports only the contract and the shared stages, never another backend.
- The core's units (subpackages and top-level modules) import one way, down `LAYERS`: no arrow back up, so no
  cycle; a unit imports only units listed before it.
- No module imports another module's private names (`from x import _y`).
- No module is over 400 lines.
- The core's native machinery names no format: every runtime's headers, libraries, plugins and program sources
  are its backend's (`NativeConsumer.recipe` and the finders beside it).
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
BACKEND_MAY_IMPORT = ("multiexport.errors", "multiexport.dtypes", "multiexport.files", "multiexport.exporting",
                      "multiexport.leaves", "multiexport.versions", "multiexport.system.process",
                      "multiexport.native")
# The core's units, bottom to top (a subpackage, or a top-level module of multiexport). System utilities and the
# subprocess helper at the bottom; the process machinery (run) above what it runs; the example zoo and the
# measurement instruments apart; the Python API and the command line on top.
LAYERS = ("status", "errors", "dtypes", "telemetry", "versions", "preflight", "system", "files", "leaves", "examples",
          "results", "exporting", "environment", "measure", "native", "report", "run", "comparison", "sweeps", "api", "cli",
          "__main__", "__init__")
# Words naming a format's runtime or program, none of which the core's native machinery may use outside docstrings.
FORMAT_WORDS = ("pjrt", "tensorflow", "openvino", "onnxruntime", "litert", "xla", "cuda", "nvidia", "iree", "mx_ort",
                "tf_run", "ov_run", "ort_run", "lite_run")
NATIVE_CORE = sorted([*(CORE / "native").glob("*.py"), CORE / "exporting" / "native_consumer.py",
                      CORE / "exporting" / "native_section.py"])
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


def imports(path: Path, source: str | None = None) -> list[str]:
    """Every module `path` (or `source`, read as if at `path`) imports, absolute, at any depth of the file
    (function-level imports included)."""
    found = []
    package = _package(path)
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
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


def _unit(path: Path) -> str:
    rel = path.relative_to(CORE).parts
    return rel[0][:-3] if len(rel) == 1 else rel[0]


def test_every_core_unit_has_its_place_in_the_layers():
    assert {_unit(p) for p in _modules(CORE)} == set(LAYERS)


def _layer_violations(path: Path, source: str | None = None) -> list[str]:
    own = _unit(path)
    found = []
    for module in imports(path, source):
        parts = module.split(".")
        if parts[0] != "multiexport" or len(parts) < 2 or parts[1] == "backends":
            continue  # a third-party module, or a backend (test_no_core_module_imports_a_backend)
        unit = parts[1] if parts[1] in LAYERS else "__init__"  # `from .. import x` names x of the package root
        if unit != own and LAYERS.index(unit) > LAYERS.index(own):
            found.append(f"{module}: {unit} is not below {own}")
    return found


def _private_imports(source: str) -> list[str]:
    return [a.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
            for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]


@pytest.mark.parametrize("path", _modules(CORE), ids=lambda p: str(p.relative_to(CORE)))
def test_the_core_imports_only_down_the_layers(path):
    assert not _layer_violations(path), f"{path.relative_to(REPO)}: {_layer_violations(path)}"


@pytest.mark.parametrize("path", _modules(CORE) + _modules(BACKENDS), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_imports_another_modules_private_names(path):
    assert not _private_imports(path.read_text()), f"{path.relative_to(REPO)}: {_private_imports(path.read_text())}"


def test_the_layer_check_sees_an_arrow_back_up_and_a_private_import():
    """The checks are not vacuous: a files/ module importing run/ (an arrow back up) is caught, and so is a
    private name."""
    probe = CORE / "files" / "probe.py"  # never written: the checks read the source given
    found = _layer_violations(probe, "from ..run.worker import main\n")
    assert found and all(v.endswith(": run is not below files") for v in found)
    assert _layer_violations(probe, "from ..errors import UsageError\nimport multiexport.files.npz\n") == []
    assert _private_imports("from .x import _y, __all__, z\n") == ["_y"]


def _asserts_in_functions(source: str) -> list[int]:
    """Lines of `assert` statements inside functions: `python -O` drops them, so an invariant checked there
    is no check at all; multiexport raises InternalError instead (errors.present)."""
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted({a.lineno for f in functions for a in ast.walk(f) if isinstance(a, ast.Assert)})


def test_no_invariant_is_an_assert_that_python_O_drops():
    found = {str(p.relative_to(REPO)): lines for p in _modules(CORE) + _modules(BACKENDS)
             if (lines := _asserts_in_functions(p.read_text()))}
    assert not found, found
    assert _asserts_in_functions("def f(x):\n    assert x is not None\n    return x\n") == [2]  # the check sees one


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


def _format_words(source: str) -> list[str]:
    """The FORMAT_WORDS `source`'s code uses (names, strings, comments aside), docstrings left out: they may give a
    format as an example."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            node.body[0].value.value = ""
    code = ast.unparse(tree).lower()  # unparsing drops the comments
    return [w for w in FORMAT_WORDS if w in code]


@pytest.mark.parametrize("path", NATIVE_CORE, ids=lambda p: str(p.relative_to(CORE)))
def test_the_cores_native_machinery_names_no_format(path):
    assert not _format_words(path.read_text()), f"{path.relative_to(REPO)} names {_format_words(path.read_text())}: " \
        "a format's runtime belongs to its backend's NativeConsumer (recipe, finders, user_options)"


def test_the_cores_native_sources_are_the_shared_ones_alone():
    """Each program's main source and own headers are in its backend's csrc/; native/csrc holds common/ and the
    section's specification."""
    here = {p.relative_to(CORE / "native" / "csrc").as_posix() for p in (CORE / "native" / "csrc").rglob("*")
            if p.is_file()}
    assert {p for p in here if not p.startswith("common/")} == {"README.md"}, here


def test_the_format_word_check_sees_a_runtime_named_in_code():
    """Not vacuous: a finder of a runtime's library in code is caught, the same words in a docstring are not."""
    assert _format_words('def f():\n    """Finds libonnxruntime."""\n    return package_dir("onnxruntime")\n') \
        == ["onnxruntime"]
    assert _format_words('"""PJRT, OpenVINO and TensorFlow are backends."""\nx = 1  # pjrt\n') == []


@pytest.mark.parametrize("path", _modules(CORE / "report") + _modules(CORE / "results"),
                         ids=lambda p: str(p.relative_to(CORE)))
def test_the_report_side_imports_no_jax_and_no_backend(path):
    for module in imports(path):
        root = module.split(".")[0]
        assert root not in HEAVY, f"{path.relative_to(REPO)} imports {module}"
        assert not module.startswith(("multiexport.backends", "multiexport.exporting", "multiexport.measure",
                                      "multiexport.leaves")), f"{path.relative_to(REPO)} imports {module}"


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
