"""jax2onnx's plugins, imported once per process, without those a conversion cannot use.

`to_onnx` first imports every module under `jax2onnx/plugins` (~510 modules). Measured with jax2onnx 0.17.1
(benchmarks/onnx_import.py): that took ~11 CPU-s, mostly `plugins/equinox` (its modules build equinox layers
with PRNG keys at import: 47 of the ~74 XLA compiles) and `plugins/examples`. Plugins under `equinox` and
`dm_pix` patch only those libraries, and `examples` registers only example metadata, so for a process that
never imported equinox or dm_pix they cannot change a conversion. With equinox imported, a plugin file under
`equinox` can change a conversion only by patching the `__call__` of an equinox class that runs while the
function is traced, or by lowering a primitive its jaxpr holds: one trace of the function (under a profile
hook, ~0.03 s for equinox's MNIST CNN) tells which, and only those files are imported (on it the
plugin import 11.9 -> 4.1 s). The ONNX written is byte-identical to jax2onnx's own import (tests/backends/test_onnx.py checks it on
the zoo and the equinox models). The rest is imported in jax2onnx's own order and the tree marked imported;
what a later conversion in the same process needs is imported then.

The shortcut relies on jax2onnx internals, so it is used only for the jax2onnx releases it was checked with
and can be switched off: MULTIEXPORT_JAX2ONNX_ALL_PLUGINS=1 imports everything, as jax2onnx itself does.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from multiexport.sdk import dist_version

CHECKED = ("0.17.",)  # jax2onnx releases whose plugin tree the shortcut was measured on
ALL_PLUGINS_ENV = "MULTIEXPORT_JAX2ONNX_ALL_PLUGINS"
_ONLY_WITH = {"equinox": "equinox", "dm_pix": "dm_pix"}  # plugin subtree -> the library it patches
_NEVER = {"examples"}
imported: set[str] = set()  # plugin modules this file imported
_PATCHES = re.compile(r"""target\s*=\s*["']?(?:equinox|eqx)\.nn\.([\w.]+)""")  # MonkeyPatchSpec(target=...)
_LOWERS = re.compile(r"""jaxpr_primitive\s*=\s*([^,\n]+)""")  # register_primitive(jaxpr_primitive=...)
_LITERAL = re.compile(r"""["']([\w.]+)["']""")


def selective_enabled() -> bool:

    version = dist_version("jax2onnx")
    return os.environ.get(ALL_PLUGINS_ENV, "") in ("", "0") and version.startswith(CHECKED)


def import_plugins(fn: Callable[..., Any] | None = None, specs: Sequence[Any] = ()) -> str:
    """Import the plugins a conversion of `fn(*specs)` in this process can use; returns how ("selective" or
    "all", with the equinox plugin files when equinox is imported). Without `fn`, every equinox plugin."""
    from jax2onnx.plugins import plugin_system as ps

    if not selective_enabled():
        ps.import_all_plugins()
        return "all"
    if getattr(ps, "_already_imported_plugins", False) and not imported:
        return "all"  # someone imported everything already
    root = Path(ps.__file__).parent
    wanted = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")} - _NEVER
    wanted -= {tree for tree, library in _ONLY_WITH.items() if library not in sys.modules}
    equinox = equinox_files(root, fn, specs) if "equinox" in wanted and fn is not None else None
    for path in root.rglob("*.py"):  # jax2onnx's own (rglob) order
        rel = path.relative_to(root).with_suffix("")
        if path.name in ("plugin_system.py", "__init__.py"):
            continue
        if len(rel.parts) > 1 and (rel.parts[0] not in wanted or (equinox is not None and rel.parts[0] == "equinox"
                                                                  and path not in equinox)):
            continue
        name = ".".join(("jax2onnx.plugins", *rel.parts))
        if name not in imported:
            importlib.import_module(name)
            imported.add(name)
    ps._already_imported_plugins = True
    if "equinox" not in wanted:
        return "selective"
    files = sorted(n.rsplit(".", 1)[1] for n in imported if n.startswith("jax2onnx.plugins.equinox."))
    return f"selective; equinox plugins: {', '.join(files) or 'none'}"


def equinox_files(root: Path, fn: Callable[..., Any], specs: Sequence[Any]) -> set[Path] | None:
    """The plugin files under `equinox` a conversion of `fn` can use, or None (all) when `fn` cannot be traced.

    A file counts when an equinox class it patches runs its `__call__` during one trace of `fn` (the trace
    jax2onnx will make: layers built inside the function count too), when it lowers a primitive the jaxpr
    holds, or when its primitive's name is not a literal this can read (then it is imported, to be safe).
    """
    import equinox as eqx
    import jax

    patches: dict[Any, set[Path]] = {}  # code object of a patched __call__ -> the files patching it
    lowers: dict[Path, list[str | None]] = {}  # file -> primitive names it lowers (None: not a literal)
    for path in (root / "equinox").rglob("*.py"):
        if path.name == "__init__.py":
            continue
        source = path.read_text()
        for dotted in _PATCHES.findall(source):
            obj: Any = eqx.nn
            for part in dotted.split("."):
                obj = getattr(obj, part, None)
            call = inspect.getattr_static(obj, "__call__", None) if isinstance(obj, type) else None
            code = getattr(inspect.unwrap(call), "__code__", None) if call is not None else None
            if code is None:
                return None  # a target this cannot resolve: import them all
            patches.setdefault(code, set()).add(path)
        lowers[path] = [(m.group(1) if (m := _LITERAL.fullmatch(expr.strip())) else None)
                        for expr in _LOWERS.findall(source)]
    ran: set[Path] = set()

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code in patches:
            ran.update(patches[frame.f_code])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        jaxpr = jax.make_jaxpr(fn)(*specs)
    except Exception:
        return None
    finally:
        sys.setprofile(previous)
    held = primitive_names(jaxpr.jaxpr)
    # A file that patches a class binds its primitive only from the patch: unpatched, the jaxpr cannot hold it.
    patching = set().union(*patches.values())
    return {path for path, names in lowers.items()
            if path in ran or path not in patching and any(n is None or n in held for n in names)}


def primitive_names(jaxpr) -> set[str]:
    """Every primitive's name in `jaxpr` and the jaxprs inside its equations' parameters."""
    names: set[str] = set()
    stack = [jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            names.add(eqn.primitive.name)
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's jaxpr, or a Jaxpr
                    if hasattr(inner, "eqns"):
                        stack.append(inner)
    return names
