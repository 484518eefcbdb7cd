"""compare on a function that calls a Pallas kernel: jax.jit cannot run it on the CPU (the compare's reference), so
the compare stops in one line naming the kernel and where it runs (exit 2), not multiexport's internal error (70)."""

from __future__ import annotations


def test_a_pallas_kernel_is_one_line_naming_where_it_runs(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("compare", "tests.test_tpu_pallas:pallas_target", "--backends", "xla", "--out", out, "--trials", "1")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("multiexport: error:")]
    assert proc.returncode == 2, proc.stderr
    assert len(errors) == 1 and "Pallas kernel" in errors[0] and "--platforms tpu" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
