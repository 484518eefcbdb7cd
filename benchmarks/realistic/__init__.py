"""Realistic models through `compare`: which format is fastest on this CPU, by how much, at batch 1 and a
throughput batch, and what fraction of the machine's peak that is.

    python -m benchmarks.realistic [--models resnet,bert,gpt2_step] [--backends xla,savedmodel,onnx,iree]
                                   [--out DIR] [--batch-sizes 1,8] [--bench-time S] [--table-out FILE]

The models (`models.py`, each also a TARGET `benchmarks/realistic/models.py:NAME`):

- `resnet`: ResNet-50 (bottleneck blocks [3, 4, 6, 3], widths 64..2048, 1000 classes) on float32 NHWC
  [b, 224, 224, 3], as flax's ImageNet example builds it (nn.Conv, nn.BatchNorm in eval mode,
  nn.max_pool). BatchNorm statistics are calibrated on a random batch (one train-mode pass with
  momentum 0), so every layer's activations are unit-scaled, as a trained network's are. 25.6 M
  parameters, 4.1 GMAC per image.
- `bert`: BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522, seq 128,
  post-LayerNorm, exact GELU, tanh pooler) on int32 input_ids and attention_mask [b, 128]
  (nn.Embed, nn.MultiHeadDotProductAttention with a padding mask, nn.LayerNorm). 109 M parameters.
- `gpt2_step`: one GPT-2-small decode step (12 layers, 768 hidden, 12 heads, vocab 50257, tied LM head):
  one new token per row at position `pos` (127 in the example: 127 cached tokens) attends to a
  128-slot KV cache passed in as inputs [b, 12, 128, 12, 64]; returns the logits and the updated cache
  (the new key/value written at `pos` with a select, so the cache feeds straight back). An explicit
  attention: the cache is an input, not flax's mutable "cache" collection. 124 M parameters.

Batch: `--batch-mode symbolic` (the default) exports each model once with a symbolic batch and times every
size from that one artifact (IREE, which cannot compile some symbolic batches, falls back to the example's size
and says `size-unsupported` for the others); `static` exports one artifact per batch size.

The table per model: rows are batch sizes; one column per backend's p50 in ms (jax.jit, the reference,
first); the fastest faithful backend (parity ok) and its lead over the runner-up (p50 ratio; with
`results.pairing` present, its ratio, 95% interval and significance instead); the fastest's speed-up
over jax.jit; its achieved GFLOP/s (XLA's cost analysis of the function over its p50) and fraction of
peak: against the best float32 matmul measured, this script's (the best of five 2048^3 jax.jit matmuls) or
any run's own (`results.pairing.peak_gflops`): one run's peak measured while the machine was shared would
make a figure read above 100%. Models run one after
another, never in parallel (2 cores).
"""
