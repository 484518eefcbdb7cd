"""The ONNX backend's second route: multiexport's own StableHLO -> ONNX converter (backends/onnx/stablehlo).

Parity over the whole case registry through `route=stablehlo`; functions jax2onnx cannot convert or
writes dead (a 5-D max pool ONNX Runtime cannot run, flax's avg_pool, a keyed random draw) converted by the
StableHLO route, under `auto` too; ops it refuses named with their reason; and a dead graph is one
`invalid-model` naming its node, at export and in compare with or without the benchmark."""

from __future__ import annotations

import contextlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ExportError, Target
from multiexport.backends.onnx import OnnxBackend
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import default_tolerance

from ..cases import CASES, CASE_IDS, feed_for
from ..conftest import reference_outputs, run_cli
from .test_onnx import pool_cnn

# Cases the StableHLO route cannot run, with the category its export fails with.
STABLEHLO_UNSUPPORTED = {
    "mlp_bf16": "unsupported-dtype",  # ONNX Runtime's CPU provider has no bfloat16 Expand/MatMul kernels
    "float8": "unsupported-dtype",  # ONNX Runtime's Python binding cannot carry float8 arrays
}

_status = OnnxBackend().available()
pytestmark = pytest.mark.skipif(not _status.ok, reason=f"onnx backend unavailable: {_status.reason}")


def export(target, path, route="stablehlo", **options):
    sig = build_signature(target)
    return sig, OnnxBackend().export(target.fn, sig, path, ExportOptions(backend_options={"route": route}, **options))


def assert_parity(target, sig, artifact, batch=None):
    feed = feed_for(sig, batch)
    got = OnnxBackend().load(artifact.directory)(feed)
    want = reference_outputs(target, sig, feed)
    for leaf in sig.outputs:
        verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype))
        assert verdict.passed, (leaf.name, batch, verdict.reasons)


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_stablehlo_route_matches_jit_on_every_case_it_converts(c, tmp_path):
    with jax.enable_x64(True) if c.x64 else contextlib.nullcontext():
        target = c.make()
        sizes = {"fallback_sizes": {"b": tuple(c.batch_sizes)}} if c.batch_sizes else {}
        if c.name in STABLEHLO_UNSUPPORTED:
            with pytest.raises(ExportError) as info:
                export(target, tmp_path / "a", **c.options, **sizes)
            assert info.value.category == STABLEHLO_UNSUPPORTED[c.name], str(info.value)
            return
        sig, artifact = export(target, tmp_path / "a", **c.options, **sizes)
        m = artifact.manifest
        facts = m.format.get("model_format", m.format)  # a symbolic case: one static model per size
        assert facts["route"] == "stablehlo" and facts["producer"].startswith("multiexport-stablehlo")
        assert {leaf.name for leaf in m.inputs if leaf.used} == set(c.used)
        for batch in c.batch_sizes or (None,):
            assert_parity(target, sig, artifact, batch)


def pool5d() -> Target:
    """A max pool over two middle axes of a 5-D array (as Haiku's NHWC max_pool is written with extra axes):
    jax2onnx writes it as one MaxPool that ONNX Runtime refuses on every call ('Unsupported pooling size')."""
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8, 4)).astype(np.float32)
    return Target(lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2, 1), (1, 1, 2, 2, 1), "VALID"),
                  args=(x,), name="pool5d")


def prng_normal() -> Target:
    """jax.random.normal from a key input: jax2onnx writes RandomNormal (which ignores the key) and is refused."""
    from ..cases import case

    return case("prng_key").make()


@pytest.mark.parametrize("make", [pool5d, pool_cnn, prng_normal], ids=lambda f: f.__name__)
def test_auto_takes_the_stablehlo_route_where_jax2onnx_fails_and_matches_jit(make, tmp_path):
    target = make()
    with pytest.raises(ExportError) as info:  # jax2onnx alone: a failure the route option lets one avoid
        export(target, tmp_path / "j", route="jax2onnx", check_load=False)
    assert info.value.category in ("invalid-model", "unsupported-op", "unsupported-dtype"), str(info.value)
    sig, artifact = export(target, tmp_path / "a", route="auto")
    assert artifact.manifest.format["route"] == "stablehlo" and artifact.manifest.format["route_requested"] == "auto"
    note = next(w for w in artifact.manifest.warnings if w.startswith("route stablehlo"))
    assert "jax2onnx's graph was not used" in note
    assert_parity(target, sig, artifact)


def test_a_graph_that_fails_on_every_call_is_invalid_model_naming_its_node_at_export(tmp_path):
    # check_load=False is how compare exports: the export itself must still run the graph once.
    with pytest.raises(ExportError) as info:
        export(pool5d(), tmp_path / "a", route="jax2onnx", check_load=False)
    assert info.value.category == "invalid-model"
    assert "at node 'node_MaxPool" in str(info.value) and "(MaxPool)" in str(info.value)
    assert "Unsupported pooling size" in str(info.value)
    assert not (tmp_path / "a").exists()


def _rbg(key, x):
    return x + jax.random.uniform(jax.random.wrap_key_data(key, impl="rbg"), x.shape)


@pytest.mark.parametrize("fn, args, op, words", [
    (_rbg, (np.zeros(4, np.uint32), np.zeros(3, np.float32)), "stablehlo.rng_bit_generator", "threefry"),
    (lambda x: jnp.linalg.cholesky(x @ x.T + 3 * jnp.eye(3)), (np.eye(3, dtype=np.float32),),
     "stablehlo.custom_call", "target 'lapack_spotrf_ffi'"),
], ids=["rng_bit_generator", "custom_call"])
def test_the_route_refuses_what_onnx_cannot_express_naming_the_op(fn, args, op, words, tmp_path):
    with pytest.raises(ExportError) as info:
        export(Target(fn, args=args, name="refused"), tmp_path / "a")
    assert info.value.category == "unsupported-op"
    assert f"route 'stablehlo' has no ONNX form for {op}" in str(info.value) and words in str(info.value)


def decoder_block() -> Target:
    """A decoder's first layer on token ids [b, 6]: an embedding lookup, a padding mask, layer norm, causal
    attention, a flatten over the batch and a dense head; its symbolic module holds every dynamic op the route
    writes (dynamic broadcasts, a dynamic reshape, a dynamic iota, dimension sizes, shape assertions)."""
    rng = np.random.default_rng(0)
    params = {"embed": rng.normal(size=(20, 8)).astype(np.float32),
              "qkv": (rng.normal(size=(8, 24)) / 3).astype(np.float32),
              "head": (rng.normal(size=(48, 4)) / 7).astype(np.float32)}
    ids = rng.integers(0, 20, size=(2, 6)).astype(np.int32)
    mask = np.ones((2, 6), np.int32)
    mask[1, 4:] = 0

    def block(params, batch):
        h = jnp.take(params["embed"], batch["ids"], axis=0)
        h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)
        q, k, v = jnp.split(h @ params["qkv"], 3, axis=-1)
        positions = jax.lax.broadcasted_iota(jnp.int32, (h.shape[0], 6, 6), 2)
        causal = positions <= jax.lax.broadcasted_iota(jnp.int32, (h.shape[0], 6, 6), 1)
        keep = causal & (batch["mask"][:, None, :] > 0)
        scores = jnp.where(keep, jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(8.0), -1e9)
        attended = jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v)
        rows = jnp.arange(h.shape[0], dtype=jnp.float32)[:, None]  # an iota along the batch itself
        return {"logits": attended.reshape(h.shape[0], -1) @ params["head"] + rows}

    return Target(block, args=(params, {"ids": ids, "mask": mask}), name="decoder_block", symbolic_batch="b",
                  batch_leaves=("batch.*",))


def test_a_symbolic_module_becomes_one_graph_whose_inputs_name_the_dimension(tmp_path):
    """The route converts the symbolic module once: the graph's inputs and outputs carry `b`, its dynamic sizes are
    computed in the graph, and it matches jax.jit at sizes the example does not have (jax2onnx is not asked)."""
    import onnx

    target = decoder_block()
    sig, artifact = export(target, tmp_path / "a")
    m = artifact.manifest
    assert "static_fallback" not in m.format and m.supports["dims"] == {"b": "any"}, m.warnings
    graph = onnx.load(str(tmp_path / "a" / "model.onnx")).graph
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert dims["batch.ids"] == ["b", 6] and dims["batch.mask"] == ["b", 6], dims
    assert [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == ["b", 4]
    assert {"Shape", "Range"} <= {n.op_type for n in graph.node}  # sizes read at run time, not constants
    runner = OnnxBackend().load(artifact.directory)
    for batch in (1, 2, 5):
        feed = feed_for(sig, batch)
        feed["batch.ids"] = np.random.default_rng(batch).integers(0, 20, size=(batch, 6)).astype(np.int32)
        want = reference_outputs(target, sig, feed)
        got = runner(feed)
        leaf = sig.outputs[0]
        assert got[leaf.name].shape == (batch, 4) and np.ptp(want[leaf.name]) > 0.1  # not a constant output
        verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype))
        assert verdict.passed, (batch, verdict.reasons)


def test_an_op_the_route_writes_at_fixed_sizes_only_sends_a_symbolic_module_to_one_model_per_size(tmp_path):
    """A reverse along the symbolic dimension has no dynamic form here: the route refuses it naming the op, and the
    export's static-size fallback converts one model per size, each matching jax.jit."""
    target = Target(lambda batch: {"y": jnp.flip(batch["x"], axis=0) * 2.0},
                    args=({"x": np.arange(6, dtype=np.float32).reshape(3, 2)},), name="flip_batch",
                    symbolic_batch="b", batch_leaves=("batch.*",))
    sig, artifact = export(target, tmp_path / "a", fallback_sizes={"b": (1, 7)})
    facts = artifact.manifest.format["static_fallback"]
    assert "no ONNX form for stablehlo.reverse: with a dynamic (symbolic) dimension" in facts["why"], facts["why"]
    assert set(facts["models"]) == {"b=1", "b=3", "b=7"}  # the sizes asked for and the example's
    assert artifact.manifest.supports["dims"] == {"b": [1, 3, 7]}
    for batch in (1, 3, 7):
        assert_parity(target, sig, artifact, batch)


def test_a_shape_assertion_the_runner_does_not_check_is_not_dropped(tmp_path):
    """An input of size 2*b: jax.export asserts the size is even, which a runner binding plain names does not check,
    so the route refuses the module naming the assertion instead of writing a graph that takes an odd size."""
    target = Target(lambda x: {"y": x * 2.0}, args=(np.arange(12, dtype=np.float32).reshape(4, 3),),
                    name="even_rows", polymorphic_shapes={"*": "2*b, 3"})
    assert [leaf.shape for leaf in build_signature(target).inputs] == [("2*b", 3)]
    with pytest.raises(ExportError) as info:
        export(target, tmp_path / "a")
    assert info.value.category == "unsupported-op"
    assert "target 'shape_assertion'" in str(info.value) and "not a plain name (2*b)" in str(info.value)


def test_an_output_sized_b_squared_converts_symbolically_and_its_manifest_reads(tmp_path):
    """An outer product over the batch flattened to [b*b, 4]: jax writes that dimension `b^2`. The manifest takes it
    (a power is an expression of symbols), it evaluates at any b, and the graph matches jax.jit at sizes 1, 3, 5."""
    from multiexport.exporting.stablehlo import evaluate_dim

    target = Target(lambda x: {"y": (x[:, None, :] * x[None, :, :]).reshape(-1, 4)},
                    args=(np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32),), name="outer_flat",
                    symbolic_batch="b")
    sig, artifact = export(target, tmp_path / "a")
    assert artifact.manifest.outputs[0].shape == ["b^2", 4] and artifact.manifest.supports["dims"] == {"b": "any"}
    assert evaluate_dim("b^2", {"b": 3}) == 9 and evaluate_dim("2*b^2 + 1", {"b": 2}) == 9
    with pytest.raises(ValueError, match="not an arithmetic expression"):
        evaluate_dim("b^b", {"b": 3})  # only small constant powers: nothing unbounded is computed
    for batch in (1, 3, 5):
        assert_parity(target, sig, artifact, batch)


def test_contractions_with_a_symbolic_batch_and_length_convert_symbolically(tmp_path):
    """Attention's two einsums and a projection with both b and s symbolic: MatMul broadcasts the leading dims
    itself, so no reshape needs two inferred sizes; the graph matches jax.jit at (b, s) pairs the example lacks."""

    def attend(w, x):
        scores = jnp.einsum("bqd,bkd->bqk", x, x) / 2.0
        mixed = jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), x)
        return {"y": jnp.einsum("bsd,ed->bse", mixed, w)}

    rng = np.random.default_rng(0)
    target = Target(attend, args=(rng.normal(size=(5, 4)).astype(np.float32), rng.normal(size=(2, 3, 4)).astype(np.float32)),
                    name="attend", polymorphic_shapes={"x": "b, s, 4"})
    sig, artifact = export(target, tmp_path / "a")
    assert "static_fallback" not in artifact.manifest.format, artifact.manifest.warnings
    assert artifact.manifest.supports["dims"] == {"b": "any", "s": "any"}
    runner = OnnxBackend().load(artifact.directory)
    for b, s in ((1, 1), (3, 7), (4, 2)):
        feed = {**sig.example_feed(), "x": rng.normal(size=(b, s, 4)).astype(np.float32)}
        want = reference_outputs(target, sig, feed)
        leaf = sig.outputs[0]
        got = runner(feed)[leaf.name]
        assert got.shape == (b, s, 5)
        verdict = compare_leaf(leaf.name, got, want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype))
        assert verdict.passed, ((b, s), verdict.reasons)


@pytest.mark.subprocess
def test_the_dead_graph_is_one_category_with_and_without_the_benchmark(tmp_path):
    module = tmp_path / "pool5d_target.py"
    module.write_text("from tests.backends.test_onnx_stablehlo import pool5d\ntarget = pool5d()\n")
    statuses = {}
    for mode, extra in (("bench", ["--bench-time", "0.1"]), ("no-bench", ["--no-bench"])):
        out = tmp_path / mode
        run_cli("compare", f"{module}:target", "--backends", "onnx", "--backend-option", "onnx.route=jax2onnx",
                "--out-dir", out, "--trials", "1", *extra)
        row = json.loads((out / "results.json").read_text())["backends"]["onnx"]
        statuses[mode] = (row["status"], row["reason"])
    assert statuses["bench"][0] == statuses["no-bench"][0] == "invalid-model", statuses
    assert all("node_MaxPool" in reason for _, reason in statuses.values()), statuses
