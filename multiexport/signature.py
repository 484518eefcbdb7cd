"""Flatten a target's inputs and outputs into named array leaves.

A `Signature` is the single description every backend exports against: ordered input leaves
(canonical name, alias, shape with symbolic dims by name, dtype) and output leaves named the same way,
plus a flat function of those leaves so no backend ever sees a custom pytree.
"""

from __future__ import annotations

import fnmatch
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .dtypes import parse_dtype
from .errors import SignatureError, TargetError, leaf_message
from .naming import AliasCollision, assign_aliases, join_name
from .target import Target

Dim = int | str


def shape_text(shape) -> str:
    """A shape as Python prints a tuple, symbolic dims by name: `(b, 16)`, `(10,)`, `()`."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@dataclass(frozen=True)
class Leaf:
    """One named array leaf of the inputs or outputs.

    shape holds ints for static dimensions and strings for symbolic ones (`"b"`, `"2*b"`).
    weak_type marks Python scalars, which JAX types weakly (they do not promote their partners).
    """

    name: str
    alias: str
    shape: tuple[Dim, ...]
    dtype: str
    weak_type: bool = False

    @property
    def is_symbolic(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)

    def shape_str(self) -> str:
        return shape_text(self.shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": self.alias,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "weak_type": self.weak_type,
        }


@dataclass(frozen=True, eq=False)
class Signature:
    """Named input and output leaves of one target, and the flat function over them."""

    name: str
    inputs: tuple[Leaf, ...]
    outputs: tuple[Leaf, ...]
    collisions: tuple[AliasCollision, ...] = ()
    warnings: tuple[str, ...] = ()
    symbolic_dims: tuple[str, ...] = ()
    examples: tuple[np.ndarray | None, ...] = ()
    specs: tuple[Any, ...] = ()  # jax.ShapeDtypeStruct per input leaf, symbolic dims included
    # Where the weights live: closed-over constants baked into every artifact, or input leaves.
    weights: dict[str, Any] = field(default_factory=dict)
    _rebuild: Callable[[Sequence[Any]], tuple[tuple, dict]] | None = field(default=None, repr=False)
    _out_treedef: Any = field(default=None, repr=False)

    def input(self, name: str) -> Leaf:
        for leaf in self.inputs:
            if leaf.name == name:
                return leaf
        raise KeyError(name)

    def flat_function(self, fn: Callable[..., Any]) -> Callable[..., list[Any]]:
        """`fn` as a function of the input leaves in order, returning the output leaves in order.

        Its parameters are named by the leaves' aliases, so lowered modules carry readable
        argument names (HLO `foo_baz.1 = parameter(0)`).
        """
        import jax

        rebuild = self._rebuild

        def flat(*leaves):
            args, kwargs = rebuild(leaves)
            return jax.tree_util.tree_leaves(fn(*args, **kwargs))

        flat.__signature__ = inspect.Signature(
            [inspect.Parameter(leaf.alias, inspect.Parameter.POSITIONAL_ONLY) for leaf in self.inputs]
        )
        flat.__name__ = flat.__qualname__ = self.name.replace("-", "_") or "fn"
        return flat

    def unflatten_outputs(self, leaves: Sequence[Any]) -> Any:
        """Output leaves back in the function's own output structure (in-process only)."""
        import jax

        return jax.tree_util.tree_unflatten(self._out_treedef, list(leaves))

    def example_feed(self) -> dict[str, np.ndarray]:
        """The target's example values by leaf name (leaves given only as shapes are left out)."""
        return {leaf.name: ex for leaf, ex in zip(self.inputs, self.examples) if ex is not None}

    def fingerprint(self, fn: Callable[..., Any]) -> str:
        """Hash of the leaves' layout, example values and the constants `fn` closes over.

        Two processes that load the same target get the same fingerprint unless the target is not
        deterministic (e.g. weights drawn without a seed), which would make a parity check between an
        artifact exported in one and a reference computed in the other meaningless.
        """
        import hashlib

        import jax

        h = hashlib.sha256(json.dumps([leaf.to_json() for leaf in self.inputs + self.outputs]).encode())
        for example in self.examples:
            h.update(b"-" if example is None else np.ascontiguousarray(example).tobytes())
        closed = jax.make_jaxpr(self.flat_function(fn))(*self.specs)
        for const in closed.consts:
            h.update(np.ascontiguousarray(np.asarray(const)).tobytes())
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": [leaf.to_json() for leaf in self.inputs],
            "outputs": [leaf.to_json() for leaf in self.outputs],
            "symbolic_dims": list(self.symbolic_dims),
            "alias_collisions": [c.describe() for c in self.collisions],
            "weights": dict(self.weights),
            "warnings": list(self.warnings),
        }


def build_signature(target: Target) -> Signature:
    """Flatten `target`'s example arguments and traced outputs into a `Signature`."""
    import jax

    prefixes, values, rebuild_args = _bind_arguments(target)
    try:
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tuple(values))
    except Exception as exc:  # e.g. dict keys of mixed types that JAX cannot sort
        raise SignatureError(f"Inputs of '{target.name}' | cannot be flattened as a pytree: {exc}") from exc

    names = [join_name(prefixes[path[0].idx], path[1:]) for path, _ in path_leaves]
    aliases, collisions = assign_aliases(names)
    warnings = [f"alias collision: {c.describe()}" for c in collisions]

    avals, examples = [], []
    for name, (_, value) in zip(names, path_leaves):
        aval, example, note = _leaf_aval(name, value)
        avals.append(aval)
        examples.append(example)
        if note:
            warnings.append(note)

    shape_specs = _shape_specs(target, names, avals)
    specs, symbols = _symbolic_specs(names, avals, shape_specs)

    def rebuild(leaves: Sequence[Any]) -> tuple[tuple, dict]:
        return rebuild_args(jax.tree_util.tree_unflatten(treedef, list(leaves)))

    inputs = tuple(
        Leaf(n, a, _shape_of(s), np.dtype(s.dtype).name, bool(getattr(s, "weak_type", False)))
        for n, a, s in zip(names, aliases, specs)
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
        _rebuild=rebuild,
        _out_treedef=out_treedef,
    )


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
    """(ShapeDtypeStruct-like aval, example as numpy or None, warning or None) for one input leaf."""
    import jax

    if isinstance(value, jax.ShapeDtypeStruct):
        return value, None, None
    if isinstance(value, _SCALARS) or isinstance(value, (np.ndarray, np.generic, jax.Array)):
        weak = isinstance(value, _SCALARS) or bool(getattr(value, "weak_type", False))
        example = np.asarray(value)
        if example.dtype == object:
            raise SignatureError(leaf_message("Input", name, "an object array", "an array of numbers"))
        dtype = jax.dtypes.canonicalize_dtype(jax.numpy.result_type(value) if isinstance(value, _SCALARS) else example.dtype)
        note = None
        if not isinstance(value, _SCALARS) and np.dtype(dtype) != example.dtype:
            note = (
                f"Input '{name}' | example is {example.dtype.name}, exported as {np.dtype(dtype).name} "
                "(JAX runs without x64; enable jax_enable_x64 to keep 64-bit)"
            )
        example = example.astype(dtype, copy=False)
        return jax.ShapeDtypeStruct(example.shape, dtype, weak_type=weak), example, note
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
                leaf_message("Input", name, f"shape spec '{spec}' for example shape {tuple(aval.shape)}", f"a valid spec ({exc})")
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

    def tree_fn(*leaves):
        args, kwargs = rebuild(leaves)
        return target.fn(*args, **kwargs)

    try:
        closed, out = jax.make_jaxpr(tree_fn, return_shape=True)(*specs)
    except Exception as exc:
        symbolic = [f"{leaf.name}={leaf.shape_str()}" for leaf in inputs if leaf.is_symbolic]
        where = f" with symbolic shapes {', '.join(symbolic)}" if symbolic else ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise TargetError(
            f"Target '{target.name}' | fn failed to trace on its example arguments{where}: {type(exc).__name__}: {first}"
        ) from exc
    path_leaves, out_treedef = jax.tree_util.tree_flatten_with_path(out)
    names = [join_name("out", path) for path, _ in path_leaves]
    aliases, collisions = assign_aliases(names)
    outputs = tuple(
        Leaf(n, a, _shape_of(s), np.dtype(s.dtype).name, bool(getattr(s, "weak_type", False)))
        for n, a, (_, s) in zip(names, aliases, path_leaves)
    )
    if not outputs:
        raise TargetError(f"Target '{target.name}' | fn returns no arrays, expected at least one output array")
    baked = [np.asarray(c) for c in closed.consts if hasattr(c, "shape")]
    weights = {"baked_bytes": int(sum(c.nbytes for c in baked)), "baked_arrays": len(baked)}
    return outputs, out_treedef, collisions, weights
