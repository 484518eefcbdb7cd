import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiexport
from multiexport import SignatureError, Target, TargetError
from multiexport.leaves import build_signature

from ..cases import CASES, CASE_IDS, WithStatic, case


def names(leaves):
    return [leaf.name for leaf in leaves]


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_every_case_flattens_to_the_leaves_it_declares(c):
    sig = build_signature(c.make())
    assert set(names(sig.inputs)) == set(c.used) | set(c.unused)
    aliases = [leaf.alias for leaf in sig.inputs]
    assert len({a.lower() for a in aliases}) == len(aliases)
    assert all(a.isidentifier() and a[0].isalpha() for a in aliases)


def test_seed_names_shapes_dtypes():
    sig = build_signature(case("seed").make())
    assert names(sig.inputs) == ["foo.bar", "foo.baz"]
    assert [leaf.shape for leaf in sig.inputs] == [(10,), (10,)]
    assert [leaf.dtype for leaf in sig.inputs] == ["int32", "int32"]
    assert names(sig.outputs) == ["out"] and sig.outputs[0].shape == ()


def test_flax_params_get_readable_names_in_parameter_order():
    sig = build_signature(case("mlp").make())
    assert names(sig.inputs)[0] == "params.Dense_0.bias"
    assert names(sig.inputs)[-1] == "batch.x"
    assert names(sig.outputs) == ["out.logits"]


def test_static_fields_are_structure_not_inputs():
    sig = build_signature(case("static_field").make())
    assert names(sig.inputs) == ["w.x"]


def test_python_scalars_become_weak_0d_leaves():
    sig = build_signature(case("scalar").make())
    s = sig.input("s")
    assert s.shape == () and s.dtype == "float32" and s.weak_type
    assert sig.example_feed()["s"].shape == ()


def test_kwargs_varargs_and_namedtuples_are_named():
    sig = build_signature(case("named_tuple_and_kwargs").make())
    assert names(sig.inputs) == ["pair.left", "pair.right", "bias"]
    assert names(sig.outputs) == ["out.0", "out.1"]

    def f(a, *rest, **extra):
        return a + rest[0] + extra["k"]

    one = np.ones(2, np.float32)
    sig = build_signature(Target(f, args=(one, one, one), kwargs={"k": one}))
    assert names(sig.inputs) == ["a", "rest.0", "rest.1", "k"]


def test_flat_function_matches_the_original_and_names_its_parameters():
    target = case("nested_dict").make()
    sig = build_signature(target)
    flat = sig.flat_function(target.fn)
    import inspect

    assert list(inspect.signature(flat).parameters) == [leaf.alias for leaf in sig.inputs]
    got = jax.jit(flat)(*[sig.example_feed()[n] for n in names(sig.inputs)])
    want = target.fn(*target.args)
    np.testing.assert_array_equal(got[0], want["y"])
    assert sig.unflatten_outputs(got).keys() == {"y"}


def test_none_is_structure_like_in_jax():
    sig = build_signature(Target(lambda d: d["x"] * 2, args=({"x": np.ones(2, np.float32), "mask": None},)))
    assert names(sig.inputs) == ["d.x"]


@pytest.mark.parametrize(
    "value, got",
    [("text", "a str"), (object(), "a object"), (np.array(["a"], dtype=object), "an object array")],
)
def test_non_array_leaves_are_rejected_by_path(value, got):
    with pytest.raises(SignatureError) as info:
        build_signature(Target(lambda d: d["x"], args=({"x": np.ones(2), "meta": {"tag": value}},)))
    assert "Input 'd.meta.tag'" in str(info.value) and got in str(info.value)


def test_float64_example_is_exported_as_float32_with_a_warning():
    sig = build_signature(Target(lambda x: x + 1, args=(np.ones(3, np.float64),)))
    assert sig.input("x").dtype == "float32"
    assert any("float64" in w and "'x'" in w for w in sig.warnings)


def test_mixed_dict_keys_give_a_signature_error():
    with pytest.raises(SignatureError, match="cannot be flattened"):
        build_signature(Target(lambda d: d["a"], args=({"a": np.ones(1), 1: np.ones(1)},)))


def test_alias_collisions_are_reported_and_distinct():
    sig = build_signature(case("alias_collision").make())
    aliases = {leaf.name: leaf.alias for leaf in sig.inputs}
    assert aliases == {"a.b": "a_b_2", "a_b": "a_b"}
    assert len(sig.collisions) == 1
    assert any("a_b_2" in w for w in sig.warnings)


def test_symbolic_batch_applies_to_matching_leaves_only():
    sig = build_signature(case("symbolic_batch").make())
    assert sig.input("w").shape == (5, 2)
    assert sig.input("batch.x").shape == ("b", 5)
    assert sig.input("batch.offset").shape == ("b",)
    assert sig.outputs[0].shape == ("b", 2)
    assert sig.symbolic_dims == ("b",)


def test_polymorphic_shapes_by_exact_name_and_glob():
    fn = lambda p, q: p.sum(axis=1) + q.sum(axis=1)  # noqa: E731
    x = np.ones((4, 6), np.float32)
    sig = build_signature(Target(fn, args=(x, x), polymorphic_shapes={"*": "n, 6", "q": "n, m"}))
    assert sig.input("p").shape == ("n", 6) and sig.input("q").shape == ("n", "m")
    assert set(sig.symbolic_dims) == {"n", "m"}


def test_bad_polymorphic_specs_name_the_leaf_or_pattern():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(SignatureError, match="pattern 'y' \\| matched no input leaf"):
        build_signature(Target(lambda x: x, args=(x,), polymorphic_shapes={"y": "b, 6"}))
    with pytest.raises(SignatureError, match="Input 'x'"):
        build_signature(Target(lambda x: x, args=(x,), polymorphic_shapes={"x": "b, 6, 7"}))
    with pytest.raises(SignatureError, match="matched no input leaf"):
        build_signature(Target(lambda x: x, args=(x,), symbolic_batch="b", batch_leaves=("nothing.*",)))


def test_functions_that_fail_to_trace_give_a_target_error():
    def broken(x):
        return x @ x  # (3,) @ (3,) is fine; (2, 3) @ (2, 3) is not

    with pytest.raises(TargetError, match="failed to trace.*TypeError"):
        build_signature(Target(broken, args=(np.ones((2, 3), np.float32),), name="broken"))

    def shape_dependent(x):
        if x.shape[0] > 2:  # Python control flow on a symbolic dim
            return x
        return x * 2

    with pytest.raises(TargetError, match="symbolic shapes x=\\(b, 3\\)"):
        build_signature(Target(shape_dependent, args=(np.ones((4, 3), np.float32),), symbolic_batch="b"))


def test_example_arguments_must_fit_the_function():
    with pytest.raises(TargetError, match="do not fit"):
        build_signature(Target(lambda a, b: a + b, args=(np.ones(2),)))


def test_shape_dtype_struct_leaves_have_no_example_values():
    spec = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    sig = build_signature(Target(lambda x: x * 2, args=(spec,)))
    assert sig.input("x").shape == (2, 3)
    assert sig.example_feed() == {}


def test_python_api_signature_accepts_a_plain_function():
    sig = multiexport.signature(lambda w: w.x * w.scale, WithStatic(np.ones(2, np.float32)))
    assert names(sig.inputs) == ["w.x"]
    assert sig.to_json()["inputs"][0]["alias"] == "w_x"


def test_a_dotted_key_and_a_nested_key_are_two_leaves_with_two_names():
    """{"a.b": x, "a": {"b": y}} named both leaves `d.a.b` before; run then returned a wrong answer."""
    x, y = np.ones(2, np.float32), np.full(2, 5.0, np.float32)
    target = Target(lambda d: d["a.b"] * 2 + d["a"]["b"], args=({"a.b": x, "a": {"b": y}},))
    sig = build_signature(target)
    assert sorted(names(sig.inputs)) == ['d."a.b"', "d.a.b"]
    assert len({leaf.alias for leaf in sig.inputs}) == 2
    feed = sig.example_feed()
    out = jax.jit(sig.flat_function())(*[feed[n] for n in names(sig.inputs)])
    np.testing.assert_array_equal(out[0], x * 2 + y)


def test_typed_prng_keys_are_leaves_of_their_physical_data():
    key = jax.random.key(0)
    target = Target(lambda state, x: x + jax.random.normal(state["key"], x.shape), args=({"key": key}, jnp.ones(3)))
    sig = build_signature(target)
    leaf = sig.input("state.key")
    assert leaf.dtype == "uint32" and leaf.shape == (2,) and leaf.key_impl
    np.testing.assert_array_equal(sig.example_feed()["state.key"], jax.random.key_data(key))
    flat = jax.jit(sig.flat_function())
    got = flat(*[sig.example_feed()[n] for n in names(sig.inputs)])[0]
    np.testing.assert_array_equal(got, jax.jit(target.fn)({"key": key}, jnp.ones(3)))
    assert any("typed PRNG key" in w for w in sig.warnings)


def test_a_key_returned_as_an_output_is_its_data_too():
    target = Target(lambda k: jax.random.split(k, 2), args=(jax.random.key(1),))
    sig = build_signature(target)
    assert sig.outputs[0].dtype == "uint32" and sig.outputs[0].shape == (2, 2) and sig.outputs[0].key_impl


def test_a_target_that_calls_sys_exit_while_traced_is_a_target_error():
    import sys

    def fn(x):
        sys.exit(0)

    with pytest.raises(TargetError, match=r"called sys.exit\(0\) while being traced"):
        build_signature(Target(fn, args=(np.ones(2, np.float32),)))


def test_x64_targets_keep_64_bit_leaves_and_say_they_need_x64():
    with jax.enable_x64(True):
        sig = build_signature(Target(lambda x, n: x * 2 + n, args=(jnp.ones(4, jnp.float64), jnp.ones(4, jnp.int64))))
    assert [leaf.dtype for leaf in sig.inputs] == ["float64", "int64"] and sig.x64
    assert not build_signature(case("mlp").make()).x64
