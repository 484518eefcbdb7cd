"""Run an artifact in its native consumer: named inputs in, named outputs out, no Python in the program.

`run(dir, feed)` checks the feed against the manifest, writes each leaf argument the `"native"` section
names as a .npy file, runs the consumer through the one supervisor with an environment holding only
what `print_command` prints (so the two cannot drift apart), and reads the outputs back by leaf name.
With `iters`, the program times that many calls itself and `run` returns its figures too.

Consumers: xla -> pjrt_run (PJRT C API), savedmodel -> tf_run (TF C API), openvino -> ov_run (OpenVINO C
API), onnx -> ort_run (ONNX Runtime C API), litert -> lite_run (LiteRT C API), iree -> the iree-base-runtime
wheel's iree-run-module / iree-benchmark-module.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..dtypes import npy_storable
from ..errors import ArtifactError, InputError, RunError, leaf_message
from ..exporting.feed import check_feed
from ..exporting.manifest import Manifest
from ..exporting.native_section import (
    INPUT_DIR,
    IREE_TOOLS,
    OUTPUT_DIR,
    check_section,
    iree_section,
    npy_describes,
    onnx_section,
    openvino_section,
)
from ..files.temporary import make_temporary
from ..system.process import run_command
from .build import NativeBuildError, build, find_pjrt_plugin, package_dir, plugin_environment

PROGRAM_FOR = {"xla": "pjrt_run", "savedmodel": "tf_run", "iree": "iree", "openvino": "ov_run", "onnx": "ort_run",
               "litert": "lite_run"}
_MESSAGE_LIMIT = 4000
BENCHMARK_FILE = "benchmark.json"  # iree-benchmark-module's figures, in the outputs directory
TIMES_FILE = "times.npy"  # our programs' --times, in the run's work directory


@dataclass(frozen=True)
class NativeRun:
    """One run of a native consumer.

    outputs: output leaf name -> array, as the program wrote them.
    timing: the program's own per-call figures when timed (min_ms, median_ms, p90_ms, max_ms, mean_ms,
        calls), else None.
    command: the argv that ran (absolute paths), in the artifact directory.
    samples_ns: when timed, every timed call's own wall time in call order (int64 ns), which the caller pools
        into the same statistic as the Python runner's; else None.
    """

    outputs: dict[str, np.ndarray]
    timing: dict[str, Any] | None
    command: list[str]
    samples_ns: np.ndarray | None = None


def consumer_of(backend: str) -> str | None:
    """The native program of a backend, or None when it has none."""
    return PROGRAM_FOR.get(backend)


def iree_tool(name: str) -> Path:
    """IREE's native tool from the iree-base-runtime wheel (the one on PATH is a Python wrapper)."""
    libs = package_dir("iree._runtime_libs")
    if libs is None or not (libs / name).is_file():
        raise NativeBuildError(f"Native tool '{name}' | not found, expected it in the iree-base-runtime wheel's "
                               "iree/_runtime_libs/: pip install 'multiexport[iree]'")
    return libs / name


def _checked(directory: Path, trust_artifact: bool) -> tuple[Manifest, dict[str, Any]]:
    """The manifest and its native section, validated; and, unless trusted, the artifact through the trust
    gate every loading path passes (`Backend.check_untrusted`): the TF C API runs a SavedModel's graph
    as `tf.saved_model.load` does, file-writing ops included."""
    from ..exporting.registry import get_backend

    manifest = Manifest.read(directory)
    if consumer_of(manifest.backend) is None:
        raise ArtifactError(f"Artifact '{directory}' | backend '{manifest.backend}' has no native consumer here, "
                            f"expected one of {', '.join(PROGRAM_FOR)}")
    native = check_section(manifest, directory)
    if not trust_artifact:
        get_backend(manifest.backend).check_untrusted(directory, manifest)
    if manifest.backend == "iree":
        expected = _iree_expected(manifest, native)
        for key in ("run_args", "benchmark_args"):
            if native.get(key) != expected[key]:
                raise ArtifactError(f"Artifact '{directory}' | native.{key} differs from what the manifest's module, "
                                    "weights and leaves give: refusing to run a command the export did not write")
    # the pipeline's record, not the consumer's binding (absent from artifacts written before it existed)
    written = {"inputs_written": native["inputs_written"]} if "inputs_written" in native else {}
    if manifest.backend == "openvino" and native != {**_openvino_expected(manifest), **written}:
        raise ArtifactError(f"Artifact '{directory}' | native section differs from what the manifest's model, ports "
                            "and leaves give: refusing to run a configuration the export did not write")
    if manifest.backend == "onnx" and native != {**_onnx_expected(manifest), **written}:
        raise ArtifactError(f"Artifact '{directory}' | native section differs from what the manifest's model, input "
                            "and output names and leaves give: refusing to run a session the export did not write")
    if manifest.backend == "litert" and native != {**_litert_expected(manifest), **written}:
        raise ArtifactError(f"Artifact '{directory}' | native section differs from what the manifest's model, signature "
                            "names and leaves give: refusing to run a binding the export did not write")
    return manifest, native


check_artifact = _checked  # public for the bundler (bundle.py), which passes the same gate before copying anything


def _litert_expected(manifest: Manifest) -> dict[str, Any]:
    from ..exporting.native_section import litert_section

    return litert_section(manifest.inputs, [_port(leaf.param) for leaf in manifest.inputs], manifest.outputs,
                          [_port(leaf.param) for leaf in manifest.outputs], model=manifest.files.get("model", ""))


def _openvino_expected(manifest: Manifest) -> dict[str, Any]:
    from ..exporting.native_section import OPENVINO_PROPERTIES

    return openvino_section(manifest.inputs, [_port(leaf.param) for leaf in manifest.inputs], manifest.outputs,
                            [_port(leaf.param) for leaf in manifest.outputs], model=manifest.files.get("model", ""),
                            properties=OPENVINO_PROPERTIES)


def _onnx_expected(manifest: Manifest) -> dict[str, Any]:
    from ..exporting.native_section import ONNX_SESSION_OPTIONS

    return onnx_section(manifest.inputs, [_port(leaf.param) for leaf in manifest.inputs], manifest.outputs,
                        [_port(leaf.param) for leaf in manifest.outputs], model=manifest.files.get("model", ""),
                        session_options=ONNX_SESSION_OPTIONS)


def _port(param: int | str | None) -> str | None:
    return None if param is None else str(param)


def _iree_expected(manifest: Manifest, native: Mapping[str, Any]) -> dict[str, Any]:
    by_name = {leaf.name: (i, leaf) for i, leaf in enumerate(manifest.inputs)}
    args = [by_name[a["leaf"]] for a in native["args"]]
    driver = next((a.split("=", 1)[1] for a in native.get("run_args", []) if a.startswith("--device=")), "local-task")
    if driver not in ("local-task", "local-sync", "cuda"):
        raise ArtifactError(f"Artifact manifest | native IREE driver {driver!r}, expected local-task, local-sync or cuda")
    weights = manifest.files.get("weights")
    return iree_section(args, manifest.outputs, driver=driver, module=manifest.files.get("module", ""),
                        function=str(manifest.format.get("function", "main")),
                        parameters=f"model={weights}" if weights else None)


def command(artifact_dir: str | os.PathLike, *, inputs_dir: str = INPUT_DIR, outputs_dir: str = OUTPUT_DIR,
            iters: int = 0, warmup: int = 0, threads: int | None = None,
            plugin: str | os.PathLike | None = None, device: str = "cpu",
            trust_artifact: bool = False) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the native run of `artifact_dir`, run with the artifact as working directory.

    inputs_dir / outputs_dir: where the .npy files are and go, relative to the artifact or absolute.
    iters: time that many calls after `warmup` untimed ones (IREE: iree-benchmark-module, one call per
    repetition). threads: the runtime's intra-op threads (PJRT_NPROC for XLA's CPU client,
    TF_NUM_INTRAOP_THREADS for TF, --task_topology_max_group_count for IREE, INFERENCE_NUM_THREADS for
    OpenVINO, intra_op_num_threads for ONNX Runtime, XNNPACK's num_threads for LiteRT), as compare gives every runtime.
    device: for XLA without `plugin`, which installed PJRT plugin runs it ("cpu", or "gpu": jax's CUDA plugin).
    trust_artifact: skip the trust gate (`Backend.check_untrusted`); the program itself is always multiexport's.
    """
    directory = Path(artifact_dir).resolve()
    manifest, native = _checked(directory, trust_artifact)
    env: dict[str, str] = {}
    if manifest.backend == "iree":
        pinned = [f"--task_topology_max_group_count={threads}"] if threads else []
        if iters:
            # The figures go to a file: thousands of repetitions print more JSON than a pipe's tail keeps.
            return [str(iree_tool(IREE_TOOLS["benchmark"])), *pinned,
                    *_iree_paths(native["benchmark_args"], inputs_dir, outputs_dir),
                    f"--benchmark_repetitions={iters}", f"--benchmark_out={outputs_dir}/{BENCHMARK_FILE}",
                    "--benchmark_out_format=json"], env
        return [str(iree_tool(IREE_TOOLS["run"])), *pinned,
                *_iree_paths(native["run_args"], inputs_dir, outputs_dir)], env
    argv = [str(build(PROGRAM_FOR[manifest.backend]))]
    if manifest.backend == "xla":
        found = find_pjrt_plugin(plugin, device)
        argv += ["--plugin", str(found)]
        env.update(plugin_environment(found))
        if threads:
            env["PJRT_NPROC"] = str(threads)
    elif manifest.backend in ("openvino", "onnx", "litert"):
        if threads:
            argv += ["--threads", str(threads)]
    else:
        env["TF_CPP_MIN_LOG_LEVEL"] = "1"  # read when the library loads: the program cannot set it itself
        if threads:
            env.update(TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS="1")
    argv += ["--inputs", inputs_dir, "--outputs", outputs_dir]
    if iters:
        argv += ["--warmup", str(warmup), "--iters", str(iters)]
    return argv, env


def _iree_paths(args: list[str], inputs_dir: str, outputs_dir: str) -> list[str]:
    """The section's argv with inputs/ and outputs/ pointed at the given directories."""
    out = []
    for a in args:
        if a.startswith(f"--input=@{INPUT_DIR}/"):
            a = f"--input=@{inputs_dir}/" + a[len(f"--input=@{INPUT_DIR}/"):]
        elif a.startswith(f"--output=@{OUTPUT_DIR}/"):
            a = f"--output=@{outputs_dir}/" + a[len(f"--output=@{OUTPUT_DIR}/"):]
        out.append(a)
    return out


def print_command(artifact_dir: str | os.PathLike, *, inputs_dir: str = INPUT_DIR, outputs_dir: str = OUTPUT_DIR,
                  **kwargs: Any) -> str:
    """One shell line that runs the artifact natively without Python: `cd DIR && mkdir -p outputs && env -i ...`.

    By default it reads the example inputs the export wrote to the artifact's inputs/ (file names:
    native.args[].file) and writes outputs/ there.
    """
    directory = Path(artifact_dir).resolve()
    argv, env = command(directory, inputs_dir=inputs_dir, outputs_dir=outputs_dir, **kwargs)
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"cd {shlex.quote(str(directory))} && mkdir -p {shlex.quote(outputs_dir)} && "
            f"env -i {assignments + ' ' if assignments else ''}{shlex.join(argv)}")


def run(artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, iters: int = 0, warmup: int = 0,
        threads: int | None = None, plugin: str | os.PathLike | None = None, device: str = "cpu",
        timeout: float = 600, trust_artifact: bool = False) -> NativeRun:
    """Run the artifact natively on `feed` (leaf name -> array), checked against the manifest first.

    A symbolic XLA artifact runs the refined static module of the sizes the feed binds; the program
    refuses sizes the artifact has no module for, naming those it has.
    """
    directory = Path(artifact_dir).resolve()
    manifest, native = _checked(directory, trust_artifact)
    arrays, _ = check_feed(manifest.inputs, feed)
    # Our programs read bfloat16 / float8 .npy files as opaque bytes (V2, V1), dtype taken from the manifest;
    # IREE's own tools take them as raw bytes only ("encoding": "raw"), which an older artifact may lack.
    for kind, entries in (("Input", native["args"]), ("Output", native["results"])):
        for entry in entries:
            if manifest.backend == "iree" and entry.get("kind") == "leaf" and entry.get("encoding") != "raw" \
                    and not npy_describes(entry["dtype"]):
                raise RunError(leaf_message(kind, entry["leaf"], entry["dtype"], "a dtype .npy files describe "
                                            "(numpy writes it as opaque bytes, which IREE's tools refuse)"),
                               category="unsupported-dtype")
    work = make_temporary("native")  # marked: removed by the next command if this process is killed outright
    try:
        work_in, work_out = work / INPUT_DIR, work / OUTPUT_DIR
        work_in.mkdir()
        work_out.mkdir()  # iree-run-module does not create it
        for entry in native["args"]:
            if entry.get("kind") != "leaf":
                continue
            value = np.asarray(arrays[entry["index"]], order="C")  # 0-d stays 0-d
            if entry.get("encoding") == "raw":
                value.tofile(work_in / entry["file"])
            else:
                np.save(work_in / entry["file"], npy_storable(value), allow_pickle=False)
        # checked above, just now: the artifact is not read through the gate twice
        argv, env = command(directory, inputs_dir=str(work_in), outputs_dir=str(work_out), iters=iters,
                            warmup=warmup, threads=threads, plugin=plugin, device=device, trust_artifact=True)
        times = work / TIMES_FILE  # our programs' --times: every timed call, in call order
        if iters and manifest.backend != "iree":
            argv = [*argv, "--times", str(times)]
        stdout = _run(argv, env, directory, timeout)
        if iters and manifest.backend == "iree":
            stdout = (work_out / BENCHMARK_FILE).read_text() if (work_out / BENCHMARK_FILE).is_file() else ""
        timing, samples = _timing(manifest.backend, stdout, times) if iters else (None, None)
        if manifest.backend == "iree" and iters:  # the benchmark tool writes no outputs: run once for them
            run_argv, _ = command(directory, inputs_dir=str(work_in), outputs_dir=str(work_out), threads=threads,
                                  trust_artifact=True)
            _run(run_argv, env, directory, timeout)
        outputs = {}
        for entry in native["results"]:
            if entry.get("kind") == "leaf":
                outputs[entry["leaf"]] = read_output(work_out / entry["file"], entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return NativeRun(outputs, timing, argv, samples)


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    name = Path(argv[0]).name
    outcome = run_command(argv, timeout=timeout, cwd=cwd, env=env)  # env: nothing inherited, as `env -i`
    if outcome.timed_out:
        raise RunError(f"Native program '{name}' | ran past {timeout:g} s, expected it to finish", category="timeout")
    if outcome.start_error:
        raise RunError(f"Native program '{name}' | {outcome.how_it_ended()}")
    if outcome.returncode != 0:
        said = " ".join((outcome.stderr.strip() or outcome.stdout.strip()).split())[-_MESSAGE_LIMIT:]
        category = "crashed" if outcome.signal else "run-failed"
        raise RunError(f"Native program '{name}' | {outcome.how_it_ended()}: {said}", category=category)
    return outcome.stdout


def read_output(path: Path, entry: Mapping[str, Any]) -> np.ndarray:
    """One file a native program wrote, as the array the `native.results[]` entry describes: a .npy (bfloat16 /
    float8 as opaque bytes, viewed as the manifest's dtype) or raw bytes of a static shape (`"encoding": "raw"`)."""
    from ..dtypes import parse_dtype

    if not path.is_file():
        raise RunError(f"Output '{entry['leaf']}' | the native program wrote no {path.name}")
    want = parse_dtype(entry["dtype"])
    if entry.get("encoding") == "raw":  # bytes alone, of the static shape the section gives
        count = int(np.prod(entry["shape"], dtype=np.int64))
        if path.stat().st_size != count * want.itemsize:
            raise RunError(f"Output '{entry['leaf']}' | {path.name} holds {path.stat().st_size} bytes, expected "
                           f"{count * want.itemsize} ({entry['shape']} of {entry['dtype']})")
        return np.fromfile(path, dtype=want).reshape(entry["shape"])
    value = np.load(path, allow_pickle=False)
    if value.dtype.kind == "V" and not npy_describes(entry["dtype"]):
        if value.dtype.itemsize == want.itemsize:  # the opaque bytes a program wrote for bfloat16 / float8
            value = value.view(want)
    if value.dtype.name != entry["dtype"]:
        raise RunError(leaf_message("Output", entry["leaf"], value.dtype.name, entry["dtype"]),
                       category="unsupported-dtype")
    return value


def _timing(backend: str, stdout: str, times: Path) -> tuple[dict[str, Any], np.ndarray]:
    """The program's own figures and every timed call's time (ns, call order): our programs' --times file,
    iree-benchmark-module's per-repetition rows."""
    try:
        if backend != "iree":
            figures = json.loads(stdout.strip().splitlines()[-1])
            figures.setdefault("statistic", "wall time of each call, measured inside the program")
            samples = np.load(times, allow_pickle=False) if times.is_file() else None
            if samples is None or samples.dtype != np.int64 or samples.ndim != 1 or len(samples) != figures["calls"]:
                raise RunError(f"Native program | wrote no per-call times to {times.name} (--times), expected "
                               f"{figures['calls']} of them")
            return figures, samples
        rows = [r for r in json.loads(stdout)["benchmarks"] if r.get("run_type") == "iteration"]
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


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A named input file for `multiexport native --inputs`, read with the hardened reader."""
    from ..files.npz import load_npz

    try:
        return load_npz(Path(path), "Inputs")
    except FileNotFoundError:
        raise InputError(f"Inputs '{path}' | no such file, expected a .npz of leaf name -> array") from None
