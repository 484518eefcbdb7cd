"""What a backend built on another's stage shares: placing the stage's files, and refusing leaves of a dtype its
runtime has no tensor type for, in one line naming the leaf.

Several formats ship the stage's file unchanged and only run it elsewhere (OpenVINO reads the ONNX stage's
model; onnx-web and onnx-node run it in a JavaScript runtime), so the file is hard-linked, not copied: a model with
gigabytes of external weights is not written twice.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Collection

from ..errors import ExportError, leaf_message

if TYPE_CHECKING:
    from .manifest import Manifest


def place_stage_file(source: Path, target: Path) -> None:
    """The stage's file at `target`: a hard link where the filesystem allows (no copy of large weights), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def check_stage_dtypes(backend: str, stage: "Manifest", dtypes: Collection[str], runtime: str) -> None:
    """Refuse the stage when a fed input or any output has a dtype outside `dtypes` (those `runtime` has a tensor
    type for): one ExportError naming the first such leaf, category unsupported-dtype.

    Args:
      backend: the building backend's name, for the message and the error's backend.
      stage: the stage artifact's manifest (inputs the graph does not read are skipped: nothing is fed to them).
      dtypes: the dtype names the runtime takes.
      runtime: the runtime as the message names it ("onnxruntime-web").
    """
    for kind, leaves in (("Input", [leaf for leaf in stage.inputs if leaf.param is not None]), ("Output", stage.outputs)):
        for leaf in leaves:
            if leaf.dtype not in dtypes:
                raise ExportError(f"Backend '{backend}' | " + leaf_message(
                    kind, leaf.name, leaf.dtype, f"a dtype {runtime} has a tensor type for ({', '.join(dtypes)})"),
                    backend=backend, category="unsupported-dtype")
