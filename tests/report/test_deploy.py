"""Deployment targets (report.deploy): each target judges only the consumers that exist there, on their own
latency (the native consumer's where the target is native), says the lead with its interval, shows where the
answer differs from the single Python-runner verdict, and says what would make a target work when nothing did.
From a real results.json of a small compare, and from hand-built results where exact figures are needed."""

from __future__ import annotations

import dataclasses

import pytest

from multiexport.report.deploy import TARGETS, deploy_verdicts, target, verdict_table
from multiexport.results import Status, load_results
from multiexport.results.bench import Pairing, Ratio
from multiexport.results.native import NativeResult, NativeSize

from ..conftest import run_cli
from .builders import latency, results, row


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    """The seed through xla and onnx (with their native consumers) and `--deploy node`: the compare adds the node
    target's consumers (onnx-node's and onnx-web's rows). The output directory and the command's stdout."""
    out = tmp_path_factory.mktemp("deploy") / "c"
    proc = run_cli("compare", "--backends", "xla,onnx", "--native", "--deploy", "node", "--out-dir", out,
                   "--bench-time", "0.05")
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr  # 3: no node or Chromium here (unavailable rows)
    return out, proc.stdout


@pytest.fixture(scope="module")
def seed_results(seed_run):
    """The seed's real results.json, read back: xla and onnx with their native consumers, and onnx-web."""
    return load_results(seed_run[0] / "results.json")


def test_a_cpp_server_is_judged_on_the_native_consumers_figures(seed_results):
    (v,) = deploy_verdicts(seed_results, ["cpp-server"])
    ok = [c for c in v.candidates if c.status is Status.OK]
    assert {c.consumer.backend for c in ok} == {"xla", "onnx"}
    for c in ok:
        native = seed_results.backends[c.consumer.backend].native
        assert native is not None
        assert c.latency == next(s.latency for s in native.sizes if s.batch == v.batch)  # not the Python figure
    assert v.pick is not None and v.pick.latency is not None
    assert v.pick.latency.p50_ms == min(c.latency.p50_ms for c in ok if c.latency)
    assert v.sentence.startswith(f"For a C++ server: ship {v.pick.consumer.backend} via ")
    # native consumers are paired with their own Python runner, not with each other: the medians' ratio
    assert v.ratio_how == "medians" and v.ratio_ci95 is not None
    missing = {c.consumer.backend: c for c in v.candidates if c.status is Status.NOT_RUN}
    assert set(missing) == {"openvino", "litert", "savedmodel", "iree"}
    assert missing["openvino"].fix == "add it: compare --backends ...,openvino"


def test_a_python_server_is_judged_on_the_python_runners(seed_results):
    (v,) = deploy_verdicts(seed_results, ["python-server"])
    assert v.pick is not None
    row_ = seed_results.backends[v.pick.consumer.backend]
    assert row_.bench is not None and v.pick.latency in [s.latency for s in row_.bench.sizes]
    assert v.today == v.pick.consumer.backend and not v.differs  # the single verdict is the Python server's


def test_a_target_whose_consumers_did_not_run_says_what_would_make_one_work(seed_results):
    no_web = dataclasses.replace(seed_results, backends={
        name: r for name, r in seed_results.backends.items() if name != "onnx-web"})
    browser, tf = deploy_verdicts(no_web, ["browser", "tf-serving"])
    assert browser.pick is None
    assert browser.sentence == ("For a web page: no consumer worked. To make one work: onnx-web (not-run): add it: "
                                "compare --backends ...,onnx-web.")
    assert tf.pick is None and "savedmodel (not-run)" in tf.sentence
    without_native = dataclasses.replace(seed_results, backends={
        name: dataclasses.replace(r, native=None) for name, r in seed_results.backends.items()})
    (cpp,) = deploy_verdicts(without_native, ["cpp-server"])
    assert cpp.pick is None and "xla (not-run): compare --native" in cpp.sentence


def test_the_lead_is_the_paired_ratio_and_the_answer_can_differ_from_todays():
    """A C++ server: openvino's C API 1.4x faster than PJRT's, paired; today's verdict (Python runners) is onnx."""
    def native(p50, lo, hi):
        return NativeResult("c_api", Status.OK, sizes=[NativeSize(batch=8, latency=latency(p50, lo, hi))])

    xla = dataclasses.replace(row("xla", p50=2.0, lo=1.9, hi=2.1), native=native(1.4, 1.35, 1.45))
    ov = dataclasses.replace(row("openvino", p50=1.5, lo=1.4, hi=1.6), native=native(1.0, 0.95, 1.05))
    onnx = dataclasses.replace(row("onnx", p50=1.0, lo=0.9, hi=1.1), native=native(1.2, 1.1, 1.3))
    res = results(xla, ov, onnx)
    res.pairing = Pairing("paired", ratios=[Ratio(8, "openvino native", "xla native", 1.41, 1.3, 1.5, True)])
    (v,) = deploy_verdicts(res, ["cpp-server"])
    assert (v.pick.consumer.backend, v.runner_up.consumer.backend) == ("openvino", "onnx")  # type: ignore[union-attr]
    assert v.ratio_how == "medians" and v.ratio == pytest.approx(1.2)  # no paired ratio for this pair
    res.pairing = Pairing("paired", ratios=[Ratio(8, "openvino native", "onnx native", 1.19, 1.1, 1.3, True)])
    (v,) = deploy_verdicts(res, ["cpp-server"])
    assert v.ratio_how == "paired" and v.ratio_ci95 == (1.1, 1.3) and v.significant
    assert v.today == "onnx" and v.differs
    assert v.sentence == ("For a C++ server: ship openvino via OpenVINO's C API (ov_run), p50 1 ms, 1.19x faster "
                          "than onnx (paired [1.10-1.30]).")
    table = verdict_table([v])
    assert "| cpp-server | openvino |" in table and "onnx (differs)" in table


def test_overlapping_intervals_are_a_tie_not_a_lead():
    a = row("onnx-web", p50=1.0, lo=0.8, hi=1.2)
    (v,) = deploy_verdicts(results(a), ["browser"])
    assert v.sentence.endswith("the only consumer there that worked.")
    b = row("onnx-node", p50=1.1, lo=0.9, hi=1.3)
    (v,) = deploy_verdicts(results(a, b), ["node"])
    assert v.significant is False and "tied with onnx-node within noise (1.10x)" in v.sentence
    assert "[figure: the same wasm runtime measured in headless Chromium, not in Node]" in v.sentence


def test_a_page_timed_from_python_says_its_figure_includes_the_round_trip():
    web = row("onnx-web", p50=3.0, lo=2.5, hi=3.5)
    assert web.bench is not None
    web.bench.runner.update(page_ms_p50=0.015, calls_timed_both_ways=7)
    (v,) = deploy_verdicts(results(web), ["browser"])
    assert v.sentence.endswith("[figure: timed from Python through the DevTools protocol, round trip included; "
                               "session.run alone in the page: p50 15 us over 7 calls].")
    web.bench.extra["timed_in_page"] = True  # the harness timed inside the page: the figure is the page's
    (v,) = deploy_verdicts(results(web), ["browser"])
    assert "round trip" not in v.sentence


def test_a_failed_consumer_names_its_failure_and_the_fix():
    broken = row("litert", status="unsupported-op", reason="no TFLite builtin for stablehlo.dynamic_gather")
    (v,) = deploy_verdicts(results(broken), ["mobile"])
    (lite,) = [c for c in v.candidates if c.consumer.backend == "litert"]
    assert lite.status is Status.UNSUPPORTED_OP and "dynamic_gather" in lite.reason
    assert "litert (unsupported-op): another converter route" in v.sentence


def test_targets_and_aliases():
    assert set(TARGETS) == {"cpp-server", "python-server", "tf-serving", "mobile", "browser", "node"}
    assert [c.backend for c in TARGETS["node"].consumers] == ["onnx-node", "onnx-web"]
    assert target("android") is TARGETS["mobile"]
    with pytest.raises(ValueError, match="Deploy target 'phone' | unknown, expected one of cpp-server"):
        target("phone")


def test_deploy_adds_what_its_targets_need_and_the_report_judges_them(seed_run, seed_results, tmp_path):
    """`--deploy node` ran onnx-node and onnx-web though neither was asked for (both opt-in); the terminal,
    report.md and report.html give the node verdict first; `multiexport report` re-renders it from results.json."""
    out, stdout = seed_run
    assert seed_results.config["deploy"] == ["node"]
    assert list(seed_results.backends) == ["xla", "onnx", "onnx-node", "onnx-web"]
    assert seed_results.backends["onnx"].native is not None
    (v,) = deploy_verdicts(seed_results, ["node"])
    assert "deploy: " + v.sentence in " ".join(stdout.split())  # the terminal wraps long lines
    report = (out / "report.md").read_text()
    assert "## Verdict per deployment target (compare --deploy)" in report
    assert report.count("| node |") == 1 and "| cpp-server |" not in report  # only the asked target is judged
    assert v.sentence.split(",")[0].replace("'", "&#x27;") in (out / "report.html").read_text()
    proc = run_cli("report", out / "results.json", "--out-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.md").read_text() == report


def test_without_deploy_the_report_shows_every_target_beside_the_single_verdict():
    from multiexport.report.render import render_html, render_markdown

    lite = dataclasses.replace(row("litert", p50=0.5, lo=0.45, hi=0.55), native=NativeResult(
        "c", Status.OK, sizes=[NativeSize(8, latency=latency(0.9, 0.85, 0.95))]))
    onnx = dataclasses.replace(row("onnx", p50=1.0, lo=0.9, hi=1.1), native=NativeResult(
        "c", Status.OK, sizes=[NativeSize(8, latency=latency(0.3, 0.28, 0.32))]))
    res = results(lite, onnx)
    report = render_markdown(res)
    assert "## Per deployment target, beside the single verdict" in report and "**For " not in report
    for name in TARGETS:
        assert f"| {name} |" in report
    # a C++ server ships onnx (its C API 3x faster than LiteRT's), where the single verdict says litert
    assert "| cpp-server | onnx | ONNX Runtime's C API (ort_run) | 300 us (280 us-320 us) | 3.00x vs litert" in report
    assert "| litert (differs) |" in report
    assert "| browser | none | - | - | - | litert | onnx-web (not-run) |" in report
    assert "Per deployment target, beside the single verdict" in render_html(res)
    res.config = {"deploy": ["mobile"]}
    report = render_markdown(res)
    assert "**For an Android phone: ship onnx via ONNX Runtime Mobile's C API" in report
    assert "| cpp-server |" not in report


def test_an_unknown_target_is_one_line_and_exit_2():
    proc = run_cli("compare", "--backends", "xla", "--deploy", "phone", "--no-bench")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "Deploy target 'phone' | unknown, expected one of cpp-server, python-server, tf-serving, mobile, browser, "
        "node, android, cpp, python, web")


def test_the_config_adds_the_consumers_and_native_once():
    from multiexport.comparison import CompareConfig

    config = CompareConfig(backends=("onnx",), deploy=("web", "browser", "tf-serving"))
    assert config.deploy == ("browser", "tf-serving")
    assert config.backends == ("onnx", "onnx-web", "savedmodel") and config.native  # TF Serving: TF's C API
    plain = CompareConfig(backends=("onnx",), deploy=("node", "python"))
    assert not plain.native and plain.deploy == ("node", "python-server")
    assert plain.backends == ("onnx", "onnx-node", "onnx-web", "xla", "openvino", "litert", "savedmodel", "iree")


def test_a_faithful_consumer_that_was_not_timed_is_no_failure():
    web = row("onnx-web")
    assert web.bench is not None
    web = dataclasses.replace(web, bench=dataclasses.replace(web.bench, sizes=[]))
    (v,) = deploy_verdicts(results(web), ["browser"])
    assert v.pick is None
    assert v.sentence == ("For a web page: onnx-web passed parity but nothing was timed, so there is no ranking "
                          "(time it: compare without --no-bench).")


def test_the_browser_line_says_whether_webgpu_was_offered_and_why_not():
    from multiexport.report.deploy_report import deploy_lines, deploy_section

    web = row("onnx-web")
    assert web.bench is not None
    web.bench.runner.update(execution_provider="wasm", webgpu={"ok": False, "reason": "navigator.gpu is absent"})
    res = results(web)
    res.config = {"deploy": ["browser"]}
    section = deploy_section(res)
    assert section is not None and section.notes == [
        "browser: the onnx-web figure is onnxruntime-web's wasm execution provider; no WebGPU row: navigator.gpu is "
        "absent."]
    assert deploy_lines(res)[-1] == "deploy: " + section.notes[0]
    web.bench.runner.update(webgpu={"ok": True, "reason": "adapter google swiftshader"})
    assert "(a software adapter on the CPU: its figures are not a GPU's); time it with --backend-option " \
           "onnx-web.execution_provider=webgpu." in deploy_section(res).notes[0]  # type: ignore[union-attr]


def test_without_deploy_the_terminal_has_a_line_per_target():
    from multiexport.report.deploy_report import deploy_lines

    lines = deploy_lines(results(row("litert", p50=0.5, lo=0.45, hi=0.55), row("onnx")))
    assert len(lines) == len(TARGETS)
    assert "deploy python-server: For a Python server: ship litert via ai_edge_litert, p50 500 us, 2.00x faster " \
           "than onnx (from the two medians [1.64-2.44])." in lines
    assert "deploy browser: not judged, none of its consumers ran (compare --deploy browser runs what it needs)" in lines
