"""One --threads reaches every runtime: each runtime's own report of its pool, per row (reference included)."""

from __future__ import annotations

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.exporting.registry import get_backend, names
from multiexport.measure.bench import BenchConfig
from multiexport.report.tables import threads_text
from multiexport.results import Status

pytestmark = pytest.mark.slow  # minutes: deselect with `make test-fast`

AVAILABLE = [n for n in names() if get_backend(n).available().ok]


@pytest.mark.subprocess
def test_one_thread_asked_is_one_thread_reported_by_every_runtime(tmp_path):
    """XLA and IREE are counted as the OS sees their pools (tf_XLAEigen, iree-worker threads); TF, ONNX Runtime and
    OpenVINO read their own setting back; LiteRT has no getter and reports the value it was given."""
    results = compare(examples.mlp(), backends=AVAILABLE, out_dir=tmp_path, trials=1, threads=1,
                      bench=BenchConfig(warmup_iters=2, min_iters=5, bench_time=0.05),
                      target_spec="multiexport.examples:mlp")
    rows = {"jax": results.reference.bench, **{n: r.bench for n, r in results.backends.items()
                                              if r.status is Status.OK}}
    assert set(rows) >= {"jax", "xla"}
    for name, bench in rows.items():
        assert threads_text(bench.runner) == "1 / 1", (name, bench.runner)
