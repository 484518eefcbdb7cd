"""report.load: the server verdict and whether its ranking differs from the single-stream one, the tables, and the
latency-vs-throughput plot."""

from __future__ import annotations

import dataclasses
import math

import pytest

from multiexport.report.load import multistream_verdict, plot, render_html, render_markdown, verdicts
from multiexport.results.load import LoadResults, LoadRow, MultiStreamResult, OfflinePoint, RatePoint, ServerResult


def _row(name, max_rate, low, high, single_ms, points=()):
    server = ServerResult(10.0, "ladder", list(points), max_rate, low, high)
    return LoadRow(name, f"/a/{name}", lanes=2, throughput_config={"how": "test", "streams": 2},
                   single_stream_p50_ms=single_ms, server=server,
                   offline=[OfflinePoint(None, samples_per_s=500.0, low=450.0, high=550.0, per_round=[450.0, 550.0],
                                         calls=100)])


def _point(rate, p99, ok=True):
    return RatePoint(rate, rate * 0.99, 200, 2, p99 / 3, p99 / 2, p99, p99 * 0.9, p99 * 1.1, ok)


def test_server_verdict_names_the_best_and_next_and_sees_a_ranking_change():
    # a is faster one call at a time, b holds the higher rate under the bound
    rows = [_row("a", 100.0, 90.0, 110.0, 1.0), _row("b", 300.0, 280.0, 320.0, 2.0)]
    server, single, differ = verdicts(rows, 10.0)
    assert server == "at p99 <= 10 ms, ship b: 300 req/s, the next best a: 100 req/s"
    assert single.startswith("single stream (one call at a time): a at p50 1 ms")
    assert differ is True


def test_same_ranking_and_overlapping_rounds():
    rows = [_row("a", 300.0, 200.0, 320.0, 1.0), _row("b", 250.0, 240.0, 260.0, 2.0)]
    server, _, differ = verdicts(rows, 10.0)
    assert "within the noise" in server and differ is False


def test_no_rate_under_the_bound():
    rows = [_row("a", None, 0.0, 0.0, 1.0)]
    server, _, differ = verdicts(rows, 10.0)
    assert "no format held any rate" in server and differ is None


def test_failed_row_and_tables():
    results = LoadResults(config={"p99_ms": 10.0, "scenario": "both", "rounds": 2, "seconds": 1.0},
                          rows=[_row("a", 100.0, 90.0, 110.0, 1.0, [_point(50.0, 4.0), _point(100.0, 9.0)]),
                                LoadRow("b", "/a/b", status="load-failed", reason="cannot read model")])
    md = render_markdown(results)
    assert "| a | ok | 100 [90, 110] | 500 [450, 550] (batch -) | - | 1 | test; streams=2 |" in md
    assert "| b | load-failed | - | - | - | - | cannot read model |" in md
    assert "MultiStream" not in md  # no row measured it
    assert "| a | 100 | 99 | 200 |" in md


def test_plot_has_a_line_per_format_and_the_bound_and_skips_infinite_points():
    rows = [_row("a", 100.0, 90.0, 110.0, 1.0, [_point(50.0, 4.0), _point(100.0, 9.0), _point(200.0, math.inf, False)]),
            _row("b", 50.0, 50.0, 50.0, 2.0, [_point(25.0, 3.0), _point(50.0, 8.0)])]
    svg = plot(LoadResults(config={"p99_ms": 10.0}, rows=rows))
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 4  # the +inf point left out
    assert "p99 bound 10 ms" in svg and "stroke-dasharray" in svg
    assert "<svg" in render_html(LoadResults(config={"p99_ms": 10.0}, rows=rows))
    assert plot(LoadResults(config={"p99_ms": 10.0}, rows=[_row("a", None, 0, 0, 1.0)])) == ""


def test_a_compare_report_gets_the_load_section_only_when_load_json_is_there(tmp_path):
    from multiexport.report.load import with_load_section

    page = "<html><body><h1>r</h1></body></html>"
    assert with_load_section(tmp_path, "# r\n", page) == ("# r\n", page)
    rows = [_row("a", 100.0, 90.0, 110.0, 1.0, [_point(50.0, 4.0), _point(100.0, 9.0)])]
    LoadResults(config={"p99_ms": 10.0}, rows=rows, server_verdict="at p99 <= 10 ms, ship a: 100 req/s").write(
        tmp_path / "load.json")
    md, html = with_load_section(tmp_path, "# r\n", page)
    assert md.startswith("# r\n\n## Load") and "ship a: 100 req/s" in md and "\n### Server" in md
    assert html.index("<h2>Load</h2>") < html.index("</body>") and "<svg" in html


def _offline_row(name, peak, low, high, max_rate=None, rate_low=None, rate_high=None):
    server = ServerResult(10.0, "ladder", [], max_rate, rate_low, rate_high) if max_rate is not None else None
    return LoadRow(name, f"/a/{name}", server=server,
                   offline=[OfflinePoint(8, samples_per_s=peak, low=low, high=high, per_round=[low, high], calls=10)])


def test_the_gate_fails_a_throughput_drop_past_the_threshold_with_rounds_apart():
    from multiexport.report.load import throughput_checks

    base = LoadResults(rows=[_offline_row("a", 1000.0, 950.0, 1050.0, 200.0, 190.0, 210.0),
                             _offline_row("b", 1000.0, 950.0, 1050.0), _offline_row("c", 500.0, 490.0, 510.0)])
    now = LoadResults(rows=[_offline_row("a", 700.0, 650.0, 720.0, 199.0, 150.0, 205.0),  # 1.43x lower, apart
                            _offline_row("b", 700.0, 600.0, 960.0)])  # 1.43x lower, but the rounds overlap
    checks = {(c.backend, c.check): c for c in throughput_checks(base, now, 1.2)}
    assert checks[("a", "offline samples/s@8")].verdict == "regression"
    assert checks[("a", "max req/s@p99<=10ms")].verdict == "slower"  # within the threshold
    assert checks[("b", "offline samples/s@8")].verdict == "slower"
    assert checks[("c", "throughput")].verdict == "missing"
    # the default threshold (CROSS_RUN_THROUGHPUT, 2x) does not flag a 1.43x drop
    assert all(c.verdict != "regression" for c in throughput_checks(base, now, None) if c.backend == "a")
    assert "drivers differ" not in checks[("a", "offline samples/s@8")].detail
    # auto's probe put a in its Python lanes in the baseline run and in its C loop now: the detail says so
    probed = dataclasses.replace(base.rows[0], throughput_config={"driver": "python",
                                                                  "driver_probe": {"native": 9.0, "python": 12.0}})
    (check, *_) = throughput_checks(LoadResults(rows=[probed]), LoadResults(rows=[_driven(now.rows[0], "native")]), 1.2)
    assert check.detail.endswith("drivers differ: Python lanes, faster than its C loop then, C loop now)"), check.detail


def test_a_tie_on_the_ladder_is_ranked_by_the_offline_peak_and_said():
    import dataclasses

    a = _row("a", 100.0, 100.0, 100.0, 1.0)
    b = dataclasses.replace(_row("b", 100.0, 100.0, 100.0, 2.0),
                            offline=[OfflinePoint(None, samples_per_s=900.0, low=850.0, high=950.0)])
    server, _, differ = verdicts([a, b], 10.0)
    assert server.startswith("at p99 <= 10 ms, ship b: 100 req/s, the next best a: 100 req/s")
    assert "same ladder rate" in server and differ is True


def _multi(name, p99, low, high):
    return LoadRow(name, f"/a/{name}", multistream=MultiStreamResult(8, 300, 3, p99 / 4, p99 / 2, p99, low, high, 900.0))


def test_multistream_verdict_table_and_column():
    # b has the lower p99 query latency; its rounds' range is apart from a's, then overlapping it
    apart = LoadResults(config={"p99_ms": 10.0}, rows=[_multi("a", 5.0, 4.5, 5.5), _multi("b", 2.0, 1.8, 2.2)])
    assert multistream_verdict(apart) == ("multistream (8 samples per query): b at p99 2 ms, the next best a: 5 ms")
    close = LoadResults(config={"p99_ms": 10.0}, rows=[_multi("a", 5.0, 2.1, 5.5), _multi("b", 2.0, 1.8, 2.2)])
    assert multistream_verdict(close).endswith("(the rounds' ranges overlap: within the noise on this machine)")
    md = render_markdown(apart)
    assert "**multistream (8 samples per query): b at p99 2 ms" in md
    assert "| b | ok | - | - | 2 [1.8, 2.2] (8/query) | - |" in md
    assert "| a | 8 | 300 | 1.25 | 2.5 | 5 [4.5, 5.5] | 900 |" in md
    assert "<h3>MultiStream: query latency</h3>" in render_html(apart)


def test_the_compare_report_gets_load_columns_and_the_server_verdict_under_its_own(tmp_path):
    import dataclasses

    from multiexport.report.render import write_reports

    from .builders import results, row

    compared = dataclasses.replace(results(row("onnx"), row("xla")), out_dir=str(tmp_path))
    md, _ = write_reports(compared, tmp_path)
    plain = md.read_text()
    assert "max req/s at p99 bound" not in plain and "Under load" not in plain  # no load.json: as before
    rows = [_row("onnx", 300.0, 280.0, 320.0, 1.0, [_point(300.0, 9.0)])]
    LoadResults(config={"p99_ms": 10.0}, rows=rows, server_verdict="at p99 <= 10 ms, ship onnx: 300 req/s").write(
        tmp_path / "load.json")
    md, page = write_reports(compared, tmp_path)
    text, html = md.read_text(), page.read_text()
    summary = text[text.index("## Summary"):]
    header = next(line for line in summary.splitlines() if line.startswith("| backend"))
    assert header.endswith("| max req/s at p99 bound | offline peak /s |")
    assert "| 300 \\[280, 320\\] (p99 &lt;= 10 ms) | 500 \\[450, 550\\] |" in summary  # onnx's, escaped
    xla = next(line for line in summary.splitlines() if line.startswith("| xla"))
    assert xla.endswith("|  |  |")  # measured under load by nobody
    # the server verdict follows the single-stream one at the top, before any table
    top = text[:text.index("## Summary")]
    assert "**Under load: at p99 <= 10 ms, ship onnx: 300 req/s**" in top
    assert top.index("**Under load") > top.index("**") and top.index("**Under load") < top.index("|")
    assert html.index("Under load: at p99 &lt;= 10 ms") < html.index("<h2>Summary</h2>")
    assert "<th>max req/s at p99 bound</th>" in html


def _per_round(name, figures):
    return LoadRow(name, f"/a/{name}", offline=[OfflinePoint(None, samples_per_s=sorted(figures)[len(figures) // 2],
                                                             low=min(figures), high=max(figures),
                                                             per_round=list(figures), calls=10)])


def test_the_paired_rule_needs_every_round_slower_and_the_median_past_the_threshold(tmp_path):
    from multiexport.report.load import gate_load, paired_throughput_checks
    from multiexport.report.regression import Diff

    rows = [_per_round("baseline:a", [1000, 1100, 900]), _per_round("a", [800, 850, 700]),  # 1.25-1.29x each round
            _per_round("baseline:b", [1000, 1100, 900]), _per_round("b", [1100, 800, 700]),  # one round faster
            _per_round("baseline:c", [1000, 1000, 1000]), _per_round("c", [850, 860, 870]),  # 1.16x: under 1.25
            _per_round("baseline:d", [1000, 1000, 1000])]
    checks = {c.backend: c for c in paired_throughput_checks(LoadResults(rows=rows), None)}
    assert checks["a"].verdict == "regression" and checks["a"].kind == "paired A/B" and checks["a"].rounds == 3
    assert checks["a"].ratio == pytest.approx(900 / 700) and "slower in every round" in checks["a"].detail
    assert checks["b"].verdict == "slower" and checks["c"].verdict == "slower"
    assert checks["d"].verdict == "missing" and "baseline:a" not in checks
    assert paired_throughput_checks(LoadResults(rows=rows), 1.3)[0].verdict == "slower"  # --max-slowdown given
    assert paired_throughput_checks(LoadResults(rows=rows), 1.1)[2].verdict == "regression"
    # the gate: the paired verdict for a, b, c, d; no cross-run check of the same formats against BASE's load.json
    (tmp_path / "base").mkdir()
    (tmp_path / "new").mkdir()
    LoadResults(rows=[_per_round("a", [5000, 5000, 5000])]).write(tmp_path / "base" / "load.json")
    LoadResults(rows=rows).write(tmp_path / "new" / "load.json")
    gated = gate_load(Diff(checks=[], max_slowdown=None), tmp_path / "base", tmp_path / "new")
    assert [(c.backend, c.kind) for c in gated.checks if c.backend == "a"] == [("a", "paired A/B")]
    assert verdicts(rows, 10.0)[0] == ""  # no server figures; baselines would be no candidates either


def test_the_load_page_and_its_plot_render_in_chromium_without_requests(tmp_path):
    from multiexport.report.load import write_load_reports
    from multiexport.report.screenshot import find_browser, screenshot

    from .test_browser import png_pixels_vary

    if find_browser() is None:
        pytest.skip("no Chromium on PATH (.ci/run installs it with apt-get)")
    rows = [_row("a", 100.0, 90.0, 110.0, 1.0, [_point(50.0, 4.0), _point(100.0, 9.0), _point(200.0, 30.0, False)]),
            _row("b", 50.0, 50.0, 50.0, 2.0, [_point(25.0, 3.0), _point(50.0, 8.0), _point(100.0, 25.0, False)])]
    _, page = write_load_reports(LoadResults(config={"p99_ms": 10.0}, rows=rows), tmp_path)
    png = tmp_path / "load.png"
    assert screenshot(page, png, width=1000, height=1400) == []
    assert png_pixels_vary(png)


def _driven(row, driver):
    return dataclasses.replace(row, throughput_config={**row.throughput_config, "driver": driver})


def test_rows_of_different_drivers_are_ranked_apart():
    # c and d ran in their C loops, p in Python lanes: p's higher figure is not ranked against theirs (the Python
    # lanes may be what limits a row), each group is ranked within itself and named
    rows = [_driven(_row("c", 300.0, 280.0, 320.0, 2.0), "native"),
            _driven(_row("p", 900.0, 880.0, 920.0, 1.0), "python"),
            _driven(_row("d", 100.0, 90.0, 110.0, 1.5), "native")]
    server, _, differ = verdicts(rows, 10.0)
    assert server == ("at p99 <= 10 ms, among the C loops (not limited by the harness), ship c: 300 req/s, the next "
                      "best d: 100 req/s; among the Python lanes (the harness may limit them, not the runtime), "
                      "p: 900 req/s")
    assert differ is True  # within the C loops: c holds more, d is faster one call at a time
    # one driver for every row: the verdict as before, no group named
    same = [_driven(r, "native") for r in rows]
    assert verdicts(same, 10.0)[0] == "at p99 <= 10 ms, ship p: 900 req/s, the next best c: 300 req/s"
    multi = LoadResults(config={"p99_ms": 10.0}, rows=[_driven(_multi("a", 5.0, 4.5, 5.5), "native"),
                                                       _driven(_multi("b", 2.0, 1.8, 2.2), "python")])
    assert multistream_verdict(multi) == ("multistream (8 samples per query): among the C loops (not limited by the "
                                          "harness), a at p99 5 ms; among the Python lanes (the harness may limit "
                                          "them, not the runtime), b at p99 2 ms")


def test_the_summary_columns_name_the_driver_when_the_rows_ran_under_two(tmp_path):
    from multiexport.report.load import load_columns

    rows = [_driven(_row("onnx", 300.0, 280.0, 320.0, 1.0), "native"),
            _driven(_row("iree", 90.0, 80.0, 95.0, 1.0), "python")]
    LoadResults(config={"p99_ms": 10.0}, rows=rows).write(tmp_path / "load.json")
    _, out = load_columns(tmp_path, ["backend"], [{"backend": "onnx"}, {"backend": "iree"}])
    assert out[0]["max req/s at p99 bound"] == "300 [280, 320] (p99 <= 10 ms) [C loop]"
    assert out[1]["offline peak /s"] == "500 [450, 550] [Python lanes]"
    LoadResults(config={"p99_ms": 10.0}, rows=[_driven(r, "native") for r in rows]).write(tmp_path / "load.json")
    _, out = load_columns(tmp_path, ["backend"], [{"backend": "onnx"}, {"backend": "iree"}])
    assert out[0]["max req/s at p99 bound"] == "300 [280, 320] (p99 <= 10 ms)"  # one driver: nothing to tell apart


def test_a_python_row_that_beat_its_c_loop_is_ranked_with_the_c_loops(tmp_path):
    # l ran in its Python lanes because auto's probe found them faster than its own C loop (what the harness costs
    # did not limit it): ranked with c, not apart; i ran in Python lanes with no C loop to probe (IREE): apart
    from multiexport.report.load import load_columns

    lanes = dataclasses.replace(_row("l", 400.0, 380.0, 420.0, 1.0), throughput_config={
        "driver": "python", "driver_probe": {"native": 32300.0, "python": 41700.0}})
    rows = [_driven(_row("c", 300.0, 280.0, 320.0, 2.0), "native"), lanes,
            _driven(_row("i", 900.0, 880.0, 920.0, 1.5), "python")]
    server, _, _ = verdicts(rows, 10.0)
    assert server == ("at p99 <= 10 ms, among the C loops and the Python lanes faster than their C loop (not limited "
                      "by the harness), ship l: 400 req/s, the next best c: 300 req/s; among the Python lanes (the "
                      "harness may limit them, not the runtime), i: 900 req/s")
    # a probe the C loop won leaves a Python row (a fallback after it) apart: only a faster probe counts
    slower = dataclasses.replace(lanes, throughput_config={"driver": "python",
                                                           "driver_probe": {"native": 5.0, "python": 4.0}})
    assert "among the C loops (not limited by the harness), ship c" in verdicts([rows[0], slower], 10.0)[0]
    LoadResults(config={"p99_ms": 10.0}, rows=rows).write(tmp_path / "load.json")
    _, out = load_columns(tmp_path, ["backend"], [{"backend": n} for n in ("c", "l", "i")])
    assert out[1]["max req/s at p99 bound"] == "400 [380, 420] (p99 <= 10 ms) [Python lanes, faster than its C loop]"
