"""compare and the TPU on this CPU machine: a function that calls a Pallas kernel stops in one line (jax.jit cannot run it
on the CPU, the compare's reference), and on a machine with a TPU the XLA artifact is lowered for the TPU too."""

from __future__ import annotations


def test_a_pallas_kernel_is_one_line_naming_where_it_runs(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("compare", "tests.test_tpu_pallas:pallas_target", "--backends", "xla", "--out-dir", out, "--trials", "1")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("multiexport: error:")]
    assert proc.returncode == 2, proc.stderr
    assert len(errors) == 1 and "Pallas kernel" in errors[0] and "--platforms tpu" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_on_a_machine_with_a_tpu_the_compare_lowers_xla_for_the_tpu_too(cli, tmp_path):
    """As `export` there: the XLA artifact a compare writes on a TPU machine also runs on the chip, though the
    compare's rows are CPU rows (the machine announces its TPU as the lent one does, TPU_ACCELERATOR_TYPE)."""
    import json

    out = tmp_path / "out"
    proc = cli("compare", "--backends", "xla", "--out-dir", out, "--trials", "1", "--bench-time", "0.05",
               env={"TPU_ACCELERATOR_TYPE": "v5litepod-4"})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "xla" / "manifest.json").read_text())
    assert manifest["supports"]["platforms"] == ["cpu", "tpu"], manifest["supports"]
    plain = cli("compare", "--backends", "xla", "--out-dir", tmp_path / "plain", "--trials", "1", "--bench-time", "0.05")
    assert plain.returncode == 0, plain.stderr
    assert json.loads((tmp_path / "plain" / "xla" / "manifest.json").read_text())["supports"]["platforms"] == ["cpu"]
