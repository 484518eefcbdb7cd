"""How far the export checks the ONNX file in OpenVINO: read (the frontend's conversion) always; compiled and run
once only up to PROBE_LIMIT_BYTES of files.

The compile probe catches a file the CPU plugin cannot compile or run (and, on the auto route, moves to the
StableHLO route's file). Its cost grows with the weights: the compiled model holds the plugin's repacked copy of
the matmul weights and the mapped data file's pages beside the target the export worker already holds (3.1x the
weights at 1 B, with the ONNX export in the same worker). Past the limit the export reads the file only (the
frontend's conversion, mapped, its pages untouched), and the runner's compile at load is the first; a failure
there is the run's, typed, not a verdict.
"""

from __future__ import annotations

from pathlib import Path

PROBE_LIMIT_BYTES = 256 << 20  # the ONNX files' bytes past which the export does not compile the model


def files_bytes(out_dir: Path, files: dict[str, str]) -> int:
    return sum((out_dir / name).stat().st_size for name in files.values())


def compile_probe(size: int) -> tuple[bool, str]:
    """(whether the export compiles and runs the file once, the rule in words for the manifest)."""
    if size <= PROBE_LIMIT_BYTES:
        return True, "read_model, compile_model and one inference on the example inputs, at export"
    return False, (f"read_model only, at export: the ONNX files' {size / 2**30:.2f} GiB are past "
                   f"{PROBE_LIMIT_BYTES >> 20} MiB, where compiling in the export worker would hold the CPU "
                   "plugin's copy of the weights and the mapped data file beside the target's (3.1x the weights "
                   "at 1 B); the runner's compile_model at load is the first compile")
