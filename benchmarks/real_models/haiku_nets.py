"""dm-haiku models (the `zoo-haiku` extra): ResNet, MobileNet, an LSTM, a transformer block, a BatchNorm CNN.

Each is a `hk.transform_with_state` function applied as Haiku documents it, `f.apply(params, state, None, x,
is_training=False)` (BatchNorm in inference mode), with params and state as input leaves (`haiku_NAME`) or
closed over (`haiku_NAME_baked`). Weights are seeded, nothing downloaded. BatchNorm's running statistics come
from a few training steps on shifted, unequally scaled data, not the init's zeros and ones.

Re-initialised for parity that can fail: hk.nets.ResNet zero-initialises its logits layer (`logits_config`'s
default w_init), which makes the output exactly 0 for every input; haiku_resnet passes a VarianceScaling init.
(hk.nets.MobileNetV1's logits Linear has Haiku's default truncated-normal init and needs nothing.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from multiexport import Target

BATCH = 2


def _trained_state(f, params, state, shape: tuple[int, ...], steps: int = 3):
    """BatchNorm statistics after `steps` training-mode applies on data with unequal channel scales and an offset."""
    step = jax.jit(lambda p, s, x: f.apply(p, s, None, x, is_training=True)[1])
    scale = jnp.exp(jax.random.normal(jax.random.key(99), shape[-1:]))
    for i in range(steps):
        state = step(params, state, scale * jax.random.normal(jax.random.key(100 + i), (8, *shape[1:])) + 0.5)
    return state


def _target(name: str, f, params, state, x, baked: bool, symbolic: bool = True) -> Target:
    """`fn(params, state, x)` over `f.apply(..., is_training=False)`, or `fn(x)` with params and state closed over."""
    if baked:
        def apply_baked(x):
            return {"logits": f.apply(params, state, None, x, is_training=False)[0]}

        fn, args = apply_baked, (x,)
    else:
        def apply(params, state, x):
            return {"logits": f.apply(params, state, None, x, is_training=False)[0]}

        fn, args = apply, (params, state, x)
    fn.__name__ = name
    return Target(fn, args=args, name=name, symbolic_batch="b" if symbolic else False, batch_leaves=("x",))


def _images(seed: int, size: int = 32) -> np.ndarray:
    return np.asarray(jax.random.normal(jax.random.key(seed), (BATCH, size, size, 3), jnp.float32))


def _resnet(name: str, baked: bool) -> Target:
    import haiku as hk

    def forward(x, is_training):
        net = hk.nets.ResNet(blocks_per_group=(1, 1, 1, 1), num_classes=10, bottleneck=False,
                             channels_per_group=(16, 32, 64, 128), use_projection=(True, True, True, True),
                             logits_config={"w_init": hk.initializers.VarianceScaling(1.0)})
        return net(x, is_training=is_training)

    f = hk.transform_with_state(forward)
    x = _images(1)
    params, state = jax.jit(f.init, static_argnums=2)(jax.random.key(0), x, True)
    return _target(name, f, params, _trained_state(f, params, state, x.shape), x, baked)


def haiku_resnet() -> Target:
    """hk.nets.ResNet (ResNet18-shaped, 1 block per group, 16-128 channels) with BatchNorm, max-pool, symbolic b."""
    return _resnet("haiku_resnet", False)


def haiku_resnet_baked() -> Target:
    """The Haiku ResNet with params and BatchNorm state closed over."""
    return _resnet("haiku_resnet_baked", True)


def haiku_mobilenet() -> Target:
    """hk.nets.MobileNetV1 (depthwise-separable convs, BatchNorm, 16-128 channels) on 32x32 images, symbolic b."""
    import haiku as hk

    def forward(x, is_training):
        net = hk.nets.MobileNetV1(strides=(1, 2, 1, 2, 1, 2), channels=(16, 32, 32, 64, 64, 128), num_classes=10)
        return net(x, is_training=is_training)

    f = hk.transform_with_state(forward)
    x = _images(2)
    params, state = jax.jit(f.init, static_argnums=2)(jax.random.key(0), x, True)
    return _target("haiku_mobilenet", f, params, _trained_state(f, params, state, x.shape), x, False)


def haiku_lstm() -> Target:
    """hk.LSTM(32) over time with hk.dynamic_unroll (time-major inside), a Linear head, float32[b, 10, 8], symbolic b."""
    import haiku as hk

    def forward(x, is_training):
        del is_training
        core = hk.LSTM(32)
        seq = jnp.swapaxes(x, 0, 1)  # dynamic_unroll is time-major
        out, _ = hk.dynamic_unroll(core, seq, core.initial_state(x.shape[0]))
        return hk.Linear(4)(out[-1])

    f = hk.transform_with_state(forward)
    x = np.asarray(jax.random.normal(jax.random.key(3), (BATCH, 10, 8), jnp.float32))
    params, state = jax.jit(f.init, static_argnums=2)(jax.random.key(0), x, False)
    return _target("haiku_lstm", f, params, state, x, False)


def haiku_transformer() -> Target:
    """A pre-norm transformer block: hk.Embed, hk.MultiHeadAttention with a causal mask, LayerNorm, MLP; int tokens."""
    import haiku as hk

    def forward(tokens, is_training):
        del is_training
        x = hk.Embed(100, 64)(tokens) + hk.get_parameter("pos", (16, 64), init=hk.initializers.RandomNormal(0.02))
        causal = jnp.tril(jnp.ones((16, 16), jnp.bool_))[None, None]
        for _ in range(2):
            y = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(x)
            x = x + hk.MultiHeadAttention(num_heads=4, key_size=16, w_init=hk.initializers.VarianceScaling(1.0))(
                y, y, y, mask=causal)
            y = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(x)
            x = x + hk.nets.MLP([128, 64])(y)
        return hk.Linear(100)(hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(x))

    f = hk.transform_with_state(forward)
    tokens = np.asarray(jax.random.randint(jax.random.key(4), (BATCH, 16), 0, 100, jnp.int32))
    params, state = jax.jit(f.init, static_argnums=2)(jax.random.key(0), tokens, False)
    return _target("haiku_transformer", f, params, state, tokens, False)


def haiku_batchnorm() -> Target:
    """Conv2D -> BatchNorm -> relu twice, avg_pool, Linear: hk.BatchNorm in inference mode with trained statistics."""
    import haiku as hk

    def forward(x, is_training):
        for ch in (16, 32):
            x = hk.Conv2D(ch, 3, with_bias=False)(x)
            x = hk.BatchNorm(create_scale=True, create_offset=True, decay_rate=0.9)(x, is_training=is_training)
            x = jax.nn.relu(x)
        x = hk.avg_pool(x, window_shape=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="VALID")
        return hk.Linear(10)(hk.Flatten()(x))

    f = hk.transform_with_state(forward)
    x = _images(5, size=12)
    params, state = jax.jit(f.init, static_argnums=2)(jax.random.key(0), x, True)
    return _target("haiku_batchnorm", f, params, _trained_state(f, params, state, x.shape, steps=10), x, False)
