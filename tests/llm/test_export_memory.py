"""The export workers' second copies of the weights (#51: every worker <= 2x the weights): ONNX's load check runs
the graph on the model's in-memory arrays, not a copy read from the data file; OpenVINO's export compiles the
file only below a size. Each test fails with the copy back."""

from __future__ import annotations

from benchmarks.real_models import llm
from multiexport.backends.onnx import OPSET
from multiexport.backends.onnx.convert import DATA_FILE, MODEL_FILE, convert, save
from multiexport.backends.onnx.routes import SHARED_INITIALIZER_BYTES, in_memory_initializers, run_once
from multiexport.backends.openvino import OpenVINOBackend
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature

from ..conftest import assert_matches_jit


def test_onnx_load_check_shares_the_models_arrays_instead_of_reading_the_data_file(tmp_path):
    target = llm.llm_tiny_decode_baked()
    sig = build_signature(target)
    model = convert(target.fn, sig, OPSET, double=False)
    save(model, tmp_path, external=True)
    shared = in_memory_initializers(model)
    big = {name: value.const_value.numpy() for name, value in model.graph.initializers.items()
           if value.const_value is not None and value.const_value.nbytes >= SHARED_INITIALIZER_BYTES}
    assert big and set(shared) == set(big)  # every weight the data file holds (the tiny decoder's 20+ matrices)
    for name, array in big.items():  # the same memory, no copy
        assert shared[name].data_ptr() == array.ctypes.data, name
    # The session takes every weight from memory: the check runs with the data file emptied (ONNX Runtime would
    # fail to read the external data from it otherwise).
    (tmp_path / DATA_FILE).write_bytes(b"")
    run_once(tmp_path / MODEL_FILE, sig, model)


def test_openvino_export_reads_only_past_the_probe_limit_and_the_runner_compiles_it(tmp_path, monkeypatch):
    from multiexport.backends.openvino import probe

    target = llm.llm_tiny_decode_baked()
    sig = build_signature(target)
    small = OpenVINOBackend().export(target.fn, sig, tmp_path / "small", ExportOptions(external_weights="always"))
    assert small.manifest.format["export_check"].startswith("read_model, compile_model and one inference")
    monkeypatch.setattr(probe, "PROBE_LIMIT_BYTES", 1024)  # the tiny decoder's 0.4 MB as if it were 1 B's
    big = OpenVINOBackend().export(target.fn, sig, tmp_path / "big", ExportOptions(external_weights="always"))
    check = big.manifest.format["export_check"]
    assert check.startswith("read_model only"), check
    feed = sig.example_feed()
    assert_matches_jit(target, sig, OpenVINOBackend().load(big.directory)(feed), feed)
