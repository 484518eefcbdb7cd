"""onnx-web (the ONNX stage's file run by onnxruntime-web in headless Chromium): inputs and outputs by leaf name
through the manifest, outputs matching jax.jit, the page cross-origin isolated with wasm threads, 64-bit and
bool tensors crossing into the page exactly, the server serving nothing but its table, and what is missing or
broken said in one typed line. Real Chromium and the npm-installed runtime; skipped with the reason without them."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import jax
import numpy as np
import pytest

from multiexport import RunError, examples
from multiexport.backends.onnx_web import OnnxWebBackend
from multiexport.backends.onnx_web.page import open_session, routes, runtime_dist
from multiexport.backends.onnx_web.runner import page_error
from multiexport.backends.onnx_web.server import ISOLATION_HEADERS, PageServer
from multiexport.errors import MultiexportError
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature

from ..conftest import assert_matches_jit, reference_outputs

# The shared cases onnx-web refuses (read by tests/exporting/test_contract.py): onnxruntime-web has no tensor
# type for them in the page, so the export names the leaf instead of a page-side failure.
KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "mlp_bf16": ("unsupported-dtype", "bfloat16 has no typed array in the page (onnxruntime-web's tensors)"),
    "float8": ("unsupported-dtype", "float8 has no typed array in the page (onnxruntime-web's tensors)"),
}

_status = OnnxWebBackend().available()
needs_browser = pytest.mark.skipif(not _status.ok, reason=f"onnx-web backend unavailable: {_status.reason}")


def export(target, path):
    sig = build_signature(target)
    return sig, OnnxWebBackend().export(target.fn, sig, path, ExportOptions())


@needs_browser
@pytest.mark.parametrize("make", [examples.seed, examples.transformer], ids=["seed", "transformer"])
def test_outputs_by_leaf_name_match_jax_jit_in_the_page(make, tmp_path):
    target = make()
    sig, artifact = export(target, tmp_path / "a")
    assert (artifact.directory / "model.onnx").is_file()
    feed = sig.example_feed()
    with OnnxWebBackend().load(artifact.directory) as runner:
        got = runner(feed)
        assert_matches_jit(target, sig, got, feed, "onnx-web")
        runner.run_prepared(runner.prepare(feed))
        described = runner.describe()
    assert described["cross_origin_isolated"] is True  # SharedArrayBuffer: the wasm EP's threads
    assert described["wasm_threads"] == described["threads_requested"]
    assert described["page_ms_p50"] is not None and described["round_trip_ms_p50"] is not None


@needs_browser
def test_the_seed_takes_only_the_leaf_it_reads_and_times_in_the_page(tmp_path):
    """Also: the export records whether headless Chromium offered WebGPU (an adapter, here SwiftShader's software
    one, or why none) in the manifest and the runner's facts, where the report's browser line reads it."""
    sig, artifact = export(examples.seed(), tmp_path / "a")
    assert artifact.manifest.format["graph_inputs"] == ["foo.baz"]
    probe = artifact.manifest.format["webgpu"]
    assert set(probe) == {"ok", "reason"} and probe["reason"]
    with OnnxWebBackend().load(artifact.directory) as runner:
        feed = {"foo.bar": np.zeros(10, np.int32), "foo.baz": np.arange(10, dtype=np.int32)}
        assert int(runner(feed)["out"]) == 45
        samples = runner.time_in_page(runner.prepare(feed), warmup=2, min_calls=7, max_calls=7, seconds=0.0)
        assert runner.describe()["webgpu"] == probe
    assert samples.dtype == np.int64 and samples.size == 7 and (samples >= 0).all()


@needs_browser
def test_64_bit_leaves_run_at_full_width_in_the_page(tmp_path):
    """int64 crosses as BigInt64Array and float64 as Float64Array: values past int32 and float32 survive."""
    from ..cases import float64

    with jax.enable_x64(True):
        target = float64()
        sig, artifact = export(target, tmp_path / "a")
        feed = {"x": np.linspace(-1, 1, 4) + 1e-12, "n": np.array([2**40 + 3, -5, 0, 7], np.int64)}
        want = reference_outputs(target, sig, feed)
    with OnnxWebBackend().load(artifact.directory) as runner:
        got = runner(feed)
    np.testing.assert_array_equal(got["out.m"], want["out.m"])  # (2^40+3)*3 exactly: no 32-bit wrap
    np.testing.assert_array_equal(got["out.y"], want["out.y"])
    assert got["out.y"].dtype == np.float64 and got["out.m"].dtype == np.int64


@needs_browser
def test_bool_tensors_cross_both_ways(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Xor", ["a", "b"], ["c"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.BOOL, [4]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    a, b = np.array([True, False, True, False]), np.array([True, True, False, False])
    session = open_session({"m.onnx": tmp_path / "m.onnx"}, "m.onnx", threads=1)
    try:
        (name, c), = session.fetch(session.feed([("a", a), ("b", b)]))
    finally:
        session.close()
    assert name == "c" and c.dtype == np.bool_
    np.testing.assert_array_equal(c, a ^ b)


@needs_browser
def test_a_broken_model_file_is_one_typed_line_not_a_crash(tmp_path):
    _, artifact = export(examples.seed(), tmp_path / "a")
    model = artifact.directory / "model.onnx"
    model.write_bytes(model.read_bytes()[: len(model.read_bytes()) // 2])  # a real fault: a truncated file
    with pytest.raises(MultiexportError) as info:  # the manifest's size check, or the page's refusal
        OnnxWebBackend().load(artifact.directory)
    assert str(info.value).startswith(f"Artifact '{artifact.directory}' | ") and "\n" not in str(info.value)


@needs_browser
def test_a_model_the_runtime_refuses_is_a_typed_run_error(tmp_path):
    """The page's own refusal (not the manifest's checks): garbage bytes served as the model."""
    (tmp_path / "m.onnx").write_bytes(b"not an onnx file at all")
    with pytest.raises(Exception) as info:
        open_session({"m.onnx": tmp_path / "m.onnx"}, "m.onnx", threads=1)
    error = page_error(info.value, tmp_path, "creating the session")
    assert isinstance(error, RunError) and error.category == "run-failed"
    assert str(error).startswith(f"Artifact '{tmp_path}' | onnxruntime-web failed during creating the session: ")


def test_the_server_serves_its_table_only_with_isolation_headers(tmp_path):
    inside = tmp_path / "model.onnx"
    inside.write_bytes(b"onnx")
    (tmp_path / "secret.txt").write_text("not served")
    with PageServer({"/model/model.onnx": inside}) as origin:
        with urllib.request.urlopen(f"{origin}/model/model.onnx") as answer:
            assert answer.read() == b"onnx"
            for key, value in ISOLATION_HEADERS.items():
                assert answer.headers[key] == value
        for path in ("/secret.txt", "/model/../secret.txt", "/model/secret.txt", "/etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(f"{origin}{path}")
            assert info.value.code == 404
            info.value.close()  # the error holds the response's socket
    assert origin.startswith("http://127.0.0.1:")


@pytest.mark.skipif(runtime_dist() is None, reason="onnxruntime-web not installed (npm ci in backends/onnx_web/web)")
def test_routes_are_the_page_the_runtime_and_the_model(tmp_path):
    dist = runtime_dist()
    assert dist is not None
    table = routes({"model.onnx": tmp_path / "model.onnx"}, dist)
    assert "/page.html" in table and "/ort/ort.wasm.min.mjs" in table and "/model/model.onnx" in table
    assert all(p.startswith(("/page.", "/ort/", "/model/")) for p in table)
    assert all(Path(f).suffix in (".html", ".mjs", ".js", ".wasm", ".onnx") for f in table.values())


def test_no_chromium_or_no_runtime_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("MULTIEXPORT_CHROMIUM", str(tmp_path / "no-such-chromium"))
    status = OnnxWebBackend().available()
    if "playwright" in status.reason:
        pytest.skip(f"playwright is not installed: {status.reason}")
    assert not status.ok and "apt-get install chromium" in status.reason and "\n" not in status.reason
    monkeypatch.delenv("MULTIEXPORT_CHROMIUM")
    monkeypatch.setenv("MULTIEXPORT_ORT_WEB_DIST", str(tmp_path))  # an empty folder: no runtime there
    status = OnnxWebBackend().available()
    if "Chromium" in status.reason:
        pytest.skip(f"no Chromium here: {status.reason}")
    assert not status.ok and "npm ci --prefix" in status.reason


def test_profiles_of_processes_gone_are_removed_and_the_living_ones_kept(tmp_path):
    """A worker killed mid-run leaves its Chromium profile (no atexit ran); the next launch removes it, never the
    profile of a process still running, nor a link or a directory that is not a profile."""
    import subprocess
    import sys

    from multiexport.backends.onnx_web.browser import PROFILE_PREFIX, reap_stale_profiles

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{PROFILE_PREFIX}{int(gone.stdout)}-abc"
    (dead / "Default").mkdir(parents=True)
    alive = tmp_path / f"{PROFILE_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / f"{PROFILE_PREFIX}{int(gone.stdout)}-link"
    link.symlink_to(elsewhere)
    other = tmp_path / f"{PROFILE_PREFIX}notapid"
    other.mkdir()
    assert reap_stale_profiles(tmp_path) == [dead]
    assert not dead.exists() and alive.is_dir() and link.is_symlink() and elsewhere.is_dir() and other.is_dir()


@needs_browser
def test_a_launch_under_a_deep_tmpdir_still_starts_chromium(tmp_path, monkeypatch):
    """A compare worker's $TMPDIR is a deep private directory; Chromium's singleton socket under a profile there
    passed the 108-byte limit of a Unix socket's path and every launch failed. Profiles now live in /tmp."""
    import tempfile

    from multiexport.backends.onnx_web.browser import launch

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    browser = launch()
    try:
        assert "Chrome" in browser.version and len(str(browser.profile)) < 60
    finally:
        browser.close()
    assert not browser.profile.exists()


@needs_browser
def test_a_tensor_over_the_wasm_heap_is_a_size_limit_row_not_a_crash(tmp_path):
    """A graph whose activation is 5 GiB: wasm32's size_t overflows in ORT (its SafeInt check). The page's failure is
    one size-limit line; the session stays usable for a call that fits."""
    import onnx
    from onnx import TensorProto, helper

    size = helper.make_tensor("n", TensorProto.INT64, [1], [5 << 28])
    graph = helper.make_graph([helper.make_node("Expand", ["x", "n"], ["y"]),
                               helper.make_node("ReduceSum", ["y"], ["out"], keepdims=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [])], initializer=[size])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    session = open_session({"m.onnx": tmp_path / "m.onnx"}, "m.onnx", threads=1)
    try:
        with pytest.raises(Exception) as info:
            session.fetch(session.feed([("x", np.ones(1, np.float32))]))
    finally:
        session.close()
    error = page_error(info.value, tmp_path, "session.run")
    assert isinstance(error, RunError) and error.category == "size-limit", str(error)
    assert str(error).startswith(f"Artifact '{tmp_path}' | onnxruntime-web ran out of wasm memory during session.run")
    assert "\n" not in str(error)


def test_model_files_over_the_wasm_heap_are_refused_at_export_with_a_size_limit_row(tmp_path):
    """A real 4 GiB external-data file (sparse: no disk used) beside the ONNX stage's model: the export refuses it
    with the size-limit category and the sizes, before any browser starts."""
    import dataclasses
    from types import SimpleNamespace

    from multiexport.backends.onnx import OnnxBackend
    from multiexport.errors import ExportError
    from multiexport.exporting.manifest import Manifest

    target = examples.seed()
    stage = OnnxBackend().export(target.fn, build_signature(target), tmp_path / "onnx", ExportOptions()).directory
    with open(stage / "model.onnx.data", "wb") as f:
        f.truncate(4 << 30)
    manifest = Manifest.read(stage)
    front = SimpleNamespace(manifest=dataclasses.replace(manifest, files={**manifest.files,
                                                                          "external_data": "model.onnx.data"}),
                            directory=stage)
    (tmp_path / "web").mkdir()
    with pytest.raises(ExportError) as info:
        OnnxWebBackend()._export_files(tmp_path / "web", {"execution_provider": "wasm"}, front)
    assert info.value.category == "size-limit"
    assert "the model's files are 4.00 GiB, over wasm32's 4 GiB address space" in str(info.value)

