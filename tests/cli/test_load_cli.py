"""`multiexport load`: its help, and bad input as one line with exit code 2 before any worker starts."""

from __future__ import annotations

import pytest

from multiexport.results.load import read_load_results


def test_help_explains_the_scenarios(cli):
    proc = cli("load", "--help")
    assert proc.returncode == 0
    for flag in ("--p99-ms", "--rates", "--batch-sizes", "--lanes", "--scenario", "--rounds", "--driver",
                 "--samples-per-query", "--baseline", "multistream"):
        assert flag in proc.stdout
    assert "auto (the default" in " ".join(proc.stdout.split())  # the default driver, and what each does


def test_a_baseline_without_the_formats_is_one_line(cli, tmp_path):
    from multiexport import api
    from multiexport.leaves import load_target

    api.export(load_target("multiexport.examples:mlp"), out_dir=tmp_path / "new" / "xla", backend="xla")
    (tmp_path / "base").mkdir()
    proc = cli("load", tmp_path / "new", "--baseline", tmp_path / "base", "--out-dir", tmp_path / "out")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--baseline" in proc.stderr and "holds none of xla" in proc.stderr and not (tmp_path / "out").exists()
    proc = cli("load", tmp_path / "new", "--driver", "c", "--out-dir", tmp_path / "out")
    assert proc.returncode == 2 and "--driver" in proc.stderr


def test_a_directory_without_artifacts_is_one_line(cli, tmp_path):
    proc = cli("load", tmp_path, "--out-dir", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "has no manifest.json" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_bad_bound_is_one_line(cli, tmp_path):
    proc = cli("load", tmp_path, "--p99-ms", "-3")
    assert proc.returncode == 2 and "--p99-ms" in proc.stderr


@pytest.mark.slow
def test_compare_load_adds_load_json_and_the_reports_section(cli, tmp_path):
    out = tmp_path / "out"
    proc = cli("compare", "--backends", "xla,onnx", "--load", "offline", "--load-seconds", "0.2", "--load-rounds", "1",
               "--out-dir", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = read_load_results(out / "load.json")
    assert sorted(r.name for r in loaded.rows) == ["onnx", "xla"]
    assert all(r.offline[0].samples_per_s > 0 for r in loaded.rows)
    # under the default driver (auto) both have C loops (ort_run, pjrt_run): each was probed in both drivers and
    # ran in the one the probe chose
    from multiexport.run.load import faster_driver

    for r in loaded.rows:
        probe = r.throughput_config["driver_probe"]
        assert r.throughput_config["driver"] == faster_driver(probe), probe
    report = (out / "report.md").read_text()
    assert "## Load" in report and "<h2>Load</h2>" in (out / "report.html").read_text()
    assert "| max req/s at p99 bound | offline peak /s |" in report  # the summary table's load columns
    # re-rendered from results.json, the section stays
    assert cli("report", out / "results.json", "--out-dir", out).returncode == 0
    assert "<h2>Load</h2>" in (out / "report.html").read_text()


def test_compare_refuses_a_bad_bound_before_any_work(cli, tmp_path):
    proc = cli("compare", "--load", "server", "--p99-ms", "0", "--out-dir", tmp_path / "out")
    assert proc.returncode == 2 and "--p99-ms" in proc.stderr and not (tmp_path / "out").exists()


def test_diff_fails_on_a_throughput_drop_in_load_json_beside_the_results(cli, tmp_path):
    from multiexport.results.load import LoadResults, LoadRow, OfflinePoint

    from ..report.builders import results, row

    for name in ("base", "new"):
        (tmp_path / name).mkdir()
        results(row("onnx")).write(tmp_path / name / "results.json")
    assert cli("diff", tmp_path / "base" / "results.json", tmp_path / "new" / "results.json").returncode == 0
    for name, peak, low, high in (("base", 1000.0, 950.0, 1050.0), ("new", 400.0, 380.0, 420.0)):
        point = OfflinePoint(None, samples_per_s=peak, low=low, high=high, per_round=[low, high], calls=10)
        LoadResults(rows=[LoadRow("onnx", "/a", offline=[point])]).write(tmp_path / name / "load.json")
    proc = cli("diff", tmp_path / "base" / "results.json", tmp_path / "new" / "results.json")
    assert proc.returncode == 1 and "offline samples/s@example" in proc.stdout


def test_the_terminal_load_table_names_each_row_driver_and_the_verdicts(capsys):
    from multiexport.cli.output import print_load_summary
    from multiexport.report.load import verdicts
    from multiexport.results.load import LoadResults, LoadRow, OfflinePoint, ServerResult

    def row(name, rate, driver):
        return LoadRow(name, f"/a/{name}", lanes=2, throughput_config={"how": "lanes", "driver": driver},
                       single_stream_p50_ms=0.5, server=ServerResult(10.0, "ladder", [], rate, rate * 0.9, rate * 1.1),
                       offline=[OfflinePoint(None, samples_per_s=2 * rate, low=rate, high=3 * rate,
                                             per_round=[rate, 3 * rate], calls=100)])

    rows = [row("onnx", 300.0, "native"), row("iree", 900.0, "python"),
            LoadRow("bad", "/a/bad", status="run-failed", reason="it broke")]
    server, single, differ = verdicts(rows, 10.0)
    print_load_summary(LoadResults(config={"p99_ms": 10.0, "rounds": 3}, rows=rows, server_verdict=server,
                                   single_stream_verdict=single, rankings_differ=differ))
    out = capsys.readouterr().out
    assert "under load (p99 bound 10.0 ms, 3 rounds)" in out and "it broke" in out and "run-failed" in out
    assert "300 [270, 330]" in out and "driver=native" in out and "driver=python" in out
    assert "load: at p99 <= 10 ms, among the C loops (not limited by the harness), ship onnx: 300 req/s" in out
