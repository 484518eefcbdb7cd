"""The tables every report shows, as rows of plain strings (escaped by whichever medium renders them)."""

from __future__ import annotations

from ..errors import present
from ..results import BackendResult, BenchResult, Results, Status
from .text import human_bytes, mib, one_line


def shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def binding_table(results: Results) -> tuple[list[str], list[list[str]]]:
    """Leaf x backend: the parameter each format binds the leaf to, or 'dropped'."""
    names = [n for n, r in results.backends.items() if r.binding]
    header = ["input leaf", "shape", "dtype"] + names
    rows = []
    for leaf in results.signature.inputs:
        row = [leaf.name, shape_text(leaf.shape), leaf.dtype]
        for n in names:
            b = next((b for b in results.backends[n].binding if b.name == leaf.name), None)
            if b is not None and b.used:
                row.append(str(b.param))
            elif b is not None and b.caller_key:
                row.append(f"{b.caller_key} (fed, unread)")
            else:
                row.append("dropped")
        rows.append(row)
    return header, rows


COLD_HEADER = ["backend", "load s", "compile s", "first call s", "process start to first output s", "peak RSS",
               "artifact size", "threads (asked / runtime's report)", "calling path"]


def threads_text(runner: dict) -> str:
    """Threads asked / threads the runtime reports using (each runner's describe() names its own report:
    `Runner.threads_key`)."""
    asked = runner.get("threads_requested", "?")
    seen = runner.get("threads_reported")
    return f"{asked} / {seen if seen not in (None, '') else 'not reported'}"


def cold_rows(results: Results) -> list[list[str]]:
    rows = []
    reference = results.reference.bench
    # its process made exports before it loaded (run.serve): its resident figures hold what they left there
    said = "jax (reference, after exports in its process)" if reference and reference.extra.get(
        "exported_before_load") else "jax (reference)"
    entries: list[tuple[str, BenchResult | None]] = [(said, reference)]
    entries += [(n, r.bench) for n, r in results.backends.items() if r.status is Status.OK]
    for name, bench in entries:
        measured = bench.measured() if bench else []
        if not measured:
            continue
        bench = present(bench, "measured is non-empty only when bench is")
        first = measured[0]
        runner = bench.runner
        threads = threads_text(runner)
        rows.append([
            name, f"{bench.load_s:.3f}", "-" if first.compile_s is None else f"{first.compile_s:.3f}",
            "-" if first.first_call_s is None else f"{first.first_call_s:.4f}",
            _opt(bench.extra.get("process_start_to_first_output_s"), "{:.2f}"),
            mib(bench.memory.get("peak_rss_bytes")),
            "-" if bench.artifact_bytes is None else human_bytes(bench.artifact_bytes), str(threads),
            one_line(runner.get("calling_path", ""), 200),
        ])
    return rows


EXPORT_HEADER = ["backend", "export s (wall, in its worker)", "export CPU s", "of which one-time setup",
                 "export peak RSS", "weights stored"]


def export_rows(results: Results) -> list[list[str]]:
    rows = []
    for name, r in results.backends.items():
        if r.export_seconds is None:
            continue
        setup = r.export_setup or {}
        seconds = setup.get("seconds") if isinstance(setup, dict) else None
        share = (f"{seconds:.2f} s ({100 * seconds / r.export_seconds:.0f}%): {setup.get('what', '')}"
                 if isinstance(seconds, (int, float)) and seconds and r.export_seconds else "-")
        rows.append([name, f"{r.export_seconds:.2f}", _opt(r.export_cpu_seconds, "{:.2f}"), share,
                     mib(r.export_peak_rss_bytes) + (f" (its child {mib(r.export_child_peak_rss_bytes)})"
                                                     if r.export_child_peak_rss_bytes else ""),
                     storage_text(r.weights or {})])
    return rows


def storage_text(w: dict) -> str:
    """Where one artifact keeps the weights, e.g. 'external: weights.safetensors (1.2 GiB)'."""
    try:
        if w.get("storage") == "external":
            return f"external: {w.get('file', '?')} ({human_bytes(w.get('external_bytes', 0))})"
        if w.get("storage") == "embedded":
            return f"embedded ({human_bytes(w.get('embedded_bytes', 0))})"
    except (TypeError, ValueError):
        return "?"
    return "-"


def weights_line(results: Results) -> str:
    w = results.signature.weights
    how = ("baked in (closed over; where each artifact keeps them: Export time table)" if w.mode == "baked"
           else "taken as input leaves")
    return (f"Weights: {how} (constants {human_bytes(w.baked_bytes)} in {w.baked_arrays} arrays; input leaves "
            f"{human_bytes(w.input_bytes)})")


PARITY_HEADER = ["backend", "output leaf", "verdict", "max err / scale", "max abs", "elementwise rel", "max ULP",
                 "mismatch ratio", "min rtol to pass", "tolerance", "worst trial"]


def parity_rows(results: Results) -> list[list[str]]:
    """Per row and output leaf, its worst trial's figures and verdict. A reduced-precision row is judged by its
    accuracy budget, not by float tolerances: its verdict and last-but-one column are the budget's (a float
    FAIL beside a row the budget judged ok would be a false verdict)."""
    rows = []
    for name, r in results.backends.items():
        if not r.parity:
            continue
        budget = {leaf.leaf: leaf for leaf in r.accuracy.leaves} if r.accuracy is not None else None
        for leaf, v in r.parity.worst().items():
            s = v.stats
            verdict, held_to = ("pass" if v.passed else "FAIL"), v.tolerance.text()
            if budget is not None and leaf in budget:
                verdict = "FAIL (budget)" if budget[leaf].failed else "pass (budget)"
                held_to = f"budget {budget[leaf].budget.text()}"
            if not s.compared:
                rows.append([name, leaf, "FAIL" if budget is None else verdict, "shape differs", "-", "-", "-", "-",
                             "-", held_to, v.trial])
                continue
            rows.append([name, leaf, verdict, f"{s.err_scale:.3g}", f"{s.max_abs:.3g}",
                         f"{s.max_rel:.3g}", "-" if s.max_ulp is None else str(s.max_ulp), f"{s.mismatch_ratio:.3g}",
                         f"{s.min_rtol:.3g}", held_to, v.trial])
    return rows


TIMING_HEADER = ["batch", "backend", "p50 ms", "x fastest", "95% interval", "lead", "GFLOP/s", "of peak",
                 "floor ms"]


def timing_rows(results: Results) -> list[list[str]]:
    """Per batch size, every timed runner against the fastest faithful one: the ratio measured over the same
    interleaved rounds (paired) with its interval, and the compute it achieved against the machine's peak."""
    rows = []
    timed = {"jax": results.reference.bench} if results.reference.bench else {}
    timed.update({n: r.bench for n, r in results.backends.items() if r.status is Status.OK and r.bench})
    batches: dict = {}
    for name, bench in timed.items():
        for size in bench.measured():
            batches.setdefault(size.batch, []).append((name, size))
    for batch, entries in batches.items():
        entries.sort(key=lambda e: e[1].latency.p50_ms)
        # "faithful" is float parity's word: a reduced-precision row is measured against it, never named so
        fp32 = [n for n, _ in entries if n != "jax" and results.backends[n].precision == "fp32"]
        fastest = fp32[0] if fp32 else next((n for n, _ in entries if n != "jax"), entries[0][0])
        best = dict(entries)[fastest].latency.p50_ms
        for name, size in entries:
            ratio = results.pairing.ratio(batch, fastest, name) if results.pairing and name != fastest else None
            if name == fastest:
                times, interval, lead = "1.00", "", "fastest faithful" if name in fp32 else ""
            elif ratio is not None:
                value = ratio.ratio if ratio.slower == name else 1 / ratio.ratio
                low, high = (ratio.ci95_low, ratio.ci95_high) if ratio.slower == name else (1 / ratio.ci95_high,
                                                                                          1 / ratio.ci95_low)
                times, interval = f"{value:.2f}", f"{low:.2f}-{high:.2f}"
                lead = "beyond noise" if ratio.significant else "tie (within noise)"
            else:
                times, interval, lead = f"{size.latency.p50_ms / best:.2f}", "", "sequential"
            rows.append(["-" if batch is None else str(batch), name, f"{size.latency.p50_ms:.4g}", times, interval, lead,
                         _opt(size.gflops_per_s, "{:.3g}"),
                         "" if size.fraction_of_peak is None else f"{100 * size.fraction_of_peak:.1f}%",
                         _floor(results, name, size.latency.p50_ms)])
    return rows


def _floor(results: Results, name: str, p50_ms: float) -> str:
    """The runtime's per-call floor, and the share of this call it accounts for (overhead vs compute)."""
    floor = results.pairing.floors.get(name) if results.pairing else None
    if floor is None:
        return ""
    return f"{floor:.3g} ({100 * min(floor / p50_ms, 1.0):.0f}% of the call)" if p50_ms > 0 else f"{floor:.3g}"


def timing_line(results: Results) -> str:
    """How latency was measured (paired rounds or one runner after another), and the machine's peak."""
    p = results.pairing
    if p is None:
        return ""
    text = p.reason or p.mode
    if p.mode == "paired":
        text += f"; {p.rounds} interleaved rounds of {p.slice_s:.3g} s per runner per batch size"
    if p.peak_gflops:
        text += f"; machine peak {p.peak_gflops:.3g} GFLOP/s ({p.peak_how})"
    for name, why in p.failures.items():
        text += f"; {name}: its paired worker failed ({why})"
    if p.floors:
        text += ("; floor: the p50 of one add on 8 floats through the same runtime and calling path (what any call "
                 "costs there), timed the same way in this run")
    return text


NATIVE_HEADER = ["backend", "native consumer", "status", "max err / scale", "batch", "native p50 ms [95% CI]",
                 "Python p50 ms", "native speedup [95% CI]", "calls", "measured"]


def native_rows(results: Results) -> list[list[str]]:
    """compare --native: each consumer's verdict and, per batch size, its in-program latency beside Python's."""
    rows = []
    for name, r in results.backends.items():
        n = r.native
        if n is None:
            continue
        worst = n.parity.headline() if n.parity else None
        err = f"{worst.stats.err_scale:.3g}" if worst is not None and worst.stats.compared else ""
        head = [name, n.consumer, n.status.value, err]
        if not n.sizes:
            rows.append(head + ["", "", "", "", "", ""])
        for s in n.sizes:
            batch = "-" if s.batch is None else str(s.batch)
            if s.status is not Status.OK:
                rows.append(head + [batch, s.status.value, "", "", "", ""])
                continue
            rows.append(head + [batch, _native_p50(s), _opt(s.python_p50_ms, "{:.4g}"), _native_speedup(s),
                                str(s.calls), s.measured or "alone"])
    return rows


def _native_p50(s) -> str:
    if s.latency is None:  # a results.json of an older multiexport: the program's median alone
        return f"{s.median_ms:.4g}"
    return f"{s.latency.p50_ms:.4g} [{s.latency.ci95_low_ms:.4g}, {s.latency.ci95_high_ms:.4g}]"


def _native_speedup(s) -> str:
    """Python p50 / native p50 (> 1: native faster); with the paired ratio's interval, turned the same way."""
    if s.speedup is None:
        return ""
    if s.ratio is None:
        return f"{s.speedup:.2f}x"
    lo, hi = s.ratio.ci95_low, s.ratio.ci95_high
    if not s.ratio.faster.endswith(" native"):
        lo, hi = 1 / hi, 1 / lo
    return f"{s.speedup:.2f}x [{lo:.2f}, {hi:.2f}]" + ("" if s.ratio.significant else " (tie)")


def native_lines(results: Results) -> list[str]:
    """The reason behind every native verdict that is not ok, and the command that repeats each run."""
    lines = []
    for name, r in results.backends.items():
        if r.native is None:
            continue
        if r.native.reason:
            lines.append(f"{name} native ({r.native.status.value}): {r.native.reason}")
        for s in r.native.sizes:
            if s.reason:
                lines.append(f"{name} native at batch {'-' if s.batch is None else s.batch} ({s.status.value}): {s.reason}")
        if r.native.command:
            lines.append(f"{name} native command: {r.native.command}")
    return lines


def excluded_lines(results: Results) -> list[str]:
    seen: dict[str, str] = {}
    for r in results.backends.values():
        for e in (r.parity.excluded if r.parity else []):
            seen.setdefault(e.trial, e.reason)
    return [f"trial '{t}' left out: {why}" for t, why in seen.items()]


def setup_lines(results: Results) -> list[str]:
    """Device and timing mode: what the figures mean."""
    plan = results.device or {}
    lines = []
    if plan:
        lines.append(f"Device: requested {plan.get('requested')}, chosen {plan.get('chosen')}"
                     + (f" ({plan['note']})" if plan.get("note") else ""))
        for name, found in (plan.get("found") or {}).items():
            if isinstance(found, dict):
                lines.append(f"{name}: {'sees a GPU' if found.get('gpu') else 'no GPU'} ({found.get('reason', '')})")
    configs = [b.config for b in [results.reference.bench] + [r.bench for r in results.backends.values()] if b]
    if configs:
        c = configs[0]
        mode = ("end to end: host inputs copied to the device and outputs copied back in every timed call"
                if c.get("include_transfers") else
                "inputs already on the device, outputs left there; every timed call synchronised")
        lines.append(f"Timing: {mode}; {c.get('warmup_iters')} warm-up calls, then at least {c.get('min_iters')} calls "
                     f"and {c.get('bench_time')} s per batch size; each backend in its own worker process, one at a time")
    threads = results.config.get("threads") if isinstance(results.config, dict) else None
    lines.append(f"Threads: every runtime got {threads or results.environment.get('usable_cores', '?')} intra-op "
                 "threads (the runtime's own report is in the cold-start table)")
    return lines


def environment_lines(results: Results) -> list[str]:
    env = results.environment or {}
    versions = env.get("versions", {}) if isinstance(env.get("versions"), dict) else {}
    return [f"CPU: {env.get('cpu', '?')} ({env.get('cores', '?')} cores, {env.get('usable_cores', '?')} usable)",
            f"Python {env.get('python', '?')} on {env.get('platform', '?')}",
            ", ".join(f"{k} {v}" for k, v in versions.items())]


def version_rows(results: Results) -> list[list[str]]:
    """Per backend: what produced the artifact and what a consumer needs."""
    rows = []
    for name, r in results.backends.items():
        if not r.versions and not r.requires:
            continue
        produced = ", ".join(f"{k} {v}" for k, v in r.versions.items() if k not in ("python", "numpy", "multiexport"))
        needs = "; ".join(f"{k} {v}" for k, v in r.requires.items() if k != "note")
        rows.append([name, one_line(produced, 300), one_line(needs, 300), one_line(r.requires.get("note", ""), 300)])
    return rows


VERSION_HEADER = ["backend", "produced by", "needs", "which consumers qualify"]


def _opt(v, fmt) -> str:
    return "-" if v is None else fmt.format(v)


def failed(row: BackendResult) -> bool:
    return row.status.is_failure


TIMELINE_HEADER = ["step (where the compare's seconds went, largest first)", "began at s", "seconds", "share"]


def timeline_rows(results: Results, top: int = 8) -> list[list[str]]:
    """The compare's longest steps, largest first, each with its share of the whole run (as the supervising
    process waited: exports and paired workers overlap in other processes)."""
    steps = results.timeline
    if not steps:
        return []
    total = steps[-1].at_s + steps[-1].seconds
    rows = [[s.what, f"{s.at_s:.1f}", f"{s.seconds:.1f}", f"{100 * s.seconds / total:.0f}%" if total > 0 else "-"]
            for s in sorted(steps, key=lambda s: -s.seconds)[:top]]
    return rows + [[f"the whole compare ({len(steps)} steps)", "0.0", f"{total:.1f}", "100%"]]

