"""Named arrays on disk, and .npz files as hostile input: every bad file is one InputError naming it."""

import io
import json
import zipfile

import ml_dtypes
import numpy as np
import pytest

from multiexport import InputError
from multiexport.files.npz import load_npz, save_npz


def test_named_arrays_round_trip_with_ml_dtypes(tmp_path):
    arrays = {
        "params.Dense_0.kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "batch.x": np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16),
        "q": np.array([0.5, 1.0], dtype=ml_dtypes.float8_e4m3fn),
        "i4": np.array([-3, 7], dtype=ml_dtypes.int4),
        "c": np.array([1 + 2j], np.complex64),
        "n": np.int32(3),
        "empty": np.zeros((0, 4), np.float32),
        'd."a.b"': np.ones(2, np.float64),
    }
    back = load_npz(save_npz(tmp_path / "a.npz", arrays))
    assert list(back) == list(arrays)
    for name, a in arrays.items():
        assert back[name].dtype == np.asarray(a).dtype and back[name].shape == np.asarray(a).shape, name
        np.testing.assert_array_equal(back[name], np.asarray(a))


def _zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def test_missing_and_non_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_npz(tmp_path / "missing.npz")
    with pytest.raises(InputError, match=r"'.*' \| is a directory, expected an .npz"):
        load_npz(tmp_path)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"bad.npz' \| is not a zip archive"):
        load_npz(tmp_path / "bad.npz")
    (tmp_path / "pickle.npz").write_bytes(b"\x80\x04\x95" + b"x" * 40)
    with pytest.raises(InputError, match="is not a zip archive"):  # never "contains pickled data"
        load_npz(tmp_path / "pickle.npz")
    with pytest.raises(InputError, match="reserved"):
        save_npz(tmp_path / "x.npz", {"__dtypes__": np.zeros(1)})
    with pytest.raises(InputError, match=r"is a directory, expected a file name"):
        save_npz(tmp_path, {"x": np.zeros(1)})


def test_a_header_claiming_more_elements_than_the_file_holds_is_refused_before_allocating(tmp_path):
    header = _npy(np.zeros(4, np.float32))
    huge = header.replace(b"(4,)", b"(1000000000000,)".ljust(len(b"(4,)")), 1)
    # keep the header length identical: rewrite through numpy's own header writer instead
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    data = buf.getvalue() + b"\x00" * 16
    path = _zip(tmp_path / "huge.npz", {"x.npy": data})
    with pytest.raises(InputError, match=r"member 'x' claims shape \(1000000000000,\)"):
        load_npz(path)
    assert huge  # the naive rewrite is not what we test: the header must describe the bytes that follow


def test_object_arrays_duplicates_and_non_npy_members_are_refused(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="holds Python objects"):
        load_npz(_zip(tmp_path / "obj.npz", {"o.npy": buf.getvalue()}))
    with pytest.raises(InputError, match="is not an .npy array"):
        load_npz(_zip(tmp_path / "txt.npz", {"t.npy": b"hello"}))
    path = tmp_path / "dup.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", _npy(np.zeros(1)))
        with pytest.warns(UserWarning):
            z.writestr("x.npy", _npy(np.ones(1)))
    with pytest.raises(InputError, match="holds 'x' twice"):
        load_npz(path)


@pytest.mark.parametrize("entry, message", [
    (b"not json", "is not a JSON mapping"),
    (json.dumps(["x"]).encode(), "is not a JSON mapping"),
    (json.dumps({"ghost": "bfloat16"}).encode(), "names 'ghost', which the file does not hold"),
    (json.dumps({"x": "object"}).encode(), "expected a numpy or ml_dtypes name"),
    (json.dumps({"x": "no_such_dtype"}).encode(), "expected a numpy or ml_dtypes name"),
    (json.dumps({"x": "float8_e4m3fn"}).encode(), "expected raw 1-byte items"),
])
def test_a_crafted_dtypes_entry_is_refused(tmp_path, entry, message):
    members = {"x.npy": _npy(np.zeros(2, "V2")), "__dtypes__.npy": _npy(np.frombuffer(entry, np.uint8))}
    with pytest.raises(InputError, match=message):
        load_npz(_zip(tmp_path / "crafted.npz", members))


def test_an_empty_archive_loads_as_no_arrays(tmp_path):
    assert load_npz(save_npz(tmp_path / "e.npz", {})) == {}
