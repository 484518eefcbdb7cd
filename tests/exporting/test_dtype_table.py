"""docs/manifest.md's dtype table against each runtime's own mapping and the native consumers' sources.

A C++ integrator copies this table into code; every cell is checked here against what the runtime itself
says (ONNX's and TF's numpy conversions, OpenVINO's ov.Type, the TFLite schema's TensorType, the PJRT C API
header) and against the tables our native programs compile (mx_util.c, pjrt_run.cc, ov_run.c,
backends/iree/native.py IREE_ELEMENT), so the document cannot drift from the code.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from multiexport.backends.litert import native as litert_native
from multiexport.backends.onnx import native as onnx_native
from multiexport.backends.openvino import native as openvino_native
from multiexport.backends.xla import native as xla_native
from multiexport.dtypes import parse_dtype
from multiexport.native.build import SOURCE_DIR

from ..conftest import REPO

COLUMNS = ("manifest", "npy", "pjrt", "onnx", "tf", "tflite", "openvino", "iree")


def table() -> dict[str, dict[str, str | None]]:
    text = (REPO / "docs" / "manifest.md").read_text()
    block = text[text.index("| manifest | .npy |"):].split("\n\n")[0].splitlines()[2:]
    rows = {}
    for line in block:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        assert len(cells) == len(COLUMNS), line
        row = dict(zip(COLUMNS, [None if c == "–" else c for c in cells], strict=True))
        rows[str(row["manifest"])] = row
    assert len(rows) >= 17
    return rows


def _c_pairs(path, pattern) -> dict[str, str]:
    return dict(re.findall(pattern, path.read_text()))


def test_npy_column_is_numpys_descriptor_and_the_native_readers_table():
    native = _c_pairs(SOURCE_DIR / "common" / "mx_util.c", r'\{"([a-z0-9_]+)", "([<|][a-zA-Z][0-9]+)", \d+\}')
    from multiexport.dtypes import npy_storable

    for name, row in table().items():
        written = np.lib.format.dtype_to_descr(npy_storable(np.zeros(1, parse_dtype(name))).dtype)
        # a one-byte or opaque type has no byte order: numpy writes '|', the table (and our C writer) '<'
        assert written.replace("|", "<") == row["npy"].replace("|", "<"), name
        assert native.get(name) == row["npy"], name
    assert set(native) == set(table())


def test_pjrt_column_is_the_consumers_table_and_names_the_headers_enum():
    from multiexport.backends.xla.runtime import find_pjrt_header
    from multiexport.native.build import NativeBuildError

    consumer = {k: v for k, v in _c_pairs(xla_native.SOURCE, r'\{"([a-z0-9_]+)", PJRT_Buffer_Type_([A-Z0-9]+)\}').items()}
    assert consumer == {name: row["pjrt"] for name, row in table().items() if row["pjrt"]}
    try:
        header = (find_pjrt_header() / "pjrt_c_api.h").read_text()
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    for name, row in table().items():
        assert f"PJRT_Buffer_Type_{row['pjrt']}," in header, name


def test_onnx_column_is_onnxs_numpy_conversion():
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    for name, row in table().items():
        assert onnx.TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(parse_dtype(name))) == row["onnx"], name


def test_tf_column_is_tensorflows_numpy_conversion():
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import types_pb2

    for name, row in table().items():
        assert types_pb2.DataType.Name(tf.dtypes.as_dtype(parse_dtype(name)).as_datatype_enum) == row["tf"], name


def test_tflite_column_names_the_schemas_tensor_types():
    pytest.importorskip("tensorflow")
    from tensorflow.lite.python import schema_py_generated as schema

    for name, row in table().items():
        if row["tflite"] is None:
            assert not hasattr(schema.TensorType, name.upper()), f"{name}: TFLite has it now"
        else:
            assert hasattr(schema.TensorType, row["tflite"]), name


def test_openvino_column_is_ov_type_and_the_consumers_table():
    ov = pytest.importorskip("openvino")
    consumer = _c_pairs(openvino_native.SOURCE, r'\{"([a-z0-9_]+)", ([A-Z0-9]+)\}')
    for name, row in table().items():
        if row["openvino"] is None:
            assert name not in consumer, name
            continue
        try:
            got = ov.Type(parse_dtype(name)).get_type_name()
        except RuntimeError:  # ml_dtypes' types have no numpy-side mapping in OpenVINO's Python API
            got = getattr(ov.Type, row["openvino"]).get_type_name()
        assert got == row["openvino"], name
        assert consumer[name] == ("BOOLEAN" if name == "bool" else row["openvino"].upper()), name


def test_iree_column_is_the_raw_input_table():
    from multiexport.backends.iree.native import IREE_ELEMENT

    assert IREE_ELEMENT == {name: row["iree"] for name, row in table().items() if row["iree"]}


def test_onnx_column_is_ort_runs_table():
    consumer = _c_pairs(onnx_native.SOURCES / "ort_run.c", r'\{"([a-z0-9_]+)", ONNX_TENSOR_ELEMENT_DATA_TYPE_([A-Z0-9]+)\}')
    assert consumer, "ort_run.c's dtype table not found"
    rows = table()
    for name, element in consumer.items():
        assert rows[name]["onnx"] == element, name  # ORT's enum names are TensorProto's


def test_tflite_column_is_lite_runs_table():
    consumer = _c_pairs(litert_native.SOURCES / "lite_run.c", r'\{"([a-z0-9_]+)", kLiteRtElementType([A-Za-z0-9]+)\}')
    assert consumer, "lite_run.c's dtype table not found"
    rows = table()
    for name, element in consumer.items():
        assert rows[name]["tflite"] == element.upper(), name  # kLiteRtElementTypeFloat32 is TFLite's FLOAT32
