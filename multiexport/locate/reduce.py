"""`locate --reduce`: the diverging op as a standalone repro, ready to attach to a bug report.

Written into `<out-dir>/reduced/<backend>-<key>/`: the op alone as a StableHLO module (`op.mlir`, text, and
`op.mlirbc`, the portable artifact every StableHLO consumer reads), its inputs as the artifact computed them
(`inputs.npz`, keyed `arg<i>` in the module's parameter order), what XLA computes from them (`expected.npz`) and
what the artifact computed (`got.npz`), the versions, and a README with the figures and the source line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import MultiexportError
from ..exporting.instrument import isolate_op, run_module
from ..files.npz import save_npz
from ..files.paths import safe_component
from ..versions import dist_version
from .reference import Reference
from .result import BackendLocation, Finding


def write_reduced(answer: BackendLocation, finding: Finding, reference: Reference, got: Mapping[str, Any], trial: Any,
                  backend: Any, request: Any, out_dir: Path) -> BackendLocation:
    """Write the repro of `finding` for `answer`'s backend; the answer with `reduced` set (or a note why not)."""
    site = finding.site
    where = out_dir / "reduced" / safe_component(f"{answer.backend}-{site.key}")
    try:
        isolated = isolate_op(reference.source, site.index)
    except ValueError as exc:
        return dataclasses.replace(answer, reduced=f"not reduced: {exc}")
    by_key = {s.key: s for s in reference.sites}
    inputs = {}
    for i, key in enumerate(isolated.operands):
        if key.startswith("arg"):
            value = np.asarray(trial.feed[reference.arg_leaves[int(key[3:])]])
        elif key in got and key in by_key:
            value = np.broadcast_to(np.asarray(got[key]), by_key[key].shape)
        else:
            value = reference.values[key]
        inputs[f"arg{i}"] = np.ascontiguousarray(value)
    where.mkdir(parents=True, exist_ok=True)
    expected = run_module(isolated, list(inputs.values()))
    save_npz(where / "inputs.npz", inputs)
    save_npz(where / "expected.npz", {f"result{i}": r for i, r in enumerate(expected)})
    save_npz(where / "got.npz", {f"result{site.result}": np.broadcast_to(np.asarray(got[site.key]), site.shape)})
    (where / "op.mlirbc").write_bytes(isolated.portable)
    if isolated.text is not None:
        (where / "op.mlir").write_text(isolated.text)
    versions = {d: dist_version(d) or "" for d in ("jax", "jaxlib", *getattr(backend, "distributions", ()))}
    (where / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    values = {key: np.broadcast_to(np.asarray(got[key]), by_key[key].shape)
              for key in site.operands if key in got and key in by_key}
    values.update({reference.arg_leaves[int(k[3:])]: np.asarray(trial.feed[reference.arg_leaves[int(k[3:])]])
                   for k in site.operands if k.startswith("arg")})
    save_npz(where / "values.npz", values)
    operands = [by_key[k] for k in site.operands if k in by_key]
    try:
        made = backend.reduced_artifact(request, site, operands, isolated.portable, where)
    except MultiexportError as exc:
        made = f"no {backend.name} artifact of the op alone: {exc}"
    (where / "README.md").write_text(_readme(answer, finding, isolated.operands, versions, made))
    return dataclasses.replace(answer, reduced=str(where))


def _readme(answer: BackendLocation, finding: Finding, operands: tuple[str, ...], versions: Mapping[str, str],
            made: str) -> str:
    s, e = finding.site, finding.error
    replay = finding.replay.text if finding.replay else "not replayed"
    lines = [
        f"# {answer.backend}: {s.op} ({s.key}) diverges from jax.jit",
        "",
        f"- source: {s.location or 'unknown'}" + (f" ({s.scope})" if s.scope else ""),
        f"- frames: {', '.join(s.frames) or 'none'}",
        f"- result: {s.dtype}{list(s.shape)}; max abs error {e.max_abs:.6g}, {e.relative:.6g} of max|ref| {e.max_ref:.6g}",
        f"- replay: {replay}",
        f"- artifact: {answer.artifact} ({answer.how})",
        f"- versions: {', '.join(f'{k} {v}' for k, v in versions.items() if v)}",
        "",
        "Files: `op.mlir` / `op.mlirbc` hold the op alone (StableHLO; `op.mlirbc` is a portable artifact), its",
        f"parameters `{', '.join(operands) or 'none'}` of the original module are `arg0..` in `inputs.npz` (the",
        "artifact's own values), `expected.npz` is what XLA computes from them and `got.npz` what the artifact did;",
        "`values.npz` holds the artifact's value of each input op by its key, and each input leaf by its name.",
        "",
        f"The {answer.backend} artifact of the op alone: {made or 'none made for this format'}.",
        "",
    ]
    return "\n".join(lines)
