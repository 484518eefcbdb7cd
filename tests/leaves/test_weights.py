"""Lifting baked weights out of the module, and the safetensors file that holds them."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from multiexport import examples
from multiexport.errors import ArtifactError, UsageError
from multiexport.exporting import ExportOptions
from multiexport.files.safetensors import iter_safetensors, read_safetensors, write_safetensors
from multiexport.leaves import build_signature
from multiexport.leaves.target import Target
from multiexport.leaves.weights import AUTO_MIN_BYTES, LIFT_MIN_BYTES, lift_weights, should_lift, tensor_names


def test_safetensors_round_trip_keeps_every_dtype_and_shape(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "bf16": rng.standard_normal((7,)).astype(ml_dtypes.bfloat16),
        "i8": np.arange(-3, 4, dtype=np.int8).reshape(7, 1),
        "bool": np.array([True, False, True]),
        "scalar": np.float64(2.5) * np.ones((), np.float64),
        "empty": np.zeros((0, 4), np.float32),
    }
    write_safetensors(tmp_path / "w.safetensors", tensors, {"who": "test"})
    back = read_safetensors(tmp_path / "w.safetensors")
    assert set(back) == set(tensors)
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape, name
        np.testing.assert_array_equal(back[name], array)
    # The header is the format's: 8-byte little-endian length, JSON padded to 8 bytes, offsets in order.
    raw = (tmp_path / "w.safetensors").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + length])
    assert length % 8 == 0 and header["__metadata__"] == {"who": "test"}
    assert header["bf16"]["dtype"] == "BF16" and header["f32"]["shape"] == [3, 5]
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] == len(raw) - 8 - length
    # Every tensor starts at a multiple of its own item size (runtimes map the file).
    for name, array in tensors.items():
        assert header[name]["data_offsets"][0] % array.dtype.itemsize == 0, name


def test_a_truncated_weights_file_is_an_artifact_error_naming_the_weight(tmp_path):
    path = tmp_path / "w.safetensors"
    write_safetensors(path, {"a": np.ones(16, np.float32), "b": np.ones(1000, np.float32)})
    path.write_bytes(path.read_bytes()[:-100])
    assert read_safetensors(path, ["a"])["a"].sum() == 16  # written first: still whole
    with pytest.raises(ArtifactError, match=re.escape("Weight 'b' | got 4000 bytes at 64")):
        read_safetensors(path, ["b"])
    path.write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(ArtifactError, match=re.escape("cannot read w.safetensors")):
        read_safetensors(path)
    with pytest.raises(ArtifactError, match=re.escape("Weight 'nope' | missing")):
        write_safetensors(path, {"a": np.ones(2, np.float32)})
        read_safetensors(path, ["nope"])


def test_lifted_function_computes_the_same_numbers_with_the_weights_as_arguments():
    target = examples.lm("small", "baked")
    sig = build_signature(target)
    lifted = lift_weights(target.fn, sig)
    assert lifted is not None
    # Every constant of 1 KiB or more is lifted; what stays is small (biases, norm scales).
    assert all(a.nbytes >= LIFT_MIN_BYTES for a in lifted.arrays)
    assert lifted.nbytes + lifted.kept_bytes == sig.weights["baked_bytes"]
    assert lifted.kept_bytes < 0.05 * sig.weights["baked_bytes"]
    ref = jax.jit(sig.flat_function(target.fn))(*sig.examples)
    got = jax.jit(lifted.fn)(*sig.examples, *lifted.arrays)
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))
    # Other weights give other outputs: the arguments are really read, not the baked values.
    other = jax.jit(lifted.fn)(*sig.examples, *[a * 0.5 for a in lifted.arrays])
    assert not np.allclose(np.asarray(other[0]), np.asarray(ref[0]))
    # The module takes them as parameters: no large constant remains in it.
    exported = jax.export.export(jax.jit(lifted.fn))(*sig.specs, *lifted.specs())
    assert len(exported.in_avals) == len(sig.inputs) + len(lifted.arrays)
    assert len(exported.mlir_module_serialized) < 0.1 * lifted.nbytes


def test_lifting_keeps_symbolic_dimensions():
    w = np.linspace(-1, 1, 64 * 8, dtype=np.float32).reshape(64, 8)

    def fn(x):
        return jnp.tanh(x @ w)

    target = Target(fn, args=(np.ones((3, 64), np.float32),), name="sym", symbolic_batch="b")
    sig = build_signature(target)
    lifted = lift_weights(target.fn, sig)
    exported = jax.export.export(jax.jit(lifted.fn))(*sig.specs, *lifted.specs())
    assert "b" in str(exported.in_avals[0].shape)
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(exported.call(x, w)[0]), np.tanh(x @ w), rtol=1e-5, atol=1e-6)



def test_a_lifted_symbolic_function_runs_on_concrete_inputs_with_the_weights_still_arguments():
    """The jax.jit reference calls the lifted function on concrete sizes; a jaxpr traced with a symbolic batch
    holds `b` in its reshapes and cannot be evaluated there (UnexpectedDimVar, an internal error that stopped
    every compare of a conv net or transformer with a symbolic batch and baked weights)."""
    w = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32) / 8

    def fn(x):
        y = x.reshape(x.shape[0], -1) @ w
        return jnp.tanh(y).reshape(x.shape[0], 2, 16).sum(-1)

    target = Target(fn, args=(np.ones((3, 8, 8), np.float32),), name="symreshape", symbolic_batch="b")
    sig = build_signature(target)
    lifted = lift_weights(target.fn, sig)
    assert lifted is not None and len(lifted.arrays) == 1
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 8)).astype(np.float32)
        (got,) = jax.jit(lifted.fn)(x, *lifted.arrays)
        np.testing.assert_allclose(np.asarray(got), np.asarray(fn(x)), rtol=1e-6, atol=1e-6)
        # The weight is still an argument, not a constant of the concrete trace: other values, other outputs.
        (other,) = jax.jit(lifted.fn)(x, *[a * 0 for a in lifted.arrays])
        np.testing.assert_array_equal(np.asarray(other), np.zeros((batch, 2), np.float32))
    exported = jax.export.export(jax.jit(lifted.fn))(*sig.specs, *lifted.specs())  # and still symbolic there
    assert "b" in str(exported.in_avals[0].shape)

def test_lifted_weights_are_named_by_where_the_target_keeps_them():
    """The closure's pytree path names each weight, the same array only: equal values never trade names."""
    import functools

    target = examples.lm("small", "baked")
    lifted = lift_weights(target.fn, build_signature(target))
    assert lifted.names[:2] == ("params.embed.embedding", "params.positions")
    assert all(n == s for n, s in zip(lifted.names, lifted.sources))  # every LM weight is a closure leaf
    assert lifted.describe()["tensors"][0] == {"name": "params.embed.embedding", "source": "params.embed.embedding",
                                               "shape": list(lifted.arrays[0].shape), "dtype": "float32"}

    rng = np.random.default_rng(0)
    zeros_a, zeros_b = np.zeros(512, np.float32), np.zeros(512, np.float32)  # equal values, two arrays
    table = {"w x": rng.standard_normal((64, 64)).astype(np.float32), "a": zeros_a, "b": zeros_b}

    def apply(variables, x):
        computed = jnp.asarray(np.full(300, 2.0, np.float32))  # made in the function: no path names it
        return {"y": x @ variables["w x"] + 3 * jnp.sum(variables["b"]) + jnp.sum(variables["a"]) + computed.sum()}

    fn = functools.partial(apply, table)
    sig = build_signature(Target(fn, args=(np.ones((2, 64), np.float32),), name="p"))
    lifted = lift_weights(fn, sig)
    by_source = dict(zip(lifted.sources, lifted.arrays))
    assert set(lifted.sources) == {'variables."w x"', "variables.a", "variables.b", None}  # canonical leaf names
    assert np.shares_memory(by_source["variables.b"], zeros_b)
    assert np.shares_memory(by_source["variables.a"], zeros_a)
    assert "variables._w_x_" in lifted.names and f"weight_{lifted.sources.index(None):04d}" in lifted.names
    # The names bind the right values: feeding each name's own array reproduces the function.
    x = rng.standard_normal((2, 64)).astype(np.float32)
    swapped = [zeros_a + 1 if s == "variables.b" else a for s, a in zip(lifted.sources, lifted.arrays)]
    got = np.asarray(jax.jit(lifted.fn)(x, *swapped)[0])
    want = np.asarray(jax.jit(lambda x: fn(x)["y"])(x)) + 3 * 512  # b + 1 enters summed, times 3
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_tensor_names_are_safe_and_unique():
    assert tensor_names(["a.b", "a b", "a_b", None, "-x", "A.B"]) == (
        "a.b", "a_b", "a_b_2", "weight_0003", "w-x", "A.B_2")


def test_policy_decides_by_the_baked_bytes():
    small = build_signature(examples.lm("small", "baked"))  # ~0.5 MiB baked
    inputs = build_signature(examples.lm("small", "inputs"))  # nothing baked
    assert small.weights["baked_bytes"] < AUTO_MIN_BYTES
    assert should_lift("always", small) and not should_lift("auto", small) and not should_lift("never", small)
    assert not should_lift("always", inputs)
    with pytest.raises(UsageError, match=re.escape("Option 'external_weights' | got 'sometimes'")):
        ExportOptions(external_weights="sometimes")


def test_reference_lifts_large_baked_weights_and_computes_the_same_numbers(monkeypatch):
    """Past AUTO_MIN_BYTES the reference jits the lifted function; its outputs equal plain jax.jit's."""
    from multiexport.leaves import weights
    from multiexport.measure.reference import ReferenceRunner

    target = examples.lm("small", "baked")
    sig = build_signature(target)
    plain = ReferenceRunner(target, sig)
    assert plain.lifted_weights == 0
    monkeypatch.setattr(weights, "AUTO_MIN_BYTES", 1024)
    lifted = ReferenceRunner(target, sig)
    assert lifted.lifted_weights > 10 and "baked weights passed as arguments" in lifted.calling_path
    feed = sig.example_feed()
    np.testing.assert_array_equal(lifted(feed)["out.logits"], plain(feed)["out.logits"])
    # XLA folds a few ops on the weights while they are constants (0.2 % of the FLOPs here); the rest is the same.
    assert lifted.flops(feed) == pytest.approx(plain.flops(feed), rel=0.01)


def test_each_weight_maps_only_its_own_bytes(tmp_path):
    """A runner loading weights one at a time holds one tensor mapped, not the whole file."""
    import mmap

    path = tmp_path / "w.safetensors"
    tensors = {"a": np.arange(1 << 18, dtype=np.float32), "b": -np.arange(1 << 18, dtype=np.float32)}
    write_safetensors(path, tensors)
    for name, array in iter_safetensors(path, ["b", "a"]):
        np.testing.assert_array_equal(array, tensors[name])
        assert not array.flags.writeable
        assert len(array._mmap) <= array.nbytes + mmap.ALLOCATIONGRANULARITY, name
