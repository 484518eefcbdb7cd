"""Keras 3 on the JAX backend (the `zoo-keras` extra): keras.applications, an LSTM, keras-hub backbones.

Each model is built from arguments (`weights=None`, keras-hub backbones from their constructor's sizes): random
weights, nothing downloaded. The applications return logits
(`classifier_activation=None`): with random weights their softmax is saturated (ResNet50: one-hot) or flat
(EfficientNetB0: 0.1 +- 1e-7), an output no parity check could fail on. Their pixels are in the range each
expects ([-1, 1]; EfficientNet rescales [0, 255] itself): raw [0, 255] saturates MobileNetV2's relu6 to a
constant output. The target is Keras's own functional entry point for JAX,
`model.stateless_call(trainable, non_trainable, inputs, training=False)`, with the variables as input leaves keyed
by their Keras path (`keras_NAME`), or closed over as constants (`keras_NAME_baked`).

KERAS_BACKEND must be `jax` before keras is first imported: a factory sets it (when keras is not imported yet)
and refuses a keras already imported on another backend (a process that imported TensorFlow's keras first).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from multiexport import Target

BATCH = 2


def _keras():
    if "keras" not in sys.modules:  # set here, not at import: importing this module changes nothing
        os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"keras | got backend {keras.backend.backend()!r}, expected 'jax' (set KERAS_BACKEND=jax "
                           "before keras is first imported)")
    keras.utils.set_random_seed(0)
    return keras


def _by_path(variables) -> dict[str, np.ndarray]:
    """Variables keyed by their Keras path (unique within a model), in the model's order."""
    values = {v.path: np.asarray(v.value) for v in variables}
    if len(values) != len(variables):
        raise RuntimeError("keras | variable paths are not unique: " + ", ".join(v.path for v in variables))
    return values


def _target(name: str, model, inputs, baked: bool = False, symbolic: bool = True) -> Target:
    """`fn(variables, inputs)` over `model.stateless_call`, or `fn(inputs)` with the variables closed over."""
    trainable = [v.path for v in model.trainable_variables]
    non_trainable = [v.path for v in model.non_trainable_variables]
    variables = {"trainable": _by_path(model.trainable_variables),
                 "non_trainable": _by_path(model.non_trainable_variables)}

    def call(variables, inputs):
        out, _ = model.stateless_call([variables["trainable"][p] for p in trainable],
                                      [variables["non_trainable"][p] for p in non_trainable], inputs, training=False)
        return out if isinstance(out, dict) else {"output": out}

    if baked:
        def apply_baked(inputs):
            return call(variables, inputs)

        fn, args = apply_baked, (inputs,)
    else:
        def apply(variables, inputs):
            return call(variables, inputs)

        fn, args = apply, (variables, inputs)
    fn.__name__ = name
    return Target(fn, args=args, name=name, symbolic_batch="b" if symbolic else False, batch_leaves=("inputs*",))


def _image(seed: int, low: float, high: float, batch: int = BATCH) -> np.ndarray:
    return np.asarray(jax.random.uniform(jax.random.key(seed), (batch, 32, 32, 3), jnp.float32, low, high))


def _application(name: str, cls: str, baked: bool = False, pixels: tuple[float, float] = (-1.0, 1.0), **kw) -> Target:
    """A keras.applications model with `classifier_activation=None`: logits, as a random-init softmax saturates."""
    keras = _keras()
    model = getattr(keras.applications, cls)(input_shape=(32, 32, 3), weights=None, classes=10,
                                             classifier_activation=None, **kw)
    _calibrate_batchnorm(keras, model, _image(7, *pixels, batch=32))
    return _target(name, model, _image(1, *pixels), baked=baked)


def _calibrate_batchnorm(keras, model, data) -> None:
    """Set every BatchNormalization's moving statistics to those of one training-mode pass over `data`.

    At the init's mean 0 / variance 1, activations shrink or grow layer after layer (MobileNetV2's logits are
    ~1e-11 for every input); statistics measured on data, as after training, keep them in a normal range.
    """
    norms = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in norms:
        layer.momentum = 0.0  # moving = batch statistics
    _, non_trainable = model.stateless_call([v.value for v in model.trainable_variables],
                                            [v.value for v in model.non_trainable_variables], data, training=True)
    for variable, value in zip(model.non_trainable_variables, non_trainable):
        variable.assign(value)


def keras_mobilenetv2() -> Target:
    """keras.applications.MobileNetV2(alpha=0.35, weights=None) on 32x32 images, 10 logits, symbolic b."""
    return _application("keras_mobilenetv2", "MobileNetV2", alpha=0.35)


def keras_mobilenetv2_baked() -> Target:
    """MobileNetV2 with its variables closed over."""
    return _application("keras_mobilenetv2_baked", "MobileNetV2", baked=True, alpha=0.35)


def keras_efficientnetb0() -> Target:
    """keras.applications.EfficientNetB0(weights=None): in-model Rescaling + Normalization, SE blocks, swish."""
    return _application("keras_efficientnetb0", "EfficientNetB0", pixels=(0.0, 255.0))


def keras_resnet50() -> Target:
    """keras.applications.ResNet50(weights=None) on 32x32 images (23.6 M parameters as input leaves)."""
    return _application("keras_resnet50", "ResNet50")


def keras_lstm() -> Target:
    """A Sequential of two stacked keras.layers.LSTM (32, 16 units) and a Dense head on float32[b, 10, 8]."""
    keras = _keras()
    model = keras.Sequential([keras.Input((10, 8)), keras.layers.LSTM(32, return_sequences=True),
                              keras.layers.LSTM(16), keras.layers.Dense(4)])
    x = np.asarray(jax.random.normal(jax.random.key(2), (BATCH, 10, 8), jnp.float32))
    return _target("keras_lstm", model, x)


SEQ, VOCAB = 12, 100


def _tokens(seed: int) -> dict[str, np.ndarray]:
    ids = np.asarray(jax.random.randint(jax.random.key(seed), (BATCH, SEQ), 1, VOCAB, jnp.int32))
    mask = np.ones((BATCH, SEQ), np.int32)
    mask[1, SEQ - 3:] = 0
    return {"token_ids": ids, "padding_mask": mask}


def _backbone(name: str, cls: str, baked: bool = False, extra_inputs: dict | None = None, **kw) -> Target:
    _keras()
    import keras_hub

    model = getattr(keras_hub.models, cls)(vocabulary_size=VOCAB, num_layers=2, hidden_dim=32, intermediate_dim=64,
                                           **kw)
    return _target(name, model, {**_tokens(3), **(extra_inputs or {})}, baked=baked)


def keras_hub_gpt2() -> Target:
    """keras_hub.models.GPT2Backbone (2 layers, 2 heads, hidden 32): token_ids + padding_mask, symbolic b."""
    return _backbone("keras_hub_gpt2", "GPT2Backbone", num_heads=2, max_sequence_length=32)


def keras_hub_llama() -> Target:
    """keras_hub.models.LlamaBackbone (GQA 4 query / 2 kv heads, RoPE, RMSNorm, SwiGLU), symbolic b."""
    return _backbone("keras_hub_llama", "LlamaBackbone", num_query_heads=4, num_key_value_heads=2)


def keras_hub_gemma() -> Target:
    """keras_hub.models.GemmaBackbone (2 query / 1 kv heads of 16, scaled embeddings, GeGLU), symbolic b."""
    return _backbone("keras_hub_gemma", "GemmaBackbone", num_query_heads=2, num_key_value_heads=1, head_dim=16)


def keras_hub_bert() -> Target:
    """keras_hub.models.BertBackbone: token_ids, segment_ids, padding_mask -> sequence and pooled output, symbolic b."""
    segments = np.zeros((BATCH, SEQ), np.int32)
    segments[:, SEQ // 2:] = 1
    return _backbone("keras_hub_bert", "BertBackbone", num_heads=2, max_sequence_length=32,
                     extra_inputs={"segment_ids": segments})


def keras_hub_bert_baked() -> Target:
    """BertBackbone with its variables closed over."""
    segments = np.zeros((BATCH, SEQ), np.int32)
    segments[:, SEQ // 2:] = 1
    return _backbone("keras_hub_bert_baked", "BertBackbone", baked=True, num_heads=2, max_sequence_length=32,
                     extra_inputs={"segment_ids": segments})
