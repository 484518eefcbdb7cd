"""Every StableHLO op handler of the converter, tested from the cases declared beside it (ops/*.py CASES).

Each case: export the function with jax.export (or parse its StableHLO module), check the module holds the op
the case is for, convert it, check the ONNX op types it declares are in the graph, run the graph in ONNX Runtime
and compare with jax.jit within the case's tolerance; a refused op must be refused naming the op and its reason.
Also: no handler without a case, and docs/converter-ops.md is what the generator writes."""

from __future__ import annotations

import numpy as np
import pytest

from multiexport.backends.onnx.stablehlo import Unsupported, convert_module
from multiexport.backends.onnx.stablehlo.coverage import PAGE, render
from multiexport.backends.onnx.stablehlo.opcases import OpCase, all_cases
from multiexport.backends.onnx.stablehlo.ops import HANDLERS

from ..conftest import REPO

CASES = all_cases()
pytest.importorskip("onnxruntime", reason="the per-op cases run their graphs in ONNX Runtime")


def _module(c: OpCase, ctx, inputs: list[np.ndarray]):
    """The StableHLO module of the case, parsed in `ctx`: its own text, or what jax.export wrote (read back
    from the portable artifact, as the ONNX backend's route reads it)."""
    import jax
    from jax.extend.mlir import ir

    from multiexport.exporting.stablehlo import parse_module

    if c.mlir:
        return ir.Module.parse(c.mlir, ctx)
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    return parse_module(jax.export.export(jax.jit(c.fn), platforms=("cpu",))(*specs), ctx)


def _context():
    """A context that parses written modules too (func registered; jax's portable artifacts load it themselves)."""
    from jax._src.interpreters import mlir  # the one public-free call: jax.extend offers no func dialect

    return mlir.make_ir_context()


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


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_op_converts_and_matches_jit(c: OpCase):
    import jax
    import onnx
    import onnxruntime as ort

    inputs = _inputs(c)
    names = [f"x{i}" for i in range(len(inputs))]
    ctx = _context()
    with ctx:
        module = _module(c, ctx, inputs)
        assert c.op in _ops_in(module.operation), f"the case for {c.op} lowers to {sorted(_ops_in(module.operation))}"
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


def test_every_handler_has_a_case_and_every_case_a_handler():
    covered = {c.op for c in CASES}
    assert not set(HANDLERS) - covered, f"handlers without a declared case: {sorted(set(HANDLERS) - covered)}"
    assert not covered - set(HANDLERS), f"cases for no handler: {sorted(covered - set(HANDLERS))}"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_the_coverage_page_is_what_the_generator_writes():
    committed = (REPO / PAGE).read_text() if (REPO / PAGE).exists() else ""
    assert committed == render(), (f"{PAGE} is out of date: run `python -m multiexport.backends.onnx.stablehlo."
                                   f"coverage` and commit it")
