"""`compare --native`: each artifact also run in its Python-free consumer, beside the Python figures."""

from __future__ import annotations

import json

import pytest

from multiexport import examples
from multiexport.backends.xla.runtime import find_pjrt_plugin
from multiexport.comparison import compare
from multiexport.files.owned import unstamped
from multiexport.native.build import NativeBuildError
from multiexport.report.render import render_markdown
from multiexport.results import Status, load_results

from ..conftest import run_cli


@pytest.fixture(scope="module")
def plugin():
    try:
        return find_pjrt_plugin()
    except NativeBuildError as exc:
        pytest.skip(str(exc))


@pytest.mark.subprocess
def test_native_parity_and_latency_at_every_batch_size(plugin, tmp_path):
    results = compare(examples.mlp_dynamic(), backends=["xla", "savedmodel", "iree", "openvino"], out_dir=tmp_path,
                      trials=1, batch_sizes=(1, 8), native=True)
    for name in ("xla", "savedmodel", "iree", "openvino"):
        row = results.backends[name]
        assert row.status is Status.OK, (name, row.reason)
        native = row.native
        assert native is not None and native.status is Status.OK, (name, native and native.reason)
        assert native.parity.passed and {v.trial for v in native.parity.leaves} == {v.trial for v in row.parity.leaves}
        assert [s.batch for s in native.sizes] == [1, 8]
        python = {s.batch: s for s in row.bench.sizes}
        for s in native.sizes:
            assert s.status is Status.OK and s.median_ms > 0 and s.python_p50_ms > 0, (name, s)
            assert_paired_native(name, s, python[s.batch], results.pairing)
        assert native.command.startswith("cd ") and " env -i " in native.command
    # XLA's refined modules cover every size compare checked or timed (the trials' and the sweep's)
    manifest = json.loads((tmp_path / "xla" / "manifest.json").read_text())
    assert {"b=1", "b=8"} <= set(manifest["native"]["static_modules"])
    again = load_results(tmp_path / "results.json")  # typed on the way back in
    assert again.backends["xla"].native.sizes[0].speedup is not None
    report = (tmp_path / "report.md").read_text()
    assert "## Native consumers (no Python)" in report and "pjrt_c_api" in report and "tf_c_api" in report
    assert "openvino_c_api" in report
    assert render_markdown(again) == unstamped(report)  # the file ends with multiexport's ownership stamp


def assert_paired_native(name, s, python, pairing) -> None:
    """A native size timed in the paired rounds: the Python runner's statistic over every round's slice, and the
    paired ratio to that runner, which the runners' own ratios do not include."""
    assert pairing.mode == "paired" and s.measured == "paired", (name, s.measured)
    lat = s.latency
    assert lat is not None and lat.n == s.calls >= 200 and lat.ci95_low_ms <= lat.p50_ms <= lat.ci95_high_ms, (name, lat)
    assert s.median_ms == lat.p50_ms and s.python_p50_ms == python.latency.p50_ms
    assert s.ratio is not None and {s.ratio.faster, s.ratio.slower} == {name, f"{name} native"}, s.ratio
    assert s.ratio.ci95_low <= s.ratio.ratio <= s.ratio.ci95_high
    speedup = s.speedup  # python / native, from the paired ratio turned the right way
    assert (speedup >= 1) == (s.ratio.faster == f"{name} native"), (speedup, s.ratio)
    assert all(not r.faster.endswith(" native") and not r.slower.endswith(" native") for r in pairing.ratios)


@pytest.mark.subprocess
def test_native_latency_alone_is_at_least_200_calls_with_the_python_statistic(plugin, tmp_path):
    """Sequential mode (no paired rounds): the native figure is one run of at least 200 timed calls, summarised
    as the Python runner's are (p50 with its 95 % interval from every call)."""
    results = compare(examples.seed(), backends=["xla"], out_dir=tmp_path, trials=1, paired=False, native=True)
    s = results.backends["xla"].native.sizes[0]
    assert (results.pairing is None or results.pairing.mode != "paired") and s.measured == "alone" and s.ratio is None
    assert s.calls >= 200 and s.latency.n == s.calls and s.latency.ci95_low_ms <= s.latency.p50_ms
    assert "[" in (tmp_path / "report.md").read_text().split("## Native consumers")[1].split("\n\n")[2]


@pytest.mark.subprocess
def test_a_broken_plugin_fails_the_native_row_only(plugin, tmp_path):
    fake = tmp_path / "not_a_plugin.so"
    fake.write_bytes(b"\x7fELF this is no shared object")
    results = compare(examples.seed(), backends=["xla", "savedmodel"], out_dir=tmp_path / "out", trials=1, bench=None,
                      native=True, native_plugin=str(fake))
    xla = results.backends["xla"]
    assert xla.status is Status.OK  # the Python verdict stands on its own
    assert xla.native.status is Status.RUN_FAILED and "cannot load PJRT plugin" in xla.native.reason
    assert results.backends["savedmodel"].native.status is Status.OK
    assert results.exit_code == 3


def test_a_missing_plugin_is_unavailable_not_a_failure(tmp_path):
    results = compare(examples.seed(), backends=["xla"], out_dir=tmp_path, trials=1, bench=None, native=True,
                      native_plugin=str(tmp_path / "missing.so"))
    assert results.backends["xla"].native.status is Status.UNAVAILABLE
    assert "no such file" in results.backends["xla"].native.reason
    assert results.exit_code == 0


def test_cli_native_prints_outputs_timing_and_command(plugin, tmp_path):
    assert run_cli("export", "--backend", "xla", "--out-dir", tmp_path / "a").returncode == 0
    proc = run_cli("native", tmp_path / "a", "--iters", "20", "--save-outputs", tmp_path / "o.npz")
    assert proc.returncode == 0, proc.stderr
    assert "native pjrt_c_api: 20 calls, median" in proc.stdout and (tmp_path / "o.npz").is_file()
    line = run_cli("native", tmp_path / "a", "--print-command")
    assert line.returncode == 0 and line.stdout.startswith("cd ") and "--plugin" in line.stdout
    bad = run_cli("native", tmp_path / "a", "--print-command", "--iters", "3")
    assert bad.returncode == 2 and "expected it alone" in bad.stderr
