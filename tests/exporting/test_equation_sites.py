"""Pairing jax2onnx's recorded tensors with the module's ops (`map_equations`) never guesses: only one-to-one
or along one chain, and every pairing checked against both graphs' dependencies. The tables here are written in
the format the ONNX conversion records (backends/onnx/equations.py)."""

from __future__ import annotations

import json

from multiexport.exporting.equation_sites import EQUATION_TABLE_VERSION, map_equations
from multiexport.exporting.intermediates import Site

LEAVES = ["x", "w"]


def _site(index: int, line: str, operands: tuple[str, ...], shape=(2, 3), scope: str = "") -> Site:
    return Site(key=f"op{index}", index=index, result=0, op="stablehlo.add", shape=shape, dtype="float32",
                location=f"model.py:{line}", operands=operands, scope=scope)


def _table(*entries, shape=(2, 3)) -> str:
    """entries: (tensor, line, input mask, near[, name stack, primitive[, shape]])."""
    return json.dumps({"version": EQUATION_TABLE_VERSION, "inputs": LEAVES, "entries": [
        [e[0], None, list(e[6] if len(e) > 6 else shape), "float32", e[5] if len(e) > 5 else "add", e[4] if len(e) > 4 else "",
         [f"/home/user/model.py:{e[1]}"], e[2], e[3]] for e in entries]})


def test_one_tensor_and_one_op_of_a_line_pair():
    found, unmapped = map_equations(_table(("t0", 5, "1", [])), [_site(0, "5", ("arg0",))], LEAVES)
    assert found["op0"].name == "t0" and "add equation at model.py:5" in found["op0"].note and not unmapped


def test_a_chain_pairs_in_order_and_parallel_values_are_not_guessed():
    chain = [_site(0, "5", ("arg0",)), _site(1, "5", ("op0",))]
    found, _ = map_equations(_table(("t0", 5, "1", []), ("t1", 5, "1", [0])), chain, LEAVES)
    assert (found["op0"].name, found["op1"].name) == ("t0", "t1")
    # the same two ops read x in parallel, not one after the other: which tensor is which cannot be told
    parallel = [_site(0, "5", ("arg0",)), _site(1, "5", ("arg0",))]
    found, unmapped = map_equations(_table(("t0", 5, "1", []), ("t1", 5, "1", [])), parallel, LEAVES)
    assert not found and "not one chain" in unmapped["op0"] and "not one chain" in unmapped["op1"]


def test_counts_that_differ_or_other_inputs_are_not_mapped():
    sites = [_site(0, "5", ("arg0",)), _site(1, "5", ("op0",))]
    found, unmapped = map_equations(_table(("t0", 5, "1", [])), sites, LEAVES)
    assert not found and "1 jax2onnx equation outputs and 2 ops" in unmapped["op0"]
    # same line and shape, but the tensor is computed from w and the op from x
    found, unmapped = map_equations(_table(("t0", 5, "2", [])), [_site(0, "5", ("arg0",))], LEAVES)
    assert not found and "no equation" in unmapped["op0"]


def test_a_pairing_the_dependencies_contradict_is_dropped():
    # op1 reads op0, but the tensor paired with op1 is not computed from op0's tensor: one pairing is wrong
    sites = [_site(0, "5", ("arg0",)), _site(1, "6", ("op0", "arg1"))]
    found, unmapped = map_equations(_table(("t0", 5, "1", []), ("t1", 6, "3", [])), sites, LEAVES)
    assert list(found) == ["op0"] and "contradict 1 other" in unmapped["op1"]
    found, _ = map_equations(_table(("t0", 5, "1", []), ("t1", 6, "3", [0])), sites, LEAVES)
    assert set(found) == {"op0", "op1"}


def test_an_unreadable_table_maps_nothing():
    found, unmapped = map_equations("{}", [_site(0, "5", ("arg0",))], LEAVES)
    assert not found and "unreadable" in unmapped["op0"]


def test_symbolic_dimensions_are_bound_to_the_trials_sizes():
    site = [_site(0, "5", ("arg0",), shape=(10, 3))]
    found, _ = map_equations(_table(("t0", 5, "1", []), shape=("2*b", 3)), site, LEAVES, {"b": 5})
    assert found["op0"].name == "t0"
    for dims in ({"b": 4}, {}):  # another size, or a dimension the trial does not bind: no pairing
        found, unmapped = map_equations(_table(("t0", 5, "1", []), shape=("2*b", 3)), site, LEAVES, dims)
        assert not found and "no equation" in unmapped["op0"]


def test_where_counts_differ_a_unique_name_stack_and_primitive_pairs():
    # two ops of one line, shape, inputs and name stack (a BatchNorm's multiply and add); jax2onnx recorded one
    # output there: the add (its name stack and primitive name one op). The silu's two ops (logistic, multiply)
    # and the equation jax2onnx named `silu`: no op has that name, so neither is paired
    sites = [_site(0, "5", ("arg0",), scope="jit(f)/bn/mul"), _site(1, "5", ("op0",), scope="jit(f)/bn/add"),
             _site(2, "5", ("op1",), scope="jit(f)/act/logistic"), _site(3, "5", ("op1", "op2"), scope="jit(f)/act/mul")]
    found, unmapped = map_equations(_table(("t0", 5, "1", [], "bn", "add"), ("t1", 5, "1", [0], "act", "silu")),
                                    sites, LEAVES)
    assert list(found) == ["op1"] and found["op1"].name == "t0"
    assert "1 jax2onnx equation outputs and 2 ops" in unmapped["op0"]
    assert "name stack and primitive are not one equation's" in unmapped["op0"]
    assert "name stack" in unmapped["op2"] and "op3" in unmapped


def test_a_library_function_converted_as_one_equation_pairs_with_its_calls_exit():
    # jax.nn.silu is a call in the module (x * logistic(x)); jax2onnx converts it as one equation, and
    # jnp.add as one: the silu's value is the call's op nothing else in it reads, the add the op named add
    sites = [_site(0, "5", ("arg0",), scope="jit(f)/bn/mul"), _site(1, "5", ("op0",), scope="jit(f)/bn/add"),
             _site(2, "5", ("op1",), scope="jit(f)/act/jit(silu)"), _site(3, "5", ("op1", "op2"), scope="jit(f)/act/jit(silu)")]
    table = _table(("t0", 5, "1", [], "bn", "jax.numpy.add"), ("t1", 5, "1", [0], "act", "jax.nn.silu"))
    found, unmapped = map_equations(table, sites, LEAVES)
    assert (found["op1"].name, found["op3"].name) == ("t0", "t1") and set(found) == {"op1", "op3"}
    # a call with two ops nothing in it reads (two exits) pairs nothing
    sites[3] = _site(3, "5", ("op1",), scope="jit(f)/act/jit(silu)")
    found, _ = map_equations(table, sites, LEAVES)
    assert set(found) == {"op1"}


def test_a_value_whose_shape_is_not_the_ops_is_not_compared():
    import numpy as np

    from multiexport.exporting.equation_sites import misshapen

    sites = [_site(0, "5", ("arg0",)), _site(1, "5", ("op0",))]
    wrong = misshapen({"op0": np.zeros((2, 3)), "op1": np.zeros((3, 2))}, sites, ["op0", "op1"])
    assert list(wrong) == ["op1"] and "shape [3, 2]" in wrong["op1"]


def _layer(i: int, first: int, source: str) -> list[Site]:
    """One attention block of layer i as jax.jit names it, all on line 5: the query, key and value Dense modules
    (a dot and a bias add each), the scaled query, the scores einsum (a call named by its spec, shape [2, 2]) and
    the output einsum."""
    at, n = f"jit(f)/Stack/layer_{i}/attention", first
    sites = []
    for j, dense in enumerate(("query", "key", "value")):
        sites += [_site(n + 2 * j, "5", (source,), scope=f"{at}/{dense}/dot_general"),
                  _site(n + 2 * j + 1, "5", (f"op{n + 2 * j}",), scope=f"{at}/{dense}/add")]
    sites.append(_site(n + 6, "5", (f"op{n + 1}",), scope=f"{at}/div"))
    sites.append(_site(n + 7, "5", (f"op{n + 6}", f"op{n + 3}"), (2, 2), f"{at}/...qhd,...khd->...hqk/dot_general"))
    sites.append(_site(n + 8, "5", (f"op{n + 7}", f"op{n + 5}"), scope=f"{at}/...hqk,...khd->...qhd/transpose"))
    return sites


def _layer_table(i: int, first: int, parent: list[int]) -> list[tuple]:
    """jax2onnx's equations of `_layer(i)`: three linen.dense_general (q, k, v), the div, two einsums."""
    at, n = f"Stack/layer_{i}/attention", first
    return [(f"q{i}", 5, "1", parent, at, "linen.dense_general"), (f"k{i}", 5, "1", parent, at, "linen.dense_general"),
            (f"v{i}", 5, "1", parent, at, "linen.dense_general"), (f"d{i}", 5, "1", [n], at, "div"),
            (f"s{i}", 5, "1", [n + 1, n + 3], at, "jax.numpy.einsum", (2, 2)),
            (f"o{i}", 5, "1", [n + 2, n + 4], at, "jax.numpy.einsum")]


def test_repeated_layers_pair_by_name_stack_and_data_flow():
    # two identical layers: every op shares line, shape and inputs with its twin in the other layer, and the
    # query, key and value Dense are three parallel values of one name stack; the name stack tells the layers
    # apart, and data flow the Denses: the query feeds the div, the key the scores, the value the output
    sites = _layer(0, 0, "arg0") + _layer(1, 9, "op8")
    table = _table(*_layer_table(0, 0, []), *_layer_table(1, 6, [5]))
    found, unmapped = map_equations(table, sites, LEAVES)
    want = {"op1": "q0", "op3": "k0", "op5": "v0", "op6": "d0", "op7": "s0", "op8": "o0",
            "op10": "q1", "op12": "k1", "op14": "v1", "op15": "d1", "op16": "s1", "op17": "o1"}
    assert {k: t.name for k, t in found.items()} == want
    assert set(unmapped) == {"op0", "op2", "op4", "op9", "op11", "op13"}  # the dots, inside the Dense equations


def test_parallel_values_data_flow_cannot_tell_apart_stay_unmapped():
    # the key and the value Dense both feed only the output einsum here: which is which cannot be told, so
    # neither is paired (the query still is: it alone feeds the div)
    sites = _layer(0, 0, "arg0")
    sites[7] = _site(7, "5", ("op6",), (2, 2), "jit(f)/Stack/layer_0/attention/...qhd,...khd->...hqk/dot_general")
    sites[8] = _site(8, "5", ("op7", "op3", "op5"), scope="jit(f)/Stack/layer_0/attention/...hqk,...khd->...qhd/x")
    table = _layer_table(0, 0, [])
    table[4] = ("s0", 5, "1", [3], "Stack/layer_0/attention", "jax.numpy.einsum", (2, 2))
    table[5] = ("o0", 5, "1", [1, 2, 4], "Stack/layer_0/attention", "jax.numpy.einsum")
    found, unmapped = map_equations(_table(*table), sites, LEAVES)
    assert {k: t.name for k, t in found.items()} == {"op1": "q0", "op6": "d0", "op7": "s0", "op8": "o0"}
    assert "op3" in unmapped and "op5" in unmapped


def test_a_broadcast_of_a_mapped_op_reads_its_tensor():
    # a gate [2, 1] broadcast over [2, 3] before a multiply: jax2onnx folds the broadcast into the Mul, so the
    # replay of the multiply needs the gate's own tensor for it, read by numpy broadcasting
    import numpy as np

    from multiexport.exporting.equation_sites import misshapen

    sites = [_site(0, "5", ("arg0",), shape=(2, 1)),
             Site(key="op1", index=1, result=0, op="stablehlo.broadcast_in_dim", shape=(2, 3), dtype="float32",
                  location="model.py:5", operands=("op0",)),
             Site(key="op2", index=2, result=0, op="stablehlo.broadcast_in_dim", shape=(4, 2, 1), dtype="float32",
                  location="model.py:5", operands=("op0",))]
    found, unmapped = map_equations(_table(("t0", 5, "1", []), shape=(2, 1)), sites, LEAVES)
    assert found["op1"].name == "t0" and "broadcast" in found["op1"].note and "op1" not in unmapped
    assert "op2" not in found and "op2" in unmapped  # another rank: which dimensions it keeps is not known here
    assert not misshapen({"op0": np.zeros((2, 1)), "op1": np.zeros((2, 1))}, sites, ["op0", "op1"])
    assert list(misshapen({"op1": np.zeros((3, 1))}, sites, ["op1"])) == ["op1"]
