"""IREE's native tools on an artifact: `iree-run-module` and `iree-benchmark-module`, no Python in the loop.

The binaries are the iree-base-runtime wheel's own (in `iree/_runtime_libs/`: the commands of the same
name on PATH are Python wrappers around them). File names never come from leaf names: module argument
k is `inputs/arg{k}.npy`, result k is `outputs/result{k}.npy`, and the manifest maps both to leaves.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from multiexport.dtypes import parse_dtype
from multiexport.errors import ArtifactError, RunError, leaf_message
from multiexport.export import Manifest
from multiexport.export.feed import check_feed
from multiexport.run.supervisor import run_command

from .fixups import FUNCTION, PARAMETER_SCOPE

MODULE = "model.vmfb"
INPUT_DIR, OUTPUT_DIR = "inputs", "outputs"
RUN_TOOL, BENCH_TOOL = "iree-run-module", "iree-benchmark-module"
DRIVERS = {"llvm-cpu": "local-task", "cuda": "cuda"}  # IREE target -> runtime HAL driver
DEVICE_TARGET = {"cpu": "llvm-cpu", "gpu": "cuda"}  # Runner device -> IREE target
_MESSAGE_LIMIT = 3000


def input_file(k: int) -> str:
    return f"{INPUT_DIR}/arg{k}.npy"


def output_file(k: int) -> str:
    return f"{OUTPUT_DIR}/result{k}.npy"


def find_native_tool(name: str, search_path: str | None = None) -> str:
    """Path of IREE's native tool `name`.

    search_path: directories to look in (os.pathsep-separated). Default: the iree-base-runtime wheel's
    own binaries (the runtime version the artifact was compiled for), this Python's bin directory, PATH.
    """
    dirs = search_path.split(os.pathsep) if search_path is not None else _default_tool_dirs()
    for directory in dirs:
        candidate = Path(directory or ".") / name
        if candidate.is_file() and os.access(candidate, os.X_OK) and not _is_script(candidate):
            return str(candidate)
    raise RunError(
        f"Native tool '{name}' | got nothing in {os.pathsep.join(dirs) or '(no directories)'}, expected the "
        f"{name} binary of iree-base-runtime (pip install 'multiexport[iree]') or one on PATH", category="unavailable")


def _is_script(path: Path) -> bool:
    """A Python wrapper script (what pip puts on PATH) rather than the native binary."""
    with open(path, "rb") as f:
        return f.read(2) == b"#!"


def _default_tool_dirs() -> list[str]:
    dirs = []
    try:
        spec = importlib.util.find_spec("iree._runtime_libs")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs += list(spec.submodule_search_locations)
    dirs.append(str(Path(sys.executable).parent))
    return dirs + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]


def native_command(n_args: int, n_results: int, target: str, tool: str = RUN_TOOL, module: str = MODULE,
                   parameters: str | None = None, threads: int | None = None) -> list[str]:
    """The iree-run-module command line for a module of `n_args` arguments and `n_results` results.

    parameters: the file holding the module's lifted weights, if any (the IREE parameter scope "model").
    threads: the local-task driver's worker count (`--task_topology_max_group_count`).
    """
    return [
        tool, f"--device={DRIVERS[target]}",
        *([f"--task_topology_max_group_count={threads}"] if threads and target == "llvm-cpu" else []),
        *([f"--parameters={PARAMETER_SCOPE}={parameters}"] if parameters else []),
        f"--module={module}", f"--function={FUNCTION}",
        *[f"--input=@{input_file(k)}" for k in range(n_args)],
        *[f"--output=@{output_file(k)}" for k in range(n_results)],
    ]


def run_native(artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, device: str = "cpu",
               search_path: str | None = None, timeout: float = 600, threads: int | None = None) -> dict[str, np.ndarray]:
    """Run the artifact with the native `iree-run-module`: named inputs in, named outputs out.

    The feed is checked against the manifest first (names, dtypes, shapes, symbolic sizes), inputs are
    written as .npy in module argument order, and the tool gets nothing but the artifact's .vmfb.
    """
    directory, manifest, arrays = _native_inputs(artifact_dir, feed)
    tool = find_native_tool(RUN_TOOL, search_path)
    with tempfile.TemporaryDirectory(prefix="multiexport-iree-") as work:
        command = _write_and_command(Path(work), directory, manifest, arrays, device, tool, threads)
        (Path(work) / OUTPUT_DIR).mkdir()
        _run_tool(command, Path(work), timeout)
        named = {}
        for k, leaf in enumerate(manifest.outputs):
            value = np.load(Path(work) / output_file(k), allow_pickle=False)
            if value.dtype.name != leaf.dtype:
                raise RunError(leaf_message("Output", leaf.name, value.dtype.name, leaf.dtype))
            named[leaf.name] = value
    return named


def native_benchmark(
    artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, device: str = "cpu", repetitions: int = 5,
    min_time_s: float = 0.5, single_calls: bool = False, search_path: str | None = None, timeout: float = 600,
    threads: int | None = None,
) -> dict[str, Any]:
    """Native latency from `iree-benchmark-module` on the artifact and feed.

    Default: each of `repetitions` runs calls for `min_time_s` and Google Benchmark reports their mean
    wall time per call; `median_ms` is the median of those means. single_calls: each repetition is one
    call (`--benchmark_min_time=1x`), so `real_time_ms` is a per-call sample and `median_ms` its p50,
    comparable with a per-call p50 measured in Python.
    """
    directory, manifest, arrays = _native_inputs(artifact_dir, feed)
    tool = find_native_tool(BENCH_TOOL, search_path)
    with tempfile.TemporaryDirectory(prefix="multiexport-iree-") as work:
        command = _write_and_command(Path(work), directory, manifest, arrays, device, tool, threads)
        command = [c for c in command if not c.startswith("--output=")] + [
            "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
            "--benchmark_min_time=" + ("1x" if single_calls else f"{min_time_s}s"),
            "--benchmark_report_aggregates_only=false"]
        stdout = _run_tool(command, Path(work), timeout)
    try:
        rows = [r for r in json.loads(stdout)["benchmarks"] if r.get("run_type") == "iteration"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RunError(f"Native tool '{BENCH_TOOL}' | got unreadable output ({exc}), expected Google Benchmark JSON") from exc
    if not rows:
        raise RunError(f"Native tool '{BENCH_TOOL}' | reported no iterations for {FUNCTION}")
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    real = [r["real_time"] * scale[r["time_unit"]] for r in rows]
    return {
        "tool": command[0], "command": command, "benchmark": rows[0]["name"], "repetitions": len(rows),
        "iterations": [int(r["iterations"]) for r in rows], "real_time_ms": real,
        "cpu_time_ms": [r["cpu_time"] * scale[r["time_unit"]] for r in rows],
        "median_ms": statistics.median(real), "mean_ms": statistics.fmean(real), "min_ms": min(real),
        "statistic": ("wall time of single calls; median_ms is their p50" if single_calls else
                      "mean wall time per call within each repetition; median_ms is the median over repetitions"),
    }


def _native_inputs(artifact_dir, feed):
    directory = Path(artifact_dir).resolve()
    manifest = Manifest.read(directory)
    if manifest.backend != "iree":
        raise ArtifactError(f"Artifact '{artifact_dir}' | got a '{manifest.backend}' artifact, expected 'iree'")
    for kind, leaves in (("Input", [leaf for leaf in manifest.inputs if leaf.param is not None]), ("Output", manifest.outputs)):
        for leaf in leaves:
            if not npy_can_carry(leaf.dtype):
                raise RunError(leaf_message(
                    kind, leaf.name, leaf.dtype, "a dtype .npy files describe (numpy saves ml_dtypes' "
                    f"{leaf.dtype} as raw bytes, which {RUN_TOOL} refuses): use the Python runner"),
                    category="unsupported-dtype")
    arrays, _ = check_feed(manifest.inputs, feed)
    return directory, manifest, arrays


def npy_can_carry(dtype: str) -> bool:
    """Whether .npy describes `dtype` itself (bfloat16 and the float8s are written as opaque void)."""
    return not np.lib.format.dtype_to_descr(parse_dtype(dtype)).lstrip("<>|=").startswith("V")


def module_args(manifest: Manifest) -> list:
    """The manifest's input leaves the module takes, in argument order (`param` is the position)."""
    args = sorted((leaf for leaf in manifest.inputs if leaf.param is not None), key=lambda leaf: leaf.param)
    if [leaf.param for leaf in args] != list(range(len(args))):
        raise ArtifactError(f"Artifact manifest | IREE argument positions {[leaf.param for leaf in args]}, "
                            f"expected 0..{len(args) - 1}")
    return args


def _write_and_command(work: Path, directory: Path, manifest: Manifest, arrays, device: str, tool: str,
                       threads: int | None) -> list[str]:
    target = DEVICE_TARGET.get(device)
    if target not in manifest.format.get("target_backends", []):
        raise RunError(f"Artifact '{directory}' | compiled for {manifest.format.get('target_backends')}, "
                       f"expected {target} for device '{device}'", category="unsupported-platform")
    args = module_args(manifest)
    by_name = {leaf.name: a for leaf, a in zip(manifest.inputs, arrays)}
    (work / INPUT_DIR).mkdir()
    for k, leaf in enumerate(args):
        np.save(work / input_file(k), np.asarray(by_name[leaf.name], order="C"), allow_pickle=False)
    parameters = str(manifest.path(directory, "weights")) if "weights" in manifest.files else None
    return native_command(len(args), len(manifest.outputs), target, tool, str(manifest.path(directory, "module")),
                          parameters, threads)


def _run_tool(command: list[str], cwd: Path, timeout: float) -> str:
    name = Path(command[0]).name
    outcome = run_command(command, timeout=timeout, cwd=cwd)
    if outcome.timed_out:
        raise RunError(f"Native tool '{name}' | ran past {timeout:g} s, expected it to finish", category="timeout")
    if outcome.start_error:
        raise RunError(f"Native tool '{name}' | cannot start: {outcome.start_error}")
    if outcome.returncode != 0:
        said = (outcome.stderr.strip() or outcome.stdout.strip())[-_MESSAGE_LIMIT:]
        raise RunError(f"Native tool '{name}' | {outcome.how_it_ended()}: {said}")
    return outcome.stdout
