"""Deployment targets: which formats can run where the model will be deployed, judged on the consumer used there.

Today's verdict ranks formats by their Python runners' latency here. A deployer ships to one place: a C++
server calls a C API, a phone runs LiteRT or ONNX Runtime Mobile, a web page runs onnxruntime-web. Each
`DeployTarget` names the consumers that exist there (a format's Python runner, its native C consumer, or the
browser page) and `deploy_verdicts` judges only those, each on its own latency from a results.json, and says
for a target whose every consumer failed (or was not run) what would make one work. Pure functions over
`Results`: nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..errors import present
from ..results import Results, Status
from ..results.bench import LatencyStats
from ..results.native import NATIVE_SUFFIX

PYTHON, NATIVE = "python", "native"


@dataclass(frozen=True)
class Consumer:
    """One way a format runs on a target.

    backend: the results row (a backend name). kind: "python" (the backend's Python runner, timed by the
        compare) or "native" (its Python-free C consumer, `compare --native`).
    api: what the deployer calls there, in words. proxy: why the figure measured here stands in for the
        target's own, when it is not that consumer itself (None: it is).
    """

    backend: str
    kind: str
    api: str
    proxy: str | None = None


@dataclass(frozen=True)
class DeployTarget:
    """A place a model is deployed to.

    name: the `--deploy` value. title: how the verdict names it ("a C++ server"). hardware: what the figures
    assume about it. consumers: the consumers that exist there. absent: formats with no consumer there, why.
    """

    name: str
    title: str
    hardware: str
    consumers: tuple[Consumer, ...]
    absent: str = ""


_PHONE = "measured on this x86 host, not a phone: a ranking of the same files and runtimes, not a phone's figure"
TARGETS: dict[str, DeployTarget] = {t.name: t for t in (
    DeployTarget("cpp-server", "a C++ server", "this machine's CPU", (
        Consumer("xla", NATIVE, "PJRT's C API (pjrt_c_api)"),
        Consumer("openvino", NATIVE, "OpenVINO's C API (ov_run)"),
        Consumer("onnx", NATIVE, "ONNX Runtime's C API (ort_run)"),
        Consumer("litert", NATIVE, "LiteRT's C API"),
        Consumer("savedmodel", NATIVE, "TensorFlow's C API"),
        Consumer("iree", NATIVE, "IREE's runtime (iree-benchmark-module)")),
        "none: every format has a C consumer"),
    DeployTarget("python-server", "a Python server", "this machine's CPU", (
        Consumer("xla", PYTHON, "jax / PJRT from Python"), Consumer("openvino", PYTHON, "openvino's Python API"),
        Consumer("onnx", PYTHON, "onnxruntime's Python API"), Consumer("litert", PYTHON, "ai_edge_litert"),
        Consumer("savedmodel", PYTHON, "tensorflow's Python API"), Consumer("iree", PYTHON, "iree.runtime"))),
    DeployTarget("tf-serving", "a TF Serving fleet", "this machine's CPU", (
        Consumer("savedmodel", NATIVE, "TF Serving (the SavedModel as exported)",
                 proxy="TF's C API over the same SavedModel and TF runtime TF Serving links (no RPC cost)"),),
        "every format but the SavedModel: TF Serving serves SavedModels only"),
    DeployTarget("mobile", "an Android phone", _PHONE, (
        Consumer("litert", NATIVE, "LiteRT's C API (the Android runtime's)", proxy=_PHONE),
        Consumer("onnx", NATIVE, "ONNX Runtime Mobile's C API", proxy=_PHONE)),
        "xla, savedmodel, openvino: no phone runtime; iree: its .vmfb is compiled for this host's triple "
        "(recompile for arm64-android first)"),
    DeployTarget("browser", "a web page", "this machine's CPU through headless Chromium", (
        Consumer("onnx-web", PYTHON, "onnxruntime-web in the page"),),
        "every format but ONNX: TF.js's path from JAX is broken upstream, and no other runtime here runs in a page"),
    DeployTarget("node", "a Node.js server", "this machine's CPU", (
        Consumer("onnx-node", PYTHON, "onnxruntime-node (CPU) in Node.js"),
        Consumer("onnx-web", PYTHON, "onnxruntime-web's wasm build in Node",
                 proxy="the same wasm runtime measured in headless Chromium, not in Node")),
        "every format but ONNX: no Node binding of the other runtimes"),
)}
ALIASES = {"android": "mobile", "cpp": "cpp-server", "python": "python-server", "web": "browser"}


def target(name: str) -> DeployTarget:
    """The target `name` (or an alias: android, cpp, python, web); ValueError with the known names."""
    key = ALIASES.get(name, name)
    if key not in TARGETS:
        raise ValueError(f"Deploy target '{name}' | unknown, expected one of {', '.join([*TARGETS, *ALIASES])}")
    return TARGETS[key]


@dataclass(frozen=True)
class Candidate:
    """One consumer of a target as the results saw it.

    consumer: which. status: the consumer's status (a native consumer's own; not-run when it was not asked for).
    reason: why, when not ok. latency: its latency at the verdict's batch size (None when not timed).
    fix: what would make it work, when it did not (install, a flag, the failure to look into).
    note: what the figure includes beyond the consumer's own cost, when the row says so (the browser
        page's DevTools round trip when the harness timed from Python).
    """

    consumer: Consumer
    status: Status
    reason: str = ""
    latency: LatencyStats | None = None
    fix: str = ""
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.consumer.backend} via {self.consumer.api}"


@dataclass(frozen=True)
class TargetVerdict:
    """The answer for one target.

    target: the target. batch: the batch size judged (None: as exported). pick, runner_up: the fastest
    working consumer and the next. ratio: runner-up's p50 over the pick's; ratio_ci95: its 95% interval;
    ratio_how: "paired" (both timed in the same interleaved rounds) or "medians" (the two p50s, interval
    from their own intervals: not a paired figure). significant: the interval excludes 1.
    candidates: every consumer of the target, working or not. sentence: the verdict in one sentence.
    today: the single verdict's pick (Python runners), to show where the target's answer differs.
    """

    target: DeployTarget
    batch: int | None
    pick: Candidate | None
    runner_up: Candidate | None
    ratio: float | None
    ratio_ci95: tuple[float, float] | None
    ratio_how: str
    significant: bool | None
    candidates: list[Candidate] = field(default_factory=list)
    sentence: str = ""
    today: str | None = None

    @property
    def differs(self) -> bool:
        return self.pick is not None and self.today is not None and self.pick.consumer.backend != self.today


def deploy_verdicts(results: Results, names: Sequence[str] | None = None, batch: int | None = None,
                    today: str | None = None) -> list[TargetVerdict]:
    """One verdict per target in `names` (default: every target) from `results`' rows alone.

    batch: the batch size to judge (default: the first size any consumer was timed at). today: the single
    verdict's pick to compare with (default: the fastest faithful Python runner at that size, as `recommend`).
    """
    chosen = [target(n) for n in (names or list(TARGETS))]
    size = batch if batch is not None else first_batch(results)
    if today is None:
        today = _today(results, size)
    return [_verdict(results, t, size, today) for t in chosen]


def _verdict(results: Results, t: DeployTarget, batch: int | None, today: str | None) -> TargetVerdict:
    candidates = [_candidate(results, c, batch) for c in t.consumers]
    working = sorted((c for c in candidates if c.status is Status.OK and c.latency is not None),
                     key=lambda c: c.latency.p50_ms if c.latency else 0.0)
    pick = working[0] if working else None
    up = working[1] if len(working) > 1 else None
    ratio = interval = None
    how, significant = "", None
    if pick and up and pick.latency and up.latency:
        ratio, interval, how = _ratio(results, pick, up, batch)
        significant = interval[0] > 1.0 if interval else None
    verdict = TargetVerdict(t, batch, pick, up, ratio, interval, how, significant, candidates, today=today)
    return _with_sentence(verdict)


def _candidate(results: Results, consumer: Consumer, batch: int | None) -> Candidate:
    row = results.backends.get(consumer.backend)
    if row is None:
        return Candidate(consumer, Status.NOT_RUN, "not in this compare",
                         fix=f"add it: compare --backends ...,{consumer.backend}")
    if row.precision != "fp32":
        return Candidate(consumer, Status.NOT_RUN, f"a {row.precision} row", fix="judge its fp32 row")
    if row.status is not Status.OK:
        return Candidate(consumer, row.status, row.reason, fix=_fix(row.status, row.reason))
    if consumer.kind == PYTHON:
        sizes = row.bench.sizes if row.bench else []
        latency = next((s.latency for s in sizes if s.batch == batch and s.status is Status.OK), None)
        return Candidate(consumer, Status.OK, "" if latency else "not timed", latency,
                         "" if latency else "time it: compare without --no-bench", _round_trip_note(row))
    native = row.native
    if native is None:
        return Candidate(consumer, Status.NOT_RUN, "its native consumer was not run", fix="compare --native")
    if native.status is not Status.OK:
        return Candidate(consumer, native.status, native.reason, fix=_fix(native.status, native.reason))
    latency = next((s.latency for s in native.sizes if s.batch == batch and s.status is Status.OK), None)
    return Candidate(consumer, Status.OK, "" if latency else "not timed natively", latency,
                     "" if latency else "time it: compare --native without --no-bench")


def _round_trip_note(row) -> str:
    """A page-driven runner (onnx-web) timed from Python: its p50 includes the DevTools round trip, which no
    deployed page pays; the page-side p50 of the same calls is in its runner facts. Empty otherwise (or when
    the harness timed inside the page: `bench.extra["timed_in_page"]`)."""
    bench = row.bench
    page = bench.runner.get("page_ms_p50") if bench else None
    if bench is None or page is None or bench.extra.get("timed_in_page") or bench.runner.get("timed_in_page"):
        return ""
    return (f"timed from Python through the DevTools protocol, round trip included; session.run alone in the "
            f"page: p50 {_ms(float(page))} over {bench.runner.get('calls_timed_both_ways')} calls")


def _fix(status: Status, reason: str) -> str:
    """What would make a failed consumer work, from its status (the reason carries the specifics)."""
    if status in (Status.UNAVAILABLE, Status.NO_GPU):
        return f"install what it names: {reason}" if reason else "install its runtime"
    if status in (Status.PARITY_FAILED, Status.ACCURACY_FAILED):
        return "it ran but gives other numbers: see the parity table before shipping it"
    if status in (Status.UNSUPPORTED_OP, Status.CONVERTER_ERROR, Status.INVALID_MODEL):
        return "another converter route (e.g. --backend-option onnx.route=stablehlo), or rewrite the op it names"
    if status is Status.UNSUPPORTED_DTYPE:
        return "cast the leaf it names to a dtype the format takes"
    if status is Status.SIZE_LIMIT:
        return "external weights (--external-weights always) or a smaller model"
    if status is Status.VERSION_SKEW:
        return "a consumer release that reads what this JAX writes, or an older JAX"
    if status is Status.INSUFFICIENT_MEMORY:
        return ("free the memory the row names, or compare on a machine with more (benchmarks/llm.py --per-format "
                "runs one process at a time)")
    return f"look into the failure ({status.value})"


def _ratio(results: Results, pick: Candidate, up: Candidate, batch: int | None
           ) -> tuple[float, tuple[float, float] | None, str]:
    """Runner-up over pick: the paired ratio from the compare's rounds when both were in them, else the
    medians' ratio with the interval their own 95% intervals allow (lowest/highest)."""
    names = {_runner_name(pick), _runner_name(up)}
    for r in results.pairing.ratios if results.pairing else []:
        if r.batch == batch and {r.faster, r.slower} == names:
            sign = 1 if r.faster == _runner_name(pick) else -1
            low, high = (r.ci95_low, r.ci95_high) if sign == 1 else (1 / r.ci95_high, 1 / r.ci95_low)
            return (r.ratio if sign == 1 else 1 / r.ratio), (low, high), "paired"
    a = present(pick.latency, "a working candidate was timed")
    b = present(up.latency, "a working candidate was timed")
    interval = (b.ci95_low_ms / a.ci95_high_ms, b.ci95_high_ms / a.ci95_low_ms) if a.ci95_low_ms > 0 else None
    return b.p50_ms / a.p50_ms, interval, "medians"


def _runner_name(c: Candidate) -> str:
    return c.consumer.backend + (NATIVE_SUFFIX if c.consumer.kind == NATIVE else "")


def _with_sentence(v: TargetVerdict) -> TargetVerdict:
    from dataclasses import replace

    t = v.target
    if v.pick is None:
        untimed = [c for c in v.candidates if c.status is Status.OK]
        if untimed:  # faithful but not timed (--no-bench): no ranking, and no failure either
            said = ", ".join(c.consumer.backend for c in untimed)
            return replace(v, sentence=f"For {t.title}: {said} passed parity but nothing was timed, so there is no "
                                       f"ranking ({untimed[0].fix}).")
        broken = "; ".join(f"{c.consumer.backend} ({c.status.value}): {c.fix}" for c in v.candidates)
        return replace(v, sentence=f"For {t.title}: no consumer worked. To make one work: {broken}.")
    lat = present(v.pick.latency, "the pick was timed")
    proxy = "".join(f" [figure: {why}]" for why in (v.pick.consumer.proxy, v.pick.note) if why)
    text = f"For {t.title}: ship {v.pick.consumer.backend} via {v.pick.consumer.api}, p50 {_ms(lat.p50_ms)}"
    if v.runner_up is not None and v.ratio is not None:
        ci = f" [{v.ratio_ci95[0]:.2f}-{v.ratio_ci95[1]:.2f}]" if v.ratio_ci95 else ""
        how = "paired" if v.ratio_how == "paired" else "from the two medians"
        lead = (f"{v.ratio:.2f}x faster than {v.runner_up.consumer.backend}" if v.significant else
                f"tied with {v.runner_up.consumer.backend} within noise ({v.ratio:.2f}x)")
        text += f", {lead} ({how}{ci})"
    else:
        text += ", the only consumer there that worked"
    return replace(v, sentence=text + proxy + ".")


def _ms(value: float) -> str:
    return f"{value * 1000:.3g} us" if value < 1 else f"{value:.3g} ms"


def first_batch(results: Results) -> int | None:
    for row in results.backends.values():
        for s in (row.bench.sizes if row.bench else []):
            if s.latency is not None:
                return s.batch
    return None


def _today(results: Results, batch: int | None) -> str | None:
    """The single verdict's pick: the fastest faithful fp32 Python runner at `batch` (as `recommend` picks)."""
    timed = []
    for name, row in results.backends.items():
        if row.status is Status.OK and row.precision == "fp32" and row.bench:
            timed += [(s.latency.p50_ms, name) for s in row.bench.sizes if s.batch == batch and s.latency]
    return min(timed)[1] if timed else None


def verdict_table(verdicts: Sequence[TargetVerdict]) -> str:
    """Markdown: one row per target (its pick, p50 and interval, the lead, the single verdict beside it)."""
    lines = ["| " + " | ".join(DEPLOY_HEADER) + " |", "|" + "---|" * len(DEPLOY_HEADER)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in verdict_rows(verdicts)])


DEPLOY_HEADER = ("target", "ship", "consumer", "p50 (95% CI)", "lead over next", "today's single verdict",
                 "failed or not run")


def verdict_rows(verdicts: Sequence[TargetVerdict]) -> list[list[str]]:
    """One row per target (DEPLOY_HEADER's columns), unescaped: the renderers escape for their medium."""
    rows = []
    for v in verdicts:
        failed = ", ".join(f"{c.consumer.backend} ({c.status.value})" for c in v.candidates
                           if c.status is not Status.OK) or "-"
        today = f"{v.today}{' (differs)' if v.differs else ''}" if v.today else "-"
        if v.pick is None or v.pick.latency is None:
            rows.append([v.target.name, "none", "-", "-", "-", today, failed])
            continue
        lat = v.pick.latency
        lead = "-" if v.ratio is None else (
            f"{v.ratio:.2f}x vs {v.runner_up.consumer.backend if v.runner_up else '?'}"
            + (f" [{v.ratio_ci95[0]:.2f}-{v.ratio_ci95[1]:.2f}] {v.ratio_how}" if v.ratio_ci95 else "")
            + ("" if v.significant else " (tie)"))
        api = v.pick.consumer.api + (" (proxy)" if v.pick.consumer.proxy else "")
        rows.append([v.target.name, v.pick.consumer.backend, api,
                     f"{_ms(lat.p50_ms)} ({_ms(lat.ci95_low_ms)}-{_ms(lat.ci95_high_ms)})", lead, today, failed])
    return rows
