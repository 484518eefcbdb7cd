"""The runtimes' telemetry off by default, and the frameworks' temporary files removed.

ONNX Runtime (1.32, Linux wheels) writes a telemetry database and a device id under
~/.cache/Microsoft/DeveloperTools/.onnxruntime and a `.ses` file in $TMPDIR whenever it starts, for every
ONNX export check and run. Measured: `onnxruntime.disable_telemetry_events()` does not stop those files;
ORT_DISABLE_TELEMETRY=1 in the environment before ONNX Runtime starts does. multiexport sets it (when the
user has not set it) on import, so workers inherit it; MULTIEXPORT_RUNTIME_TELEMETRY=1 leaves the runtimes
as they are configured.

TensorFlow's autograph writes an `__autograph_generated_file*.py` to $TMPDIR for every function it converts
(`tf.saved_model.save` converts its signature wrapper: one per SavedModel or LiteRT export) and removes it
at interpreter exit; workers and the CLI end with os._exit, which skips that, so `exit_now` removes them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import MutableMapping

SWITCH = "MULTIEXPORT_RUNTIME_TELEMETRY"
_AUTOGRAPH_PREFIX = "__autograph_generated_file"


def quiet_runtimes(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn the runtimes' telemetry off in `environ` unless SWITCH=1 (a value the user set is kept)."""
    if environ.get(SWITCH, "").strip() == "1":
        return
    environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def remove_framework_temporaries() -> None:
    """Remove the files TensorFlow's autograph wrote for this process (its modules in sys.modules name
    them; nothing another process wrote is touched)."""
    tmp = os.path.realpath(tempfile.gettempdir())
    for name, module in list(sys.modules.items()):
        if not name.startswith(_AUTOGRAPH_PREFIX):
            continue
        path = getattr(module, "__file__", None)
        if path and os.path.dirname(os.path.realpath(path)) == tmp and os.path.basename(path).startswith(_AUTOGRAPH_PREFIX):
            try:
                os.remove(path)
            except OSError:
                pass
