"""What the compare hands its export workers so most exports need not build the target (leaves/handed.py).

`write_handoff` writes the signature, its example values and the StableHLO modules the built-in backends ask
`export_module` for by default: the one of every leaf jax.export keeps, for the CPU (that module serves a
keep_unused export too when it keeps every leaf), and the module that aliases donated leaves when the target
donates any. A module a backend asks for with other arguments (another platform, lifted weights, fixed sizes)
is not handed: its worker builds the target for it. Nothing is handed for a target whose modules would carry
more than HANDOFF_LIMIT_BYTES of baked weights (each worker would read them all), nor for a target whose
module cannot be exported here (the workers then say why, each for its row).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..files import write_bytes_atomic, write_text_atomic
from ..leaves.handed import CPU, MODULES_FILE, ModuleKey, write_signature
from ..leaves.signature import Signature
from .stablehlo import donated_leaves, export_module

# Past this many baked bytes (weights closed over, which every module embeds) nothing is handed: the workers
# build the target, as they did, rather than the compare writing and every worker reading them.
HANDOFF_LIMIT_BYTES = 64 << 20


def write_handoff(fn: Callable[..., Any], signature: Signature, fingerprint: str, directory: Path) -> bool:
    """Write the handed target for `fn` into the (empty, private) `directory`; False, writing nothing usable,
    when the target is too large to hand or its module cannot be exported (see the module's docstring)."""
    if int(signature.weights.get("baked_bytes", 0)) > HANDOFF_LIMIT_BYTES:
        return False
    try:
        donates = bool(donated_leaves(fn, signature))
        plain = export_module(fn, signature, keep_unused=False, platforms=CPU)
        made = {ModuleKey(False, CPU, False): plain}
        if len(plain.module_kept_var_idx) == len(signature.inputs):
            made[ModuleKey(True, CPU, False)] = plain  # every leaf kept: keep_unused changes nothing
        if donates:
            made[ModuleKey(False, CPU, True)] = export_module(fn, signature, keep_unused=False, platforms=CPU,
                                                              donate=True)
        files: dict[int, str] = {}
        modules = []
        for key, exported in made.items():
            if id(exported) not in files:
                files[id(exported)] = f"module-{len(files)}.bin"
                write_bytes_atomic(directory / files[id(exported)], bytes(exported.serialize()))
            modules.append({**key.to_json(), "file": files[id(exported)]})
    except Exception:  # noqa: BLE001  (a target jax.export refuses: each worker reports it for its own row)
        return False
    write_signature(signature, directory)
    write_text_atomic(directory / MODULES_FILE, json.dumps({"fingerprint": fingerprint, "donates": donates,
                                                            "modules": modules}))
    return True
