"""locate's engine and command: a graph it cannot map is said so (never guessed), --leaf keeps one output's
ops, the command's exit codes and one-line mistakes."""

from __future__ import annotations

import json
import shutil

import jax.numpy as jnp
import numpy as np
import onnx

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.cli import main
from multiexport.leaves import Target
from multiexport.locate import LocateConfig, locate
from multiexport.sdk import SITE_TABLE_KEY

from . import plant


def two_heads(x, w):
    h = jnp.tanh(x @ w)
    return {"a": h * 2.0, "b": jnp.exp(x).sum()}


def target():
    rng = np.random.default_rng(0)
    return Target(two_heads, args=(rng.normal(size=(2, 3)).astype(np.float32),
                                   rng.normal(size=(3, 4)).astype(np.float32)), name="two_heads")


def test_a_jax2onnx_graph_is_mapped_by_its_equations_and_one_without_a_table_is_not(tmp_path):
    result = locate(target(), LocateConfig(backends=("onnx",), out_dir=tmp_path / "a", backend_options={
        "onnx": {"route": "jax2onnx"}}), say=lambda line: None)
    answer = result.backends[0]
    # tanh(x @ w), * 2.0, exp, sum: each equation jax2onnx converted holds one op's value, and agrees
    assert answer.mapped >= 4 and answer.first is None and "agrees" in answer.verdict
    # the same file without its equation table (as an older multiexport wrote it): nothing mapped, and why
    shipped = tmp_path / "shipped"
    shutil.copytree(answer.artifact, shipped)
    model = onnx.load(str(shipped / "model.onnx"))
    kept = [p for p in model.metadata_props if p.key != "multiexport.locate.jax2onnx"]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    onnx.save(model, str(shipped / "model.onnx"))
    plant.reseal(shipped)
    result = locate(target(), LocateConfig(backends=("onnx",), out_dir=tmp_path / "b", artifacts={"onnx": shipped}),
                    say=lambda line: None)
    answer = result.backends[0]
    assert answer.mapped == 0 and answer.first is None and answer.culprit is None
    (reason,) = answer.unmapped
    assert "neither a site table nor a jax2onnx equation table" in reason and "re-export" in reason
    assert "no intermediate value could be mapped" in answer.verdict
    written = json.loads((tmp_path / "b" / "locate.json").read_text())
    assert written["schema"] == "multiexport.locate/1" and written["backends"][0]["mapped"] == 0


def test_leaf_keeps_only_the_ops_that_output_depends_on(tmp_path):
    everything = locate(target(), LocateConfig(backends=("xla",), out_dir=tmp_path / "all"), say=lambda line: None)
    one = locate(target(), LocateConfig(backends=("xla",), out_dir=tmp_path / "b", leaf="out.b"), say=lambda line: None)
    assert one.backends[0].total < everything.backends[0].total
    assert one.backends[0].mapped == one.backends[0].total and everything.backends[0].first is None


def test_the_command_reports_and_refuses_mistakes_in_one_line(tmp_path, capsys):
    assert main(["locate", "multiexport.examples:mlp", "--backend", "xla", "--out-dir", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert "locate mlp, trial" in out and "verdict: xla: every mapped op agrees" in out
    assert (tmp_path / "ok" / "locate.json").is_file()
    assert main(["locate", "multiexport.examples:mlp", "--backend", "xla", "--trial", "nope",
                 "--out-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "Option '--trial' | got 'nope', expected one of: example" in err and len(err.strip().splitlines()) == 1
    assert main(["locate", "multiexport.examples:mlp", "--backend", "xla", "--artifact", str(tmp_path),
                 "--out-dir", str(tmp_path / "y")]) == 2
    assert "has no manifest.json" in capsys.readouterr().err


def cancels(a, b):
    return {"d": a * 3.0 - b * 3.0}


def test_a_rounding_level_difference_amplified_by_cancellation_is_not_blamed_on_an_op(tmp_path):
    """One product one ulp off (a real edit of the shipped graph's constant for one Mul): both products agree within
    tolerance, their difference cancels to 1e-3 of their size and diverges; replayed on the artifact's own inputs the
    subtraction is exact, so the verdict is amplification, and no op is named as computed differently."""
    import onnx
    from onnx import numpy_helper

    from .plant import reseal

    a = np.full((4,), 1000.0, np.float32)
    t = Target(cancels, args=(a, a - np.float32(0.001) * np.arange(1, 5, dtype=np.float32)), name="cancels")
    clean = locate(t, LocateConfig(backends=("onnx",), out_dir=tmp_path / "clean",
                                   backend_options={"onnx": {"route": "stablehlo"}}), say=lambda line: None)
    artifact = tmp_path / "clean" / "artifacts" / "onnx"
    assert clean.backends[0].first is None
    model = onnx.load(str(artifact / "model.onnx"))
    mul = next(n for n in model.graph.node if n.op_type == "Mul")
    three = next(i for i in model.graph.initializer if i.name in mul.input)
    value = numpy_helper.to_array(three)
    model.graph.initializer.append(numpy_helper.from_array(np.nextafter(value, np.float32(4)), "three_off_by_one_ulp"))
    mul.input[list(mul.input).index(three.name)] = "three_off_by_one_ulp"
    onnx.save(model, str(artifact / "model.onnx"))
    reseal(artifact)
    answer = locate(t, LocateConfig(backends=("onnx",), out_dir=tmp_path / "planted", artifacts={"onnx": artifact}),
                    say=lambda line: None).backends[0]
    assert answer.failing and answer.first is not None and answer.culprit is None
    assert answer.first.site.op == "stablehlo.subtract" and answer.first.replay.verdict == "faithful"
    assert "amplified" in answer.verdict and "not an op computed wrongly" in answer.verdict


def centred(x):
    return {"y": x - jnp.mean(x, axis=-1, keepdims=True)}


def test_a_sum_that_cancels_is_faithful_when_it_differs_by_its_own_rounding(tmp_path):
    """ONNX Runtime sums 4096 values of +-1e4 in another order than XLA: its sum differs by 8 % of the (small)
    result, beyond the float32 default, while a one-ulp move of the inputs moves XLA's own sum by 3 %: the replay's
    tolerance follows the op's own rounding, so a faithful runtime is not blamed (it was, before). The order is
    ONNX Runtime's own (it may vary with the CPU's vector width): where both sum alike, nothing diverges."""
    rng = np.random.default_rng(1)
    x = (np.where(np.arange(4096) % 2 == 0, 1e4, -1e4) + rng.normal(size=(8, 4096))).astype(np.float32)
    answer = locate(Target(centred, args=(x,), name="centred"), LocateConfig(
        backends=("onnx",), out_dir=tmp_path, backend_options={"onnx": {"route": "stablehlo"}}),
        say=lambda line: None).backends[0]
    assert not answer.failing and answer.culprit is None
    first = answer.first
    if first is not None:  # measured here: 7.7e-2 of max|ref|, the inputs' rounding moving it 2.6e-2
        assert first.site.op == "stablehlo.reduce" and first.replay.verdict == "faithful"
        assert "own rounding" in first.replay.text
        assert answer.verdict.startswith("onnx: its outputs pass parity; the first divergence")


def broadcast_mean(x):
    m = jnp.broadcast_to(x.mean(0), x.shape)
    return {"y": jnp.tanh(m * 2.0) @ x.T + jnp.arange(x.shape[0], dtype=jnp.float32)}


def test_a_symbolic_target_on_the_stablehlo_route_is_mapped_op_by_op_at_the_trial_s_size(tmp_path):
    """The StableHLO route converts a symbolic module once, numbered unlike the module locate instruments (refined to
    the trial's sizes): locate's own export asks for fixed sizes, so the graph it examines is the trial size's model
    and every op result maps; a symbolic graph (the compare's) carries no site table to mis-map."""
    from multiexport.exporting import ExportOptions
    from multiexport.exporting.registry import get_backend
    from multiexport.leaves import build_signature

    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    t = Target(broadcast_mean, args=(x,), name="broadcast_mean", symbolic_batch="b")
    result = locate(t, LocateConfig(backends=("onnx",), out_dir=tmp_path / "loc", dim_sizes={"b": (5,)},
                                    backend_options={"onnx": {"route": "stablehlo"}}), say=lambda line: None)
    answer = result.backends[0]
    assert not answer.error and answer.total > 0 and answer.mapped == answer.total, answer
    symbolic = get_backend("onnx").export(t.fn, build_signature(t), tmp_path / "symbolic",
                                          ExportOptions(backend_options={"route": "stablehlo"}))
    assert symbolic.manifest.supports["dims"] == {"b": "any"}
    table = json.loads(next(p.value for p in onnx.load(str(tmp_path / "symbolic" / "model.onnx")).metadata_props
                            if p.key == SITE_TABLE_KEY))
    assert table["sites"] == [] and table["ops"] == 0
