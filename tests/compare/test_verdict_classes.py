"""Verdict classes of compare on real artifacts: what is no evidence is left out and said, never a failure."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import Target
from multiexport.comparison import compare
from multiexport.exporting.registry import get_backend
from multiexport.measure.bench import BenchConfig
from multiexport.report.recommend import recommend
from multiexport.results import Status

BENCH = BenchConfig(warmup_iters=1, warmup_time=0.0, min_iters=5, bench_time=0.05)


def sqrt_edge() -> Target:
    """Defined for x <= 1; the example sits just below 1, where perturbed trials can step over it."""
    return Target(lambda x: jnp.sqrt(1.0 - x), args=(np.linspace(0.95, 0.999, 16).astype(np.float32),),
                  name="sqrt_edge")


def flatten() -> Target:
    """A reshape over a symbolic batch: IREE 3.13 cannot lower stablehlo.dynamic_reshape, so it falls back to one
    module per size."""
    return Target(lambda batch: {"flat": batch["x"].reshape(-1) * 2.0},
                  args=({"x": np.arange(12, dtype=np.float32).reshape(3, 4)},), name="flatten",
                  symbolic_batch="b", batch_leaves=("batch.*",))


def test_a_trial_outside_the_models_domain_is_left_out_and_said(tmp_path):
    results = compare(sqrt_edge(), backends=["xla"], out_dir=tmp_path, trials=4, bench=None)
    row = results.backends["xla"]
    assert row.status is Status.OK, row.reason
    excluded = {e.trial: e.reason for e in row.parity.excluded}
    assert excluded and all("jax.jit's own output out is not finite" in why for why in excluded.values())
    assert set(excluded).isdisjoint(row.parity.trials)  # no verdict rests on them
    assert "left out" in (tmp_path / "report.md").read_text()


@pytest.mark.skipif(not get_backend("iree").available().ok, reason="iree unavailable")
def test_a_symbolic_module_iree_cannot_compile_is_checked_timed_and_run_natively_at_every_size(tmp_path):
    """IREE compiles one module per size the compare checks (it once compiled the example's alone, and b=1 and b=5
    went unchecked and untimed): every trial is checked, each once and under its own name, every size timed, the
    native consumer runs each trial in the model of its size; the verdict says the artifact takes those sizes only."""
    results = compare(flatten(), backends=["xla", "iree"], out_dir=tmp_path, trials=1, dim_sizes={"b": (1, 3, 5)},
                      batch_sizes=(1, 3), bench=BENCH, paired=False, native=True)
    iree = results.backends["iree"]
    assert iree.status is Status.OK, iree.reason
    assert "not supported by this artifact" not in iree.reason
    assert iree.supports["dims"] == {"b": [1, 3, 5]}
    assert sorted(iree.parity.trials) == sorted(t.name for t in results.trials)  # each trial once, no extra
    sizes = {s.batch: s for s in iree.bench.sizes}
    assert all(sizes[b].status is Status.OK and sizes[b].latency is not None for b in (1, 3))
    native = iree.native
    assert native.status is Status.OK and native.parity.passed, native.reason
    assert sorted(native.parity.trials) == sorted(t.name for t in results.trials)
    assert {s.batch for s in native.sizes if s.status is Status.OK and s.latency is not None} == {1, 3}
    assert "/static/b3 " in native.command  # the example's model, in its own directory
    assert "iree takes b=1,3,5 only" in recommend(results).verdict, recommend(results).verdict
