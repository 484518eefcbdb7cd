"""A stage's files placed by a building backend without a second copy of the weights, and leaves of a dtype the
runtime has no tensor type for refused in one line naming the leaf (an unread input is never refused)."""

import os
import tempfile
from pathlib import Path

import pytest

from multiexport.errors import ExportError
from multiexport.exporting.manifest import LeafBinding, Manifest
from multiexport.exporting.stage_files import check_stage_dtypes, place_stage_file


def stage(inputs, outputs):
    return Manifest(backend="onnx", target="t", inputs=inputs, outputs=outputs, keep_unused=False, symbolic_dims=[],
                    files={"model": "model.onnx"}, versions={}, created="2026-01-01T00:00:00+00:00", inventory={})


def test_a_stage_file_is_hard_linked_on_one_file_system(tmp_path):
    source = tmp_path / "model.onnx.data"
    source.write_bytes(b"weights" * 100)
    place_stage_file(source, tmp_path / "placed")
    assert (tmp_path / "placed").stat().st_ino == source.stat().st_ino


def test_across_file_systems_the_link_fails_and_the_file_is_copied(tmp_path):
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's directory (a real EXDEV)")
    source = tmp_path / "model.onnx"
    source.write_bytes(b"graph")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        target = Path(other) / "model.onnx"
        place_stage_file(source, target)
        assert target.read_bytes() == b"graph" and target.stat().st_ino != source.stat().st_ino


def test_a_dtype_the_runtime_lacks_is_refused_naming_the_leaf_and_an_unread_input_is_not():
    unread = LeafBinding("params.unused", "params_unused", [2], "bfloat16", used=False, param=None)
    x = LeafBinding("x", "x", [2], "float32", used=True, param="x")
    ok = stage([unread, x], [LeafBinding("out", "out", [2], "float32", used=True, param="out")])
    check_stage_dtypes("onnx-node", ok, ("float32", "int64"), "onnxruntime-node")  # the bfloat16 leaf is not fed
    bad = stage([unread, x], [LeafBinding("out.logits", "out_logits", [2], "bfloat16", used=True, param="logits")])
    with pytest.raises(ExportError, match=r"Output 'out.logits' \| got bfloat16, expected a dtype onnxruntime-node "
                                          r"has a tensor type for \(float32, int64\)") as info:
        check_stage_dtypes("onnx-node", bad, ("float32", "int64"), "onnxruntime-node")
    assert info.value.category == "unsupported-dtype" and info.value.backend == "onnx-node"
