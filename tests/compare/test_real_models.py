"""The quick subset of the real-model zoo (benchmarks/real_models) through `compare`: every row's verdict is pinned.

Each quick model runs parity-only (trials 1) on every backend that is available here, and each row's status
must equal the table below: `ok`, or the known converter limitation with its category and a piece of its
reason. A verdict that changes (a new false `parity-failed`, a limitation that turns into a silent `ok`, a
category that drifts) fails here. When a converter or multiexport really changes a verdict, update the
table and say why in the commit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks import real_models
from benchmarks.real_models import REAL_MODELS, select
from multiexport.comparison import compare
from multiexport.exporting.registry import get_backend
from multiexport.results import Status

pytestmark = pytest.mark.slow  # minutes: deselect with `make test-fast`

BACKENDS = ("xla", "savedmodel", "onnx", "iree", "litert", "openvino")
OK = (Status.OK, "")
# jax2onnx 0.17's layout pass removes a Transpose pair around Relu but keeps a stale NHWC value_info on the
# NCHW value, so onnx.checker(full_check) rejects the file; the ONNX backend drops the converter's optional
# intermediate shape hints, validates again and says so in a warning, and parity judges the graph.
REPAIRED = "removed all"

# model -> backend -> (status, a substring of the row's reason; "" for none). Measured with jax 0.10.2,
# TF 2.21, jax2onnx 0.17, ORT 1.32, IREE 3.13, ai_edge_litert 2.3, OpenVINO 2026.4.
EXPECTED: dict[str, dict[str, tuple[Status, str]]] = {
    "linen_mlp": dict.fromkeys(BACKENDS, OK),
    # IREE cannot compile the symbolic reshape of these two: the static-size fallback compiles one module per
    # size the compare checks, so every trial is checked (the row's reason names no trial it was not given).
    "linen_cnn": dict.fromkeys(BACKENDS, OK),
    "linen_batchnorm": dict.fromkeys(BACKENDS, OK),
    "linen_attention_mask": dict.fromkeys(BACKENDS, OK),
    "nnx_mlp": dict.fromkeys(BACKENDS, OK),
    "nnx_batchnorm": dict.fromkeys(BACKENDS, OK),
    "eqx_mlp": dict.fromkeys(BACKENDS, OK),
}

QUICK = [m for m in REAL_MODELS if m.quick]


def _available() -> list[str]:
    return [name for name in BACKENDS if get_backend(name).available().ok]


def test_the_quick_subset_covers_what_users_hit():
    tags = {t for m in QUICK for t in m.tags}
    assert {"linen", "nnx", "eqx", "symbolic-batch", "batchnorm", "attention", "mask"} <= tags
    assert 6 <= len(QUICK) <= 8 and [m.name for m in QUICK] == list(EXPECTED)
    assert select(tags=["quick"]) == QUICK
    for m in REAL_MODELS:  # every target string resolves to the package's re-exported factory
        module, _, attr = m.target.partition(":")
        assert module == "benchmarks.real_models" and getattr(real_models, attr) is m.factory


def test_a_model_loads_only_its_own_framework():
    """As a user's flax file would: loading a linen model must not import equinox (with equinox loaded, the ONNX
    export also imports jax2onnx's equinox plugins, ~14 CPU-s), nor the package import any framework."""
    import subprocess
    import sys

    code = ("import sys, benchmarks.real_models as r; before = {'flax', 'equinox'} & set(sys.modules); "
            "r.linen_mlp(); print(sorted(before), 'equinox' in sys.modules, 'flax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(real_models.__file__).parents[2]).stdout.split()
    assert out == ["[]", "False", "True"], out


@pytest.mark.parametrize("model", QUICK, ids=lambda m: m.name)
def test_quick_real_model_verdicts(model, tmp_path):
    backends = _available()
    expected = EXPECTED[model.name]
    t0 = time.perf_counter()
    results = compare(model.factory(), backends=backends, out_dir=tmp_path, trials=1, bench=None,
                      **model.compare_options())
    seconds = time.perf_counter() - t0
    got = {b: (r.status, r.reason) for b, r in results.backends.items()}
    wrong = {b: f"got {s.value}: {reason[:300]!r}, expected {expected[b][0].value} with {expected[b][1]!r}"
             for b, (s, reason) in got.items() if s is not expected[b][0] or expected[b][1] not in reason}
    assert not wrong, f"{model.name} ({seconds:.0f} s): verdicts changed:\n" + "\n".join(f"  {b}: {w}" for b, w in wrong.items())
    for b, row in results.backends.items():
        if row.status is not Status.OK:
            assert row.parity is None and row.reason, (b, row.reason)  # a failed row carries no parity, and says why
            continue
        verdict = row.parity
        assert verdict is not None and verdict.passed and len(verdict.trials) >= 2, (b, verdict)
        assert not verdict.excluded and not verdict.notes, (b, verdict.excluded, verdict.notes)
        assert "not supported by this artifact" not in row.reason, (b, row.reason)  # every trial checked
        assert len(set(verdict.trials)) == len(verdict.trials), (b, verdict.trials)  # one name, one feed
        for leaf in results.signature.outputs:  # no vacuous pass: every output leaf compared finite numbers
            compared = [v for v in verdict.leaves if v.name == leaf.name]
            assert compared and all(v.stats.compared for v in compared), (b, leaf.name)
            assert max(v.stats.finite for v in compared) > 0, (b, leaf.name)
    if model.name == "linen_batchnorm" and "onnx" in results.backends:
        assert any(REPAIRED in w for w in results.backends["onnx"].warnings), results.backends["onnx"].warnings
    assert results.exit_code == (0 if all(s is Status.OK for s, _ in got.values()) else 3)
