"""Built-in example targets: the seed question, and flax.linen models imported on first use.

Reachable from the CLI as `multiexport.examples:seed` (the default TARGET), `...:mlp`, `...:mlp_dynamic`
(symbolic batch), `...:cnn`, `...:transformer`, `...:embedding`, `...:lm_small_inputs` and the rest of
`flax_models`. The seed needs only JAX: its dataclass is registered with `jax.tree_util.register_dataclass`,
which names leaves exactly as a `flax.struct.dataclass` does (`foo.bar`, `foo.baz`), so the core install
runs `multiexport compare` without flax. The flax examples need `pip install 'multiexport[flax]'`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import UsageError
from ..leaves.target import Target


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Foo:
    """The dataclass from the seed discussion: two arrays, only one of which the function reads.

    bar: int32[10], which the seed function never reads (XLA prunes it).
    baz: int32[10], summed.
    """

    bar: jax.Array
    baz: jax.Array


def sum_baz(foo):
    """The seed function: reads only `foo.baz`, so XLA prunes `foo.bar`."""
    return jnp.sum(foo.baz)


def sum_bar(foo):
    """The seed function with the other field read: the pruned leaf swaps."""
    return jnp.sum(foo.bar)


def seed() -> Target:
    """`fn(foo) = sum(foo.baz)` with `Foo(bar=arange(10), baz=arange(10))`."""
    foo = Foo(jnp.arange(10, dtype=jnp.int32), jnp.arange(10, dtype=jnp.int32))
    return Target(sum_baz, args=(foo,), name="seed", description="Which dataclass members become parameters?")


def seed_bar() -> Target:
    """The seed with `foo.bar` read instead: the other leaf is pruned."""
    foo = Foo(jnp.arange(10, dtype=jnp.int32), jnp.arange(10, dtype=jnp.int32))
    return Target(sum_bar, args=(foo,), name="seed_bar")


# What `flax_models` defines (tests/test_examples.py keeps this in step with it).
FLAX_EXAMPLES = frozenset({
    "MLP", "mlp", "mlp_dynamic", "mlp_bf16", "TransformerBlock", "transformer", "CNN", "cnn", "TokenBatch",
    "embedding", "TransformerLM", "LM_SIZES", "lm", "lm_small_inputs", "lm_small_baked", "lm_large_inputs",
    "lm_large_baked",
})


def __getattr__(name: str) -> Any:
    """The flax examples (`flax_models`), imported on first use; without flax, one line saying what to install."""
    if name not in FLAX_EXAMPLES:
        raise AttributeError(f"module 'multiexport.examples' has no attribute '{name}'")
    try:
        import multiexport.examples.flax_models as flax_models  # flax at its top: on first use only
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "flax":
            raise
        raise UsageError(f"Example '{name}' | needs flax, which is not installed: pip install 'multiexport[flax]' "
                         "(the seed example needs only JAX)") from None
    return getattr(flax_models, name)
