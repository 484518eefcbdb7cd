"""What the commands print. All user and runtime text goes through rich as `Text`, never as markup:
a leaf named `[/]` or a reason holding `[gpu]` prints as itself."""

from __future__ import annotations

import sys

from rich.text import Text

from ..files.text import visible
from ..leaves.weights import AUTO_MIN_BYTES
from ..report.load import SUMMARY_HEADER, multistream_verdict, summary_rows as load_summary_rows
from ..report.recommend import recommend
from ..report.summary import COLUMNS, capped_note, summary_rows
from ..report.tables import NATIVE_HEADER, binding_table, native_lines, native_rows, shape_text
from ..report.text import human_bytes


def console():
    from rich.console import Console

    # Off a terminal rich assumes 80 columns and would wrap leaf names; logs and pipes get room.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False, markup=False)


def err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False)


def plain(text: object, style: str | None = None) -> Text:
    """`text` as rich Text, shown as written: no markup, and every control or bidirectional character escaped
    (a leaf named with a terminal escape cannot colour, clear or retitle the terminal)."""
    return Text(visible(text), style=style or "")


def _table(title: str, columns):
    from rich.table import Table

    table = Table(title=plain(title))
    for col in columns:
        table.add_column(plain(col), no_wrap=True)
    return table


def print_signature(data: dict, keep_unused: bool) -> None:
    c = console()
    table = _table(f"inputs of '{data['name']}'" + (" (--keep-unused)" if keep_unused else ""),
                   ("leaf", "shape", "dtype", "used", "xla param", "alias"))
    for row in data["inputs"]:
        used = plain("yes", "green") if row["used"] else plain("no", "red")
        param = "-" if row["xla_param"] is None else str(row["xla_param"])
        table.add_row(plain(row["name"]), plain(shape_text(row["shape"])), plain(row["dtype"]), used, plain(param),
                      plain(row["alias"]))
    c.print(table)
    table = _table("outputs", ("leaf", "shape", "dtype", "xla result", "alias"))
    for row in data["outputs"]:
        table.add_row(*(plain(v) for v in (row["name"], shape_text(row["shape"]), row["dtype"], row["xla_result"],
                                           row["alias"])))
    c.print(table)
    dropped = [row["name"] for row in data["inputs"] if not row["used"]]
    c.print(plain(f"XLA module parameters: {len(data['inputs']) - len(dropped)} of {len(data['inputs'])} input leaves, "
                  "in the order above."))
    if dropped:
        c.print(plain(f"Pruned (the function never reads them): {', '.join(dropped)}. Pass --keep-unused to make every "
                      "leaf a parameter."))
    if data["symbolic_dims"]:
        c.print(plain(f"Symbolic dimensions: {', '.join(data['symbolic_dims'])}"))
    w = data["weights"]
    c.print(plain(f"Weights: {'baked in (closed over)' if w['mode'] == 'baked' else 'input leaves'} (constants "
                  f"{human_bytes(w['baked_bytes'])} in {w['baked_arrays']} arrays; inputs {human_bytes(w['input_bytes'])})"))
    if w["mode"] == "baked":

        where = ("out of the module (XLA/IREE: weights.safetensors, SavedModel: variables/, ONNX: model.onnx.data)"
                 if w["baked_bytes"] >= AUTO_MIN_BYTES else "as constants in the module")
        c.print(plain(f"Export stores them {where} by default; --external-weights always|never chooses."))
    producer = data.get("producer", {})
    c.print(plain("Producer: " + ", ".join(f"{k} {v}" for k, v in producer.items())))
    for warning in data["warnings"]:
        c.print(Text.assemble(("note: ", "yellow"), visible(warning)))


def print_export(artifact) -> None:
    m = artifact.manifest
    c = console()
    c.print(Text.assemble((visible(m.backend), "bold"), visible(f" artifact for '{m.target}' written to {artifact.directory}")))
    for role, name in m.files.items():
        size = (artifact.directory / name).stat().st_size
        c.print(plain(f"  {name:<28} {human_bytes(size):>10}  {role}"))
    dropped = [leaf.name for leaf in m.unused_inputs]
    c.print(plain(f"  parameters: {len(m.used_inputs)} of {len(m.inputs)} input leaves"
                  + (f"; dropped (not read): {', '.join(dropped)}" if dropped else "")))
    produced = ", ".join(f"{k} {v}" for k, v in m.versions.items() if k not in ("python", "numpy"))
    c.print(plain(f"  produced by: {produced}"))
    if m.requires.get("note"):
        c.print(plain(f"  a consumer needs: {m.requires['note']}"))
    if m.precision is not None:
        p = m.precision
        calibrated = (f"; calibrated on {p.calibration.samples} {'synthetic ' if p.calibration.synthetic else ''}samples"
                      if p.calibration else "")
        reduced = ", ".join(f"{k} x{v}" for k, v in p.quantized_ops.items())
        c.print(plain(f"  precision: {p.precision} by {p.method}{calibrated}; reduced: {reduced}"))
    for warning in m.warnings:
        c.print(Text.assemble(("  note: ", "yellow"), visible(warning)))


def print_outputs(manifest, outputs) -> None:
    import numpy as np

    table = _table(f"{manifest.backend} outputs of '{manifest.target}'", ("output", "shape", "dtype", "values"))
    for name, value in outputs.items():
        flat = np.asarray(value).reshape(-1)
        head = ", ".join(f"{v:.6g}" if np.issubdtype(flat.dtype, np.floating) else str(v) for v in flat[:6].tolist())
        table.add_row(plain(name), plain(str(tuple(value.shape))), plain(value.dtype.name),
                      plain(f"[{head}{', ...' if flat.size > 6 else ''}]"))
    console().print(table)


def print_results(results) -> None:
    c = console()
    rows = summary_rows(results)
    table = _table(f"'{results.target}': parity against jax.jit over {len(results.trials)} trials, latency per call",
                   [col for col in COLUMNS if col != "tolerance"])
    for row in rows:
        style = "green" if row["status"] == "ok" else ("dim" if row["backend"] == "jax" else "red")
        name = plain(row["backend"], "bold" if row.get("fastest") else None)
        table.add_row(name, plain(row["status"], style), *[plain(row[col]) for col in COLUMNS[2:] if col != "tolerance"])
    c.print(table)
    if capped_note(results):
        c.print(plain(capped_note(results), "dim"))
    header, brows = binding_table(results)
    if len(header) > 3:
        btable = _table("which input leaves each format takes (parameter, or dropped)", header)
        for brow in brows:
            btable.add_row(*[plain(cell, "dim" if cell == "dropped" else None) for cell in brow])
        c.print(btable)
    nrows = native_rows(results)
    if nrows:
        ntable = _table("native consumers (no Python): parity against jax.jit, latency measured inside the program",
                        NATIVE_HEADER)
        for nrow in nrows:
            ntable.add_row(*[plain(cell, ("green" if cell == "ok" else "red") if i == 2 else None)
                             for i, cell in enumerate(nrow)])
        c.print(ntable)
        for line in native_lines(results):
            c.print(plain(line, "dim"))
    for name, r in results.backends.items():
        if r.status.value != "ok":
            c.print(Text.assemble((visible(name), "red"), visible(f": {r.status.value}: {r.reason}")))
        elif r.parity is not None and r.parity.weak:
            weak = [n for n in r.parity.notes if "weak check" in n]
            c.print(Text.assemble((visible(name), "yellow"), visible(f": ok, but a weak check: {' '.join(weak)}")))
        if r.error_vs_float64:
            errs = ", ".join(f"{k} {v:.2e}" for k, v in r.error_vs_float64.items())
            c.print(plain(f"{name} error vs float64 truth (max abs / max |truth|): {errs}"))
    if results.reference.jax_error_vs_float64:
        errs = ", ".join(f"{k} {v:.2e}" for k, v in results.reference.jax_error_vs_float64.items())
        c.print(plain(f"jax.jit error vs float64 truth: {errs}"))
    widened = sorted({n for r in results.backends.values() if r.parity is not None for n in r.parity.notes
                      if "instead of the" in n and "rounding alone" in n})
    for note in widened:  # once per leaf, not once per backend
        c.print(plain(note, "dim"))
    if results.reference.no_float64_truth:
        c.print(plain(f"no float64 truth for {', '.join(results.reference.no_float64_truth)}: the function casts back "
                      "to a narrower float even with x64 on (e.g. a Keras dtype policy), so no error vs float64 is "
                      "reported for them"))
    rec = recommend(results)
    c.print(Text.assemble(("verdict: ", "bold"), visible(rec.verdict)))
    if rec.precision:
        c.print(Text.assemble(("precision: ", "bold"), visible(rec.precision.removeprefix("Precision: "))))
    plan = results.device or {}
    if plan.get("requested", "cpu") != "cpu":
        ran = [n for n, r in results.backends.items() if r.status.value not in ("no-gpu", "unavailable")]
        c.print(plain(f"device: requested {plan['requested']}, chose {plan['chosen']}; ran there: "
                      f"{', '.join(ran) or 'none'}" + (f" ({plan['note']})" if plan.get("note") else "")))
        for name, found in plan.get("found", {}).items():
            c.print(plain(f"  {name}: {'GPU' if found['gpu'] else 'no GPU'}: {found['reason']}"))
    out = results.out_dir
    c.print(plain(f"results: {out}/results.json; reports: {out}/report.md, {out}/report.html"))


def print_load_summary(loaded) -> None:
    """The terminal's load table after `compare --load` (results.load.LoadResults): per format its max req/s under
    the p99 bound, offline peak and MultiStream p99 with the rounds' ranges, and the throughput configuration
    (which names the driver), then the server, MultiStream and single-stream verdicts."""
    c = console()
    bound = loaded.config.get("p99_ms")
    table = _table(f"under load (p99 bound {bound} ms, {loaded.config.get('rounds')} rounds)", SUMMARY_HEADER)
    for row in load_summary_rows(loaded):
        table.add_row(plain(row[0], "bold"), plain(row[1], "green" if row[1] == "ok" else "red"),
                      *[plain(cell) for cell in row[2:]])
    c.print(table)
    for line in (loaded.server_verdict, multistream_verdict(loaded), loaded.single_stream_verdict):
        if line:
            c.print(Text.assemble(("load: ", "bold"), visible(line)))
