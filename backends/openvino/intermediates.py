"""OpenVINO's intermediates for `multiexport locate`: the shipped model (the ONNX file, or the IR of a reduced
precision) read by OpenVINO, every mapped tensor added as a model output (`Model.add_outputs`, by tensor name),
compiled for the CPU as the runner compiles it, run once.

The tensor of each StableHLO op comes from the site table the StableHLO->ONNX route writes into model.onnx:
OpenVINO's ONNX frontend keeps the file's metadata in the model's rt_info (`framework`), and `ov.save_model`
keeps it in the IR, so both shipped forms carry it. A tensor OpenVINO's frontend fused away or renamed has no
name to add and is reported unmapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from multiexport.sdk import SITE_TABLE_KEY, Intermediates, IntermediatesRequest, map_sites

from .runner import config, import_openvino


def site_table(model: Any) -> str | None:
    """The site table's text in an ov.Model's rt_info, or None."""
    try:
        return str(model.get_rt_info(["framework", SITE_TABLE_KEY]).astype(str))
    except Exception:  # no such key: OpenVINO raises a plain RuntimeError
        return None


def openvino_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Run the shipped model with every mapped tensor as an output; values keyed by the request's sites."""
    ov = import_openvino()
    path = request.manifest.path(Path(request.artifact_dir), "model")
    core = ov.Core()
    model = core.read_model(str(path))
    text = site_table(model)
    if text is None:
        route = request.manifest.format.get("onnx_route") or request.manifest.format.get("route") or "jax2onnx"
        why = (f"cannot map: this model was converted by the {route} route, whose nodes are not tied to StableHLO "
               "ops (re-export with --backend-option openvino.onnx_route=stablehlo to locate in OpenVINO)")
        return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    tensors, unmapped = map_sites(text, request.sites)
    feed = {leaf.param: np.asarray(request.feed[leaf.name]) for leaf in request.manifest.inputs
            if leaf.param is not None and leaf.name in request.feed}
    known: dict[str, Any] = {}
    names: dict[str, str] = {}
    n_outputs = len(model.outputs)
    existing = {n for port in model.outputs for n in port.get_names()}
    added: set[str] = set()
    for key, tensor in tensors.items():
        if tensor.name in feed:
            known[key] = feed[tensor.name]
            continue
        if tensor.name not in existing and tensor.name not in added:
            try:
                model.add_outputs(tensor.name)
            except RuntimeError:
                unmapped[key] = f"cannot map: OpenVINO's model has no tensor named {tensor.name} (fused or folded)"
                continue
            added.add(tensor.name)
        names[key] = tensor.name
    compiled = core.compile_model(model, "CPU", config(request.options.thread_count))
    results = compiled.create_infer_request().infer({k: v for k, v in feed.items()
                                                    if k in {n for i in model.inputs for n in i.get_names()}})
    by_name: dict[str, Any] = {}
    for port, value in results.items():
        for n in port.get_names():
            by_name[n] = np.asarray(value)
    values = dict(known)
    for key, name in names.items():
        if name in by_name:
            values[key] = by_name[name]
        else:
            unmapped[key] = f"cannot map: OpenVINO returned no tensor named {name}"
    outputs = {n: by_name[n] for port in list(model.outputs)[:n_outputs] for n in port.get_names() if n in by_name}
    how = (f"OpenVINO CPU on the shipped {path.name} with {len(added)} tensors added as model outputs "
           f"({len(known)} more read from its inputs)")
    return Intermediates(values=values, unmapped=unmapped, how=how, outputs=outputs)
