"""Flatten a target's inputs and outputs into named array leaves (`build_signature`).

Inputs are the target's example arguments flattened as JAX flattens them; outputs come from tracing the
function once on abstract values (`jax.make_jaxpr`), so no example is computed. Every leaf name is
unique (`naming.join_name` quotes keys that would collide), typed PRNG keys become their physical
uint32 data, and a target that needs 64-bit types says so (`Signature.x64`).
"""

from __future__ import annotations

import fnmatch
import inspect
from typing import Any, Sequence

import numpy as np

from ..dtypes import parse_dtype
from ..errors import SignatureError, TargetError, leaf_message
from .naming import assign_aliases, duplicates, join_name
from .signature import Dim, Leaf, Signature
from .target import Target

X64_DTYPES = ("float64", "int64", "uint64", "complex128")


def build_signature(target: Target) -> Signature:
    """Flatten `target`'s example arguments and traced outputs into a `Signature`."""
    import jax

    prefixes, values, rebuild_args = _bind_arguments(target)
    try:
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tuple(values))
    except Exception as exc:  # e.g. dict keys of mixed types that JAX cannot sort
        raise SignatureError(f"Inputs of '{target.name}' | cannot be flattened as a pytree: {_first_line(exc)}") from exc

    names = [join_name(prefixes[path[0].idx], path[1:]) for path, _ in path_leaves]
    _check_unique(target, names, "Input")
    aliases, collisions = assign_aliases(names)
    warnings = [f"alias collision: {c.describe()}" for c in collisions]

    avals, examples, key_impls = [], [], []
    for name, (_, value) in zip(names, path_leaves):
        aval, example, key_impl, note = _leaf_aval(name, value)
        avals.append(aval)
        examples.append(example)
        key_impls.append(key_impl)
        if note:
            warnings.append(note)

    shape_specs = _shape_specs(target, names, avals)
    specs, symbols = _symbolic_specs(names, avals, shape_specs)

    def rebuild(leaves: Sequence[Any]) -> tuple[tuple, dict]:
        return rebuild_args(jax.tree_util.tree_unflatten(treedef, list(leaves)))

    inputs = tuple(
        Leaf(n, a, _shape_of(s), np.dtype(s.dtype).name, bool(getattr(s, "weak_type", False)), k)
        for n, a, s, k in zip(names, aliases, specs, key_impls)
    )
    outputs, out_treedef, out_collisions, weights = _trace_outputs(target, inputs, specs, rebuild)
    weights["input_bytes"] = int(sum(_nbytes(leaf) for leaf in inputs))
    weights["mode"] = "baked" if weights["baked_bytes"] > weights["input_bytes"] else "inputs"
    collisions += out_collisions
    warnings += [f"alias collision: {c.describe()}" for c in out_collisions]
    return Signature(
        name=target.name,
        inputs=inputs,
        outputs=outputs,
        collisions=tuple(collisions),
        warnings=tuple(warnings),
        symbolic_dims=tuple(symbols),
        examples=tuple(examples),
        weights=weights,
        specs=tuple(specs),
        x64=any(leaf.dtype in X64_DTYPES for leaf in inputs + outputs),
        _rebuild=rebuild,
        _out_treedef=out_treedef,
        _fn=target.fn,
    )


def _check_unique(target: Target, names: list[str], kind: str) -> None:
    """Two leaves with one name would be merged silently by every name-keyed format: refuse instead."""
    dup = duplicates(names)
    if dup:
        raise SignatureError(f"{kind} '{dup[0]}' | names {names.count(dup[0])} leaves of '{target.name}', "
                             "expected unique leaf names (rename one of the keys)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def _bind_arguments(target: Target):
    """Top-level argument names and values in parameter order, and a way back to (args, kwargs)."""
    fn, args, kwargs = target.fn, target.args, dict(target.kwargs)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is None:
        prefixes = [f"arg{i}" for i in range(len(args))] + sorted(kwargs)
        values = list(args) + [kwargs[k] for k in sorted(kwargs)]
        n_args = len(args)

        def rebuild_plain(vals):
            return tuple(vals[:n_args]), dict(zip(prefixes[n_args:], vals[n_args:]))

        return prefixes, values, rebuild_plain
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TargetError(
            f"Target '{target.name}' | example arguments do not fit {fn.__name__ if hasattr(fn, '__name__') else 'fn'}"
            f"{sig}: {exc}"
        ) from exc
    prefixes, values, kinds = [], [], []
    for pname, value in bound.arguments.items():
        kind = sig.parameters[pname].kind
        if kind is inspect.Parameter.VAR_KEYWORD:  # **kw entries are named by their own keys
            for key in sorted(value):
                prefixes.append(key)
                values.append(value[key])
                kinds.append((pname, key))
        else:
            prefixes.append(pname)
            values.append(value)
            kinds.append((pname, None))

    def rebuild_bound(vals):
        arguments: dict[str, Any] = {}
        for (pname, key), val in zip(kinds, vals):
            if key is None:
                arguments[pname] = val
            else:
                arguments.setdefault(pname, {})[key] = val
        rebound = sig.bind_partial()
        rebound.arguments.update(arguments)
        return rebound.args, rebound.kwargs

    return prefixes, values, rebuild_bound


_SCALARS = (bool, int, float, complex)


def _leaf_aval(name: str, value: Any):
    """(ShapeDtypeStruct of what the artifact takes, example as numpy or None, key impl or None, warning)."""
    import jax

    if _is_key_dtype(getattr(value, "dtype", None)):
        return _key_aval(name, value)
    if isinstance(value, jax.ShapeDtypeStruct):
        _check_dtype(name, value.dtype)
        return value, None, None, None
    if isinstance(value, _SCALARS) or isinstance(value, (np.ndarray, np.generic, jax.Array)):
        weak = isinstance(value, _SCALARS) or bool(getattr(value, "weak_type", False))
        try:
            example = np.asarray(value)
        except Exception as exc:  # e.g. a deleted or sharded-away array
            raise SignatureError(leaf_message("Input", name, f"an array numpy cannot read ({_first_line(exc)})",
                                              "an array on this host")) from exc
        if example.dtype == object:
            raise SignatureError(leaf_message("Input", name, "an object array", "an array of numbers"))
        _check_dtype(name, example.dtype)
        dtype = jax.dtypes.canonicalize_dtype(jax.numpy.result_type(value) if isinstance(value, _SCALARS) else example.dtype)
        note = None
        if not isinstance(value, _SCALARS) and np.dtype(dtype) != example.dtype:
            note = (
                f"Input '{name}' | example is {example.dtype.name}, exported as {np.dtype(dtype).name} "
                "(JAX runs without x64; enable jax_enable_x64 to keep 64-bit)"
            )
        example = example.astype(dtype, copy=False)
        return jax.ShapeDtypeStruct(example.shape, dtype, weak_type=weak), example, None, note
    kind = type(value).__name__
    raise SignatureError(
        leaf_message(
            "Input",
            name,
            f"a {kind}",
            "an array, a Python number or a jax.ShapeDtypeStruct (make it static, e.g. "
            "flax.struct.field(pytree_node=False), or close over it)",
        )
    )


def _check_dtype(name: str, dtype: Any) -> None:
    try:
        parse_dtype(np.dtype(dtype).name)
    except TypeError:
        raise SignatureError(leaf_message("Input", name, f"dtype {dtype}", "a numeric or bool array")) from None


def _is_key_dtype(dtype: Any) -> bool:
    import jax

    try:
        return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:
        return False


def _key_aval(name: str, value: Any):
    """A typed PRNG key leaf as its physical data: jax.export passes keys that way too."""
    import jax

    impl = jax.random.key_impl(value) if not isinstance(value, jax.ShapeDtypeStruct) else value.dtype._impl
    impl_name = str(getattr(impl, "name", impl))
    if isinstance(value, jax.ShapeDtypeStruct):
        data = jax.eval_shape(jax.random.key_data, value)
        return jax.ShapeDtypeStruct(data.shape, data.dtype), None, impl_name, None
    example = np.asarray(jax.random.key_data(value))
    note = (f"Input '{name}' | is a typed PRNG key ({impl_name}): every format takes its physical data "
            f"({example.dtype.name}{tuple(example.shape)}), wrapped back into a key inside the function")
    return jax.ShapeDtypeStruct(example.shape, example.dtype), example, impl_name, note


def _shape_specs(target: Target, names: list[str], avals: list[Any]) -> list[str | None]:
    """Shape spec string per input leaf from `polymorphic_shapes` and `symbolic_batch`."""
    specs: list[str | None] = [None] * len(names)
    for pattern, spec in target.polymorphic_shapes.items():
        matched = [i for i, n in enumerate(names) if n == pattern] or [
            i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, pattern)
        ]
        if not matched:
            raise SignatureError(
                f"Polymorphic shape pattern '{pattern}' | matched no input leaf, expected one of: {', '.join(names)}"
            )
        for i in matched:
            if specs[i] is None or names[i] == pattern:
                specs[i] = spec
    symbol = target.batch_symbol
    if symbol:
        hits = 0
        for i, (n, aval) in enumerate(zip(names, avals)):
            if specs[i] is None and len(aval.shape) >= 1 and any(fnmatch.fnmatchcase(n, p) for p in target.batch_leaves):
                specs[i] = f"{symbol}, ..."
                hits += 1
        if hits == 0 and not any(specs):
            raise SignatureError(
                f"Symbolic batch '{symbol}' | matched no input leaf with a leading dimension, "
                f"expected batch_leaves {list(target.batch_leaves)} to match some of: {', '.join(names)}"
            )
    return specs


def _symbolic_specs(names, avals, shape_specs):
    import jax
    from jax import export

    scope = export.SymbolicScope()
    specs, symbols = [], []
    for name, aval, spec in zip(names, avals, shape_specs):
        if spec is None:
            specs.append(aval)
            continue
        try:
            shape = export.symbolic_shape(spec, scope=scope, like=tuple(aval.shape))
        except Exception as exc:
            raise SignatureError(
                leaf_message("Input", name, f"shape spec '{spec}' for example shape {tuple(aval.shape)}",
                             f"a valid spec ({_first_line(exc)})")
            ) from exc
        for d in shape:
            if not isinstance(d, int):
                for sym in _dim_symbols(d):
                    if sym not in symbols:
                        symbols.append(sym)
        specs.append(jax.ShapeDtypeStruct(shape, aval.dtype, weak_type=bool(getattr(aval, "weak_type", False))))
    return specs, symbols


def _nbytes(leaf: Leaf) -> int:
    """Bytes of one input leaf, symbolic dimensions counted as 1."""
    return int(np.prod([d if isinstance(d, int) else 1 for d in leaf.shape], dtype=np.int64)) * np.dtype(
        parse_dtype(leaf.dtype)).itemsize


def _dim_symbols(dim: Any) -> list[str]:
    import re

    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(dim))


def _shape_of(aval: Any) -> tuple[Dim, ...]:
    return tuple(d if isinstance(d, int) else str(d) for d in aval.shape)


def _trace_outputs(target: Target, inputs, specs, rebuild):
    import jax

    keys = [leaf.key_impl for leaf in inputs]

    def tree_fn(*leaves):
        leaves = [jax.random.wrap_key_data(x, impl=k) if k else x for x, k in zip(leaves, keys)]
        args, kwargs = rebuild(leaves)
        return target.fn(*args, **kwargs)

    try:
        closed, out = jax.make_jaxpr(tree_fn, return_shape=True)(*specs)
    except SystemExit as exc:  # a target must not end the process while it is traced
        raise TargetError(f"Target '{target.name}' | fn called sys.exit({exc.code!r}) while being traced, "
                          "expected it to return arrays") from None
    except Exception as exc:
        symbolic = [f"{leaf.name}={leaf.shape_str()}" for leaf in inputs if leaf.is_symbolic]
        where = f" with symbolic shapes {', '.join(symbolic)}" if symbolic else ""
        raise TargetError(
            f"Target '{target.name}' | fn failed to trace on its example arguments{where}: {_first_line(exc)}"
        ) from exc
    path_leaves, out_treedef = jax.tree_util.tree_flatten_with_path(out)
    names = [join_name("out", path) for path, _ in path_leaves]
    _check_unique(target, names, "Output")
    aliases, collisions = assign_aliases(names)
    outputs = []
    for n, a, (_, s) in zip(names, aliases, path_leaves):
        if _is_key_dtype(s.dtype):
            data = jax.eval_shape(jax.random.key_data, s)
            impl = s.dtype._impl
            outputs.append(Leaf(n, a, _shape_of(data), np.dtype(data.dtype).name, False, str(getattr(impl, "name", impl))))
            continue
        try:
            parse_dtype(np.dtype(s.dtype).name)
        except TypeError:
            raise SignatureError(leaf_message("Output", n, f"dtype {s.dtype}", "a numeric or bool array")) from None
        outputs.append(Leaf(n, a, _shape_of(s), np.dtype(s.dtype).name, bool(getattr(s, "weak_type", False))))
    if not outputs:
        raise TargetError(f"Target '{target.name}' | fn returns no arrays, expected at least one output array")
    baked = [np.asarray(c) for c in closed.consts if hasattr(c, "shape") and not _is_key_dtype(c.dtype)]
    weights = {"baked_bytes": int(sum(c.nbytes for c in baked)), "baked_arrays": len(baked)}
    return tuple(outputs), out_treedef, collisions, weights
