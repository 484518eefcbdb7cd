"""jax2onnx's plugins, imported once per process, without the subtrees a conversion cannot use.

`to_onnx` first imports every module under `jax2onnx/plugins` (~510 modules). Measured with jax2onnx 0.17.1
(benchmarks/onnx_import.py): that took ~11 CPU-s, mostly `plugins/equinox` (its modules build equinox layers
with PRNG keys at import: 47 of the ~74 XLA compiles) and `plugins/examples`. Plugins under `equinox` and
`dm_pix` patch only those libraries, and `examples` registers only example metadata, so for a process that
never imported equinox or dm_pix they cannot change a conversion; the ONNX written is byte-identical
(tests/backends/test_onnx.py checks it on the zoo). This imports the rest in jax2onnx's own order and marks
the tree imported; a subtree is imported later once its library is.

The shortcut relies on jax2onnx internals, so it is used only for the jax2onnx releases it was checked with
and can be switched off: MULTIEXPORT_JAX2ONNX_ALL_PLUGINS=1 imports everything, as jax2onnx itself does.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

CHECKED = ("0.17.",)  # jax2onnx releases whose plugin tree the shortcut was measured on
ALL_PLUGINS_ENV = "MULTIEXPORT_JAX2ONNX_ALL_PLUGINS"
_ONLY_WITH = {"equinox": "equinox", "dm_pix": "dm_pix"}  # plugin subtree -> the library it patches
_NEVER = {"examples"}
_done: set[str] = set()


def selective_enabled() -> bool:
    from multiexport.versions import dist_version

    version = dist_version("jax2onnx")
    return os.environ.get(ALL_PLUGINS_ENV, "") in ("", "0") and version.startswith(CHECKED)


def import_plugins() -> str:
    """Import the plugins a conversion in this process can use; returns how ("selective" or "all")."""
    from jax2onnx.plugins import plugin_system as ps

    if not selective_enabled():
        ps.import_all_plugins()
        return "all"
    if getattr(ps, "_already_imported_plugins", False) and not _done:
        return "all"  # someone imported everything already
    root = Path(ps.__file__).parent
    wanted = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")} - _NEVER
    wanted -= {tree for tree, library in _ONLY_WITH.items() if library not in sys.modules}
    new = sorted(wanted - _done)
    for path in root.rglob("*.py"):  # jax2onnx's own (rglob) order
        rel = path.relative_to(root).with_suffix("")
        if path.name in ("plugin_system.py", "__init__.py"):
            continue
        if len(rel.parts) > 1 and rel.parts[0] not in new:
            continue
        if len(rel.parts) == 1 and _done:
            continue  # top-level helper modules: the first call imports them
        importlib.import_module(".".join(("jax2onnx.plugins", *rel.parts)))
    _done.update(new)
    ps._already_imported_plugins = True
    return "selective"
