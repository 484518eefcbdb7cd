"""benchmarks.vendor_check on the seed: the runner and the vendor's own paths (IREE's iree-benchmark-module,
ONNX Runtime's sessions) time the same artifact, and the row says which vendor path was fastest and how far
the runner is from it. Timing figures are not asserted (a shared machine); what each path ran is."""

from __future__ import annotations

import pytest

from benchmarks import vendor_check
from multiexport import examples


@pytest.mark.parametrize("backend", ["iree", "onnx"])
def test_vendor_check_times_the_runner_against_the_vendor_paths(backend, tmp_path):
    row = vendor_check.check("seed", examples.seed(), backend, rounds=2, block_s=0.005, root=tmp_path)
    expected = {"iree": {"iree-benchmark-module local-sync", "iree-benchmark-module local-task"},
                "onnx": {"ort session.run", "ort run_with_iobinding"}}[backend]
    assert set(row.vendor_us) == expected and row.best in expected
    assert all(v > 0 for v in row.vendor_us.values()) and row.runner_us > 0
    assert row.ratio == pytest.approx(row.runner_us / row.vendor_us[row.best])
    assert row.flagged == (row.ratio > vendor_check.FLAG)
    if backend == "iree":  # the runner runs on the driver the export chose, and says so
        assert row.runner["driver"] in ("local-sync", "local-task")
        assert "--iree-opt-data-tiling" in row.runner["compile_flags"]
    else:
        assert row.runner["intra_op_allow_spinning"] == "1"
    assert f"| seed | {backend} |" in vendor_check.table([row])


def test_the_xla_vendor_path_passes_the_lifted_weights_and_a_target_spec_loads(tmp_path):
    """Baked weights of 16 MiB and more are lifted out of the XLA module (--external-weights auto) and passed
    after the leaves; jax.jit(exported.call) with the leaves alone failed ("a tuple of length 2 ... 3")."""
    import numpy as np

    from multiexport import Target

    w = np.random.default_rng(0).normal(size=(2100, 2100)).astype(np.float32)  # 17.6 MB: lifted
    target = Target(lambda x: {"y": x @ w}, (np.ones((1, 2100), np.float32),), name="baked_big")
    row = vendor_check.check("baked_big", target, "xla", rounds=2, block_s=0.005, root=tmp_path)
    assert set(row.vendor_us) == {"jax.jit(exported.call)"} and row.runner_us > 0
    assert vendor_check._target("multiexport.examples:seed").name == "seed"
    assert vendor_check._target("mlp").name == examples.mlp().name
