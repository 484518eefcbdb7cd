"""IREE's native consumer: the iree-base-runtime wheel's own tools (iree-run-module, iree-benchmark-module), no
program of ours. The section is argv for those tools, recomputed from the manifest before any run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from multiexport.sdk import (
    INPUT_DIR,
    NATIVE_SCHEMA,
    OUTPUT_DIR,
    ArtifactError,
    Call,
    NativeBuildError,
    NativeConsumer,
    NoNativeSection,
    Program,
    Request,
    RunError,
    UsageError,
    leaf_entry,
    leaf_message,
    npy_describes,
    package_dir,
    symbolic_names,
)

from .facts import IreeFacts

CONSUMER = "iree_tools"  # the section's consumer id (manifest.schema.json)
IREE_ELEMENT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16", "int32": "i32",
                "int64": "i64", "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
                "bfloat16": "bf16"}
# The IREE native tools by role: the only programs an IREE section may name (binaries of the
# iree-base-runtime wheel, found by multiexport in iree/_runtime_libs/).
IREE_TOOLS = {"run": "iree-run-module", "benchmark": "iree-benchmark-module"}
BENCHMARK_FILE = "benchmark.json"  # iree-benchmark-module's figures, in the outputs directory


def iree_section(args: Sequence[tuple[int, Any]], outputs: Sequence[Any], *, driver: str, module: str,
                 function: str, parameters: str | None = None) -> dict[str, Any]:
    """The section of an IREE artifact: argv for IREE's own native tools (no program of ours).

    args: (manifest input index, leaf) of the module's arguments in order. parameters: the
    `--parameters=` value for lifted weights (`model=weights.safetensors`). The tools are the
    iree-base-runtime wheel's binaries (`iree/_runtime_libs/`); those on PATH are Python wrappers.
    """
    entries = [leaf_entry(leaf, i, "input") for i, leaf in args]
    results = [leaf_entry(leaf, j, "output") for j, leaf in enumerate(outputs)]
    for role, entry in [*(("Input", e) for e in entries), *(("Output", e) for e in results)]:
        if not npy_describes(entry["dtype"]):
            # IREE's tools read and write no .npy of bfloat16 / float8 (numpy writes them as opaque bytes), but
            # take raw bytes with the shape and element type in the flag: possible only for a static shape.
            if entry["dtype"] not in IREE_ELEMENT or not all(isinstance(d, int) for d in entry["shape"]):
                raise NoNativeSection(
                    f"{role} '{entry['leaf']}' | {entry['dtype']} of shape {entry['shape']}: IREE's tools read no .npy "
                    "of it and take raw bytes only for a static shape of " + ", ".join(IREE_ELEMENT))
            entry.update(file=entry["file"].replace(".npy", ".bin"), encoding="raw")
        elif role == "Input" and entry["shape"] == [] and entry["dtype"] in IREE_ELEMENT:
            # iree-run-module reads a 0-d .npy as shape [1] (measured, IREE 3.13): a scalar goes in as raw bytes.
            entry.update(file=entry["file"].replace(".npy", ".bin"), encoding="raw")
    common = [f"--device={driver}", *([f"--parameters={parameters}"] if parameters else []),
              f"--module={module}", f"--function={function}",
              *[f"--input={''.join(f'{d}x' for d in e['shape'])}{IREE_ELEMENT[e['dtype']]}=@{INPUT_DIR}/{e['file']}"
                if e.get("encoding") == "raw" else f"--input=@{INPUT_DIR}/{e['file']}" for e in entries]]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMER,
        "tools": dict(IREE_TOOLS),
        "tool_location": "iree-base-runtime wheel: site-packages/iree/_runtime_libs/ (native binaries)",
        "mkdir": [OUTPUT_DIR],
        "run_args": common + [f"--output=@{OUTPUT_DIR}/{e['file']}" for e in results],
        "benchmark_args": common + ["--benchmark_format=json", "--benchmark_min_time=1x",
                                    "--benchmark_report_aggregates_only=false"],
        "args": entries,
        "results": results,
        "symbolic_dims": symbolic_names([leaf for _, leaf in args]),
    }


def check_iree_tools(native: Mapping[str, Any], directory) -> None:
    """Refuse an IREE section whose `tools` are not exactly IREE_TOOLS: the field is data that documents
    the consumer, never a program path (an absolute path, or one leaving the wheel's tools directory,
    would run whatever the artifact's author chose). One ArtifactError line names the field."""
    tools = native.get("tools")
    if not isinstance(tools, dict):
        raise ArtifactError(f"Artifact '{directory}' | manifest field native.tools is {type(tools).__name__}, "
                            f"expected {IREE_TOOLS}")
    for key in sorted(set(tools) | set(IREE_TOOLS)):
        if tools.get(key) != IREE_TOOLS.get(key):
            raise ArtifactError(
                f"Artifact '{directory}' | manifest field native.tools.{ascii(key)[1:-1][:40]} is "
                f"{ascii(tools.get(key))[:120]}, expected {IREE_TOOLS.get(key)!r}: multiexport runs only the "
                "iree-base-runtime wheel's own tools, found by itself; an artifact never names the program that runs it")


def iree_tool(name: str) -> Path:
    """IREE's native tool from the iree-base-runtime wheel (the one on PATH is a Python wrapper)."""
    libs = package_dir("iree._runtime_libs")
    if libs is None or not (libs / name).is_file():
        raise NativeBuildError(f"Native tool '{name}' | not found, expected it in the iree-base-runtime wheel's "
                               "iree/_runtime_libs/: pip install 'multiexport[iree]'")
    return libs / name


def _paths(args: list[str], inputs_dir: str, outputs_dir: str) -> list[str]:
    """The section's argv with inputs/ and outputs/ pointed at the given directories."""
    out = []
    for a in args:
        if a.startswith(f"--input=@{INPUT_DIR}/"):
            a = f"--input=@{inputs_dir}/" + a[len(f"--input=@{INPUT_DIR}/"):]
        elif a.startswith("--input=") and f"=@{INPUT_DIR}/" in a:  # a raw one, `--input=i32=@inputs/input1.bin`:
            # its file must move too, or a 0-d leaf would be read from the artifact's example inputs
            head, _, tail = a.partition(f"=@{INPUT_DIR}/")
            a = f"{head}=@{inputs_dir}/{tail}"
        elif a.startswith(f"--output=@{OUTPUT_DIR}/"):
            a = f"--output=@{outputs_dir}/" + a[len(f"--output=@{OUTPUT_DIR}/"):]
        out.append(a)
    return out


@dataclass(frozen=True)
class IreeConsumer(NativeConsumer):
    """iree-run-module for outputs, iree-benchmark-module for timings (one call per repetition, its JSON in
    outputs/benchmark.json); neither writes outputs/ itself nor names a program the artifact chose."""

    consumer: str = CONSUMER
    program: str = "iree"
    builds: bool = False
    mkdir_outputs: bool = True

    def check_fields(self, native: Mapping[str, Any], directory: Path) -> None:
        check_iree_tools(native, directory)

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        by_name = {leaf.name: (i, leaf) for i, leaf in enumerate(manifest.inputs)}
        args = [by_name[a["leaf"]] for a in native["args"]]
        driver = next((a.split("=", 1)[1] for a in native.get("run_args", []) if a.startswith("--device=")),
                      "local-task")
        if driver not in ("local-task", "local-sync", "cuda"):
            raise ArtifactError(f"Artifact manifest | native IREE driver {driver!r}, expected local-task, local-sync "
                                "or cuda")
        weights = manifest.files.get("weights")
        return iree_section(args, manifest.outputs, driver=driver, module=manifest.files.get("module", ""),
                            function=IreeFacts.from_json(manifest.format, "Artifact manifest").function,
                            parameters=f"model={weights}" if weights else None)

    def check(self, manifest: Any, native: Mapping[str, Any], directory: Path) -> None:
        expected = self.expected(manifest, native)
        for key in ("run_args", "benchmark_args"):
            if native.get(key) != expected[key]:
                raise ArtifactError(f"Artifact '{directory}' | native.{key} differs from what the manifest's module, "
                                    "weights and leaves give: refusing to run a command the export did not write")

    def check_entries(self, manifest: Any, native: Mapping[str, Any]) -> None:
        # IREE's own tools take bfloat16 / float8 as raw bytes only ("encoding": "raw"), which an older artifact
        # may lack.
        for kind, entries in (("Input", native["args"]), ("Output", native["results"])):
            for entry in entries:
                if entry.get("kind") == "leaf" and entry.get("encoding") != "raw" and not npy_describes(entry["dtype"]):
                    raise RunError(leaf_message(kind, entry["leaf"], entry["dtype"], "a dtype .npy files describe "
                                                "(numpy writes it as opaque bytes, which IREE's tools refuse)"),
                                   category="unsupported-dtype")

    def command(self, manifest: Any, native: Mapping[str, Any], call: Call, program: Path | None
                ) -> tuple[list[str], dict[str, str]]:
        pinned = [f"--task_topology_max_group_count={call.threads}"] if call.threads else []
        if call.iters:
            # The figures go to a file: thousands of repetitions print more JSON than a pipe's tail keeps.
            return [str(iree_tool(IREE_TOOLS["benchmark"])), *pinned,
                    *_paths(native["benchmark_args"], call.inputs_dir, call.outputs_dir),
                    f"--benchmark_repetitions={call.iters}", f"--benchmark_out={call.outputs_dir}/{BENCHMARK_FILE}",
                    "--benchmark_out_format=json"], {}
        return [str(iree_tool(IREE_TOOLS["run"])), *pinned,
                *_paths(native["run_args"], call.inputs_dir, call.outputs_dir)], {}

    def timed(self, argv: list[str], times: Path) -> list[str]:
        return argv

    def read_timing(self, stdout: str, outputs: Path, times: Path) -> tuple[dict[str, Any], np.ndarray]:
        """iree-benchmark-module's per-repetition rows, from the JSON it wrote to outputs/benchmark.json."""
        import json

        text = (outputs / BENCHMARK_FILE).read_text() if (outputs / BENCHMARK_FILE).is_file() else ""
        try:
            rows = [r for r in json.loads(text)["benchmarks"] if r.get("run_type") == "iteration"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise RunError(f"Native program | got unreadable timing output ({exc}), expected JSON") from exc
        if not rows:
            raise RunError("Native program 'iree-benchmark-module' | reported no iterations")
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
        in_order = [r["real_time"] * scale[r["time_unit"]] for r in rows]
        times_ms = sorted(in_order)
        n = len(times_ms)
        return ({"consumer": "iree-benchmark-module", "calls": n, "min_ms": times_ms[0],
                 "median_ms": (times_ms[(n - 1) // 2] + times_ms[n // 2]) / 2,
                 "p90_ms": times_ms[int(0.9 * (n - 1) + 0.5)], "max_ms": times_ms[-1], "mean_ms": sum(times_ms) / n,
                 "statistic": "wall time of single calls (--benchmark_min_time=1x), measured inside the tool"},
                np.rint(np.asarray(in_order) * 1e6).astype(np.int64))

    def outputs_after_timing(self) -> bool:
        return True  # the benchmark tool writes no outputs: run once for them

    def bundle_programs(self, request: Request) -> list[Program]:

        if any(a == "--device=cuda" for a in request.native.get("run_args", [])):
            raise UsageError("IREE driver 'cuda' | cannot be bundled yet, expected local-task or local-sync: the "
                             "bundle is proven by running it here on the CPU")
        tools = [iree_tool(request.native["tools"]["run"]), iree_tool(request.native["tools"]["benchmark"])]
        return [Program(t, t) for t in tools]

    def bundle_argv(self, request: Request) -> list[str]:
        return list(request.native["run_args"])
