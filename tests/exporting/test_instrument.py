"""instrument_module: the flattened `main` returns every op's result, in data-flow order, with its source; and
isolate_op: one op alone, constants and captured values included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from multiexport.exporting.instrument import describe_location, instrument_module, isolate_op, run_module, user_frame


def _helper(x):
    return jnp.tanh(x) * 2.0


def model(x, w):
    y = x @ w
    z = jax.nn.relu(y)
    s = jax.lax.fori_loop(0, 3, lambda i, c: c + y, z)
    return _helper(z) + s, jnp.sum(z)


@pytest.fixture(scope="module")
def module():
    specs = (jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((3, 4), jnp.float32))
    return bytes(export.export(jax.jit(model))(*specs).mlir_module_serialized)


@pytest.fixture(scope="module")
def feed():
    rng = np.random.default_rng(0)
    return rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)


def test_every_op_result_is_returned_with_its_value(module, feed):
    ins = instrument_module(module)
    results = run_module(ins, list(feed))
    x, w = feed
    expected = model(x, w)
    assert ins.n_results == 2
    np.testing.assert_array_equal(results[0], np.asarray(expected[0]))
    values = {s.key: v for s, v in zip(ins.sites, results[ins.n_results:])}
    by_op = {s.op: s for s in ins.sites}
    np.testing.assert_allclose(values[by_op["stablehlo.dot_general"].key], x @ w, rtol=1e-6)
    np.testing.assert_allclose(values[by_op["stablehlo.maximum"].key], np.maximum(x @ w, 0), rtol=1e-6)
    # the relu's call and the helper's ops are inlined in place: their ops are sites of main, in order
    ops = [s.op for s in ins.sites]
    assert ops.index("stablehlo.dot_general") < ops.index("stablehlo.maximum") < ops.index("stablehlo.tanh")
    assert "func.call" not in ops and "stablehlo.constant" not in ops
    # a while's three results are three sites of one op
    assert [s.key for s in ins.sites if s.op == "stablehlo.while"] == [f"op{by_op['stablehlo.while'].index}.{i}" for i in range(3)]


def test_sites_carry_their_source_line_and_name_stack(module):
    ins = instrument_module(module)
    dot = next(s for s in ins.sites if s.op == "stablehlo.dot_general")
    tanh = next(s for s in ins.sites if s.op == "stablehlo.tanh")
    assert dot.location.endswith(f"test_instrument.py:{model.__code__.co_firstlineno + 1}") and dot.scope.endswith("dot_general")
    assert tanh.location.endswith(f"test_instrument.py:{_helper.__code__.co_firstlineno + 1}")
    relu = next(s for s in ins.sites if s.op == "stablehlo.maximum")  # inside relu's function: the call's line
    assert relu.location.endswith(f"test_instrument.py:{model.__code__.co_firstlineno + 2}")
    assert dot.operands == ("arg0", "arg1")


def test_an_isolated_op_computes_the_op_alone(module, feed):
    ins = instrument_module(module)
    values = dict(zip([s.key for s in ins.sites], run_module(ins, list(feed))[ins.n_results:]))
    loop = next(s for s in ins.sites if s.op == "stablehlo.while")
    isolated = isolate_op(module, loop.index)  # its condition captures constants of main: cloned in
    args = [values[k] for k in isolated.operands]
    got = run_module(isolated, args)
    np.testing.assert_array_equal(got[2], values[f"op{loop.index}.2"])
    assert isolated.text is not None and "stablehlo.while" in isolated.text


def test_location_parsing_and_the_user_frame():
    text = 'loc("jit(f)/Conv_0/conv"(callsite("flax/linen/linear.py":700:12 at callsite("model.py":42:8 at "x.py":1:0))))'
    scope, frames = describe_location(text)
    assert scope == "jit(f)/Conv_0/conv"
    assert frames == ["flax/linen/linear.py:700", "model.py:42", "x.py:1"]
    assert user_frame(frames) == "model.py:42"  # flax's file resolves inside site-packages: not the user's
    assert user_frame(["model.py:42"]) == "model.py:42"
    assert user_frame([]) == ""
