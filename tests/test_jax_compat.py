"""Every place multiexport leans on JAX beyond its documented API, checked on the JAX this leg runs.

CI runs this on both locks (constraints.txt: Python 3.11 + jax 0.10.2; constraints-py312.txt: Python 3.12 +
the newest jax), so a JAX release that moves one of these fails here by name, not as a wrong number in a
manifest or a metric that quietly turned into its fallback:

- `JitRunner.compile_count()` counts with jit's own cache size (`_cache_size`, a private method).
- `export.stablehlo.exported_header` reads the `jax.export` flatbuffer by hand (no public reader exists).
- `export.stablehlo.ir_context/parse_module/retarget` and `producer_version`: the portable artifact as JAX's
  public MLIR bindings and the bytecode header give it.
- `jax.core.eval_jaxpr` and `jax.core.Tracer` (signature/weights.py), the PRNG key dtype's `_impl`
  (signature/build.py), `Exported` fields read by the backends, `jax.config.jax_use_shardy_partitioner`.
- The factory cache (signature/factory_cache.py): JAX's persistent-cache options and its cache-hit event,
  checked for real by tests/leaves/test_factory_cache.py, which this leg runs too.
"""

from __future__ import annotations

import importlib.util
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiexport
from multiexport.backends.xla import FILES, XlaBackend
from multiexport.exporting import ExportOptions
from multiexport.exporting.stablehlo import (
    exported_header,
    ir_context,
    jax_stablehlo_versions,
    module_interface,
    parse_module,
    producer_version,
    retarget,
)
from multiexport.leaves import build_signature

from .cases import case, feed_for

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3])


@pytest.fixture(scope="module")
def seed_artifact(tmp_path_factory):
    """The seed exported by the XLA backend: a real model.jax_exported and model.mlirbc on disk."""
    target = case("seed").make()
    sig = build_signature(target)
    artifact = XlaBackend().export(target.fn, sig, tmp_path_factory.mktemp("compat") / "seed", ExportOptions())
    return target, sig, artifact


def _module_arity(module) -> int:
    from jax.extend.mlir import ir

    main = next(op for op in module.body.operations if op.operation.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")
    return len(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).inputs)


# -- JitRunner.compile_count ---------------------------------------------------------------------------------

def test_compile_count_is_jits_own_and_counts_one_executable_per_shape(tmp_path):
    target = case("symbolic_batch").make()
    sig = build_signature(target)
    artifact = XlaBackend().export(target.fn, sig, tmp_path / "sym", ExportOptions())
    runner = multiexport.load(artifact.directory)
    # the private method the count comes from: without it the runner falls back to its own signature count
    assert callable(getattr(runner._jitted, "_cache_size", None)), (
        f"jax {jax.__version__}: jax.jit(...)._cache_size is gone; JitRunner.compile_count falls back to counting "
        "input signatures")
    assert runner.compile_count() == 0
    for batch in (2, 3, 2):
        runner.run_prepared(runner.prepare(feed_for(sig, batch)))
    assert runner.compile_count() == 2  # batch 2 twice reuses its executable
    assert runner.compile_count() == len(runner._signatures)  # jax's count agrees with the fallback's


# -- the serialized Exported's header ------------------------------------------------------------------------

def test_exported_header_reads_the_file_and_the_file_round_trips(seed_artifact):
    target, sig, artifact = seed_artifact
    data = (artifact.directory / FILES["exported"]).read_bytes()
    header = exported_header(data)
    version = header["serialization_version"]
    assert isinstance(version, int) and 1 <= version < 100, header
    # jax.export writes 3 up to 0.11 (so older readers accept it) and its own version from 0.12 on, with
    # jax_version beside it
    if JAX_VERSION >= (0, 12, 0):
        assert header["jax_version"] == jax.__version__
        assert version >= 12
    else:
        assert header["jax_version"] is None
    exported = jax.export.deserialize(bytearray(data))
    again = bytes(exported.serialize())
    assert exported_header(again) == header
    assert jax.export.deserialize(bytearray(again)).in_avals == exported.in_avals
    # what the manifest recorded is what the file says
    assert artifact.manifest.requires["serialization_version"] == version
    expected = {o.name: v for o, v in zip(sig.outputs, jax.tree_util.tree_leaves(target.fn(*target.args)))}
    got = multiexport.load(artifact.directory)(sig.example_feed())
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], np.asarray(value), rtol=1e-6)


def test_exported_header_agrees_with_jaxs_generated_reader(seed_artifact):
    """The hand reader against jax's own flatbuffer code (an internal, used here only as the oracle)."""
    generated = pytest.importorskip("jax._src.export.serialization_generated")
    data = (seed_artifact[2].directory / FILES["exported"]).read_bytes()
    root = generated.Exported.GetRootAsExported(bytearray(data), 0)
    assert exported_header(data)["serialization_version"] == root.SerializationVersion()


def test_exported_header_of_bytes_that_are_no_exported_says_nothing():
    for junk in (b"", b"\x00" * 3, b"\xff" * 64, b"ML\xefR\x0b"):
        header = exported_header(junk)
        assert set(header) == {"serialization_version", "jax_version"}
        assert header["jax_version"] is None


# -- the StableHLO module through JAX's public MLIR bindings -------------------------------------------------

def test_ir_context_parses_an_exported_module_and_its_interface(seed_artifact):
    _, sig, artifact = seed_artifact
    exported = jax.export.deserialize(bytearray((artifact.directory / FILES["exported"]).read_bytes()))
    with ir_context() as ctx:
        module = parse_module(exported, ctx)
        assert _module_arity(module) == len(exported.module_kept_var_idx)
    args = module_interface(exported, [leaf.name for leaf in sig.inputs])
    used = [leaf.name for leaf in artifact.manifest.inputs if leaf.used]
    assert [a.name for a in args if a.kind == "leaf"] == used == ["foo.baz"]  # the seed never reads foo.bar


def test_producer_version_reads_model_mlirbc_as_jax_exports_it(seed_artifact):
    _, _, artifact = seed_artifact
    written = producer_version((artifact.directory / FILES["stablehlo_bytecode"]).read_bytes())
    assert written is not None and re.fullmatch(r"\d+\.\d+\.\d+", written), written
    # jax.export writes for its 4-week compatibility window; the manifest and the skew checks rely on it
    assert written == jax_stablehlo_versions()["stablehlo_export_target"]
    assert artifact.manifest.requires["stablehlo_version"] == written
    assert producer_version(b"not bytecode") is None


def test_retarget_writes_an_older_stablehlo_that_still_parses(seed_artifact):
    """What the SavedModel backend does for TF 2.21's reader (StableHLO 1.13.7), with public APIs only."""
    _, _, artifact = seed_artifact
    exported = jax.export.deserialize(bytearray((artifact.directory / FILES["exported"]).read_bytes()))
    older = retarget(exported, "1.13.7")
    assert producer_version(bytes(older.mlir_module_serialized)) == "1.13.7"
    assert older.module_kept_var_idx == exported.module_kept_var_idx  # dataclasses.replace kept the rest
    with ir_context() as ctx:
        assert _module_arity(parse_module(older, ctx)) == len(exported.module_kept_var_idx)


# -- jax names multiexport uses outside jax.export --------------------------------------------------------

def test_jax_core_eval_jaxpr_and_tracer_are_public_and_not_deprecated():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation shim on jax.core would warn on access
        eval_jaxpr, tracer = jax.core.eval_jaxpr, jax.core.Tracer
    closed = jax.make_jaxpr(lambda x, y: jnp.sin(x) * y + 1.0)(np.float32(1.0), np.ones(3, np.float32))
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, np.float32(0.5), np.arange(3, dtype=np.float32))
    np.testing.assert_allclose(out, np.sin(0.5) * np.arange(3) + 1.0, rtol=1e-6)
    seen = []
    jax.jit(lambda x: seen.append(isinstance(x, tracer)) or x)(1.0)
    assert seen == [True]


def test_prng_key_dtype_carries_its_impl():
    """signature/build.py names a key's implementation from `dtype._impl` when it has only the aval."""
    key = jax.random.key(0)
    spec = jax.ShapeDtypeStruct(key.shape, key.dtype)
    impl = spec.dtype._impl
    assert str(getattr(impl, "name", impl)) == str(getattr(jax.random.key_impl(key), "name", jax.random.key_impl(key)))


def test_exported_fields_the_backends_read():
    exported = jax.export.export(jax.jit(lambda a, unused, b: a + b))(
        *[jax.ShapeDtypeStruct((2,), np.float32)] * 3)
    assert tuple(sorted(exported.module_kept_var_idx)) == (0, 2)
    version = exported.calling_convention_version
    assert (jax.export.minimum_supported_calling_convention_version <= version
            <= jax.export.maximum_supported_calling_convention_version)
    for name in ("in_avals", "out_avals", "platforms", "nr_devices", "ordered_effects", "disabled_safety_checks",
                 "mlir_module_serialized"):
        assert hasattr(exported, name), name
    assert isinstance(jax.config.jax_use_shardy_partitioner, bool)  # passed to TF's call_module (convention >= 10)


@pytest.mark.skipif(importlib.util.find_spec("multiexport.native") is None, reason="no multiexport.native here")
def test_the_shape_refinement_native_uses_still_exists():
    """multiexport/native refines polymorphic shapes with a JAX internal (no public API does it)."""
    from jax._src.interpreters import mlir as jax_mlir

    assert callable(getattr(jax_mlir, "refine_polymorphic_shapes", None))
