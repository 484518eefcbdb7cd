"""Which .tflite tensor holds which StableHLO op's result: the converter's tensor names, read back.

The TFLite converter names every tensor after the MLIR location of the op that makes it (TensorFlow's
GetNameFromLoc): a name location gives its name, which for a jax module is the op's name stack
(`jit(cnn)/CNN/Conv_0/add`); an op inlined from a call is named by its own location (`max` for the ReLU
of `jit(relu)`); an op the converter fused from several (an ADD with a fused ReLU) joins their names with
`;`, the pattern's root op first (`max;jit(cnn)/CNN/Conv_0/add;jit(cnn)/CNN/Conv_0/reshape`); and a name
already taken gets a counter appended (`sub`, `sub1`, `sub2`). Tensors the converter makes itself
(transposed kernels, shape arithmetic) carry the name of the op they serve, with another shape.

`pair` reads those names back against the reference's sites. A tensor holds a site's value only when its
name (or its fused root's) is the site's, its shape and dtype are the site's, and no other tensor or site
could claim it: when several do (two ReLUs of one shape are both `max`), they are paired in data-flow
order only if each chain is totally ordered by dependency on both sides, which a converter cannot
reorder; anything else is "cannot map", with the reason, never a guess.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

_COUNTER = re.compile(r"\d+$")
_CALL = re.compile(r"^.*/jit\([^/)]*\)/")
# Ops that only reshape or broadcast (the converter folds most of them into their consumers' broadcasting),
# told apart from ops that compute when one name and shape has both (a BatchNorm's broadcast mean and its
# subtraction are both `.../sub` under a symbolic batch).
SITE_SHAPE_OPS = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim", "stablehlo.reshape",
                            "stablehlo.dynamic_reshape", "stablehlo.broadcast"})
TFLITE_SHAPE_OPS = frozenset({"BROADCAST_TO", "RESHAPE", "EXPAND_DIMS", "SQUEEZE"})


@dataclass(frozen=True)
class SiteRef:
    """What the pairing reads of one reference site.

    key: the site's key (`op17`). names: the names the converter may have given its tensor (see `site_names`).
    op: the StableHLO op. shape, dtype: its result's. parents: the site keys it reads (`op<j>` operands only).
    """

    key: str
    names: tuple[str, ...]
    op: str
    shape: tuple[int, ...]
    dtype: str
    parents: tuple[str, ...]


@dataclass(frozen=True)
class TensorRef:
    """What the pairing reads of one .tflite tensor that an op of the model's main subgraph produces.

    index: the tensor's index. name: its name in the flatbuffer. shape: its shape in this run. dtype: the
    numpy dtype of its value as read (float32 for a quantized tensor read dequantized). producer: the
    producing op's name (`CONV_2D`). order: the producing op's position in the execution plan. inputs: the
    tensor indices the producing op reads.
    """

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    producer: str
    order: int
    inputs: tuple[int, ...]


@dataclass(frozen=True)
class Pairing:
    """pairs: site key -> tensor index. unmapped: site key -> "cannot map: why" for every other site. fused: paired
    site key -> the unpaired sites the converter fused into its tensor (named in it, and feeding the site)."""

    pairs: Mapping[str, int]
    unmapped: Mapping[str, str]
    fused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def site_names(scope: str, name: str = "") -> tuple[str, ...]:
    """The names the converter may have given a site's tensor: its own location's name when the core gives it
    (`name`), else its scope, and for an op that the flattening inlined from a call (`.../jit(relu)/max`) also
    the part after the call (`max`), which is what the converter, inlining the same call, names it."""
    if name:
        return (name,)
    inner = _CALL.sub("", scope)
    return (scope,) if inner in ("", scope) else (scope, inner)


def fused_parts(tensor_name: str) -> list[str]:
    """The op names in a tensor's name, root first, the converter's counter removed from the last."""
    parts = tensor_name.split(";")
    parts[-1] = _COUNTER.sub("", parts[-1]) or parts[-1]
    return parts


def pair(sites: Sequence[SiteRef], tensors: Sequence[TensorRef]) -> Pairing:
    """Each site's tensor, where the names, shapes, dtypes and dependency order say so without doubt."""
    by_name: dict[str, list[SiteRef]] = defaultdict(list)
    for site in sites:
        for name in site.names:
            by_name[name].append(site)
    groups: dict[tuple[str, tuple[int, ...], str], tuple[list[SiteRef], list[TensorRef]]] = {}
    fused_into: dict[str, TensorRef] = {}
    for tensor in tensors:
        for part in fused_parts(tensor.name)[1:]:
            for site in by_name.get(part, ()):
                fused_into.setdefault(site.key, tensor)
        resolved = _resolve(tensor.name, by_name)
        if resolved is None:
            continue
        key = (resolved, tensor.shape, tensor.dtype)
        if key not in groups:
            groups[key] = ([s for s in by_name[resolved] if s.shape == tensor.shape and s.dtype == tensor.dtype], [])
        groups[key][1].append(tensor)
    pairs: dict[str, int] = {}
    ambiguous: dict[str, str] = {}
    site_parents = {s.key: s.parents for s in sites}
    tensor_parents = _tensor_parents(tensors)
    for (name, _, _), (candidates, claimants) in groups.items():
        for part_sites, part_tensors in _split_by_kind(candidates, claimants):
            found = _pair_group(name, part_sites, part_tensors, site_parents, tensor_parents)
            if isinstance(found, str):
                for site in part_sites:
                    ambiguous[site.key] = found
            else:
                pairs.update(found)
    holder = {index: key for key, index in pairs.items()}
    unmapped = {}
    for site in sites:
        if site.key in pairs:
            continue
        unmapped[site.key] = ambiguous.get(site.key) or _why(site, fused_into.get(site.key), tensors, holder)
    fused: dict[str, list[str]] = defaultdict(list)
    for part, tensor in fused_into.items():
        root = holder.get(tensor.index)
        if root is not None and part not in pairs and _reaches(root, part, site_parents):
            fused[root].append(part)
    return Pairing(pairs, unmapped, {k: tuple(sorted(v, key=_site_order)) for k, v in fused.items()})


def _resolve(tensor_name: str, by_name: Mapping[str, list[SiteRef]]) -> str | None:
    """The site name a tensor's name stands for: its fused root, as is or without the converter's counter."""
    root = tensor_name.split(";", 1)[0]
    if ";" in tensor_name:  # the counter, if any, follows the last fused name, not the root
        return root if root in by_name else None
    if root in by_name:
        return root
    stripped = _COUNTER.sub("", root)
    return stripped if stripped != root and stripped in by_name else None


def _split_by_kind(sites: list[SiteRef], tensors: list[TensorRef]) -> list[tuple[list[SiteRef], list[TensorRef]]]:
    """The group as it is when its counts agree, else split into reshaping/broadcasting and computing ops."""
    if len(sites) == len(tensors) or len(sites) <= 1 and len(tensors) <= 1:
        return [(sites, tensors)]
    shaping = ([s for s in sites if s.op in SITE_SHAPE_OPS], [t for t in tensors if t.producer in TFLITE_SHAPE_OPS])
    computing = ([s for s in sites if s.op not in SITE_SHAPE_OPS],
                 [t for t in tensors if t.producer not in TFLITE_SHAPE_OPS])
    return [part for part in (shaping, computing) if part[0]]


def _pair_group(name: str, sites: list[SiteRef], tensors: list[TensorRef], site_parents: Mapping[str, Sequence[str]],
                tensor_parents: Mapping[int, Sequence[int]]) -> dict[str, int] | str:
    """site key -> tensor index for one group of one name, shape and dtype, or why it cannot be paired."""
    if not tensors:
        return {}
    if len(sites) == 1 and len(tensors) == 1:
        return {sites[0].key: tensors[0].index}
    if len(sites) != len(tensors):
        return (f"cannot map: {len(tensors)} .tflite tensors and {len(sites)} ops of the module share the name "
                f"'{name}', shape {list(tensors[0].shape)} and dtype {tensors[0].dtype}")
    ordered_sites = sorted(sites, key=lambda s: _site_order(s.key))
    ordered_tensors = sorted(tensors, key=lambda t: t.order)
    chained = all(_reaches(b.key, a.key, site_parents) for a, b in zip(ordered_sites, ordered_sites[1:])) and all(
        _reaches(b.index, a.index, tensor_parents) for a, b in zip(ordered_tensors, ordered_tensors[1:]))
    if not chained:
        return (f"cannot map: {len(sites)} ops of the module and as many .tflite tensors share the name '{name}' "
                f"and shape {list(tensors[0].shape)}, and they are not one chain of dependencies, so their order "
                "does not tell which is which")
    return {s.key: t.index for s, t in zip(ordered_sites, ordered_tensors)}


def _site_order(key: str) -> tuple[int, int]:
    index, _, result = key[2:].partition(".")
    return int(index), int(result or 0)


def _reaches(start, target, parents: Mapping) -> bool:
    """Whether `target` is an ancestor of `start` in the graph `parents` (node -> the nodes it reads)."""
    seen = set()
    stack = list(parents.get(start, ()))
    while stack:
        node = stack.pop()
        if node == target:
            return True
        if node in seen:
            continue
        seen.add(node)
        stack.extend(parents.get(node, ()))
    return False


def _tensor_parents(tensors: Iterable[TensorRef]) -> dict[int, tuple[int, ...]]:
    return {t.index: t.inputs for t in tensors}


def _why(site: SiteRef, fused: TensorRef | None, tensors: Sequence[TensorRef], holder: Mapping[int, str]) -> str:
    """The reason a site has no tensor, as precise as the names allow (`holder`: tensor index -> the site paired
    with it)."""
    if fused is not None:
        return (f"cannot map: the converter fused this op into {fused.producer} '{fused.name}', whose tensor holds "
                f"the fused result only")
    same = [t for t in tensors if t.name.split(";", 1)[0] in site.names
            or _COUNTER.sub("", t.name) in site.names]
    taken = [t for t in same if t.index in holder and t.shape == site.shape]
    if taken:
        return (f"cannot map: the one .tflite tensor of this name and shape, '{taken[0].name}' ({taken[0].producer}), "
                f"holds {holder[taken[0].index]}'s value (the converter folded this {site.op} into it)")
    if same:
        shapes = sorted({f"{list(t.shape)} {t.dtype}" for t in same})
        return (f"cannot map: the .tflite tensors named after this op have {', '.join(shapes[:3])}, not its "
                f"{list(site.shape)} {site.dtype}: they hold another op of the same name (jax names an operand's "
                "reshape or broadcast after its consumer) or a layout the converter made")
    if not any(site.names):
        return "cannot map: the op has no location name, so no .tflite tensor is named after it"
    return (f"cannot map: no .tflite tensor is named '{site.names[-1]}' (the converter folded the op into a constant "
            "or into its neighbours)")
