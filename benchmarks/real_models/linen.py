"""flax.linen models of the zoo: MLP, MNIST CNN, BatchNorm, Dropout, masked attention, nn.scan, LSTMs."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from multiexport import Target

from ._init import init


class LinenMLP(nn.Module):
    """The MLP of flax's docs: Dense -> relu, a Dense head (`flax.linen.Dense` docstring style)."""

    features: Sequence[int] = (64, 64, 10)

    @nn.compact
    def __call__(self, x):
        for i, feat in enumerate(self.features):
            x = nn.Dense(feat, name=f"layers_{i}")(x)
            if i != len(self.features) - 1:
                x = nn.relu(x)
        return x


def linen_mlp() -> Target:
    """flax.linen MLP, `fn(params, batch)`: the shape of every flax tutorial's first model."""
    model = LinenMLP()
    x = jax.random.normal(jax.random.key(1), (8, 32), jnp.float32)
    params = init(model, jax.random.key(0), x)["params"]

    def linen_mlp_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["x"])}

    return Target(linen_mlp_apply, args=(params, {"x": x}), name="linen_mlp", batch_leaves=("batch.*",))


class MnistCNN(nn.Module):
    """flax's MNIST example CNN (examples/mnist/train.py): Conv/relu/avg_pool twice, flatten, Dense 256, Dense 10."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(features=32, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(features=64, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=256)(x)
        x = nn.relu(x)
        x = nn.Dense(features=10)(x)
        return x


def linen_cnn() -> Target:
    """The MNIST CNN on float32[b, 28, 28, 1] with a symbolic batch b (Conv + reshape + Dense)."""
    model = MnistCNN()
    image = jax.random.uniform(jax.random.key(3), (4, 28, 28, 1), jnp.float32)  # pixels in [0, 1)
    params = init(model, jax.random.key(0), image)["params"]

    def linen_cnn_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["image"])}

    return Target(linen_cnn_apply, args=(params, {"image": image}), name="linen_cnn",
                  symbolic_batch="b", batch_leaves=("batch.*",))


class BNNet(nn.Module):
    """Conv -> BatchNorm -> relu blocks and a Dense head, `train` switching BatchNorm's statistics."""

    @nn.compact
    def __call__(self, x, train: bool):
        for feat in (16, 32):
            x = nn.Conv(feat, (3, 3), use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
            x = nn.relu(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dense(10)(x)
        return x


def linen_batchnorm() -> Target:
    """BatchNorm CNN in eval mode: `fn(variables, x)` with `variables = {params, batch_stats}` as input leaves.

    The running statistics come from 20 training steps (momentum 0.9) on data whose channels differ in
    scale (as real images' do), so `batch_stats.*.var` are positive values of varied size, as after
    training, not the init's ones.
    """
    model = BNNet()
    x = jax.random.normal(jax.random.key(7), (4, 12, 12, 3), jnp.float32)
    variables = init(model, jax.random.key(0), x, train=False)
    params, batch_stats = variables["params"], variables["batch_stats"]
    step = jax.jit(lambda p, s, xb: model.apply({"params": p, "batch_stats": s}, xb, train=True,
                                               mutable=["batch_stats"])[1]["batch_stats"])
    channel_scale = jnp.exp(1.5 * jax.random.normal(jax.random.key(99), (3,)))  # real data: unequal channels
    for i in range(20):
        xb = channel_scale * jax.random.normal(jax.random.key(100 + i), (16, 12, 12, 3)) + 0.5
        batch_stats = step(params, batch_stats, xb)

    def linen_batchnorm_apply(variables, batch):
        return {"logits": model.apply(variables, batch["x"], train=False)}

    return Target(linen_batchnorm_apply, args=({"params": params, "batch_stats": batch_stats}, {"x": x}),
                  name="linen_batchnorm", batch_leaves=("batch.*",))


class DropoutMLP(nn.Module):
    """`flax.linen.Dropout` docstring's MLP: Dense, Dropout(deterministic=not train), Dense."""

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Dense(64)(x)
        x = nn.relu(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        x = nn.Dense(64)(x)
        x = nn.relu(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.Dense(10)(x)


def linen_dropout() -> Target:
    """Dropout in deterministic (eval) mode: no rng input, Dropout is the identity."""
    model = DropoutMLP()
    x = jax.random.normal(jax.random.key(1), (8, 32), jnp.float32)
    params = init(model, jax.random.key(0), x, train=False)["params"]

    def linen_dropout_apply(params, x):
        return model.apply({"params": params}, x, train=False)

    return Target(linen_dropout_apply, args=(params, x), name="linen_dropout")


class MaskedSelfAttention(nn.Module):
    """Token embedding, then a decoder layer whose attention mask is causal AND padding (token id 0 = pad)."""

    vocab: int = 100
    dim: int = 64
    heads: int = 4

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.dim)(tokens)
        mask = nn.combine_masks(nn.make_attention_mask(tokens > 0, tokens > 0), nn.make_causal_mask(tokens))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.dim)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        x = x + nn.Dense(self.dim)(nn.gelu(nn.Dense(4 * self.dim)(h)))
        return nn.Dense(self.vocab)(x)


def linen_attention_mask() -> Target:
    """MultiHeadDotProductAttention with a causal + padding mask on int32 tokens[b, 16], symbolic batch b.

    Every example row starts with a real token, so no query row is fully masked (a fully masked row
    softmaxes over all -inf-like logits; flax makes that uniform, which is well defined).
    """
    model = MaskedSelfAttention()
    tokens = jax.random.randint(jax.random.key(5), (3, 16), 1, model.vocab, jnp.int32)
    tokens = tokens.at[1, 12:].set(0).at[2, 5:].set(0)  # right padding
    params = init(model, jax.random.key(0), tokens)["params"]

    def linen_attention_apply(params, batch):
        return {"logits": model.apply({"params": params}, batch["tokens"])}

    return Target(linen_attention_apply, args=(params, {"tokens": tokens}), name="linen_attention_mask",
                  symbolic_batch="b", batch_leaves=("batch.*",))


class ResidualMLPBlock(nn.Module):
    """From `flax.linen.scan`'s docstring: a residual Dense block scanned over layers."""

    @nn.compact
    def __call__(self, x, _):
        h = nn.Dense(features=x.shape[-1])(x)
        h = nn.relu(h)
        return x + h, None


class ResidualMLP(nn.Module):
    n_layers: int = 4

    @nn.compact
    def __call__(self, x):
        ScanMLP = nn.scan(ResidualMLPBlock, variable_axes={"params": 0}, variable_broadcast=False,
                          split_rngs={"params": True}, length=self.n_layers)
        x, _ = ScanMLP()(x, None)
        return nn.Dense(10)(x)


def linen_scan_layers() -> Target:
    """`nn.scan` over 6 stacked residual layers (params with a leading layer axis)."""
    model = ResidualMLP(n_layers=6)
    x = jax.random.normal(jax.random.key(1), (8, 32), jnp.float32)
    params = init(model, jax.random.key(42), x)["params"]

    def linen_scan_apply(params, x):
        return model.apply({"params": params}, x)

    return Target(linen_scan_apply, args=(params, x), name="linen_scan_layers")


class LSTMClassifier(nn.Module):
    """nn.RNN(nn.OptimizedLSTMCell) over a padded sequence with per-example lengths, then a Dense head."""

    hidden: int = 32

    @nn.compact
    def __call__(self, x, seq_lengths):
        carry, ys = nn.RNN(nn.OptimizedLSTMCell(self.hidden), return_carry=True)(x, seq_lengths=seq_lengths)
        (c, h) = carry
        return {"last_hidden": h, "logits": nn.Dense(5)(h), "sequence": ys}


def linen_lstm() -> Target:
    """An LSTM (nn.RNN + OptimizedLSTMCell, a lax.scan inside) with int32 seq_lengths in [1, T]."""
    model = LSTMClassifier()
    x = jax.random.normal(jax.random.key(8), (4, 10, 8), jnp.float32)
    seq_lengths = jnp.array([10, 7, 3, 9], jnp.int32)
    params = init(model, jax.random.key(0), x, seq_lengths)["params"]

    def linen_lstm_apply(params, batch):
        return model.apply({"params": params}, batch["x"], batch["seq_lengths"])

    return Target(linen_lstm_apply, args=(params, {"x": x, "seq_lengths": seq_lengths}), name="linen_lstm")


class ScanLSTM(nn.Module):
    """`flax.linen.scan`'s docstring LSTM: nn.scan(nn.LSTMCell) over the time axis."""

    features: int = 32

    @nn.compact
    def __call__(self, x):
        lstm = nn.scan(nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=1, out_axes=1)(self.features)
        carry = lstm.initialize_carry(jax.random.key(0), x[:, 0].shape)
        carry, x = lstm(carry, x)
        return x


def linen_scan_lstm() -> Target:
    model = ScanLSTM()
    x = jax.random.normal(jax.random.key(8), (4, 12, 7), jnp.float32)
    params = init(model, jax.random.key(0), x)["params"]

    def linen_scan_lstm_apply(params, x):
        return model.apply({"params": params}, x)

    return Target(linen_scan_lstm_apply, args=(params, x), name="linen_scan_lstm")
