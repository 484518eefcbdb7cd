"""Built-in example targets: the seed question and a small flax.linen MLP.

Reachable from the CLI as `multiexport.examples:seed` (the default TARGET), `...:mlp`, and
`...:mlp_dynamic` (symbolic batch). Importing this module imports jax and flax (core dependencies); the CLI does so only when a
command needs a target.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from .target import Target


@struct.dataclass
class Foo:
    """The dataclass from the seed discussion: two arrays, only one of which the function reads."""

    bar: jnp.ndarray
    baz: jnp.ndarray


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
    foo = Foo(jnp.arange(10, dtype=jnp.int32), jnp.arange(10, dtype=jnp.int32))
    return Target(sum_bar, args=(foo,), name="seed_bar")


class MLP(nn.Module):
    """Dense -> relu -> Dense -> relu -> Dense; flax names the layers Dense_0, Dense_1, ..."""

    features: tuple = (32, 16, 4)

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.features):
            x = nn.Dense(width)(x)
            if i < len(self.features) - 1:
                x = nn.relu(x)
        return x


def mlp(batch: int = 8, in_features: int = 16, symbolic_batch: bool = False) -> Target:
    """A flax.linen MLP called as `fn(params, batch)`, `batch = {"x": float32[batch, in_features]}`."""
    model = MLP()
    x = jax.random.normal(jax.random.key(1), (batch, in_features), jnp.float32)
    params = model.init(jax.random.key(0), x)["params"]

    def mlp_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["x"])}

    return Target(
        mlp_apply,
        args=(params, {"x": x}),
        name="mlp_dynamic" if symbolic_batch else "mlp",
        symbolic_batch="b" if symbolic_batch else False,
        batch_leaves=("batch.*",),
    )


def mlp_dynamic() -> Target:
    """The MLP with a symbolic leading batch dimension `b` on `batch.x`."""
    return mlp(symbolic_batch=True)
