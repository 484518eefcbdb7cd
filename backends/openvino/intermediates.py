"""OpenVINO's intermediates for `multiexport locate`: the shipped model (the ONNX file, or the IR of a reduced
precision) read by OpenVINO, every mapped tensor added as a model output (`Model.add_outputs`, by tensor name),
compiled for the CPU as the runner compiles it, run once.

The tensor of each StableHLO op comes from the table the ONNX route wrote into model.onnx: the StableHLO route's
site table (op by op), or jax2onnx's equation table (equation by equation, paired with the module's ops by
`map_equations`; a tensor in another layout is transposed back). OpenVINO's ONNX frontend keeps the file's
metadata in the model's rt_info (`framework`), and `ov.save_model` keeps it in the IR, so both shipped forms
carry it. A tensor OpenVINO's frontend fused away or renamed has no name to add and is reported unmapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from multiexport.sdk import (
    EQUATION_TABLE_KEY,
    SITE_TABLE_KEY,
    Intermediates,
    IntermediatesRequest,
    equations_hint,
    feed_dims,
    map_equations,
    map_sites,
    misshapen,
)

from .runner import config, import_openvino


def site_table(model: Any, key: str = SITE_TABLE_KEY) -> str | None:
    """The text under `key` (the site table by default) in an ov.Model's rt_info, or None."""
    try:
        return str(model.get_rt_info(["framework", key]).astype(str))
    except Exception:  # no such key: OpenVINO raises a plain RuntimeError
        return None


def openvino_intermediates(request: IntermediatesRequest) -> Intermediates:
    """Run the shipped model with every mapped tensor as an output; values keyed by the request's sites."""
    ov = import_openvino()
    path = request.manifest.path(Path(request.artifact_dir), "model")
    core = ov.Core()
    model = core.read_model(str(path))
    text, equations = site_table(model), site_table(model, EQUATION_TABLE_KEY)
    layouts: dict[str, tuple[int, ...]] = {}
    notes: dict[str, str] = {}
    if text is not None:
        sites, unmapped = map_sites(text, request.sites)
        tensors = {k: t.name for k, t in sites.items()}
    elif equations is not None:
        found, unmapped = map_equations(equations, request.sites, [leaf.name for leaf in request.manifest.inputs],
                                        feed_dims(request))
        tensors = {k: t.name for k, t in found.items()}
        layouts = {k: t.to_jax for k, t in found.items() if t.to_jax is not None}
        notes = {k: t.note for k, t in found.items()}
    else:
        route = request.manifest.format.get("onnx_route") or request.manifest.format.get("route") or "jax2onnx"
        why = (f"cannot map: this model (route {route}) carries neither a site table nor a jax2onnx equation table "
               "(written by an older multiexport: re-export it, or --backend-option openvino.onnx_route=stablehlo)")
        return Intermediates(values={}, unmapped={s.key: why for s in request.sites}, how=why)
    feed = {leaf.param: np.asarray(request.feed[leaf.name]) for leaf in request.manifest.inputs
            if leaf.param is not None and leaf.name in request.feed}
    known: dict[str, Any] = {}
    names: dict[str, str] = {}
    n_outputs = len(model.outputs)
    existing = {n for port in model.outputs for n in port.get_names()}
    added: set[str] = set()
    for key, name in tensors.items():
        if name in feed:
            known[key] = in_layout(feed[name], layouts.get(key))
            continue
        if name not in existing and name not in added:
            try:
                model.add_outputs(name)
            except RuntimeError:
                unmapped[key] = f"cannot map: OpenVINO's model has no tensor named {name} (fused or folded)"
                continue
            added.add(name)
        names[key] = name
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
            values[key] = in_layout(by_name[name], layouts.get(key))
        else:
            unmapped[key] = f"cannot map: OpenVINO returned no tensor named {name}"
    outputs = {n: by_name[n] for port in list(model.outputs)[:n_outputs] for n in port.get_names() if n in by_name}
    how = (f"OpenVINO CPU on the shipped {path.name} with {len(added)} tensors added as model outputs "
           f"({len(known)} more read from its inputs)")
    if text is None and unmapped:  # mapped through jax2onnx's equation table
        how += equations_hint("openvino.onnx_route")
    wrong = misshapen(values, request.sites, notes)
    for key in wrong:
        values.pop(key)
    return Intermediates(values=values, unmapped={**unmapped, **wrong}, how=how, outputs=outputs, notes=notes)


def in_layout(value: Any, perm: tuple[int, ...] | None) -> Any:
    """A tensor's value in its site's layout (jax2onnx may hold it transposed: NCHW for NHWC)."""
    return np.transpose(np.asarray(value), perm) if perm is not None else value
