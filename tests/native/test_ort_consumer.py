"""The ONNX Runtime C API consumer (csrc/ort_run.c) against `multiexport run`, bit for bit.

Each ONNX artifact is exported once; `multiexport run`'s outputs come from one fresh process
(tests.run_many, the user's path); ort_run runs each artifact from its directory and manifest alone,
through multiexport's own declaration of the C API (csrc/ort_api.h: no ORT header ships in any package
here). Both run the same ONNX Runtime build with the same session options (shown below from ORT's own
log of each session), so outputs must be identical. Cases: the shared registry's that ONNX takes
(bfloat16 has no ORT CPU kernels), a symbolic batch at two sizes, lifted weights in model.onnx.data,
64-bit leaves, dotted names, a 0-d input and output, twelve outputs; and a CNN.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from multiexport import examples
from multiexport.backends.onnx.native import find_onnxruntime
from multiexport.errors import ArtifactError, RunError
from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.native.build import NativeBuildError, build, recipe
from multiexport.native.run import command, run

from ..cases import case, feed_for
from ..conftest import REPO
from .test_consumers import _assert_same

CASES = ["seed", "mlp", "symbolic_batch", "lifted_weights", "float64", "dotted_keys", "scalar_0d", "many_outputs"]
EXTRA = ["cnn"]  # multiexport.examples targets beside the registry: convolutions (ORT's NCHWc layout path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every planned ONNX artifact, its feeds, and `multiexport run`'s outputs from a fresh process."""
    backend = get_backend("onnx")
    if not backend.available().ok:
        pytest.skip(f"onnx unavailable: {backend.available().reason}")
    try:
        find_onnxruntime()
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("native-ort")
    done, jobs = {}, []
    for name in CASES + EXTRA:
        c = case(name) if name in CASES else None
        with jax.enable_x64(True) if c and c.x64 else contextlib.nullcontext():
            target = c.make() if c else getattr(examples, name)()
            sig = build_signature(target)
            artifact = backend.export(target.fn, sig, root / name, ExportOptions(**(c.options if c else {})))
        feeds = []
        for batch in (c and c.batch_sizes) or (None,):
            stem = root / f"{name}-{batch}"
            save_npz(f"{stem}.in.npz", feed_for(sig, batch))
            feeds.append((f"{stem}.in.npz", f"{stem}.out.npz"))
        jobs.append({"artifact": str(artifact.directory), "feeds": [list(f) for f in feeds]})
        done[name] = (artifact.directory, sig, feeds)
    (root / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-m", "tests.run_many", str(root / "jobs.json")], cwd=REPO, check=True, timeout=900)
    return done


@pytest.mark.subprocess
@pytest.mark.parametrize("name", CASES + EXTRA)
def test_ort_run_matches_multiexport_run_bit_for_bit(exported, name):
    directory, sig, feeds = exported[name]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["native"]["consumer"] == "onnxruntime_c_api"
    for feed_path, out_path in feeds:
        error = Path(out_path).with_suffix(".error.txt")
        assert not error.exists(), error.read_text()
        native = run(directory, load_npz(feed_path))
        _assert_same("onnx", None, native.outputs, load_npz(out_path), sig, f"onnx/{name}/{feed_path}")


@pytest.mark.subprocess
def test_symbolic_batch_binds_by_name_at_any_size(exported):
    """One model takes every size (its batch dim is symbolic), each leaf bound by its graph input name."""
    directory, sig, feeds = exported["symbolic_batch"]
    native = json.loads((directory / "manifest.json").read_text())["native"]
    assert native["symbolic_dims"] == ["b"] and len(feeds) == 2
    assert {a["leaf"]: a["tensor"] for a in native["args"]} == {"w": "w", "batch.offset": "batch.offset",
                                                              "batch.x": "batch.x"}
    assert run(directory, feed_for(sig, 5)).outputs["out.y"].shape[0] == 5


@pytest.mark.subprocess
def test_session_options_are_the_python_runners(exported, tmp_path):
    """ORT's own log of the session it built ("Session Options { ... }": optimisation level, intra/inter-op
    pools, spinning, config entries) is the same for ort_run and for the Python runner: this also pins the
    OrtApi slots ort_api.h declares for them (a wrong slot would set another option or crash)."""
    directory, _, _ = exported["mlp"]
    argv, env = command(directory, inputs_dir="inputs", outputs_dir=str(tmp_path / "out"), threads=3)
    proc = subprocess.run([*argv, "--log-level", "info"], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    script = ("import onnxruntime as ort, multiexport\n"
              "ort.set_default_logger_severity(1)\n"
              f"multiexport.load({str(directory)!r}, threads=3)\n")
    python = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert python.returncode == 0, python.stderr

    def options(log: str) -> str:
        found = re.findall(r"Session Options \{.*\}", log)
        assert len(found) == 1, log[-2000:]
        return found[0]

    native_options = options(proc.stderr)
    assert native_options == options(python.stderr)
    for fact in ("execution_mode:0", "thread_pool_size: 3", "thread_pool_size: 1",
                 "session.intra_op.allow_spinning: 1", "session.inter_op.allow_spinning: 1"):
        assert fact in native_options, fact


@pytest.mark.subprocess
def test_iters_times_calls_inside_the_program(exported):
    from importlib.metadata import version

    directory, sig, _ = exported["mlp"]
    timed = run(directory, sig.example_feed(), iters=20, warmup=2, threads=1)
    t = timed.timing
    assert t["consumer"] == "onnxruntime_c_api" and t["calls"] == 20 and t["warmup"] == 2
    assert 0 < t["min_ms"] <= t["median_ms"] <= t["p90_ms"] <= t["max_ms"]
    assert t["onnxruntime"] == version("onnxruntime") and t["api_version"] == 8
    assert t["intra_op_threads"] == 1 and t["declaration"].startswith("multiexport ort_api.h")
    assert set(timed.outputs) == {leaf.name for leaf in sig.outputs}


def _copy(directory: Path, tmp_path: Path) -> tuple[Path, dict]:
    copy = tmp_path / directory.name
    shutil.copytree(directory, copy)
    return copy, json.loads((copy / "manifest.json").read_text())


@pytest.mark.subprocess
@pytest.mark.parametrize("tamper", ["level", "tensor", "config"])
def test_a_section_the_export_did_not_write_is_refused(exported, tmp_path, tamper):
    """run.py re-derives the section from the manifest's model, names and leaves and the fixed session
    options: a manifest asking for another optimisation level, binding a leaf to another graph input, or
    adding a config entry is refused before any program runs."""
    directory, sig, _ = exported["symbolic_batch"]
    copy, manifest = _copy(directory, tmp_path)
    native = manifest["native"]
    if tamper == "level":
        native["session_options"]["graph_optimization_level"] = "ORT_DISABLE_ALL"
    elif tamper == "tensor":
        native["args"][1]["tensor"], native["args"][2]["tensor"] = native["args"][2]["tensor"], native["args"][1]["tensor"]
    else:
        native["session_options"]["config_entries"]["session.load_model_format"] = "ORT"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"native section differs .* refusing to run a session the export did "
                                            r"not write"):
        run(copy, sig.example_feed())


@pytest.mark.subprocess
def test_the_program_itself_checks_the_graph_names(exported, tmp_path):
    """Run directly (no run.py check), ort_run refuses a section whose input name is not the model's, in one
    line naming the leaf, rather than binding it elsewhere."""
    directory, _, _ = exported["symbolic_batch"]
    copy, manifest = _copy(directory, tmp_path)
    manifest["native"]["args"][1]["tensor"] = "renamed"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([str(build("ort_run"))], cwd=copy, env={}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("ort_run: Input 'batch.offset' | the model's input 1 is named 'batch.offset', "
                                   "expected 'renamed'")


def test_declaration_unless_a_real_header_is_named(monkeypatch, tmp_path):
    """Without $MULTIEXPORT_ORT_INCLUDE the program is built from ort_api.h; a directory without ORT's
    onnxruntime_c_api.h is refused by name (no ORT header can be obtained here to test the real-header build)."""
    try:
        find_onnxruntime()
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    monkeypatch.delenv("MULTIEXPORT_ORT_INCLUDE", raising=False)
    chain = recipe("ort_run")
    assert "-DMX_ORT_REAL_HEADER" not in chain.flags and chain.inputs[0].name == "ort_api.h"
    assert any(f.startswith("-DMX_ORT_LIBRARY=") and "libonnxruntime.so" in f for f in chain.flags)
    assert chain.dlopened == ("MX_ORT_LIBRARY",)  # the bundled build names it by file name
    monkeypatch.setenv("MULTIEXPORT_ORT_INCLUDE", str(tmp_path))
    with pytest.raises(NativeBuildError, match=r"MULTIEXPORT_ORT_INCLUDE .* holds no onnxruntime_c_api.h"):
        recipe("ort_run")


@pytest.mark.subprocess
def test_a_static_size_fallback_artifact_runs_each_feed_in_the_model_of_its_size(exported, tmp_path):
    """An artifact of the static-size fallback (one complete artifact per size under static/, no native section at
    the top): run.py runs a feed in the model of its size, and refuses a size it holds none for, naming those it
    holds; the program itself, pointed at the top directory, refuses in one line naming the models."""
    directory, sig, _ = exported["symbolic_batch"]
    top = tmp_path / "fallback"  # the files the manifest lists stay in place: only the format facts change
    shutil.copytree(directory, top)
    shutil.copytree(directory, top / "static" / "b3")
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["native"] = None
    manifest["format"] = {"static_fallback": {"why": "the converter took no symbolic b", "category": "unsupported-op",
                                              "models": {"b=3": "static/b3"}}}
    (top / "manifest.json").write_text(json.dumps(manifest))
    feed = sig.example_feed()
    assert feed["batch.x"].shape[0] == 3
    got = run(top, feed)
    assert got.outputs["out.y"].shape[0] == 3
    assert np.array_equal(got.outputs["out.y"], run(top / "static" / "b3", feed).outputs["out.y"])
    at_two = {name: value[:2] if name.startswith("batch.") else value for name, value in feed.items()}
    with pytest.raises(RunError, match=r"got b=2, expected one of the sizes it was built for: b=3"):
        run(top, at_two)
    proc = subprocess.run([str(build("ort_run"))], cwd=top, env={}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "holds one model per size (the first: b=3 in static/b3)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    inner = json.loads((top / "static" / "b3" / "manifest.json").read_text())
    inner["backend"] = "xla"  # a model of another format: its consumer is not the one the artifact names
    (top / "static" / "b3" / "manifest.json").write_text(json.dumps(inner))
    with pytest.raises(ArtifactError, match=r"its model of b=3 \(static/b3\) is a 'xla' artifact, expected 'onnx'"):
        run(top, feed)


@pytest.mark.subprocess
def test_an_onnx_runtime_failure_is_one_line_with_its_status_message(exported, tmp_path):
    """ORT's own status (GetErrorMessage, then ReleaseStatus) on a model file it cannot parse: one line
    naming the call, exit status 1."""
    directory, _, _ = exported["mlp"]
    copy, _ = _copy(directory, tmp_path)
    (copy / "model.onnx").write_bytes((copy / "model.onnx").read_bytes()[:100])
    proc = subprocess.run([str(build("ort_run"))], cwd=copy, env={}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.startswith("ort_run: CreateSession | ONNX Runtime: ") and len(proc.stderr.splitlines()) == 1
    assert "model.onnx" in proc.stderr or "Protobuf" in proc.stderr, proc.stderr


@pytest.mark.subprocess
def test_a_runtime_without_the_api_version_is_refused(exported, tmp_path, monkeypatch):
    """GetApi returns NULL for an API version the runtime does not serve (a runtime older than 1.8): the
    program says which version it needs instead of calling through a NULL table. The runtime here is a
    stand-in library with ORT's one exported entry point whose GetApi serves no version."""
    from multiexport.native.build import find_compiler

    source = tmp_path / "old_ort.c"
    source.write_text("typedef struct { const void *(*get_api)(unsigned); const char *(*version)(void); } base_t;\n"
                      "static const void *get_api(unsigned v) { (void)v; return 0; }\n"
                      "static const char *version(void) { return \"1.7.0\"; }\n"
                      "static const base_t base = {get_api, version};\n"
                      "const base_t *OrtGetApiBase(void) { return &base; }\n")
    library = tmp_path / "libonnxruntime.so.1.7.0"
    subprocess.run([find_compiler("c"), "-shared", "-fPIC", str(source), "-o", str(library)], check=True, timeout=120)
    monkeypatch.setenv("MULTIEXPORT_ORT_LIBRARY", str(library))
    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))
    directory, _, _ = exported["seed"]
    proc = subprocess.run([str(build("ort_run")), "--outputs", str(tmp_path / "out")], cwd=directory, env={},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("ort_run: ONNX Runtime 1.7.0 | serves no C API version 8, expected a runtime that "
                                   "does (1.8 or newer)")
