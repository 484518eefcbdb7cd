"""A compare's output directory: the synthetic calibration a previous run wrote is cleared with its results,
a user's own file of that name is never touched."""

from __future__ import annotations

import numpy as np

from multiexport.files.npz import save_npz
from multiexport.run.rundir import SYNTHETIC_CALIBRATION, claim_run_dir


def test_a_previous_runs_synthetic_calibration_is_cleared_and_a_users_file_of_that_name_stays(tmp_path):
    out = tmp_path / "out"
    claim_run_dir(out).release()  # a compare's directory
    save_npz(out / SYNTHETIC_CALIBRATION, {"x": np.zeros((2, 3), np.float32)})  # stamped: multiexport's
    claim_run_dir(out).release()
    assert not (out / SYNTHETIC_CALIBRATION).exists()
    np.savez(out / SYNTHETIC_CALIBRATION, x=np.ones(3))  # numpy's own: the user's
    claim_run_dir(out).release()
    assert (out / SYNTHETIC_CALIBRATION).exists()
