"""ONNX's intermediates for `multiexport locate`: the shipped model.onnx with every mapped tensor added as a graph
output (what Polygraphy's `--mark all` does), run once by ONNX Runtime.

Which tensor holds which StableHLO op's result comes from a table in the model's metadata_props: the site table
the StableHLO route writes (`SITE_TABLE_KEY`, op by op), or on jax2onnx's route the equation table its
conversion records (`EQUATION_TABLE_KEY`, equation by equation: `equations.py`), paired with the module's ops by
`map_equations` (a tensor in another layout is transposed back). A site whose tensor is a graph input or an
initializer is read from the feed or the file; one whose node was removed as dead code is unmapped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import (
    EQUATION_TABLE_KEY,
    SITE_TABLE_KEY,
    Intermediates,
    IntermediatesRequest,
    RunError,
    Site,
    TensorSite,
    equations_hint,
    feed_dims,
    map_equations,
    map_sites,
    misshapen,
)

from .runner import session_options


def site_table(model: Any, key: str = SITE_TABLE_KEY) -> str | None:
    """The text under `key` (the site table by default) in a loaded onnx.ModelProto's metadata_props, or None."""
    return next((p.value for p in model.metadata_props if p.key == key), None)


def no_table_reason(route: str) -> str:
    return (f"cannot map: this model.onnx (route {route}) carries neither a site table nor a jax2onnx equation "
            "table (written by an older multiexport; re-export it, or --backend-option onnx.route=stablehlo)")


@dataclass(frozen=True)
class Mapped:
    """Where each mapped site's value is: `tensors` (key -> tensor), `layouts` (key -> the permutation taking
    the tensor to the site's layout, jax2onnx's route), `notes` (key -> what the converter made of it)."""

    tensors: dict[str, TensorSite]
    layouts: dict[str, tuple[int, ...]]
    notes: dict[str, str]
    unmapped: dict[str, str]


def mapped_sites(tables: dict[str, str | None], request: IntermediatesRequest, route: str) -> Mapped:
    """The sites' tensors from whichever table the graph carries (`tables`: key -> text or None)."""
    text = tables.get(SITE_TABLE_KEY)
    if text is not None:
        tensors, unmapped = map_sites(text, request.sites)
        return Mapped(tensors, {}, {}, unmapped)
    text = tables.get(EQUATION_TABLE_KEY)
    if text is None:
        why = no_table_reason(route)
        return Mapped({}, {}, {}, {s.key: why for s in request.sites})
    leaves = [leaf.name for leaf in request.manifest.inputs]
    found, unmapped = map_equations(text, request.sites, leaves, feed_dims(request))
    return Mapped({k: TensorSite(t.name) for k, t in found.items()},
                  {k: t.to_jax for k, t in found.items() if t.to_jax is not None},
                  {k: t.note for k, t in found.items()}, unmapped)


def in_layout(value: Any, perm: tuple[int, ...] | None) -> Any:
    """A tensor's value in its site's layout."""
    return np.transpose(np.asarray(value), perm) if perm is not None else value


def marked_model(model: Any, request: IntermediatesRequest, route: str) -> tuple[Any, dict, dict, Mapped]:
    """(the model with mapped tensors added as outputs, key -> tensor name to fetch, key -> value known without
    running (an input or initializer), the mapping (its `unmapped` completed))."""
    from onnx import helper, numpy_helper

    mapped = mapped_sites({k: site_table(model, k) for k in (SITE_TABLE_KEY, EQUATION_TABLE_KEY)}, request, route)
    tensors, unmapped = mapped.tensors, mapped.unmapped
    produced = {o for node in model.graph.node for o in node.output}
    feed = feed_by_param(request)
    initializers = {t.name: t for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    fetch, known = {}, {}
    for key, tensor in tensors.items():
        if tensor.name in feed:
            known[key] = in_layout(feed[tensor.name], mapped.layouts.get(key))
        elif tensor.name in initializers:
            known[key] = in_layout(numpy_helper.to_array(initializers[tensor.name]), mapped.layouts.get(key))
        elif tensor.name in produced:
            fetch[key] = tensor.name
        else:
            unmapped[key] = f"cannot map: tensor {tensor.name} is not in the shipped graph (removed as dead code)"
    for name in sorted(set(fetch.values()) - outputs):
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
    return model, fetch, known, mapped


def feed_by_param(request: IntermediatesRequest) -> dict[str, Any]:
    """The feed keyed by graph input name (the manifest's `param` of each leaf the graph takes)."""
    return {str(leaf.param): request.feed[leaf.name] for leaf in request.manifest.inputs
            if leaf.param is not None and leaf.name in request.feed}


def onnx_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Run the shipped model.onnx with every mapped tensor as an output; values keyed by the request's sites."""
    import onnx
    import onnxruntime as ort

    path = request.manifest.path(Path(request.artifact_dir), "model")
    route = str(request.manifest.format.get("route", "jax2onnx"))
    model = onnx.load(str(path), load_external_data=True)
    n_outputs = len(model.graph.output)
    model, fetch, known, mapped = marked_model(model, request, route)
    values: dict[str, Any] = dict(known)
    outputs: dict[str, Any] = {}
    if fetch:
        try:
            session = ort.InferenceSession(model.SerializeToString(), session_options(ort, request.options.thread_count),
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise RunError(f"Backend 'onnx' | ONNX Runtime cannot load the model with {len(fetch)} tensors added as "
                           f"outputs: {' '.join(str(exc).split())[:300]}", backend="onnx", category="load-failed") from exc
        graph_inputs = [i.name for i in session.get_inputs()]
        names = [o.name for o in session.get_outputs()]
        feed = feed_by_param(request)
        results = session.run(names, {n: np.asarray(feed[n]) for n in graph_inputs})
        by_name = dict(zip(names, results))
        values.update({key: in_layout(by_name[name], mapped.layouts.get(key)) for key, name in fetch.items()})
        outputs = {o.name: by_name[o.name] for o in model.graph.output[:n_outputs]}
    how = (f"ONNX Runtime on the shipped {path.name} with {len(set(fetch.values()))} tensors added as graph outputs "
           f"({len(known)} more read from its inputs and initializers)")
    if mapped.unmapped and route == "jax2onnx":
        how += equations_hint("onnx.route")
    wrong = misshapen(values, request.sites, mapped.notes)
    for key in wrong:
        values.pop(key)
    return Intermediates(values=values, unmapped={**mapped.unmapped, **wrong}, how=how, outputs=outputs,
                         notes=mapped.notes)


def reduced_onnx(request: IntermediatesRequest, site: Site, operands: Sequence[Site], out_dir: Path) -> str:
    """`op.onnx`: the shipped graph cut to the nodes computing `site`'s tensor from its operands' tensors (what
    Polygraphy's `debug reduce` would leave), and `op_inputs.json` naming each input's site."""
    import onnx
    from onnx.utils import Extractor

    path = request.manifest.path(Path(request.artifact_dir), "model")
    model = onnx.load(str(path), load_external_data=True)
    text = site_table(model)
    if text is None:
        return ""
    tensors, _ = map_sites(text, [site, *operands])
    if site.key not in tensors:
        return ""
    initializers = {t.name for t in model.graph.initializer}
    inputs = {tensors[o.key].name: o.key for o in operands
              if o.key in tensors and tensors[o.key].name not in initializers}
    leaves = [request.manifest.inputs[i] for i in range(len(request.manifest.inputs))]
    for key in site.operands:  # an input leaf the op reads directly ("arg<i>": the module's argument i)
        if key.startswith("arg") and int(key[3:]) < len(leaves) and leaves[int(key[3:])].param is not None:
            inputs[str(leaves[int(key[3:])].param)] = leaves[int(key[3:])].name
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        cut = Extractor(inferred).extract_model(sorted(inputs), [tensors[site.key].name])
    except Exception as exc:  # an input that does not separate the op from the rest: say so, write nothing
        return f"no op.onnx: the graph could not be cut at the op's inputs ({type(exc).__name__})"
    used = {i.name for i in cut.graph.input}
    onnx.save(cut, str(out_dir / "op.onnx"))
    (out_dir / "op_inputs.json").write_text(json.dumps({n: k for n, k in inputs.items() if n in used}, indent=1))
    return (f"op.onnx: the shipped graph cut to {len(cut.graph.node)} nodes computing {tensors[site.key].name} "
            f"(inputs named in op_inputs.json)")
