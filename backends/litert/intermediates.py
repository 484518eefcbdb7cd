"""`multiexport locate` on a LiteRT artifact: the shipped model.tflite run with every tensor kept, read by name.

The interpreter is opened on the artifact's own file with `experimental_preserve_all_tensors=True` (LiteRT's
debugging mode: no tensor's memory is reused) and the same op resolver as the runner (XNNPACK by default),
which then delegates op by op so that every tensor is materialized. One trial's feed goes in through the
serving_default signature, and every tensor an op of the main subgraph produces is read back (a quantized
one dequantized with its scale and zero point). `tensor_names.pair` pairs them with the reference's sites
by the names the converter wrote (the ops' MLIR locations); what it cannot pair is said, not guessed.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

from multiexport.sdk import ArtifactError, Intermediates, IntermediatesRequest, RunError

from .dependencies import contradictions
from .runner import signature_of
from .tensor_names import SiteRef, TensorRef, pair, site_names

_QUANTIZED = ("int8", "uint8", "int16")


def litert_intermediates(request: IntermediatesRequest) -> Intermediates:
    """The shipped .tflite's value for every site its tensor names map (see the module docstring)."""
    manifest, directory = request.manifest, request.artifact_dir
    model = manifest.path(directory, "model")
    interpreter = _open(str(model), request.options.thread_count)
    sig = signature_of(interpreter)
    if sig is None:
        raise ArtifactError(f"Artifact '{directory}' | {manifest.files['model']} has no serving_default signature")
    _feed(interpreter, sig, manifest, request.feed, directory)
    tensors, values = _read_tensors(interpreter)
    sites = [SiteRef(key=s.key, names=site_names(s.scope, s.name), op=s.op, shape=tuple(s.shape),
                     dtype=s.dtype, parents=tuple(o for o in s.operands if o.startswith(("op", "arg"))))
             for s in request.sites]
    found = pair(sites, tensors)
    # the reference's argument i is input leaf i (every leaf kept); the .tflite's input tensors by signature alias
    args = {leaf.param: f"arg{i}" for i, leaf in enumerate(manifest.inputs) if leaf.param is not None}
    sources = {index: args[alias] for alias, index in sig["inputs"].items() if alias in args}
    settled = by_ancestors(found.pairs, found.unmapped, sites, tensors, sources)
    candidate = {**found.pairs, **settled}
    dropped = contradictions(candidate, sites, tensors, sources)
    pairs = {key: index for key, index in candidate.items() if key not in dropped}
    outputs = {leaf.name: np.array(interpreter.get_tensor(sig["outputs"][str(leaf.param)]))
               for leaf in manifest.outputs}
    import ai_edge_litert

    how = (f"ai_edge_litert {ai_edge_litert.__version__} Interpreter on the shipped {manifest.files['model']} with "
           f"experimental_preserve_all_tensors (XNNPACK delegating op by op); {len(pairs)} of "
           f"{len(request.sites)} ops paired with a tensor by the name the converter gave it (the op's location) and "
           "the same inputs and paired ancestors")
    ops = {s.key: s.op for s in request.sites}
    by_index = {t.index: t for t in tensors}
    notes = {key: (f"the .tflite computes this in {by_index[pairs[key]].producer} '{by_index[pairs[key]].name}', "
                   f"fused with {', '.join(f'{ops[k]} ({k})' for k in parts)}")
             for key, parts in found.fused.items() if key in pairs}
    unmapped = {k: why for k, why in found.unmapped.items() if k not in settled}
    return Intermediates(values={key: values[index] for key, index in pairs.items()},
                         unmapped={**unmapped, **dropped}, how=how, outputs=outputs, notes=notes)


SHARED = "share the name"  # tensor_names' reason for a name held by several ops and tensors


def _nearest(starts: Any, label: Any, parents: Any) -> frozenset[str]:
    """The labels of the nearest labelled nodes above `starts` (`label(node)`: a label, or None to walk on up)."""
    out, seen, todo = set(), set(), list(starts)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        found = label(node)
        if found is not None:
            out.add(found)
        else:
            todo.extend(parents(node))
    return frozenset(out)


def _named(tensor_name: str, names: tuple[str, ...]) -> bool:
    """Whether a tensor's name stands for one of `names` as the pairing reads it: its fused root, as is, or (when
    not fused) without the converter's counter (`max1`)."""
    root = tensor_name.split(";", 1)[0]
    return root in names or (";" not in tensor_name and root.rstrip("0123456789") in names)


def by_ancestors(pairs: Mapping[str, int], unmapped: Mapping[str, str], sites: list[SiteRef],
                 tensors: list[TensorRef], sources: Mapping[int, str]) -> dict[str, int]:
    """Pairs for the ops whose name, shape and dtype several ops and tensors share (a relu6 inlined from
    `jit(relu6)` is `max` in every block): an op and a tensor of one such group pair when their nearest paired
    ancestors (the reference's arguments counted as paired) are the same sites, and no other op or tensor of the
    group has those. A tensor computed from the same paired values as exactly one of the ops is that op's value;
    parallel ops with the same ancestors, or a set no tensor shares, stay unmapped. The pairs then go through the
    dependency check with the rest."""
    holder = {index: key for key, index in pairs.items()}
    by_key = {s.key: s for s in sites}
    by_index = {t.index: t for t in tensors}

    site_label = {key: key for key in pairs}
    tensor_label = {**{i: key for i, key in holder.items()}, **sources}

    def site_nearest(key: str) -> frozenset[str]:
        return _nearest(by_key[key].parents, lambda k: k if k.startswith("arg") else site_label.get(k),
                        lambda k: by_key[k].parents if k in by_key else ())

    def tensor_nearest(index: int) -> frozenset[str]:
        return _nearest(by_index[index].inputs, tensor_label.get,
                        lambda i: by_index[i].inputs if i in by_index else ())

    groups: dict[tuple, tuple[list[str], list[int]]] = {}
    for key, why in unmapped.items():
        if SHARED in why:
            s = by_key[key]
            groups.setdefault((s.names, s.shape, s.dtype), ([], []))[0].append(key)
    free = [t for t in tensors if t.index not in holder]
    for (names, shape, dtype), (_, found) in groups.items():
        found.extend(t.index for t in free if t.shape == shape and t.dtype == dtype and _named(t.name, names))
    settled: dict[str, int] = {}
    for keys, indices in groups.values():
        ops: dict[frozenset[str], list[str]] = {}
        for key in keys:
            ops.setdefault(site_nearest(key), []).append(key)
        held: dict[frozenset[str], list[int]] = {}
        for index in indices:
            held.setdefault(tensor_nearest(index), []).append(index)
        for ancestors, at in ops.items():
            if ancestors and len(at) == 1 and len(held.get(ancestors, ())) == 1:
                settled[at[0]] = held[ancestors][0]
    return settled


def _open(path: str, threads: int) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    with warnings.catch_warnings():  # "intended for debugging purposes only": that is this use
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors.*")
        try:
            return Interpreter(model_path=path, num_threads=threads, experimental_preserve_all_tensors=True)
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(f"Artifact '{path}' | LiteRT cannot load it: {' '.join(str(exc).split())[:600]}") \
                from exc


def _feed(interpreter: Any, sig: dict[str, dict[str, int]], manifest: Any, feed: Any, directory: Any) -> None:
    """Resize, allocate, set every signature input from the feed, invoke (as the runner does, by index)."""
    bound = [(leaf, sig["inputs"][leaf.param]) for leaf in manifest.inputs if leaf.param is not None]
    try:
        for leaf, index in bound:
            shape = list(np.shape(feed[leaf.name]))
            if list(interpreter._get_tensor_details(index, 0)["shape"]) != shape:
                interpreter.resize_tensor_input(index, shape, strict=True)
        interpreter.allocate_tensors()
        for leaf, index in bound:
            interpreter.set_tensor(index, np.require(feed[leaf.name], requirements="C"))
        interpreter.invoke()
    except (RuntimeError, ValueError) as exc:
        raise RunError(f"Artifact '{directory}' | LiteRT failed running with every tensor kept: "
                       f"{' '.join(str(exc).split())[:600]}", backend="litert") from exc


def _read_tensors(interpreter: Any) -> tuple[list[TensorRef], dict[int, np.ndarray]]:
    """Every tensor an op of the main subgraph produces (DELEGATE nodes aside) that this run materialized, with its
    value. In this mode XNNPACK delegates op by op (measured: the example CNN's 3 partitions become 8, one per op),
    so each delegated op's output is its partition's output; should a partition hold several ops, the tensors
    inside it are never written, and only the partitions' outputs are read."""
    ops = interpreter._get_ops_details()
    kept = _materialized(ops)
    refs: list[TensorRef] = []
    values: dict[int, np.ndarray] = {}
    for order, op in enumerate(ops):
        if op["op_name"] == "DELEGATE":
            continue
        inputs = tuple(int(i) for i in op["inputs"] if i >= 0)
        for index in (int(i) for i in op["outputs"]):
            if index in values or (kept is not None and index not in kept):
                continue
            details = interpreter._get_tensor_details(index, 0)
            try:
                value = np.array(interpreter.get_tensor(index))
            except ValueError:  # a tensor without data (none was kept for it)
                continue
            value = _dequantized(value, details)
            refs.append(TensorRef(index=index, name=str(details["name"]), shape=tuple(int(d) for d in value.shape),
                                  dtype=value.dtype.name, producer=str(op["op_name"]), order=order, inputs=inputs))
            values[index] = value
    return refs, values


def _materialized(ops: list[dict[str, Any]]) -> set[int] | None:
    """None when every DELEGATE node runs one op (every op's output is then written), else the tensors known to be
    written: a partition's outputs, and its inputs that an op outside it made (a partition of several ops writes no
    tensor inside it)."""
    producer = {int(o): i for i, op in enumerate(ops) if op["op_name"] != "DELEGATE" for o in op["outputs"]}
    delegates = [op for op in ops if op["op_name"] == "DELEGATE"]
    single = True
    for node in delegates:
        makers = {producer.get(int(o)) for o in node["outputs"]}
        maker = next(iter(makers)) if len(makers) == 1 else None
        if maker is None or not {int(i) for i in node["inputs"] if i >= 0} <= {int(i) for i in ops[maker]["inputs"]}:
            single = False
    if single:
        return None
    # partitions' outputs, and what TFLite's own kernels wrote for a partition to read
    return {int(t) for node in delegates for t in (*node["outputs"], *node["inputs"]) if int(t) in producer}


def _dequantized(value: np.ndarray, details: dict[str, Any]) -> np.ndarray:
    """A per-tensor quantized int8/uint8/int16 value as the float32 it stands for; any other value as it is."""
    params = details.get("quantization_parameters") or {}
    scales = np.asarray(params.get("scales", ()), dtype=np.float32)
    zeros = np.asarray(params.get("zero_points", ()), dtype=np.float32)
    if value.dtype.name not in _QUANTIZED or scales.size != 1:
        return value
    zero = zeros.reshape(-1)[0] if zeros.size else np.float32(0)
    return (value.astype(np.float32) - zero) * scales.reshape(-1)[0]
