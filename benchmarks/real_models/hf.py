"""Hugging Face transformers 4.x Flax models (the `zoo-hf` extra): BERT, RoBERTa, ELECTRA, GPT-2, BART, ViT, CLIP, Whisper.

Each model is built the way transformers documents it, `FlaxXModel(config, seed=0, _do_init=True)`, from a small
config given as arguments (2 layers, hidden 32): random weights, nothing downloaded. The target calls the model
object as a user does, `model(..., params=params)`, with the params tree as input leaves (`hf_NAME`) or closed
over as constants (`hf_NAME_baked`). Flax was removed from transformers in 5.0: the extra pins 4.x.

Random init is transformers' normal(0.02) (no zero-initialised output layer). Two models needed a wider init for
parity that can fail: at 0.02, ViT's pooled [CLS] output and Whisper's encoder output are nearly constant across
inputs (the constant cls token / sinusoidal positions dominate the residual stream: across-batch std 1e-4 and 7e-3
of the output's), so hf_vit uses initializer_range=0.2 and hf_whisper_encoder init_std=0.2. Token ids stay inside
the vocabulary and away from the special ids (val_ranges in the registry).

T5 is not here: transformers 4.57's FlaxT5 calls `jnp.clip(..., a_max=...)`, which jax 0.10 removed, so it does
not trace on the pinned JAX (TypeError: clip() got an unexpected keyword argument 'a_max').
"""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from multiexport import Target

# transformers probes for TensorFlow and torch at import; the Flax classes need neither, and importing TF here
# would cost every export worker seconds and log noise.
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("USE_TORCH", "0")

BATCH, SEQ, VOCAB = 2, 12, 100
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _ids(seed: int, low: int = 3, shape=(BATCH, SEQ)) -> np.ndarray:
    return np.asarray(jax.random.randint(jax.random.key(seed), shape, low, VOCAB, jnp.int32))


def _mask(shape=(BATCH, SEQ)) -> np.ndarray:
    """Attention mask with padding at the end of the second row (real batches are padded)."""
    mask = np.ones(shape, np.int32)
    mask[1, shape[1] - 3:] = 0
    return mask


def _target(name: str, model, call: Callable[..., Any], batch: dict, baked: bool, symbolic: bool,
            outputs: tuple[str, ...]) -> Target:
    """`fn(params, batch)` (or `fn(batch)` with the params closed over) returning the named model outputs."""
    params = model.params

    def pick(out) -> dict:
        return {k: getattr(out, k) for k in outputs}

    if baked:
        def apply_baked(batch):
            return pick(call(model, params, batch))

        fn, args, leaves = apply_baked, (batch,), ("batch.*",)
    else:
        def apply(params, batch):
            return pick(call(model, params, batch))

        fn, args, leaves = apply, (params, batch), ("batch.*",)
    fn.__name__ = name
    return Target(fn, args=args, name=name, symbolic_batch="b" if symbolic else False, batch_leaves=leaves)


def _encoder(name: str, cls_name: str, config_name: str, baked: bool = False, **config_kw) -> Target:
    import transformers

    config = getattr(transformers, config_name)(vocab_size=VOCAB, max_position_embeddings=40, **SMALL, **config_kw)
    model = getattr(transformers, cls_name)(config, seed=0, _do_init=True)
    batch = {"input_ids": _ids(1), "attention_mask": _mask(), "token_type_ids": np.zeros((BATCH, SEQ), np.int32)}

    def call(model, params, b):
        return model(b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                     params=params)

    outputs = ("last_hidden_state", "pooler_output") if "Electra" not in cls_name else ("last_hidden_state",)
    return _target(name, model, call, batch, baked, True, outputs)


def hf_bert() -> Target:
    """FlaxBertModel (2 layers, hidden 32): input_ids, attention_mask, token_type_ids, symbolic batch b."""
    return _encoder("hf_bert", "FlaxBertModel", "BertConfig")


def hf_bert_baked() -> Target:
    """FlaxBertModel with its params closed over (constants in the exported program)."""
    return _encoder("hf_bert_baked", "FlaxBertModel", "BertConfig", baked=True)


def hf_roberta() -> Target:
    """FlaxRobertaModel: position ids from the non-padding tokens' cumulative sum (pad id 1), symbolic batch."""
    return _encoder("hf_roberta", "FlaxRobertaModel", "RobertaConfig", pad_token_id=1, type_vocab_size=1)


def hf_electra() -> Target:
    """FlaxElectraModel: embedding size 16 projected to hidden 32, symbolic batch."""
    return _encoder("hf_electra", "FlaxElectraModel", "ElectraConfig", embedding_size=16)


def _gpt2(name: str, baked: bool) -> Target:
    import transformers

    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = transformers.FlaxGPT2Model(config, seed=0, _do_init=True)
    batch = {"input_ids": _ids(2), "attention_mask": np.ones((BATCH, SEQ), np.int32)}

    def call(model, params, b):
        return model(b["input_ids"], attention_mask=b["attention_mask"], params=params)

    return _target(name, model, call, batch, baked, False, ("last_hidden_state",))


def hf_gpt2() -> Target:
    """FlaxGPT2Model (2 layers, 32 wide, causal), static batch 2 x 12 tokens."""
    return _gpt2("hf_gpt2", False)


def hf_gpt2_baked() -> Target:
    """FlaxGPT2Model with its params closed over."""
    return _gpt2("hf_gpt2_baked", True)


def hf_bart() -> Target:
    """FlaxBartModel encoder-decoder (1 + 1 layers, d_model 32): input_ids, attention_mask, decoder_input_ids."""
    import transformers

    config = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=40)
    model = transformers.FlaxBartModel(config, seed=0, _do_init=True)
    batch = {"input_ids": _ids(3), "attention_mask": _mask(), "decoder_input_ids": _ids(4, shape=(BATCH, 8))}

    def call(model, params, b):
        return model(b["input_ids"], attention_mask=b["attention_mask"], decoder_input_ids=b["decoder_input_ids"],
                     params=params)

    return _target("hf_bart", model, call, batch, False, False, ("last_hidden_state", "encoder_last_hidden_state"))


def hf_vit() -> Target:
    """FlaxViTModel on float32[b, 3, 16, 16] pixel values (NCHW, as transformers takes them), 4x4 patches, symbolic b."""
    import transformers

    config = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, initializer_range=0.2, **SMALL)
    model = transformers.FlaxViTModel(config, seed=0, _do_init=True)
    batch = {"pixel_values": np.asarray(jax.random.normal(jax.random.key(7), (BATCH, 3, 16, 16), jnp.float32))}

    def call(model, params, b):
        return model(b["pixel_values"], params=params)

    return _target("hf_vit", model, call, batch, False, True, ("last_hidden_state", "pooler_output"))


def hf_clip_text() -> Target:
    """FlaxCLIPTextModel: causal text encoder, pooled at each row's highest token id (argmax + gather), symbolic b."""
    import transformers

    config = transformers.CLIPTextConfig(vocab_size=VOCAB, max_position_embeddings=16, **SMALL)
    model = transformers.FlaxCLIPTextModel(config, seed=0, _do_init=True)
    batch = {"input_ids": _ids(8), "attention_mask": _mask()}

    def call(model, params, b):
        return model(b["input_ids"], attention_mask=b["attention_mask"], params=params)

    return _target("hf_clip_text", model, call, batch, False, True, ("last_hidden_state", "pooler_output"))


def hf_whisper_encoder() -> Target:
    """FlaxWhisperModel's encoder (`model.encode`): log-mel float32[b, 16, 32], two convs + 2 layers, symbolic b."""
    import transformers

    config = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, encoder_layers=2, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
                                        max_target_positions=16, init_std=0.2)
    model = transformers.FlaxWhisperModel(config, seed=0, _do_init=True)
    batch = {"input_features": np.asarray(jax.random.normal(jax.random.key(9), (BATCH, 16, 32), jnp.float32))}

    def call(model, params, b):
        return model.encode(b["input_features"], params=params)

    return _target("hf_whisper_encoder", model, call, batch, False, True, ("last_hidden_state",))
