"""ONNX's intermediates for `multiexport locate`: the shipped model.onnx with every mapped tensor added as a graph
output (what Polygraphy's `--mark all` does), run once by ONNX Runtime.

Which tensor holds which StableHLO op's result comes from the site table the StableHLO route writes into the
model's metadata_props (`SITE_TABLE_KEY`). A graph written by jax2onnx has no such table: its nodes come from
jaxpr-level plugins, not from the module's ops, so no tensor is mapped there and locate says so. A site whose
tensor is a graph input or an initializer is read from the feed or the file; one whose node was removed as dead
code is unmapped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import SITE_TABLE_KEY, Intermediates, IntermediatesRequest, RunError, Site, map_sites

from .runner import session_options


def site_table(model: Any) -> str | None:
    """The site table's text in a loaded onnx.ModelProto, or None."""
    return next((p.value for p in model.metadata_props if p.key == SITE_TABLE_KEY), None)


def no_table_reason(route: str) -> str:
    return (f"cannot map: this model.onnx was written by the {route} route, whose nodes are not tied to StableHLO "
            "ops (re-export with --backend-option onnx.route=stablehlo to locate in ONNX)")


def marked_model(model: Any, request: IntermediatesRequest, route: str) -> tuple[Any, dict, dict, dict]:
    """(the model with mapped tensors added as outputs, key -> tensor name to fetch, key -> value known without
    running (an input or initializer), key -> why unmapped)."""
    from onnx import helper, numpy_helper

    text = site_table(model)
    if text is None:
        why = no_table_reason(route)
        return model, {}, {}, {s.key: why for s in request.sites}
    tensors, unmapped = map_sites(text, request.sites)
    produced = {o for node in model.graph.node for o in node.output}
    feed = feed_by_param(request)
    initializers = {t.name: t for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    fetch, known = {}, {}
    for key, tensor in tensors.items():
        if tensor.name in feed:
            known[key] = np.asarray(feed[tensor.name])
        elif tensor.name in initializers:
            known[key] = numpy_helper.to_array(initializers[tensor.name])
        elif tensor.name in produced:
            fetch[key] = tensor.name
        else:
            unmapped[key] = f"cannot map: tensor {tensor.name} is not in the shipped graph (removed as dead code)"
    for name in sorted(set(fetch.values()) - outputs):
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
    return model, fetch, known, unmapped


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
    model, fetch, known, unmapped = marked_model(model, request, route)
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
        values.update({key: by_name[name] for key, name in fetch.items()})
        outputs = {o.name: by_name[o.name] for o in model.graph.output[:n_outputs]}
    how = (f"ONNX Runtime on the shipped {path.name} with {len(set(fetch.values()))} tensors added as graph outputs "
           f"({len(known)} more read from its inputs and initializers)")
    return Intermediates(values=values, unmapped=unmapped, how=how, outputs=outputs)


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
