"""Typed results built by hand, for report tests that need exact figures."""

from __future__ import annotations

from multiexport.results import (
    BackendResult,
    BenchResult,
    LatencyStats,
    LeafStats,
    LeafVerdict,
    ParityVerdict,
    Reference,
    Results,
    SignatureData,
    SizeResult,
    Status,
    Tolerance,
)


def latency(p50=1.0, lo=0.9, hi=1.1) -> LatencyStats:
    return LatencyStats(n=100, min_ms=lo, p50_ms=p50, p90_ms=hi, p99_ms=hi, max_ms=hi, mean_ms=p50, std_ms=0.05,
                        ci95_low_ms=lo, ci95_high_ms=hi)


def row(name="onnx", status="ok", err=1e-7, p50=1.0, lo=0.9, hi=1.1, batch=8, rtol=1e-5, reason="",
        versions=None) -> BackendResult:
    stats = LeafStats(True, True, "float32", "float32", [4], [4], count=4, max_abs=err, max_rel=err, err_scale=err)
    verdict = LeafVerdict("t0", "out", status != "parity-failed", Tolerance(rtol, 4e-6), stats)
    bench = BenchResult(load_s=0.1, sizes=[SizeResult(batch=batch, latency=latency(p50, lo, hi))], memory={},
                        artifact_bytes=10, runner={}, config={})
    return BackendResult(name, Status(status), reason, parity=ParityVerdict(name, verdict.passed, [verdict], ["t0"]),
                         bench=bench, versions=dict(versions or {}))


def results(*rows: BackendResult, target="t") -> Results:
    return Results(target=target, signature=SignatureData(target, [], []), trials=[],
                   backends={r.backend: r for r in rows}, reference=Reference(), environment={}, out_dir=".")
