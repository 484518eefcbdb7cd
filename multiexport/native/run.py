"""Run an artifact in its native consumer: named inputs in, named outputs out, no Python in the program.

`run(dir, feed)` checks the feed against the manifest, writes each leaf argument the `"native"` section
names as a .npy file, runs the consumer through the one supervisor with an environment holding only
what `print_command` prints (so the two cannot drift apart), and reads the outputs back by leaf name.
With `iters`, the program times that many calls itself and `run` returns its figures too.

Which program runs, with which argv and environment, how its section is checked and its timings read: the
backend's `native_consumer()` (`contract.NativeConsumer`) says; this module names no format.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..dtypes import npy_storable, parse_dtype
from ..environment import tpu_presence
from ..errors import ArtifactError, InputError, RunError, UsageError, leaf_message
from ..exporting.feed import check_feed
from ..exporting.manifest import Manifest
from ..exporting.native_consumer import Call, NativeConsumer
from ..exporting.native_section import CONSUMERS, INPUT_DIR, OUTPUT_DIR, check_section, consumer_for, npy_describes
from ..exporting.options import check_run_device
from ..exporting.registry import get_backend
from ..exporting.static_runner import holds_models, model_at
from ..files.npz import load_npz
from ..files.temporary import make_temporary
from ..system.process import run_command
from .build import build

_MESSAGE_LIMIT = 4000
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
    """The native program of a backend (its consumer's `program`), or None when it has none."""
    found = consumer_for(backend)
    return None if found is None else found.program


def _checked(directory: Path, trust_artifact: bool) -> tuple[Manifest, dict[str, Any]]:
    """The manifest and its native section, validated and checked against what the manifest gives (the
    consumer's tamper check); and, unless trusted, the artifact through the trust gate every loading path passes
    (`Backend.check_untrusted`): the TF C API runs a SavedModel's graph as `tf.saved_model.load` does, file-writing
    ops included."""
    manifest, native, _ = _consumer_checked(directory, trust_artifact)
    return manifest, native


def size_model(directory: Path, feed: Mapping[str, Any] | None) -> Path:
    """The directory whose native section runs: the artifact itself, or, for an artifact holding one model per
    size (its converter could not keep the symbolic dims: no native section of its own), the model built for
    the sizes `feed` binds (None: the first model, the example's; RunError `size-unsupported` naming the sizes
    it holds when it has none for them). Each size's model is a complete artifact with its own native section,
    checked like any other."""
    manifest = Manifest.read(directory)
    if manifest.native is not None or not holds_models(manifest):
        return directory
    sizes = check_feed(manifest.inputs, feed)[1] if feed is not None else None
    return model_at(manifest, directory, sizes, manifest.backend)  # of this format, a model of one size


def _consumer_checked(directory: Path, trust_artifact: bool) -> tuple[Manifest, dict[str, Any], NativeConsumer]:
    manifest = Manifest.read(directory)
    consumer = consumer_for(manifest.backend)
    if consumer is None:
        raise ArtifactError(f"Artifact '{directory}' | backend '{manifest.backend}' has no native consumer here, "
                            f"expected one of {', '.join(CONSUMERS)}")
    native = check_section(manifest, directory)
    if not trust_artifact:
        get_backend(manifest.backend).check_untrusted(directory, manifest)
    consumer.check(manifest, native, directory)
    return manifest, native, consumer


check_artifact = _checked  # public for the bundler (bundle.py), which passes the same gate before copying anything


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
    device: for XLA without `plugin`, which installed PJRT plugin runs it ("cpu"; "gpu": jax's CUDA plugin; "tpu":
    libtpu; "auto": the TPU where this machine has one the consumer can use, else the CPU; `device_for`).
    trust_artifact: skip the trust gate (`Backend.check_untrusted`); the program itself is always multiexport's.
    An artifact holding one model per size gives the command of its first model's (the example's size).
    """
    directory = size_model(Path(artifact_dir).resolve(), None)
    manifest, native, consumer = _consumer_checked(directory, trust_artifact)
    lowered = [str(p).lower() for p in manifest.supports.get("platforms") or []]
    device = device_for(consumer, device, lowered)
    if plugin is None:  # a platform the module lacks is refused before any plugin is loaded
        check_run_device(manifest, device, f"Artifact '{directory}'")
    call = Call(inputs_dir, outputs_dir, iters, warmup, threads, None if plugin is None else str(plugin), device)
    return consumer.command(manifest, native, call, build(consumer.program) if consumer.builds else None)


def device_for(consumer: NativeConsumer, requested: str, lowered: Sequence[str] = ()) -> str:
    """The device `consumer` runs on: `requested`, which must be one of its devices, or for "auto" the TPU when
    this machine has one (seen without opening it; libtpu installed), the consumer runs there and the artifact was
    lowered for it (`lowered`: its platforms, empty when the manifest does not say), else the CPU."""

    if requested == "auto":
        here = tpu_presence()
        usable = "tpu" in consumer.devices and here.attached and here.libtpu is not None
        return "tpu" if usable and (not lowered or "tpu" in lowered) else "cpu"
    if requested not in consumer.devices:
        raise UsageError(f"Option '--device' | got '{requested}', expected one of {', '.join(consumer.devices)}: "
                         f"the native program '{consumer.program}' runs on those only")
    return requested


def print_command(artifact_dir: str | os.PathLike, *, inputs_dir: str = INPUT_DIR, outputs_dir: str = OUTPUT_DIR,
                  **kwargs: Any) -> str:
    """One shell line that runs the artifact natively without Python: `cd DIR && mkdir -p outputs && env -i ...`.

    By default it reads the example inputs the export wrote to the artifact's inputs/ (file names:
    native.args[].file) and writes outputs/ there. An artifact holding one model per size gives its first
    model's line (the example's size), in that model's directory.
    """
    directory = size_model(Path(artifact_dir).resolve(), None)
    argv, env = command(directory, inputs_dir=inputs_dir, outputs_dir=outputs_dir, **kwargs)
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (f"cd {shlex.quote(str(directory))} && mkdir -p {shlex.quote(outputs_dir)} && "
            f"env -i {assignments + ' ' if assignments else ''}{shlex.join(argv)}")


def run(artifact_dir: str | os.PathLike, feed: Mapping[str, Any], *, iters: int = 0, warmup: int = 0,
        threads: int | None = None, plugin: str | os.PathLike | None = None, device: str = "cpu",
        timeout: float = 600, trust_artifact: bool = False) -> NativeRun:
    """Run the artifact natively on `feed` (leaf name -> array), checked against the manifest first.

    A symbolic XLA artifact runs the refined static module of the sizes the feed binds; the program
    refuses sizes the artifact has no module for, naming those it has. An artifact holding one model per size
    (the static-size fallback) runs the model of the sizes the feed binds (`size_model`).
    """
    check_timeout(timeout)
    directory = size_model(Path(artifact_dir).resolve(), feed)
    manifest, native, consumer = _consumer_checked(directory, trust_artifact)
    arrays, _ = check_feed(manifest.inputs, feed)
    # Our programs read bfloat16 / float8 .npy files as opaque bytes (V2, V1), dtype taken from the manifest;
    # a consumer whose tool cannot refuses such leaves here.
    consumer.check_entries(manifest, native)
    work = make_temporary("native")  # marked: removed by the next command if this process is killed outright
    try:
        work_in, work_out = work / INPUT_DIR, work / OUTPUT_DIR
        work_in.mkdir()
        work_out.mkdir()  # not every consumer creates it
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
        if iters:
            argv = consumer.timed(argv, times)
        stdout = _run(argv, env, directory, timeout)
        timing, samples = consumer.read_timing(stdout, work_out, times) if iters else (None, None)
        if iters and consumer.outputs_after_timing():
            run_argv, _ = command(directory, inputs_dir=str(work_in), outputs_dir=str(work_out), threads=threads,
                                  plugin=plugin, device=device, trust_artifact=True)
            _run(run_argv, env, directory, timeout)
        outputs = {}
        for entry in native["results"]:
            if entry.get("kind") == "leaf":
                outputs[entry["leaf"]] = read_output(work_out / entry["file"], entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return NativeRun(outputs, timing, argv, samples)


def check_timeout(timeout: float) -> None:
    """Refuse a timeout that is not a finite number of seconds > 0 (one line, before any work)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        got = f"{timeout:g}" if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else repr(timeout)
        raise UsageError(f"Option '--timeout' | got {got}, expected seconds > 0")


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    name = Path(argv[0]).name
    outcome = run_command(argv, timeout=timeout, cwd=cwd, env=env)  # env: nothing inherited, as `env -i`
    if outcome.timed_out:  # run_command killed its whole session: nothing it started is left running
        raise RunError(f"Native program '{name}' | ran past {timeout:g} s and was stopped with everything it started, "
                       "expected it to finish (--timeout)", category="timeout")
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


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A named input file for `multiexport native --inputs`, read with the hardened reader."""

    try:
        return load_npz(Path(path), "Inputs")
    except FileNotFoundError:
        raise InputError(f"Inputs '{path}' | no such file, expected a .npz of leaf name -> array") from None
