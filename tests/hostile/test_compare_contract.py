"""compare as a hostile user drives it (issue 16, items 6, 9, 10, 11, 12): nothing checked is never exit 0,
a nondeterministic target is named as such, exotic output dtypes become rows, markup prints as text, and
every option is validated in the Python API before any work (nothing written).

Covered elsewhere, referenced rather than repeated: every bad compare option through the CLI
(tests/compare/test_compare.py::test_cli_compare_usage_errors_exit_2), BenchConfig fields
(tests/measure/test_bench.py), Python tolerances (tests/measure/test_tolerance.py), float8/int4/complex64
statistics (tests/measure/test_parity.py), sys.exit at import (tests/leaves/test_target.py), markup in
signature/export (tests/cli/test_cli.py::test_markup_in_leaf_and_target_names_prints_as_text).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from multiexport import Target, TargetError, UsageError, compare, export
from multiexport.comparison import CompareConfig
from multiexport.examples import seed
from multiexport.measure.bench import BenchConfig
from multiexport.measure.tolerance import Tolerance

from .conftest import assert_one_line

# -- item 6: nothing checked is a user mistake ----------------------------------------------------------------

@pytest.mark.parametrize("backends", [[], [""], ""])
def test_compare_with_no_backends_is_refused_in_the_api(backends, sandbox):
    with pytest.raises(UsageError, match="Option 'backends' | got .*, expected at least one of"):
        compare(seed(), backends=backends, out_dir=sandbox.root / "o", bench=None)
    assert not (sandbox.root / "o").exists()


def test_a_target_that_calls_sys_exit_while_traced_is_one_line_and_exit_2(sandbox):
    path = sandbox.root / "bye.py"
    path.write_text("import sys\nimport numpy as np\nfrom multiexport import Target\n"
                    "def f(x):\n    sys.exit(0)\n"
                    "target = Target(f, args=(np.ones(3, np.float32),), name='bye')\n")
    sandbox.rebase()
    for args in (["signature", f"{path}:target"], ["export", f"{path}:target", "--out-dir", sandbox.root / "a"],
                 ["compare", f"{path}:target", "--backends", "xla", "--no-bench", "--out-dir", sandbox.root / "o"]):
        proc = sandbox.main(*args)
        assert_one_line(proc, 2, "Target 'bye' | fn called sys.exit(0) while being traced")
    assert not (sandbox.root / "a").exists() and not (sandbox.root / "o" / "results.json").exists()
    sandbox.assert_untouched("o")


def test_a_target_file_that_calls_sys_exit_is_one_line_from_compare(sandbox):
    path = sandbox.root / "script.py"
    path.write_text("import sys\nsys.exit(0)\n")
    proc = sandbox.main("compare", f"{path}:target", "--backends", "xla", "--no-bench", "--out-dir", sandbox.root / "o")
    assert_one_line(proc, 2, "called sys.exit(0)")
    assert not (sandbox.root / "o").exists()


def test_a_target_that_fails_to_build_leaves_no_early_worker_behind(sandbox):
    """The paired workers start before the target is built (their runtimes import meanwhile): a factory that
    raises is still one line, and the workers, their directories and the factory cache are gone with it."""
    path = sandbox.root / "broken.py"
    path.write_text("def target():\n    raise FileNotFoundError('checkpoint.msgpack not found')\n")
    sandbox.rebase()
    proc = sandbox.cli("compare", f"{path}:target", "--backends", "xla", "--out-dir", sandbox.root / "o")
    assert_one_line(proc, 2, "checkpoint.msgpack not found")
    assert sandbox.tmp_left() == []
    sandbox.assert_untouched()


# -- item 9: random numbers inside the traced function ----------------------------------------------------------

@pytest.mark.subprocess
def test_random_numbers_drawn_while_tracing_make_a_nondeterministic_target_row_not_a_parity_failure(sandbox):
    def noisy(x):
        return x + np.random.normal(size=x.shape).astype(np.float32)

    results = compare(Target(noisy, args=(np.ones(3, np.float32),), name="noisy"), backends=["xla"],
                      out_dir=sandbox.root / "o", bench=None, trials=1)
    row = results.backends["xla"]
    assert row.status.value == "nondeterministic-target", (row.status, row.reason)
    assert "random numbers drawn while tracing" in row.reason
    assert results.exit_code == 2  # the target is at fault, not the format


# -- item 10: float8 / int4 / complex64 outputs ----------------------------------------------------------------

@pytest.mark.subprocess
def test_float8_int4_and_complex64_outputs_are_compared_not_a_crash(sandbox):
    import jax.numpy as jnp

    from multiexport.results import Status

    def exotic(x):
        return {"f8": x.astype(jnp.float8_e4m3fn), "i4": jnp.clip(jnp.round(x * 3), -8, 7).astype(jnp.int4),
                "c64": (x + 1j * x).astype(jnp.complex64)}

    target = Target(exotic, args=(np.linspace(-2, 2, 8).astype(np.float32),), name="exotic")
    results = compare(target, backends=["xla"], out_dir=sandbox.root / "o", bench=None, trials=1)
    assert results.backends["xla"].status is Status.OK, results.backends["xla"].reason  # bit-exact, ULP computed
    data = json.loads((sandbox.root / "o" / "results.json").read_text())
    assert data["backends"]["xla"]["parity"]["passed"] is True
    assert (sandbox.root / "o" / "report.md").is_file()


def test_a_float8_e5m2_leaf_round_trips_and_compares_faithful(sandbox):
    import ml_dtypes

    from multiexport.files.npz import load_npz, save_npz
    from multiexport.results import Status

    value = np.array([1.5, -2.0, 0.25], ml_dtypes.float8_e5m2)
    try:
        back = load_npz(save_npz(sandbox.root / "x.npz", {"x": value}))["x"]
        assert back.dtype == value.dtype and back.tobytes() == value.tobytes()
    finally:
        results = compare(Target(lambda x: x * 2, args=(value,), name="e5m2"), backends=["xla"],
                          out_dir=sandbox.root / "o", bench=None, trials=1)
    assert results.backends["xla"].status is Status.OK, results.backends["xla"].reason


def test_a_parameter_named_file_exports(sandbox):
    def f(file):
        return file * 2

    export(Target(f, args=(np.ones(3, np.float32),), name="filearg"), sandbox.root / "a", "xla")
    assert (sandbox.root / "a" / "example_inputs.npz").is_file()


# -- item 11: markup in names ------------------------------------------------------------------------------------

MARKUP = ("import numpy as np\nfrom multiexport import Target\n"
          "target = Target(lambda d: {'[/]': d['[/]'] * 2, '[bold red]x': d['[/]']}, "
          "args=({'[/]': np.ones(2, np.float32)},), name='[bold]x[/]')\n")


@pytest.mark.subprocess
def test_markup_in_leaf_and_target_names_prints_as_text_in_run_and_compare(sandbox):
    path = sandbox.root / "markup.py"
    path.write_text(MARKUP)
    art = sandbox.root / "a"
    assert sandbox.main("export", f"{path}:target", "--out-dir", art).returncode == 0
    proc = sandbox.main("run", art)
    assert proc.returncode == 0, proc.stderr
    assert "out.[/]" in proc.stdout and "[bold red]x" in proc.stdout
    proc = sandbox.main("compare", f"{path}:target", "--backends", "xla", "--no-bench", "--out-dir", sandbox.root / "o")
    assert proc.returncode == 0, proc.stderr
    assert "[bold]x[/]" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


# -- item 12: every option validated in the Python API, before any work ------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("timeout", math.nan, "Option 'timeout' | got nan"),
    ("timeout", 0, "Option 'timeout' | got 0"),
    ("timeout", -5, "Option 'timeout' | got -5"),
    ("timeout", math.inf, "Option 'timeout' | got inf"),
    ("seed", -1, "Option 'seed' | got -1"),
    ("seed", 1.5, "Option 'seed' | got 1.5"),
    ("trials", 0, "Option 'trials' | got 0"),
    ("threads", 0, "Option 'threads' | got 0"),
    ("tolerances", {"out": Tolerance(rtol=math.inf, atol=0.0)}, "rtol"),
    ("tolerances", {"out": Tolerance(rtol=0.0, atol=math.nan)}, "atol"),
    ("batch_sizes", (0,), "Option 'batch_sizes'"),
    ("reference", "float16", "Option 'reference'"),
    ("device", "npu", "Option 'device'"),
    ("matmul_precision", "bf16", "Option 'matmul_precision'"),
    ("bench", "fast", "Option 'bench'"),
])
def test_compare_config_refuses_bad_options_before_any_work(field, value, message, sandbox):
    out = sandbox.root / "o"
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("|", r"\|")):
        compare(seed(), backends=["xla"], out_dir=out, **{field: value})
    assert not out.exists()
    with pytest.raises(UsageError):
        CompareConfig(**{field: value})


@pytest.mark.parametrize("field, value", [("bench_time", math.nan), ("bench_time", math.inf), ("bench_time", -1.0),
                                          ("warmup_time", math.nan), ("min_iters", 0), ("max_iters", 0)])
def test_bench_config_refuses_non_finite_and_negative_values(field, value):
    with pytest.raises(UsageError, match=f"Option '{field}'"):
        BenchConfig(**{field: value})


def test_a_bench_time_the_max_iters_cap_cuts_short_is_said_not_silent(sandbox):
    results = compare(seed(), backends=["xla"], out_dir=sandbox.root / "o", trials=1,
                      bench=BenchConfig(warmup_iters=1, min_iters=2, max_iters=20, bench_time=30.0))
    text = (sandbox.root / "o" / "report.md").read_text()
    assert "max_iters" in text, "the report must say the loop stopped at max_iters before --bench-time"
    assert results.backends["xla"].status.value == "ok"


@pytest.mark.parametrize("value", [0, 0.5, math.nan, math.inf, -1])
def test_diff_thresholds_are_validated_in_the_api(value, seed_results):
    from multiexport.report.regression import diff_results
    from multiexport.results import load_results

    r = load_results(seed_results)
    with pytest.raises(UsageError, match="Option 'max_slowdown'"):
        diff_results(r, r, max_slowdown=value)
    with pytest.raises(UsageError, match="Option 'max_parity_drift'"):
        diff_results(r, r, max_parity_drift=value)


@pytest.mark.parametrize("platforms", [["bogus"], ["cpu", "cpu"], [""]])
def test_export_refuses_unknown_platforms_before_writing(platforms, sandbox):
    out = sandbox.root / "a"
    with pytest.raises(UsageError, match="Option 'platforms'"):
        export(seed(), out, "xla", platforms=platforms)
    assert not out.exists()
    sandbox.assert_untouched()


def test_cli_export_platforms_bogus_is_one_line(sandbox):
    proc = sandbox.main("export", "--platforms", "bogus", "--out-dir", sandbox.root / "a")
    assert_one_line(proc, 2, "Option 'platforms' | got bogus")
    assert not (sandbox.root / "a").exists()


def test_a_bad_option_creates_no_output_directory(sandbox):
    for opts in (["--tol", "out=rtol:inf"], ["--timeout", "nan"], ["--seed", "-1"], ["--max-slowdown", "0"]):
        proc = sandbox.main("compare", "--backends", "xla", "--out-dir", sandbox.root / "o", *opts)
        assert_one_line(proc, 2)
        assert not (sandbox.root / "o").exists(), opts


def test_target_errors_are_typed_in_the_api():
    with pytest.raises(TargetError):
        compare(lambda: None, backends=["xla"], bench=None)
