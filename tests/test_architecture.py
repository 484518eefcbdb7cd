"""The architecture's rules, checked on the source: who may import whom, and how big a module may grow.

- The report side (multiexport.report, multiexport.results) imports no JAX and no backend: a results.json
  re-renders anywhere.
- No core module imports a backend: the core knows backends only through the registry.
- A backend imports only `multiexport.sdk` from the core (the backend SDK), never another backend.
- No import cycle among the modules of multiexport and its backends, counting imports inside functions; the
  in-function imports left in the SDK's packages (exporting/, backends/) are the heavy frameworks' only.
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

import multiexport.sdk

from .conftest import REPO

CORE = REPO / "multiexport"
BACKENDS = REPO / "backends"
REFERENCE_BACKEND = REPO / "examples" / "reference_backend"  # the SDK's reference backend, from outside the package
MAX_LINES = 400
# What a backend may import from multiexport: the backend SDK alone (multiexport/sdk.py, its `__all__`).
BACKEND_MAY_IMPORT = ("multiexport.sdk",)
# The core's units, bottom to top (a subpackage, or a top-level module of multiexport). System utilities and the
# subprocess helper at the bottom; the process machinery (run) above what it runs; the example zoo and the
# measurement instruments apart; the Python API and the command line on top.
LAYERS = ("status", "errors", "dtypes", "telemetry", "versions", "preflight", "system", "files", "leaves", "examples",
          "results", "exporting", "environment", "measure", "native", "sdk", "report", "run", "locate", "comparison", "sweeps", "api", "cli",
          "__main__", "__init__")
# Words naming a format's runtime or program, none of which the core's native machinery may use outside docstrings.
FORMAT_WORDS = ("pjrt", "tensorflow", "openvino", "onnxruntime", "litert", "xla", "cuda", "nvidia", "iree", "mx_ort",
                "tf_run", "ov_run", "ort_run", "lite_run")
NATIVE_CORE = sorted([*(CORE / "native").glob("*.py"), CORE / "exporting" / "native_consumer.py",
                      CORE / "exporting" / "native_section.py"])
SDK_NAMES: list[str] = list(multiexport.sdk.__all__)
HEAVY = ("jax", "jaxlib", "tensorflow", "onnx", "onnxruntime", "jax2onnx", "iree", "flax", "openvino", "ai_edge_litert")


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _package(path: Path) -> str:
    """The dotted package a file's relative imports resolve against (backends/ installs as multiexport.backends)."""
    if path.is_relative_to(BACKENDS):
        parts = ["multiexport", "backends", *path.relative_to(BACKENDS).parts]
    elif path.is_relative_to(REFERENCE_BACKEND.parent):  # examples/ goes on sys.path: its packages are top-level
        parts = list(path.relative_to(REFERENCE_BACKEND.parent).parts)
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


@pytest.mark.parametrize("path", _modules(BACKENDS) + _modules(REFERENCE_BACKEND), ids=lambda p: str(p.relative_to(REPO)))
def test_a_backend_imports_only_the_sdk(path):
    own = _package(path).split(".")[:3]  # multiexport.backends.<name>
    for module in imports(path):
        if not module.startswith("multiexport"):
            continue
        if module.startswith("multiexport.backends"):
            assert module.split(".")[:3] == own, f"{path.name} imports another backend: {module}"
            continue
        assert module.startswith(BACKEND_MAY_IMPORT), f"{path.relative_to(REPO)} imports core module {module}, " \
            "expected multiexport.sdk"
        if module.startswith("multiexport.sdk."):
            assert module.split(".")[2] in SDK_NAMES, f"{path.relative_to(REPO)} imports {module}: not in sdk.__all__"


def test_the_sdk_names_what_it_offers():
    """An explicit `__all__`, every name of it defined, and nothing else public in the module."""
    import multiexport.sdk as sdk

    assert len(SDK_NAMES) == len(set(SDK_NAMES))
    assert all(hasattr(sdk, name) for name in SDK_NAMES)
    public = {n for n in vars(sdk) if not n.startswith("_") and n != "annotations"}
    assert public == set(SDK_NAMES), public ^ set(SDK_NAMES)


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


# Import cycles that remain outside the SDK's packages, each with the package that owns it: this list must only
# shrink. A cycle found that is not listed fails (a new one); a listed one no longer found fails too, until it is
# removed from here, so the list always states the tree as it is.
KNOWN_CYCLES: dict[frozenset[str], str] = {}
# Every module of the core and the backends: an import inside a function may only be of a heavy framework (or the
# standard library), never of multiexport's own modules, but for the modules below, each importing a heavy
# framework at its top (so that `multiexport --help` and the registry's scan stay free of it).
SDK_PATHS = sorted([*_modules(CORE), *_modules(BACKENDS)])
HEAVY_OWN_MODULES = {"multiexport.examples.flax_models": "flax, at its top"}


def _module_name(path: Path) -> str:
    package = _package(path)
    return package if path.name == "__init__.py" else f"{package}.{path.stem}"


def _runtime_imports(path: Path, source: str | None = None) -> list[tuple[str, str | None]]:
    """(module, name imported from it or None) for every import running `path` (or `source`) can make, at its
    top or inside its functions; those under `if TYPE_CHECKING:` are never executed and left out."""
    tree = ast.parse(path.read_text() if source is None else source)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    package = _package(path).split(".")
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            found += [(base, alias.name) for alias in node.names]
    return found


def import_graph(sources: dict[Path, str | None]) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports anywhere in its file (in functions too). `from x import y` is
    an arrow to x.y when that is a module of the tree, else to x; the implicit import of a module's own parent
    packages is no arrow (they are being imported already)."""
    known = {_module_name(p) for p in sources}
    graph: dict[str, set[str]] = {}
    for path, source in sources.items():
        own = _module_name(path)
        targets = set()
        for module, name in _runtime_imports(path, source):
            module = f"{module}.{name}" if name and f"{module}.{name}" in known else module
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module and module != own:
                targets.add(module)
        graph[own] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle_counting_imports_inside_functions():
    found = cycles(import_graph({p: None for p in _modules(CORE) + _modules(BACKENDS)}))
    new = {", ".join(sorted(c)) for c in found - set(KNOWN_CYCLES)}
    gone = {f"{', '.join(sorted(c))} ({owner})" for c, owner in KNOWN_CYCLES.items() if c not in found}
    assert not new, f"new import cycles: {sorted(new)}"
    assert not gone, f"cycles no longer found: remove them from KNOWN_CYCLES: {sorted(gone)}"


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import():
    """Not vacuous: a -> b at the top and b -> a inside a function is a cycle; under TYPE_CHECKING it is none."""
    a, b = CORE / "exporting" / "probe_a.py", CORE / "exporting" / "probe_b.py"  # never written
    lazy = "def f():\n    from .probe_a import x\n"
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .probe_a import x\n"
    assert cycles(import_graph({a: "from .probe_b import y\n", b: lazy})) == {frozenset({_module_name(a),
                                                                                         _module_name(b)})}
    assert cycles(import_graph({a: "from .probe_b import y\n", b: typed})) == set()


def _imports_in_functions(path: Path) -> list[str]:
    """The multiexport modules (and the module's own package's) imported inside `path`'s functions."""
    tree = ast.parse(path.read_text())
    nested = ast.Module(body=[n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                              for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    return [m for m in imports(path, ast.unparse(nested)) if m.startswith("multiexport")]


@pytest.mark.parametrize("path", SDK_PATHS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_sdk_packages_import_only_heavy_frameworks_inside_functions(path):
    own = [m for m in _imports_in_functions(path) if m not in HEAVY_OWN_MODULES]
    assert not own, f"{path.relative_to(REPO)}: {own}"
