"""Checking the rows in paired mode: every cold start alone, then the untimed parity trials two runners at a time."""

from __future__ import annotations

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig
from multiexport.results import Status

BENCH = BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.2, max_iters=20_000)


@pytest.mark.subprocess
def test_paired_rows_are_cold_started_one_by_one_then_checked_together_with_each_verdict_its_own(tmp_path, fault_backends):
    """Three paired runners: a faithful one, a numerically wrong one, one whose runtime refuses its inputs. Each
    cold start is a step of its own, one after another; then one step runs every runner's trials, two at a time,
    before the rounds. The verdicts are each runner's own: the wrong one fails parity on the trials it ran
    beside the others, the refusing one fails alone (at its cold start, first, as before), the faithful one passes
    on every trial and keeps its cold start figures."""
    names = ["xla", "xla_perturbed", "xla_raise"]
    results = compare(examples.mlp(), backends=names, out_dir=tmp_path, trials=2, bench=BENCH, threads=2,
                      target_spec="multiexport.examples:mlp")
    steps = [step.what for step in results.timeline]
    colds = [steps.index(f"{name}: cold start in its paired worker") for name in names]
    parity = steps.index(f"parity: {', '.join(names)} run their trials in their paired workers, 2 at a time "
                         "(nothing is timed meanwhile)")
    rounds = next(i for i, what in enumerate(steps) if what.startswith("paired benchmark"))
    assert colds == sorted(colds) and colds[-1] < parity < rounds, steps
    assert not any("cold start and run" in what for what in steps), steps
    good = results.backends["xla"]
    assert good.status is Status.OK and good.parity.passed
    assert set(good.parity.trials) == {t.name for t in results.trials}
    size = good.bench.sizes[0]
    assert size.first_call_s is not None and size.measured == "paired"  # the cold start's figures, then the rounds'
    wrong = results.backends["xla_perturbed"]
    assert wrong.status is Status.PARITY_FAILED and "Output 'out.logits'" in wrong.reason
    refused = results.backends["xla_raise"]
    assert refused.status is Status.BENCH_FAILED and "runtime refused the inputs" in refused.reason  # at its cold start
    assert refused.bench is None
