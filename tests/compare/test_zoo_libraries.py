"""The zoo's models from other libraries (benchmarks/real_models: hf_*, keras_*, haiku_*) build, vary and compare.

Per library (Hugging Face transformers Flax, Keras 3 on JAX with keras-hub, dm-haiku; extras zoo-hf, zoo-keras,
zoo-haiku, installed by `make setup`), one small model goes through `compare` on the backends that take it today,
parity-only: each row must be `ok` with every output leaf compared. Before that, the model's outputs must vary
with its inputs: a random-init model whose output is constant (a zero-initialised head, a saturated softmax, a
flat BatchNorm stack) would make every parity check pass whatever the backend did.

The default run builds three small models (~1-2 minutes on 2 cores); every new entry's variation check is slow.
"""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest

from benchmarks.real_models import REAL_MODELS, RealModel
from multiexport.comparison import compare
from multiexport.results import Status

LIBRARIES = {"hf": "transformers", "keras": "keras_hub", "haiku": "haiku"}
ZOO = [m for m in REAL_MODELS if set(m.tags) & set(LIBRARIES)]


def _library(model: RealModel) -> str:
    return next(LIBRARIES[t] for t in model.tags if t in LIBRARIES)


def _need(model: RealModel) -> None:
    module = _library(model)
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: `pip install -e .[zoo]` (and keras-hub with --no-deps), or make setup")


def _perturbed(model: RealModel, target, seed: int) -> tuple:
    """The example arguments with every batch input redrawn in its domain: float leaves re-sampled at the
    example's mean and spread, integer id leaves inside the entry's val_ranges, masks and the weights kept."""
    import fnmatch
    import inspect

    args = target.args
    params = list(inspect.signature(target.fn).parameters)
    rng = np.random.default_rng(seed)
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(args)
    weights = 0 if len(args) == 1 else len(args) - 1  # baked targets take only the batch
    out = []
    for path, leaf in paths_leaves:
        name = ".".join([params[path[0].idx]] + [str(getattr(k, "key", getattr(k, "idx", k))) for k in path[1:]])
        if path[0].idx < weights:
            out.append(leaf)
            continue
        a = np.asarray(leaf)
        if a.dtype.kind == "f":
            out.append((rng.normal(a.mean(), a.std() + 1e-3, a.shape)).astype(a.dtype))
            continue
        ranges = [r for pattern, r in model.val_ranges.items() if fnmatch.fnmatchcase(name, pattern)]
        if ranges:
            lo, hi = ranges[0]
            out.append(rng.integers(int(lo), int(hi), a.shape).astype(a.dtype))
        else:
            out.append(a)  # masks, token types: kept
    return jax.tree_util.tree_unflatten(treedef, out)


def assert_outputs_vary(model: RealModel, target) -> None:
    """Every output leaf changes when the inputs do, and differs between the rows of one batch."""
    fn = jax.jit(target.fn)
    first = jax.tree_util.tree_leaves_with_path(fn(*target.args))
    second = jax.tree_util.tree_leaves(fn(*_perturbed(model, target, seed=1)))
    for (path, a), b in zip(first, second):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        where = f"{model.name}{jax.tree_util.keystr(path)}"
        assert np.isfinite(a).all(), f"{where}: non-finite output"
        scale = np.abs(a).max() + 1e-12
        assert np.abs(a - b).max() > 1e-3 * scale, f"{where}: output does not change with the inputs"
        rows = a.reshape(a.shape[0], -1)
        assert np.abs(rows - rows[:1]).max() > 1e-3 * scale, f"{where}: every row of the batch is the same"


# One small model per library, and the backends it goes through here (parity ok, every output leaf compared).
# Measured on jax 0.10.2, jax2onnx 0.17.1, ORT 1.32 (benchmarks/real_models/MATRIX.md has every backend).
FAST = {"hf_gpt2": ("xla", "onnx"), "keras_lstm": ("xla", "onnx"), "haiku_batchnorm": ("xla", "onnx")}


@pytest.mark.parametrize("name", list(FAST))
def test_one_model_per_library_compares_ok(name, tmp_path):
    model = next(m for m in ZOO if m.name == name)
    _need(model)
    target = model.factory()
    assert_outputs_vary(model, target)
    results = compare(target, backends=FAST[name], out_dir=tmp_path, trials=1, bench=None, **model.compare_options())
    for backend, row in results.backends.items():
        assert row.status is Status.OK, (backend, row.status, row.reason[:300])
        assert row.parity is not None and row.parity.passed and len(row.parity.trials) >= 2, (backend, row.parity)
        for leaf in results.signature.outputs:
            compared = [v for v in row.parity.leaves if v.name == leaf.name]
            assert compared and all(v.stats.compared for v in compared), (backend, leaf.name)
    assert results.exit_code == 0


def test_every_library_has_models_and_the_zoo_entries_resolve():
    assert {_library(m) for m in ZOO} == set(LIBRARIES.values())
    assert {"symbolic-batch", "baked", "batchnorm", "attention", "rnn", "conv"} <= {t for m in ZOO for t in m.tags}
    for m in ZOO:
        assert m.module in ("hf", "keras3", "haiku_nets") and m.target == f"benchmarks.real_models:{m.name}"
        assert not m.quick  # the quick subset's verdicts are pinned by test_real_models.py


@pytest.mark.slow
@pytest.mark.parametrize("model", ZOO, ids=lambda m: m.name)
def test_every_zoo_entry_builds_and_its_outputs_vary(model):
    _need(model)
    target = model.factory()
    assert (target.batch_symbol is not None) == ("symbolic-batch" in model.tags)
    assert_outputs_vary(model, target)
