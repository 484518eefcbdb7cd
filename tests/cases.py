"""The shared case registry: every backend's contract test runs every case here.

Each case builds a Target and says which input leaves the function reads, so tests can check the
used flags any format reports without re-deriving them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from multiexport import Target, examples


@dataclass(frozen=True)
class Case:
    """One target every backend's contract test runs.

    name: the case id. make: builds the Target. used / unused: input leaves the function reads / does not.
    batch_sizes: for symbolic cases, the concrete sizes to run. tags: what the case exercises.
    options: ExportOptions fields the case is exported with (e.g. lifted weights).
    x64: the case needs JAX's 64-bit mode while it is built and exported.
    """

    name: str
    make: Callable[[], Target]
    used: tuple[str, ...]
    unused: tuple[str, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    tags: tuple[str, ...] = field(default_factory=tuple)
    options: dict = field(default_factory=dict)
    x64: bool = False


@struct.dataclass
class WithStatic:
    x: jnp.ndarray
    scale: float = struct.field(pytree_node=False, default=2.0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Plain:
    a: jnp.ndarray
    b: jnp.ndarray


class Pair(typing.NamedTuple):
    left: jnp.ndarray
    right: jnp.ndarray


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def nested_dict() -> Target:
    r = _rng(1)
    tree = {"enc": {"w": r.normal(size=(4, 3)).astype(np.float32), "b": r.normal(size=(3,)).astype(np.float32)},
            "x": r.normal(size=(2, 4)).astype(np.float32)}
    return Target(lambda t: {"y": t["x"] @ t["enc"]["w"] + t["enc"]["b"]}, args=(tree,), name="nested_dict")


def int_leaves() -> Target:
    table = _rng(2).normal(size=(10, 4)).astype(np.float32)

    def lookup(tokens, table):
        return {"emb": table[tokens], "count": jnp.sum(tokens > 3)}

    return Target(lookup, args=(np.array([[1, 5, 9], [0, 2, 7]], np.int32), table), name="int_leaves")


def scalar() -> Target:
    def scaled(x, s):
        return x * s

    return Target(scaled, args=(np.arange(6, dtype=np.float32).reshape(2, 3), 1.5), name="scalar")


def unused_leaf() -> Target:
    def first(xs):
        return xs[0] + 1

    return Target(first, args=([np.ones(3, np.float32), np.zeros(5, np.float32)],), name="unused_leaf")


def static_field() -> Target:
    def apply(w: WithStatic):
        return w.x * w.scale

    return Target(apply, args=(WithStatic(np.arange(4, dtype=np.float32)),), name="static_field")


def plain_dataclass() -> Target:
    return Target(lambda p: p.a - p.b, args=(Plain(np.ones(3, np.float32), np.arange(3, dtype=np.float32)),),
                  name="plain_dataclass")


def named_tuple_and_kwargs() -> Target:
    def f(pair: Pair, *, bias):
        return (pair.left * pair.right + bias, pair.left)

    pair = Pair(np.arange(3, dtype=np.float32), np.full(3, 2.0, np.float32))
    return Target(f, args=(pair,), kwargs={"bias": np.float32(0.5)}, name="named_tuple_and_kwargs")


def symbolic_batch() -> Target:
    def affine(w, batch):
        return {"y": batch["x"] @ w + batch["offset"][:, None]}

    w = _rng(3).normal(size=(5, 2)).astype(np.float32)
    batch = {"x": _rng(4).normal(size=(3, 5)).astype(np.float32), "offset": np.arange(3, dtype=np.float32)}
    return Target(affine, args=(w, batch), name="symbolic_batch", symbolic_batch="b", batch_leaves=("batch.*",))


def alias_collision() -> Target:
    def f(a, a_b):
        return a["b"] + a_b

    return Target(f, args=({"b": np.ones(2, np.float32)}, np.full(2, 3.0, np.float32)), name="alias_collision")


def scalar_0d() -> Target:
    """A 0-d input and output: runners must keep shape () (ONNX's made it (1,))."""
    return Target(lambda x: jnp.sin(jnp.sin(x)), args=(np.float32(0.3),), name="scalar_0d")


def prng_key() -> Target:
    """A typed PRNG key in the input pytree, as nnx.split of a module with Rngs holds one."""
    return Target(lambda state, x: x + jax.random.normal(state["key"], x.shape),
                  args=({"key": jax.random.key(0)}, np.linspace(-1, 1, 6, dtype=np.float32)), name="prng_key")


def dotted_keys() -> Target:
    """{"a.b": x, "a": {"b": y}}: two leaves that must keep two names."""
    return Target(lambda d: d["a.b"] * 2 + d["a"]["b"],
                  args=({"a.b": np.arange(3, dtype=np.float32), "a": {"b": np.full(3, 5.0, np.float32)}},),
                  name="dotted_keys")


def float8() -> Target:
    import ml_dtypes

    return Target(lambda x, s: (x.astype(jnp.float32) * s).astype(ml_dtypes.float8_e4m3fn),
                  args=(np.array([0.5, 1.0, -2.0, 0.25], ml_dtypes.float8_e4m3fn), np.float32(2.0)), name="float8")


def float64() -> Target:
    """64-bit leaves (built with x64 on): every format runs them in 64 bits or refuses naming the leaf."""
    return Target(lambda x, n: {"y": x * 2.5 + n, "m": n * 3},
                  args=(np.linspace(-1, 1, 4).astype(np.float64) + 1e-12, np.arange(4, dtype=np.int64)), name="float64")


def top_k() -> Target:
    return Target(lambda x: jax.lax.top_k(x, 2), args=(np.array([[3.0, 1.0, 2.0, 5.0], [0.5, 4.0, -1.0, 2.0]], np.float32),),
                  name="top_k")


def many_outputs() -> Target:
    """Twelve outputs: SavedModel's StatefulPartitionedCall:<i> follows the sorted keys (out.10 is :2)."""
    return Target(lambda x: [x * k for k in range(12)], args=(np.arange(3, dtype=np.float32),), name="many_outputs")


def lifted_weights() -> Target:
    return examples.lm("small", "baked")


def eqx_layer_built_inside() -> Target:
    """An equinox PReLU built inside the function, so no instance is in its arguments or closure: a plugin
    chooser that looked only at the objects the target holds would miss jax2onnx's PReLU plugin."""
    import equinox as eqx

    w = _rng(3).normal(size=(8, 4)).astype(np.float32)

    def prelu_head(x):
        return eqx.nn.PReLU(init_alpha=0.1)(x @ w)

    return Target(prelu_head, args=(_rng(4).normal(size=(2, 8)).astype(np.float32),), name="eqx_layer_built_inside")


CASES: tuple[Case, ...] = (
    Case("seed", examples.seed, used=("foo.baz",), unused=("foo.bar",), tags=("dataclass",)),
    Case("seed_bar", examples.seed_bar, used=("foo.bar",), unused=("foo.baz",), tags=("dataclass",)),
    Case("nested_dict", nested_dict, used=("t.enc.b", "t.enc.w", "t.x")),
    Case("int_leaves", int_leaves, used=("tokens", "table")),
    Case("scalar", scalar, used=("x", "s")),
    Case("unused_leaf", unused_leaf, used=("xs.0",), unused=("xs.1",)),
    Case("static_field", static_field, used=("w.x",)),
    Case("plain_dataclass", plain_dataclass, used=("p.a", "p.b")),
    Case("named_tuple_and_kwargs", named_tuple_and_kwargs, used=("pair.left", "pair.right", "bias")),
    Case("symbolic_batch", symbolic_batch, used=("w", "batch.offset", "batch.x"), batch_sizes=(1, 7)),
    Case("alias_collision", alias_collision, used=("a.b", "a_b")),
    Case("mlp", examples.mlp, used=tuple(
        f"params.Dense_{i}.{p}" for i in range(3) for p in ("bias", "kernel")) + ("batch.x",), tags=("flax",)),
    Case("mlp_bf16", examples.mlp_bf16, used=tuple(
        f"params.Dense_{i}.{p}" for i in range(3) for p in ("bias", "kernel")) + ("batch.x",), tags=("bf16",)),
    Case("scalar_0d", scalar_0d, used=("x",), tags=("0-d",)),
    Case("prng_key", prng_key, used=("state.key", "x"), tags=("key",)),
    Case("dotted_keys", dotted_keys, used=('d."a.b"', "d.a.b"), tags=("names",)),
    Case("float8", float8, used=("x", "s"), tags=("float8",)),
    Case("float64", float64, used=("x", "n"), tags=("x64",), x64=True),
    Case("top_k", top_k, used=("x",), tags=("composite",)),
    Case("many_outputs", many_outputs, used=("x",), tags=("outputs",)),
    Case("lifted_weights", lifted_weights, used=("batch.tokens",), tags=("weights",),
         options={"external_weights": "always"}),
)

CASE_IDS = [c.name for c in CASES]


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def feed_for(target_sig, batch: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Named inputs for a signature: the example values, or fresh ones at another batch size."""
    if batch is None:
        return target_sig.example_feed()
    r = np.random.default_rng(seed)
    feed = {}
    for leaf in target_sig.inputs:
        shape = tuple(batch if isinstance(d, str) else d for d in leaf.shape)
        if np.issubdtype(np.dtype(leaf.dtype), np.integer):
            feed[leaf.name] = r.integers(0, 5, size=shape).astype(leaf.dtype)
        else:
            feed[leaf.name] = r.normal(size=shape).astype(leaf.dtype)
    return feed


# Backends from outside multiexport that run every case too, registered by the tests alone (no core file names
# them): the SDK's reference backend (examples/reference_backend/), importable once examples/ is on sys.path.
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXTERNAL_BACKENDS = {"stablehlo-text": "reference_backend:ReferenceBackend"}


@contextlib.contextmanager
def external_backend(name: str) -> Iterator[None]:
    """`name` (of EXTERNAL_BACKENDS) registered in this process, as a third party would, then removed."""
    from multiexport.exporting.registry import register, unregister

    if str(EXAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLES_DIR))
    register(name, EXTERNAL_BACKENDS[name])
    try:
        yield
    finally:
        unregister(name)


def in_fresh_process(name: str, code: str) -> list[str]:
    """argv running `code` in a fresh Python with external backend `name` registered first (or as is for a
    built-in one)."""
    if name not in EXTERNAL_BACKENDS:
        return [sys.executable, "-c", code]
    prelude = (f"import sys; sys.path.insert(0, {str(EXAMPLES_DIR)!r}); from multiexport.exporting.registry import "
               f"register; register({name!r}, {EXTERNAL_BACKENDS[name]!r})\n")
    return [sys.executable, "-c", prelude + code]
