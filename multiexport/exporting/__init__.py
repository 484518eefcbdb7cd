"""Exporting: the backend contract, manifests, the registry, feed checks and the shared StableHLO stage.

`pipeline.export_artifact` is the one path every backend's export takes; backends import only from
this package (and the signature types), never from each other.
"""

from .contract import (
    PLATFORM_OF_DEVICE,
    Artifact,
    Availability,
    Backend,
    ExportOptions,
    FormatResult,
    Option,
    RunOptions,
    Runner,
)
from .manifest import MANIFEST_NAME, LeafBinding, Manifest
from .pipeline import export_artifact

__all__ = ["MANIFEST_NAME", "PLATFORM_OF_DEVICE", "Artifact", "Availability", "Backend", "ExportOptions",
           "FormatResult", "LeafBinding", "Manifest", "Option", "RunOptions", "Runner", "export_artifact"]
