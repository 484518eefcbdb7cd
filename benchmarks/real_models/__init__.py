"""The real-model zoo: models built the way flax.linen, flax.nnx and equinox document them, for `compare`.

Each entry of `REAL_MODELS` names a zero-argument factory returning a `multiexport.Target`, reachable as
`benchmarks.real_models:NAME` from the repository root (this package re-exports every factory):

    multiexport compare benchmarks.real_models:nnx_mlp --trials 2 --no-bench
    python -m benchmarks.real_models --list                    # the registry, with each model's compare flags
    python -m benchmarks.real_models --run quick --out DIR     # compare each model in turn (parity only), one matrix
    python -m benchmarks.real_models --run all --out DIR --bench --backends xla,onnx   # all of them, timed too
    python -m benchmarks.real_models --matrix DIR1 DIR2        # one matrix of several finished runs

`--run` takes `quick`, `all`, a tag (`nnx`, `symbolic-batch`, ...) or comma-separated names. It is a sweep
(`multiexport sweep`, local executor, one compare at a time): DIR/rows/NAME/results.json, DIR/rows/NAME.log
(the command, its output and exit code), DIR/matrix.md/.html + DIR/summary.json for all of them, `--resume`
after a stop. The registry is also the sweep spec benchmarks/real_models/zoo.toml (`--write-spec`):

    multiexport sweep benchmarks/real_models/zoo.toml --only quick --out DIR [--executor ray]

The models follow the libraries' own docstrings and examples (flax's MNIST CNN, `nn.scan` over layers and
the scanned LSTM from `flax.linen.scan`'s docstring, `nnx.split`/`nnx.merge` of an `nnx.Module`,
`nnx.BatchNorm` and `nnx.Dropout` from their docstrings, equinox's MNIST CNN, `eqx.partition` /
`eqx.combine`, `eqx.nn.make_with_state` for BatchNorm), at small, CI-sized widths but realistic
structure. Weights are seeded (`jax.random.key(N)`), never downloaded, so a fresh worker process that
re-loads a TARGET gets the same values. Stateful layers are given *trained-looking* statistics (a few
training steps on shifted data), not their initial zeros/ones.

float64: `x64_mlp` calls `jax.config.update("jax_enable_x64", True)` as the first thing its factory does,
before it creates any array. The flag is global: it stays on in the process that called the factory, so
load that target in a process of its own (the CLI does) rather than next to 32-bit targets.

Registry fields: `val_ranges` (leaf pattern -> [low, high)) keep index-like leaves valid; `dim_sizes`
and `batch_sizes` are what `--dim-sizes` / `--batch-sizes` get; tags: `quick` (the CI-sized subset that
tests/compare/test_real_models.py gates), plus what the model exercises (`linen`, `nnx`, `eqx`,
`symbolic-batch`, `batchnorm`, `attention`, `mask`, `x64`, `bf16`, `prng-key`, ...).

Modules: linen.py, transformers.py (GPT/ViT/BERT, linen), nnx.py, eqx.py, ops.py (dtypes and ops), llm.py (a
Llama-style decoder with its KV cache as leaves, plain JAX; tag `kv-cache`), and the models of other libraries, each an optional extra (`pip install -e .[zoo]`, or zoo-hf / zoo-keras / zoo-haiku):
hf.py (Hugging Face transformers 4.x Flax), keras3.py (Keras 3 on JAX, keras.applications and keras-hub),
haiku_nets.py (dm-haiku). Their tags: `hf`, `keras`, `haiku`; `baked` marks weights closed over as constants.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from multiexport import Target


@dataclass(frozen=True)
class RealModel:
    """One zoo entry: `target` is the TARGET string `compare` loads; the rest are its compare options."""

    name: str
    target: str
    module: str
    what: str
    tags: tuple[str, ...] = ()
    val_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    dim_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    batch_sizes: tuple[int, ...] = ()

    @property
    def factory(self) -> Callable[[], Target]:
        """The function that builds the target (its module is imported now, not with this package)."""
        return getattr(importlib.import_module(f"{__name__}.{self.module}"), self.name)

    @property
    def quick(self) -> bool:
        return "quick" in self.tags

    def compare_flags(self, bench: bool = False) -> list[str]:
        """The `multiexport compare` flags this entry needs (value ranges, dimension sizes, batch sweep if timed)."""
        flags = []
        for pattern, (lo, hi) in self.val_ranges.items():
            flags += ["--val-range", f"{pattern}={lo:g}:{hi:g}"]
        for dim, sizes in self.dim_sizes.items():
            flags += ["--dim-sizes", f"{dim}={','.join(map(str, sizes))}"]
        if bench and self.batch_sizes:
            flags += ["--batch-sizes", ",".join(map(str, self.batch_sizes))]
        return flags

    def compare_options(self, bench: bool = False) -> dict[str, Any]:
        """The same as keyword arguments of `multiexport.comparison.compare`."""
        options: dict[str, Any] = {"val_ranges": dict(self.val_ranges), "dim_sizes": dict(self.dim_sizes)}
        if bench and self.batch_sizes:
            options["batch_sizes"] = tuple(self.batch_sizes)
        return options


def _m(name: str, what: str, *tags: str, **kw) -> RealModel:
    prefix = name.split("_")[0]
    module = prefix if prefix in ("linen", "nnx", "eqx") else _LIBRARY_MODULES.get(prefix) or _MODULE_OF.get(name, "ops")
    return RealModel(name, f"benchmarks.real_models:{name}", module, what, tags, **kw)


# The model files import only their own framework, and this package imports none of them until a model is
# asked for (`RealModel.factory`, or `benchmarks.real_models:NAME` through `__getattr__`): a worker loading a
# flax model must not pay for equinox's import, nor have equinox in sys.modules (which makes the ONNX export
# import jax2onnx's equinox plugins, ~14 CPU-s), as a user's own flax file would not.
# The models of other libraries (each an optional extra, `pip install -e .[zoo]`): hf_* from transformers' Flax
# classes, keras_* from Keras 3 on JAX (keras_hub_* from keras-hub), haiku_* from dm-haiku.
_LIBRARY_MODULES = {"hf": "hf", "keras": "keras3", "haiku": "haiku_nets", "llm": "llm"}
_MODULE_OF = {"gpt_gqa": "transformers", "gpt_bf16": "transformers", "vit": "transformers",
              "bert_encoder": "transformers"}


_HF_IDS = {"batch.input_ids": (3.0, 100.0)}  # inside the vocabulary, clear of the special ids (pad 1)
_KERAS_IDS = {"inputs.token_ids": (1.0, 100.0)}

REAL_MODELS: tuple[RealModel, ...] = (
    _m("linen_mlp", "flax.linen MLP, fn(params, batch)", "linen", "quick"),
    _m("linen_cnn", "flax MNIST CNN (Conv, avg_pool, reshape, Dense), symbolic batch", "linen", "conv",
       "symbolic-batch", "quick", dim_sizes={"b": (1, 5)}, batch_sizes=(1, 8)),
    _m("linen_batchnorm", "linen BatchNorm CNN in eval mode, batch_stats as input leaves", "linen", "batchnorm", "quick"),
    _m("linen_dropout", "linen Dropout in deterministic mode", "linen", "dropout"),
    _m("linen_attention_mask", "linen MultiHeadDotProductAttention with causal+padding mask, int tokens, symbolic batch",
       "linen", "attention", "mask", "symbolic-batch", "quick", val_ranges={"batch.tokens": (0, 100)}),
    _m("linen_scan_layers", "nn.scan over 6 residual layers (flax.linen.scan docstring)", "linen", "scan"),
    _m("linen_lstm", "nn.RNN(OptimizedLSTMCell) with int32 seq_lengths", "linen", "rnn", "scan",
       val_ranges={"batch.seq_lengths": (1, 11)}),
    _m("linen_scan_lstm", "nn.scan(nn.LSTMCell) over time (flax.linen.scan docstring)", "linen", "rnn", "scan"),
    _m("gpt_gqa", "GPT-style decoder: RMSNorm, RoPE, GQA (4q/2kv), SwiGLU, tied embeddings", "linen", "attention",
       "mask", "gqa", val_ranges={"batch.tokens": (0, 256)}),
    _m("gpt_bf16", "the GPT decoder in bfloat16", "linen", "bf16", "attention", val_ranges={"batch.tokens": (0, 256)}),
    _m("vit", "small ViT (conv patches, cls token, attention), symbolic batch", "linen", "attention", "conv",
       "symbolic-batch"),
    _m("bert_encoder", "BERT-style encoder: word/position/token-type embeddings, padding mask, pooler, symbolic batch",
       "linen", "attention", "mask", "symbolic-batch",
       val_ranges={"batch.input_ids": (0, 100)}, batch_sizes=(1, 8)),
    _m("nnx_mlp", "flax.nnx MLP of nnx.Linear, fn(state, x) after nnx.split", "nnx", "quick"),
    _m("nnx_batchnorm", "nnx.BatchNorm in eval mode, trained running stats in the state", "nnx", "batchnorm", "quick"),
    _m("nnx_dropout", "nnx.Dropout + nnx.Rngs, plain nnx.split: typed PRNG key in the state", "nnx", "dropout",
       "prng-key"),
    _m("nnx_dropout_params_only", "the nnx Dropout model split by nnx.Param (rng state closed over)", "nnx", "dropout"),
    _m("nnx_attention", "nnx.MultiHeadAttention with a causal mask", "nnx", "attention", "mask"),
    _m("nnx_attention_dynamic", "nnx attention block, symbolic batch", "nnx", "attention", "mask", "symbolic-batch"),
    _m("eqx_mlp", "eqx.nn.MLP via eqx.partition/combine + vmap", "eqx", "quick"),
    _m("eqx_cnn", "equinox MNIST CNN (Conv2d, MaxPool2d, ravel, Linear) vmapped, symbolic batch", "eqx", "conv",
       "symbolic-batch"),
    _m("eqx_attention", "eqx.nn.MultiheadAttention with padding+causal mask, module closed over", "eqx", "attention",
       "mask", val_ranges={"lengths": (1, 17)}),
    _m("eqx_gru_scan", "eqx.nn.GRUCell over time with lax.scan", "eqx", "rnn", "scan"),
    _m("eqx_batchnorm", "eqx.nn.BatchNorm via make_with_state, inference mode, State as input", "eqx", "batchnorm"),
    _m("x64_mlp", "float64 linen MLP with int64 labels (jax_enable_x64 set by the factory)", "x64"),
    _m("scalar_inputs", "0-d inputs (np.float32, np.int32, Python float) and 0-d outputs", "scalar"),
    _m("scalar_only", "sin(sin(x)) of one 0-d float32", "scalar"),
    _m("ops_topk", "lax.top_k values/indices + masked logits", "ops"),
    _m("ops_sort", "jnp.sort / argsort / cumsum (top-p)", "ops"),
    _m("ops_scatter", "KV-cache .at[:, pos].set and segment-sum .at[seg].add", "ops",
       val_ranges={"pos": (0, 16), "segments": (0, 6)}),
    _m("ops_while", "lax.while_loop Newton sqrt (data-dependent trip count)", "ops", "while",
       val_ranges={"x": (0.5, 100.0)}),
) + (
    # Hugging Face transformers 4.x Flax (extra zoo-hf): FlaxXModel(config, seed=0, _do_init=True), small configs.
    _m("hf_bert", "FlaxBertModel, params as inputs, ids + mask + token types, symbolic batch", "hf", "attention",
       "mask", "symbolic-batch", val_ranges=_HF_IDS | {"batch.token_type_ids": (0, 2)}),
    _m("hf_bert_baked", "FlaxBertModel with params closed over (constants), symbolic batch", "hf", "baked",
       "attention", "mask", "symbolic-batch", val_ranges=_HF_IDS | {"batch.token_type_ids": (0, 2)}),
    _m("hf_roberta", "FlaxRobertaModel (positions from non-pad cumsum), symbolic batch", "hf", "attention", "mask",
       "symbolic-batch", val_ranges=_HF_IDS | {"batch.token_type_ids": (0, 1)}),
    _m("hf_electra", "FlaxElectraModel (embedding 16 -> hidden 32), symbolic batch", "hf", "attention", "mask",
       "symbolic-batch", val_ranges=_HF_IDS | {"batch.token_type_ids": (0, 2)}),
    _m("hf_gpt2", "FlaxGPT2Model, causal, static batch", "hf", "attention", "mask", val_ranges=_HF_IDS),
    _m("hf_gpt2_baked", "FlaxGPT2Model with params closed over, static batch", "hf", "baked", "attention", "mask",
       val_ranges=_HF_IDS),
    _m("hf_bart", "FlaxBartModel encoder-decoder, static batch", "hf", "attention", "mask",
       val_ranges=_HF_IDS | {"batch.decoder_input_ids": (3, 100)}),
    _m("hf_vit", "FlaxViTModel on NCHW pixels (init 0.2), symbolic batch", "hf", "attention", "conv",
       "symbolic-batch"),
    _m("hf_clip_text", "FlaxCLIPTextModel (causal, argmax-pooled), symbolic batch", "hf", "attention", "mask",
       "symbolic-batch", val_ranges=_HF_IDS),
    _m("hf_whisper_encoder", "FlaxWhisperModel.encode on log-mels (init 0.2), symbolic batch", "hf", "attention",
       "conv", "symbolic-batch"),
    # Keras 3 on the JAX backend (extra zoo-keras), through model.stateless_call.
    _m("keras_mobilenetv2", "keras.applications.MobileNetV2(alpha=0.35, weights=None), logits, calibrated BN, "
       "symbolic batch", "keras", "conv", "batchnorm", "symbolic-batch"),
    _m("keras_mobilenetv2_baked", "MobileNetV2 with variables closed over, symbolic batch", "keras", "baked", "conv",
       "batchnorm", "symbolic-batch"),
    _m("keras_efficientnetb0", "keras.applications.EfficientNetB0(weights=None), logits, calibrated BN, symbolic "
       "batch", "keras", "conv", "batchnorm", "symbolic-batch"),
    _m("keras_resnet50", "keras.applications.ResNet50(weights=None) on 32x32, logits, calibrated BN, symbolic batch",
       "keras", "conv", "batchnorm", "symbolic-batch"),
    _m("keras_lstm", "Sequential of two keras.layers.LSTM and Dense, symbolic batch", "keras", "rnn",
       "symbolic-batch"),
    _m("keras_hub_gpt2", "keras_hub GPT2Backbone from arguments, symbolic batch", "keras", "attention", "mask",
       "symbolic-batch", val_ranges=_KERAS_IDS),
    _m("keras_hub_llama", "keras_hub LlamaBackbone (GQA, RoPE), symbolic batch", "keras", "attention", "mask", "gqa",
       "symbolic-batch", val_ranges=_KERAS_IDS),
    _m("keras_hub_gemma", "keras_hub GemmaBackbone (MQA, GeGLU), symbolic batch", "keras", "attention", "mask", "gqa",
       "symbolic-batch", val_ranges=_KERAS_IDS),
    _m("keras_hub_bert", "keras_hub BertBackbone (segments, pooled output), symbolic batch", "keras", "attention",
       "mask", "symbolic-batch", val_ranges=_KERAS_IDS | {"inputs.segment_ids": (0, 2)}),
    _m("keras_hub_bert_baked", "keras_hub BertBackbone with variables closed over, symbolic batch", "keras", "baked",
       "attention", "mask", "symbolic-batch", val_ranges=_KERAS_IDS | {"inputs.segment_ids": (0, 2)}),
    # dm-haiku (extra zoo-haiku): hk.transform_with_state, apply(..., is_training=False).
    _m("haiku_resnet", "hk.nets.ResNet (BatchNorm, max-pool; head re-initialised), symbolic batch", "haiku", "conv",
       "batchnorm", "symbolic-batch"),
    _m("haiku_resnet_baked", "the Haiku ResNet with params and state closed over, symbolic batch", "haiku", "baked",
       "conv", "batchnorm", "symbolic-batch"),
    _m("haiku_mobilenet", "hk.nets.MobileNetV1 (depthwise convs, BatchNorm), symbolic batch", "haiku",
       "conv", "batchnorm", "symbolic-batch"),
    _m("haiku_lstm", "hk.LSTM with hk.dynamic_unroll, symbolic batch", "haiku", "rnn", "scan", "symbolic-batch"),
    _m("haiku_transformer", "hk.MultiHeadAttention blocks with a causal mask, int tokens, symbolic batch", "haiku",
       "attention", "mask", "symbolic-batch", val_ranges={"x": (0, 100)}),
    _m("haiku_batchnorm", "hk.Conv2D + hk.BatchNorm in inference mode with trained statistics, symbolic batch",
       "haiku", "conv", "batchnorm", "symbolic-batch"),
) + (
    # The Llama-style decoder of llm.py (plain JAX) at its CI size: the 1 B config is llm.py's llm_1b_* (not here:
    # a sweep of the zoo must not build 4 GiB of weights per worker; benchmarks/llm.py runs it).
    _m("llm_tiny_decode", "Llama decode step: token, pos, KV cache leaves in and out, weights as inputs", "llm",
       "attention", "gqa", "kv-cache", val_ranges={"token": (0, 256), "pos": (0, 48)}),
    _m("llm_tiny_decode_baked", "the Llama decode step with its weights closed over", "llm", "baked", "attention",
       "gqa", "kv-cache", val_ranges={"token": (0, 256), "pos": (0, 48)}),
    _m("llm_tiny_prefill", "Llama prefill: prompt -> next-token logits and the KV cache leaves", "llm", "attention",
       "gqa", "kv-cache", val_ranges={"tokens": (0, 256)}),
)

TAGS: frozenset[str] = frozenset(t for m in REAL_MODELS for t in m.tags)


def select(names: Sequence[str] = (), tags: Sequence[str] = ()) -> list[RealModel]:
    """Entries by name, or every entry with one of `tags` ("quick" for the CI subset); all when both are empty."""
    known = {m.name: m for m in REAL_MODELS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown real model(s): {', '.join(unknown)}; known: {', '.join(known)}")
    if names:
        return [known[n] for n in names]
    if tags:
        return [m for m in REAL_MODELS if set(tags) & set(m.tags)]
    return list(REAL_MODELS)


def select_run(spec: str) -> list[RealModel]:
    """What `--run` names: 'all', tags (e.g. 'quick'), or model names, comma-separated."""
    wanted = [s for s in spec.split(",") if s]
    if wanted == ["all"]:
        return list(REAL_MODELS)
    if wanted and all(w in TAGS for w in wanted):
        return select(tags=wanted)
    return select(names=wanted)


def main(argv: Sequence[str] | None = None) -> int:
    """List the zoo, or run `multiexport compare` on each selected model in turn and print the matrix."""
    import argparse

    from ._run import run_models

    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_models", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the registry and each model's compare flags")
    parser.add_argument("--run", default="", help="'quick', 'all', a tag, or comma-separated model names")
    parser.add_argument("--out", default="multiexport-out/real-models", help="output directory")
    parser.add_argument("--backends", default="xla,savedmodel,onnx,iree,litert,openvino")
    parser.add_argument("--trials", type=int, default=2, help="seeded trials per size, besides the example")
    parser.add_argument("--bench", action="store_true", help="also measure latency (default: parity only)")
    parser.add_argument("--timeout", default="600", help="seconds before a backend's worker is stopped")
    parser.add_argument("--matrix", nargs="+", metavar="DIR",
                        help="print the matrix of finished --run output directories (merged), run nothing")
    parser.add_argument("--resume", action="store_true", help="continue a --run stopped halfway in --out")
    parser.add_argument("--write-spec", action="store_true",
                        help="write the registry as the sweep spec benchmarks/real_models/zoo.toml")
    args, extra = parser.parse_known_args(argv)
    if args.matrix:
        from ._run import merged_matrix

        print(merged_matrix(args.matrix), end="")
        return 0
    if args.write_spec:
        from ._run import SPEC, spec_text

        SPEC.write_text(spec_text(REAL_MODELS))
        print(f"wrote {SPEC}")
        return 0
    if args.list or not args.run:
        for m in REAL_MODELS:
            print(f"{m.name:26s} {','.join(m.tags):38s} {m.what}")
            print(f"{'':26s} multiexport compare {m.target} {' '.join(m.compare_flags(bench=True))}".rstrip())
        return 0
    return run_models(select_run(args.run), args.out, args.backends, args.trials, args.bench, args.timeout, extra,
                      resume=args.resume)


__all__ = ["REAL_MODELS", "RealModel", "TAGS", "main", "select", "select_run"] + [m.name for m in REAL_MODELS]


def __getattr__(name: str) -> Any:
    """`benchmarks.real_models:NAME`: the model's factory, from its own file."""
    for m in REAL_MODELS:
        if m.name == name:
            return m.factory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
