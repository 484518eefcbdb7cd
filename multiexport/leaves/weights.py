"""Baked weights moved out of the module: lifted to parameters and stored once, in a safetensors file.

A target that closes over its weights bakes them into every artifact as constants. Inside a StableHLO
module (XLA, IREE) or a SavedModel graph they are copied at every step of export and load: MLIR
attributes, the serialized module, the compiler's own constants, a protobuf capped at 2 GB. Lifting
instead traces the function once, turns each large closed-over constant into a trailing parameter
of the module, and writes the values to `weights.safetensors` (a plain, widely read format: an
8-byte header length, a JSON header, raw little-endian data), from which each runtime loads them
once: PJRT device buffers, IREE parameters, TF variables. The user's signature does not change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import UsageError
from ..files.safetensors import write_safetensors
from .handed import is_handed
from .naming import join_name
from .signature import NeedsTarget

WEIGHTS_FILE = "weights.safetensors"
POLICIES = ("auto", "always", "never")
# A constant smaller than this stays in the module: scalars, iotas and small tables cost nothing there and
# keep the compiler free to fold them.
LIFT_MIN_BYTES = 1024
# `auto` lifts once the baked constants reach this size: from here on the text forms are skipped and the
# embedded copies dominate export memory (measured on the 1.34 GB LM: XLA's export peaked at 7.2x the
# weights and IREE's at 9.7x with them embedded).
AUTO_MIN_BYTES = 16 << 20



@dataclass(frozen=True)
class LiftedWeights:
    """The target's large baked constants as trailing parameters of `fn(*leaves, *weights)`."""

    names: tuple[str, ...]  # tensor names in the weights file: the closed-over path, sanitized, else weight_NNNN
    arrays: tuple[np.ndarray, ...]  # views of the target's own constants: nothing is copied
    fn: Callable[..., list[Any]]
    kept_bytes: int  # constants small enough to stay in the module
    sources: tuple[str | None, ...]  # the dotted path of the closed-over array each weight is, if found

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays))

    def specs(self) -> list[Any]:
        import jax

        return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.arrays]

    def write(self, directory: Path) -> dict[str, Any]:
        """Write the weights file into `directory`; returns the manifest's description of it."""
        write_safetensors(directory / WEIGHTS_FILE, dict(zip(self.names, self.arrays)),
                          {"format": "multiexport lifted weights"})
        return self.describe()

    def describe(self) -> dict[str, Any]:
        return {
            "storage": "external",
            "file": WEIGHTS_FILE,
            "file_format": "safetensors",
            "external_bytes": self.nbytes,
            "embedded_bytes": self.kept_bytes,
            "tensors": [{"name": n, "source": src, "shape": list(a.shape), "dtype": a.dtype.name}
                        for n, src, a in zip(self.names, self.sources, self.arrays)],
        }


def check_policy(policy: str) -> None:
    """Refuse an `external_weights` value other than auto / always / never."""
    if policy not in POLICIES:
        raise UsageError(f"Option 'external_weights' | got {policy!r}, expected one of {', '.join(POLICIES)}")


def externalizes(policy: str, nbytes: int) -> bool:
    """Whether `policy` keeps `nbytes` of weights out of the module: always, or under auto from 16 MiB on."""
    return policy == "always" or (policy == "auto" and nbytes >= AUTO_MIN_BYTES)


def should_lift(policy: str, signature) -> bool:
    """Whether `policy` (auto / always / never) lifts this signature's baked constants."""
    check_policy(policy)
    baked = int(signature.weights.get("baked_bytes", 0))
    return baked >= LIFT_MIN_BYTES and externalizes(policy, baked)


def module_function(fn: Callable[..., Any], signature, lifted: "LiftedWeights | None") -> tuple[Callable[..., Any], list[Any]]:
    """What a module is lowered from: the function, and the specs of its arguments past the leaves.

    The signature's flat function (no further arguments), or with `lifted` weights the lifted function,
    which takes them after the leaves.
    """
    if lifted is None:
        return signature.flat_function(fn), []
    return lifted.fn, lifted.specs()


def lift_weights(fn: Callable[..., Any], signature, min_bytes: int = LIFT_MIN_BYTES) -> LiftedWeights | None:
    """`fn` (the target's function) with its baked constants of at least `min_bytes` lifted, or None if none are.

    The function is traced once to a jaxpr; evaluating that jaxpr with the lifted constants supplied as
    arguments runs the same primitives in the same order, so the module differs from the embedded one only
    in where the values come from.
    """
    import inspect

    import jax

    closed = jax.make_jaxpr(signature.flat_function(fn))(*signature.specs)
    consts = list(closed.consts)
    lift = [i for i, c in enumerate(consts) if hasattr(c, "shape") and np.asarray(c).nbytes >= min_bytes]
    if not lift:
        return None
    arrays = tuple(np.asarray(consts[i]) for i in lift)
    known = closed_over_arrays(fn)
    sources = tuple(known.get(_array_key(consts[i])) for i in lift)
    names = tensor_names(sources)
    lifted_set = set(lift)
    kept = int(sum(np.asarray(c).nbytes for i, c in enumerate(consts) if i not in lifted_set and hasattr(c, "shape")))
    n, jaxpr = len(signature.inputs), closed.jaxpr
    traced_shapes = tuple(tuple(spec.shape) for spec in signature.specs)
    lifted_keys = {_array_key(consts[i]): k for k, i in enumerate(lift)}
    concrete: dict[tuple, tuple] = {}

    def for_shapes(shapes: tuple, dtypes: tuple) -> tuple:
        """The jaxpr traced at these concrete shapes, and where each lifted weight sits among its constants.

        A jaxpr traced with symbolic dimensions holds them in its equations (a reshape to (b, -1)), so it
        can only be evaluated on symbolic arguments (inside jax.export); concrete arguments (the jax.jit
        reference) need a trace of their own. The lifted weights are found in it by identity, so they stay
        arguments; a constant not found (one the function computes while tracing) stays embedded.
        """
        if (shapes, dtypes) not in concrete:
            specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in zip(shapes, dtypes)]
            again = jax.make_jaxpr(signature.flat_function(fn))(*specs)
            slots = {j: lifted_keys[key] for j, c in enumerate(again.consts)
                     if hasattr(c, "shape") and (key := _array_key(c)) in lifted_keys}
            concrete[(shapes, dtypes)] = (again.jaxpr, list(again.consts), slots)
        return concrete[(shapes, dtypes)]

    def lifted(*xs):
        shapes = tuple(tuple(x.shape) for x in xs[:n])
        if shapes == traced_shapes or not all(isinstance(d, int) for shape in shapes for d in shape):
            values = list(consts)
            for i, w in zip(lift, xs[n:]):
                values[i] = w
            return jax.core.eval_jaxpr(jaxpr, values, *xs[:n])
        jaxpr_here, values, slots = for_shapes(shapes, tuple(x.dtype for x in xs[:n]))
        values = list(values)
        weights = xs[n:]
        for j, k in slots.items():
            values[j] = weights[k]
        return jax.core.eval_jaxpr(jaxpr_here, values, *xs[:n])

    aliases = [leaf.alias for leaf in signature.inputs]
    params = aliases + _unique([f"weight_{k:04d}" for k in range(len(lift))], taken=aliases)  # identifiers
    # inspect.signature() reads __signature__; typeshed does not declare it on functions
    lifted.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in params])
    lifted.__name__ = lifted.__qualname__ = signature.name.replace("-", "_") or "fn"
    return LiftedWeights(names, arrays, lifted, kept, sources)


# -- naming lifted weights by where the target keeps them ----------------------------------------------------

_TENSOR_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
# Functions of these packages are not searched for closed-over arrays: their globals are not the target's.
_LIBRARIES = ("jax", "jaxlib", "flax", "numpy", "optax", "equinox", "haiku", "functools", "builtins")


def tensor_names(sources: Sequence[str | None]) -> tuple[str, ...]:
    """A unique tensor name per lifted weight: its source path where known, else `weight_NNNN` by position.

    Kept to `[A-Za-z0-9_.-]`, starting with a letter or digit: valid as a safetensors key, an IREE
    parameter key and a TF variable name alike. Unique ignoring case (the names may become file names).
    """
    bases = []
    for k, source in enumerate(sources):
        base = _TENSOR_UNSAFE.sub("_", source) if source else f"weight_{k:04d}"
        bases.append(base if base[:1].isalnum() else "w" + base)
    return tuple(_unique(bases))


def _unique(names: Sequence[str], taken: Sequence[str] = ()) -> list[str]:
    seen = {t.lower() for t in taken}
    out = []
    for base in names:
        name, i = base, 2
        while name.lower() in seen:
            name, i = f"{base}_{i}", i + 1
        seen.add(name.lower())
        out.append(name)
    return out


def _array_key(x: Any) -> Any:
    """What identifies an array across tracing: its memory for numpy (JAX keeps a view), else the object."""
    if isinstance(x, np.ndarray):
        return ("memory", x.__array_interface__["data"][0], x.shape, x.dtype.str, x.strides)
    return ("object", id(x))


def closed_over_arrays(fn: Callable[..., Any], max_depth: int = 4) -> dict[Any, str]:
    """The arrays `fn` closes over, by `_array_key`, each with its dotted path (`params.Dense_0.kernel`).

    Searched: the function's closure variables and the globals it names, functools.partial arguments
    (named by the wrapped function's parameters), and functions among those, to `max_depth`. Only the
    same array (object, or numpy memory) matches a constant of the trace, never an equal value: two
    zero-initialised biases must not trade names. The first path found for an array names it.
    """
    import functools
    import inspect

    import jax


    found: dict[Any, str] = {}
    seen: set[int] = set()

    def add_tree(prefix: str, value: Any) -> None:
        try:
            leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        except Exception:  # a custom pytree whose flatten fails is not ours to name
            return
        for path, leaf in leaves:
            if isinstance(leaf, (np.ndarray, jax.Array)) and not isinstance(leaf, jax.core.Tracer):
                found.setdefault(_array_key(leaf), join_name(prefix, path))

    def handle(name: str, value: Any, depth: int) -> None:
        if inspect.isfunction(value) or isinstance(value, functools.partial):
            visit(value, depth + 1)
        elif inspect.ismethod(value):  # `model.apply`: the instance may be a pytree of arrays (equinox)
            add_tree(name, value.__self__)
            visit(value.__func__, depth + 1)
        elif not (inspect.ismodule(value) or inspect.isclass(value)):
            add_tree(name, value)  # a callable pytree (equinox, nnx) holds its arrays as leaves

    def visit(f: Any, depth: int) -> None:
        if depth > max_depth or id(f) in seen:
            return
        seen.add(id(f))
        if isinstance(f, functools.partial):
            try:
                bound = dict(inspect.signature(f.func).bind_partial(*f.args, **f.keywords).arguments)
            except (TypeError, ValueError):
                bound = {**{f"args.{i}": a for i, a in enumerate(f.args)}, **f.keywords}
            for name, value in bound.items():
                handle(name, value, depth)
            visit(f.func, depth + 1)
        elif inspect.ismethod(f):
            handle("self", f, depth)
        elif inspect.isfunction(f) and (getattr(f, "__module__", None) or "").split(".")[0] not in _LIBRARIES:
            try:
                closure = inspect.getclosurevars(f)
            except (TypeError, ValueError):
                return
            for name, value in {**closure.nonlocals, **closure.globals}.items():
                handle(name, value, depth)

    visit(fn, 0)
    return found


def plan(fn: Callable[..., Any], signature, policy: str) -> LiftedWeights | None:
    """The lifted weights when `policy` asks for them and there are any, else None (embed as they are). Lifting
    reads the function's closure: a handed target's (leaves/handed.py) is not there, so it needs the target."""
    if not should_lift(policy, signature):
        return None
    if is_handed(fn):
        raise NeedsTarget(f"the weights of '{signature.name}' are lifted from its function")
    return lift_weights(fn, signature)


def embedded(signature) -> dict[str, Any]:
    """The manifest's weights description when nothing is lifted."""
    baked = int(signature.weights.get("baked_bytes", 0))
    return {"storage": "embedded" if baked else "none", "external_bytes": 0, "embedded_bytes": baked}
