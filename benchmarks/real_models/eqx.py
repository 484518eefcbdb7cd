"""equinox models of the zoo: eqx.partition/combine, vmapped CNN, MultiheadAttention, GRU scan, BatchNorm with State."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from multiexport import Target


def eqx_mlp() -> Target:
    """eqx.nn.MLP, split with `eqx.partition(model, eqx.is_array)`; `fn(params, x)` combines and vmaps."""
    model = eqx.nn.MLP(in_size=32, out_size=10, width_size=64, depth=2, activation=jax.nn.relu,
                       key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    x = jax.random.normal(jax.random.key(1), (8, 32), jnp.float32)

    def eqx_mlp_apply(params, x):
        model = eqx.combine(params, static)
        return jax.vmap(model)(x)

    return Target(eqx_mlp_apply, args=(params, x), name="eqx_mlp")


class EqxCNN(eqx.Module):
    """Equinox's MNIST tutorial CNN: Conv2d, MaxPool2d, relu, ravel, Linear x3, log_softmax (one image, CHW)."""

    layers: list

    def __init__(self, key):
        key1, key2, key3, key4 = jax.random.split(key, 4)
        self.layers = [
            eqx.nn.Conv2d(1, 3, kernel_size=4, key=key1),
            eqx.nn.MaxPool2d(kernel_size=2),
            jax.nn.relu,
            jnp.ravel,
            eqx.nn.Linear(1728, 512, key=key2),
            jax.nn.sigmoid,
            eqx.nn.Linear(512, 64, key=key3),
            jax.nn.relu,
            eqx.nn.Linear(64, 10, key=key4),
            jax.nn.log_softmax,
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def eqx_cnn() -> Target:
    """The equinox MNIST CNN vmapped over float32[b, 1, 28, 28], symbolic batch b, via partition/combine."""
    model = EqxCNN(jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    x = jax.random.uniform(jax.random.key(1), (4, 1, 28, 28), jnp.float32)

    def eqx_cnn_apply(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    return Target(eqx_cnn_apply, args=(params, x), name="eqx_cnn", symbolic_batch="b", batch_leaves=("x",))


def eqx_attention() -> Target:
    """eqx.nn.MultiheadAttention with a padding x causal mask, closing over the module (weights baked)."""
    model = eqx.nn.MultiheadAttention(num_heads=4, query_size=64, use_query_bias=True, use_key_bias=True,
                                      use_value_bias=True, use_output_bias=True, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (3, 16, 64), jnp.float32)
    lengths = jnp.array([16, 11, 4], jnp.int32)

    def eqx_attention_apply(x, lengths):
        def one(x, n):
            valid = jnp.arange(x.shape[0]) < n
            mask = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), bool)) & valid[None, :]
            return model(x, x, x, mask=mask)

        return jax.vmap(one)(x, lengths)

    return Target(eqx_attention_apply, args=(x, lengths), name="eqx_attention")


def eqx_gru_scan() -> Target:
    """eqx.nn.GRUCell run over time with lax.scan (equinox's RNN example), a Linear head on the last state."""
    k1, k2 = jax.random.split(jax.random.key(0))
    cell = eqx.nn.GRUCell(input_size=8, hidden_size=32, key=k1)
    head = eqx.nn.Linear(32, 3, key=k2)
    params, static = eqx.partition((cell, head), eqx.is_array)
    xs = jax.random.normal(jax.random.key(1), (4, 20, 8), jnp.float32)

    def eqx_gru_apply(params, xs):
        cell, head = eqx.combine(params, static)

        def run(seq):
            def step(h, x):
                h = cell(x, h)
                return h, h

            h, hs = lax.scan(step, jnp.zeros(cell.hidden_size), seq)
            return head(h), hs

        logits, hs = jax.vmap(run)(xs)
        return {"logits": logits, "states": hs}

    return Target(eqx_gru_apply, args=(params, xs), name="eqx_gru_scan")


class EqxBNNet(eqx.Module):
    """Linear -> eqx.nn.BatchNorm -> relu -> Linear, with its running statistics in an `eqx.nn.State`."""

    linear1: eqx.nn.Linear
    norm: eqx.nn.BatchNorm
    linear2: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.linear1 = eqx.nn.Linear(16, 32, key=k1)
        self.norm = eqx.nn.BatchNorm(32, axis_name="batch", momentum=0.9, mode="batch")
        self.linear2 = eqx.nn.Linear(32, 10, key=k2)

    def __call__(self, x, state):
        x = self.linear1(x)
        x, state = self.norm(x, state)
        return self.linear2(jax.nn.relu(x)), state


def eqx_batchnorm() -> Target:
    """eqx.nn.BatchNorm via `eqx.nn.make_with_state`, trained 20 steps, then `eqx.nn.inference_mode`.

    `fn(params, state, x)`: the weights and the eqx.nn.State (running mean/var) are input leaves.
    """
    model, state = eqx.nn.make_with_state(EqxBNNet)(jax.random.key(0))
    train = eqx.filter_jit(eqx.filter_vmap(lambda m, x, s: m(x, s), in_axes=(None, 0, None),
                                           out_axes=(0, None), axis_name="batch"))
    feature_scale = jnp.exp(1.5 * jax.random.normal(jax.random.key(299), (16,)))  # real data: unequal features
    for i in range(20):
        xb = feature_scale * jax.random.normal(jax.random.key(300 + i), (32, 16)) + 0.4
        _, state = train(model, xb, state)
    model = eqx.nn.inference_mode(model)
    params, static = eqx.partition(model, eqx.is_array)
    x = jax.random.normal(jax.random.key(1), (8, 16), jnp.float32)

    def eqx_batchnorm_apply(params, state, x):
        model = eqx.combine(params, static)
        out, _ = jax.vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")(x, state)
        return out

    return Target(eqx_batchnorm_apply, args=(params, state, x), name="eqx_batchnorm")
