import ml_dtypes
import numpy as np
import pytest

from multiexport import InputError
from multiexport.arrays_io import load_npz, save_npz


def test_named_arrays_round_trip_with_ml_dtypes(tmp_path):
    arrays = {
        "params.Dense_0.kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "batch.x": np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16),
        "q": np.array([0.5, 1.0], dtype=ml_dtypes.float8_e4m3fn),
        "n": np.int32(3),
    }
    back = load_npz(save_npz(tmp_path / "a.npz", arrays))
    assert list(back) == list(arrays)
    for name, a in arrays.items():
        assert back[name].dtype == np.asarray(a).dtype, name
        np.testing.assert_array_equal(back[name].astype(np.float32), np.asarray(a).astype(np.float32))


def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_npz(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="'.*bad.npz' \\| unreadable"):
        load_npz(tmp_path / "bad.npz")
    with pytest.raises(InputError, match="reserved"):
        save_npz(tmp_path / "x.npz", {"__dtypes__": np.zeros(1)})
