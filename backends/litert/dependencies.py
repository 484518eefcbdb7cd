"""The check that keeps a name-based pairing honest: a tensor holds an op's value only if it depends on what the op
depends on.

The converter keeps names through its rewrites: a BatchNorm folded into `x * scale + (beta - mean * scale)` leaves
an ADD named `.../bn/add` that computes `beta - mean * scale`, with the shape of jax's broadcast of `beta`, which is
also named `.../bn/add`. Names, shapes and dtypes agree; the values are different quantities. Two invariants of
a true pair catch such a tensor, each from the graphs alone:

- the same inputs: the model inputs (leaves) the tensor's value is computed from are the ones the op's is
  (shape arithmetic, everything a SHAPE op reads, does not count: a symbolic batch makes the .tflite compute
  shapes from its inputs);
- the same paired ancestors: for every other pair (op', tensor'), tensor' feeds the tensor exactly when op' feeds
  the op. Pairs that contradict others are dropped, the most contradicted first, until none contradict.

Dropping is conservative: an op that loses its pair is "cannot map" with the reason, never paired elsewhere.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .tensor_names import SiteRef, TensorRef

# TFLite ops whose output depends on their input's shape only, not its values.
SHAPE_ONLY = frozenset({"SHAPE", "RANK"})


def site_ancestry(sites: Sequence[SiteRef], bits: dict[str, int]) -> dict[str, int]:
    """site key -> the bitset of the sites and arguments its value is computed from (`bits`: key -> bit, extended
    here for every site and argument met)."""
    found: dict[str, int] = {}
    for site in sites:  # data-flow order: parents come first
        mask = 0
        for parent in site.parents:
            bit = bits.setdefault(parent, len(bits))
            mask |= found.get(parent, 0) | (1 << bit)
        bits.setdefault(site.key, len(bits))
        found[site.key] = mask
    return found


def tensor_ancestry(tensors: Sequence[TensorRef], sources: Mapping[int, str], bits: Mapping[str, int],
                    tensor_bits: dict[int, int]) -> dict[int, int]:
    """tensor index -> the bitset of the tensors and arguments its value is computed from. Arguments use the sites'
    bits (`sources`: graph input tensor -> its argument key); tensors get bits of their own after those."""
    found: dict[int, int] = {}
    offset = max(bits.values(), default=-1) + 1
    for tensor in sorted(tensors, key=lambda t: t.order):
        mask = 0
        if tensor.producer not in SHAPE_ONLY:
            for index in tensor.inputs:
                if index in sources and sources[index] in bits:
                    mask |= 1 << bits[sources[index]]
                elif index in found:
                    bit = tensor_bits.setdefault(index, offset + len(tensor_bits))
                    mask |= found[index] | (1 << bit)
        tensor_bits.setdefault(tensor.index, offset + len(tensor_bits))
        found[tensor.index] = mask
    return found


def contradictions(pairs: Mapping[str, int], sites: Sequence[SiteRef], tensors: Sequence[TensorRef],
                   sources: Mapping[int, str]) -> dict[str, str]:
    """site key -> why its pair cannot stand, for the pairs to drop (see the module docstring)."""
    bits: dict[str, int] = {}
    site_anc = site_ancestry(sites, bits)
    tensor_bits: dict[int, int] = {}
    tensor_anc = tensor_ancestry(tensors, sources, bits, tensor_bits)
    args = {key: bit for key, bit in bits.items() if key.startswith("arg")}
    arg_mask = sum(1 << bit for bit in args.values())
    names = {t.index: t.name for t in tensors}
    dropped: dict[str, str] = {}
    for key, index in pairs.items():
        own, theirs = site_anc.get(key, 0) & arg_mask, tensor_anc.get(index, 0) & arg_mask
        if own != theirs:
            extra = sorted(a for a, bit in args.items() if theirs >> bit & 1 and not own >> bit & 1)
            missing = sorted(a for a, bit in args.items() if own >> bit & 1 and not theirs >> bit & 1)
            dropped[key] = (f"cannot map: the .tflite tensor named after this op, '{names[index]}', is computed from "
                            f"other inputs ({'also ' + ', '.join(extra) if extra else 'not ' + ', '.join(missing)}): "
                            "the converter rewrote the computation around this op")
    live = {k: i for k, i in pairs.items() if k not in dropped}
    conflicts: dict[str, set[str]] = {k: set() for k in live}
    for key, index in live.items():
        s_anc, t_anc = site_anc.get(key, 0), tensor_anc.get(index, 0)
        for other, other_index in live.items():
            if other != key and (s_anc >> bits[other] & 1) != (t_anc >> tensor_bits[other_index] & 1):
                conflicts[key].add(other)
                conflicts[other].add(key)
    while conflicts:
        worst = max(len(v) for v in conflicts.values())
        if worst == 0:
            break
        for key in [k for k, v in conflicts.items() if len(v) == worst]:
            dropped[key] = (f"cannot map: the .tflite tensor named after this op, '{names[pairs[key]]}', depends on "
                            f"the tensors of other ops than this op does (it contradicts the pairing of "
                            f"{', '.join(sorted(conflicts[key])[:3])}): the converter rewrote the computation around it")
        for key in [k for k in conflicts if k in dropped]:
            for other in conflicts.pop(key):
                if other in conflicts:
                    conflicts[other].discard(key)
    return dropped
