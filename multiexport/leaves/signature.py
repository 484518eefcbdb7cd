"""The named leaves of a target, and the one description every backend exports against.

A `Signature` holds ordered input leaves and output leaves (canonical name, alias, shape with symbolic
dims by name, dtype) plus a flat function of the input leaves that returns the output leaves, so no
backend ever sees a custom pytree.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .naming import AliasCollision

Dim = int | str


def shape_text(shape) -> str:
    """A shape as Python prints a tuple, symbolic dims by name: `(b, 16)`, `(10,)`, `()`."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class NeedsTarget(BaseException):
    """Something needs the target's function or pytree, which a signature read back without its target (an
    export worker's handed target, leaves/handed.py) does not have.

    A BaseException, like KeyboardInterrupt: the converters' and the pipeline's `except Exception` must not turn
    it into an export failure; only the worker catches it, builds the target and exports again.
    """


@dataclass(frozen=True)
class Leaf:
    """One named array leaf of the inputs or outputs.

    name: canonical dotted name (`params.Dense_0.kernel`), unique among the inputs (outputs).
    alias: the name reduced to `[A-Za-z0-9_]` (a TF signature key, an identifier), unique ignoring case.
    shape: ints for static dimensions and strings for symbolic ones (`"b"`, `"2*b"`).
    dtype: numpy / ml_dtypes name of the array the artifact takes or returns (`float32`, `bfloat16`).
    weak_type: a Python scalar, which JAX types weakly (it does not promote its partners).
    key_impl: for a typed PRNG key, its implementation (`threefry2x32`): the leaf is then the key's
        physical data (`uint32`, shape with the implementation's trailing key dims), wrapped back into a
        key inside the exported function.
    """

    name: str
    alias: str
    shape: tuple[Dim, ...]
    dtype: str
    weak_type: bool = False
    key_impl: str | None = None

    @property
    def is_symbolic(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)

    def shape_str(self) -> str:
        return shape_text(self.shape)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "alias": self.alias, "shape": list(self.shape),
                                "dtype": self.dtype, "weak_type": self.weak_type}
        if self.key_impl:
            data["key_impl"] = self.key_impl
        return data


@dataclass(frozen=True, eq=False)
class Signature:
    """Named input and output leaves of one target, and the flat function over them.

    name: the target's name.
    inputs, outputs: the leaves in flattening order (the order of every format's parameters).
    collisions: alias collisions that were resolved (also listed in `warnings`).
    warnings: facts a user should know (64-bit examples exported as 32-bit, collisions, ...).
    symbolic_dims: the symbolic dimension names in order of first appearance.
    examples: the example value per input leaf (None for leaves given as shapes only).
    specs: `jax.ShapeDtypeStruct` per input leaf, symbolic dims included: what exports trace with.
    weights: where the weights live: closed-over constants baked into every artifact, or input leaves
        (`mode`, `baked_bytes`, `baked_arrays`, `input_bytes`).
    x64: whether the target needs JAX's 64-bit mode (a 64-bit input or output leaf).
    """

    name: str
    inputs: tuple[Leaf, ...]
    outputs: tuple[Leaf, ...]
    collisions: tuple[AliasCollision, ...] = ()
    warnings: tuple[str, ...] = ()
    symbolic_dims: tuple[str, ...] = ()
    examples: tuple[np.ndarray | None, ...] = ()
    specs: tuple[Any, ...] = ()
    weights: dict[str, Any] = field(default_factory=dict)
    x64: bool = False
    _rebuild: Callable[[Sequence[Any]], tuple[tuple, dict]] | None = field(default=None, repr=False)
    _out_treedef: Any = field(default=None, repr=False)
    _fn: Callable[..., Any] | None = field(default=None, repr=False)

    def input(self, name: str) -> Leaf:
        for leaf in self.inputs:
            if leaf.name == name:
                return leaf
        raise KeyError(name)

    def flat_function(self, fn: Callable[..., Any] | None = None) -> Callable[..., list[Any]]:
        """`fn` (default: the target's) as a function of the input leaves in order, returning the output
        leaves in order. Key leaves are wrapped into typed keys on the way in and unwrapped on the way out.

        Its parameters are named by the leaves' aliases, so lowered modules carry readable argument names.
        """
        import jax

        rebuild, fn = self._rebuild, fn or self._fn
        if rebuild is None:  # read back without its target (leaves/handed.py): no pytree to rebuild
            raise NeedsTarget(f"the function of '{self.name}' is needed")
        keys = [leaf.key_impl for leaf in self.inputs]
        out_keys = any(leaf.key_impl for leaf in self.outputs)

        def flat(*leaves):
            leaves = [jax.random.wrap_key_data(x, impl=k) if k else x for x, k in zip(leaves, keys)]
            args, kwargs = rebuild(leaves)
            out = jax.tree_util.tree_leaves(fn(*args, **kwargs))
            if out_keys:
                out = [jax.random.key_data(o) if jax.dtypes.issubdtype(o.dtype, jax.dtypes.prng_key) else o
                       for o in out]
            return out

        flat.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(leaf.alias, inspect.Parameter.POSITIONAL_ONLY) for leaf in self.inputs]
        )
        flat.__name__ = flat.__qualname__ = _identifier(self.name)
        return flat

    def unflatten_outputs(self, leaves: Sequence[Any]) -> Any:
        """Output leaves back in the function's own output structure (in-process only)."""
        import jax

        if self._out_treedef is None:
            raise NeedsTarget(f"the outputs' structure of '{self.name}' is needed")
        return jax.tree_util.tree_unflatten(self._out_treedef, list(leaves))

    def example_feed(self) -> dict[str, np.ndarray]:
        """The target's example values by leaf name (leaves given only as shapes are left out)."""
        return {leaf.name: ex for leaf, ex in zip(self.inputs, self.examples) if ex is not None}

    def example_sizes(self) -> dict[str, int] | None:
        """Symbolic dimension -> its size in the example values, or None when a symbol has no example to read
        (no symbols: {}). Only plain symbols bind; expressions like `2*b` follow from them."""
        sizes: dict[str, int] = {}
        for leaf, example in zip(self.inputs, self.examples):
            if example is None:
                continue
            for dim, size in zip(leaf.shape, np.shape(example)):
                if dim in self.symbolic_dims:
                    sizes.setdefault(str(dim), int(size))
        return sizes if set(sizes) == set(self.symbolic_dims) else None

    def fingerprint(self, fn: Callable[..., Any] | None = None, closed: Any = None) -> str:
        """Hash of the leaves' layout, example values and the constants `fn` closes over.

        Two processes that load the same target get the same fingerprint unless the target is not
        deterministic (weights drawn without a seed, numpy random numbers drawn while tracing), which
        would make a parity check between an artifact exported in one and a reference computed in the
        other meaningless. closed: `jax.make_jaxpr` of `self.flat_function(fn)` at `self.specs`, when the
        caller has traced it already (else traced here).
        """
        import hashlib

        import jax

        h = hashlib.sha256(json.dumps([leaf.to_json() for leaf in self.inputs + self.outputs]).encode())
        for example in self.examples:
            h.update(b"-" if example is None else np.ascontiguousarray(example).tobytes())
        if closed is None:
            closed = jax.make_jaxpr(self.flat_function(fn))(*self.specs)
        for const in closed.consts:
            value = np.asarray(jax.random.key_data(const) if _is_key(const) else const)
            h.update(np.ascontiguousarray(value).tobytes())
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": [leaf.to_json() for leaf in self.inputs],
            "outputs": [leaf.to_json() for leaf in self.outputs],
            "symbolic_dims": list(self.symbolic_dims),
            "alias_collisions": [c.describe() for c in self.collisions],
            "weights": dict(self.weights),
            "x64": self.x64,
            "warnings": list(self.warnings),
        }


def _is_key(value: Any) -> bool:
    import jax

    dtype = getattr(value, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _identifier(name: str) -> str:
    import re

    text = re.sub(r"\W", "_", name)
    return text if text and (text[0].isalpha() or text[0] == "_") else f"fn_{text}"
