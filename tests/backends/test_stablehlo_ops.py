"""Every StableHLO op handler of the converter, tested from the cases declared beside it (ops/*.py CASES).

Each case: export the function with jax.export (or serialize its StableHLO module the same way), check the module holds the op
the case is for, convert it, check the ONNX op types it declares are in the graph, run the graph in ONNX Runtime
and compare with jax.jit within the case's tolerance; a refused op must be refused naming the op and its reason.
Also: the checks fail a case that does not show its op or computes something else, no handler is without a
case, and docs/converter-ops.md is what the generator writes."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import re

import numpy as np
import pytest

from multiexport.backends.onnx.stablehlo import Unsupported, convert_module
from multiexport.backends.onnx.stablehlo.coverage import PAGE, render
from multiexport.backends.onnx.stablehlo.opcases import OpCase
from multiexport.backends.onnx.stablehlo.ops import CASES, HANDLERS

from ..conftest import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                                reason="the per-op cases run their graphs in ONNX Runtime (the onnx extra)")


def _module(c: OpCase, ctx, inputs: list[np.ndarray]):
    """The case's StableHLO module as the ONNX backend's route reads it: from a portable artifact (what jax.export
    wrote, or the case's own text serialized the same way), deserialized into `ctx`."""
    import jax
    from jax.extend import mlir
    from jax.extend.mlir.dialects import stablehlo

    from multiexport.exporting.stablehlo import parse_module

    if c.mlir:
        return mlir.deserialize_portable_artifact(
            mlir.serialize_portable_artifact(c.mlir, stablehlo.get_current_version()), ctx)
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    return parse_module(jax.export.export(jax.jit(c.fn), platforms=("cpu",))(*specs), ctx)


def _ops_in(op) -> set[str]:
    found = set()
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.add(inner.operation.name)
                found |= _ops_in(inner.operation)
    return found


def _onnx_ops(graph) -> set[str]:
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found |= _onnx_ops(sub)
    return found


def _inputs(c: OpCase) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, c.id)))
    return [arg.sample(rng) for arg in c.args]


def check_case(c: OpCase) -> None:
    """Export (or read) the case's module, check it holds the op, convert, check the declared ONNX ops are in the
    graph, run it in ONNX Runtime and compare with jax.jit; for a refused op, check the refusal and its words."""
    import jax
    import onnx
    import onnxruntime as ort

    from multiexport.exporting.stablehlo import ir_context

    inputs = _inputs(c)
    names = [f"x{i}" for i in range(len(inputs))]
    with ir_context() as ctx:
        module = _module(c, ctx, inputs)
        lowered = _ops_in(module.operation)
        assert c.op in lowered, f"the case for {c.op} lowers to {sorted(lowered)}"
        if c.refused:
            with pytest.raises(Unsupported) as info:
                convert_module(module, names, ["y"], 21, c.id)
            assert info.value.op == c.op and c.refused in str(info.value), str(info.value)
            return
        want = jax.jit(c.fn)(*inputs)
        want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else [want])]
        outputs = [f"y{i}" for i in range(len(want))]
        model = convert_module(module, names, outputs, 21, c.id.replace("-", "_"))
    onnx.checker.check_model(model)
    written = _onnx_ops(model.graph)
    assert set(c.onnx) <= written, f"{c.id}: expected ONNX {sorted(c.onnx)}, the graph holds {sorted(written)}"
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = session.run(None, dict(zip(names, inputs)))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=c.rtol, atol=c.atol, equal_nan=True, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


def uncovered(handlers, cases) -> tuple[list[str], list[str]]:
    """Handlers no case is declared for, and cases declared for no handler."""
    covered = {c.op for c in cases}
    return sorted(set(handlers) - covered), sorted(covered - set(handlers))


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_op_converts_and_matches_jit(c: OpCase):
    import jax

    with jax.enable_x64(True) if c.x64 else contextlib.nullcontext():
        check_case(c)


def _sine() -> OpCase:
    return next(c for c in CASES if c.op == "stablehlo.sine")


@pytest.mark.parametrize("change, words", [
    ({"onnx": ("Sin", "Conv")}, "expected ONNX ['Conv', 'Sin']"),  # an expected ONNX op the graph lacks
    ({"op": "stablehlo.cosine"}, "the case for stablehlo.cosine lowers to"),  # a case that misses its op
    ({"fn": lambda x: x * 1.5 + 0.0 * x}, "lowers to"),  # the function no longer lowers to the op
], ids=["absent-onnx-op", "wrong-op", "other-function"])
def test_a_case_that_does_not_show_its_op_fails(change, words):
    with pytest.raises(AssertionError, match=re.escape(words)):
        check_case(dataclasses.replace(_sine(), **change))


def test_a_handler_that_computes_something_else_fails_its_case(monkeypatch):
    # A real fault in the converter: the sine written as a cosine (the ONNX op check relaxed to reach the run).
    monkeypatch.setitem(HANDLERS, "stablehlo.sine", lambda cx, op: [cx.b.op1("Cos", cx.inputs(op))])
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        check_case(dataclasses.replace(_sine(), onnx=()))


def test_every_handler_has_a_case_and_every_case_a_handler():
    missing, stray = uncovered(HANDLERS, CASES)
    assert not missing, f"handlers without a declared case (declare one in CASES beside the handler): {missing}"
    assert not stray, f"cases for no handler: {stray}"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_a_new_handler_without_a_case_is_named():
    assert uncovered({**HANDLERS, "stablehlo.popcnt": None}, CASES) == (["stablehlo.popcnt"], [])


def test_the_coverage_page_is_what_the_generator_writes():
    committed = (REPO / PAGE).read_text() if (REPO / PAGE).exists() else ""
    assert committed == render(), (f"{PAGE} is out of date: run `python -m multiexport.backends.onnx.stablehlo."
                                   f"coverage` and commit it")
