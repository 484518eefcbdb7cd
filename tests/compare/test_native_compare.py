"""`compare --native`: each artifact also run in its Python-free consumer, beside the Python figures."""

from __future__ import annotations

import json

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.files.owned import unstamped
from multiexport.native.build import NativeBuildError, find_pjrt_plugin
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
        for s in native.sizes:
            assert s.status is Status.OK and s.median_ms > 0 and s.python_p50_ms > 0 and s.calls >= 20, (name, s)
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
    assert run_cli("export", "--backend", "xla", "--out", tmp_path / "a").returncode == 0
    proc = run_cli("native", tmp_path / "a", "--iters", "20", "--out", tmp_path / "o.npz")
    assert proc.returncode == 0, proc.stderr
    assert "native pjrt_c_api: 20 calls, median" in proc.stdout and (tmp_path / "o.npz").is_file()
    line = run_cli("native", tmp_path / "a", "--print-command")
    assert line.returncode == 0 and line.stdout.startswith("cd ") and "--plugin" in line.stdout
    bad = run_cli("native", tmp_path / "a", "--print-command", "--iters", "3")
    assert bad.returncode == 2 and "expected it alone" in bad.stderr
