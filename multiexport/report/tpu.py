"""The TPU sections of a report (`compare --device tpu`): rows from results.json's `device.tpu_rows` alone.

The TPU rows (jax.jit at the default matmul precision, the TPU reference; jax.jit at "highest"; the XLA artifact;
its native consumer on libtpu) with status, p50 and its 95 % interval, the error against the TPU reference and the
bound the TPU's own bf16 passes give; then "trained on TPU, shipped to CPU": each CPU row against the TPU
reference at the default precision and at "highest", and the share of the difference the TPU's arithmetic
explains. Plain strings: the medium escapes them.
"""

from __future__ import annotations

from typing import Any

from ..results import Results

TPU_HEADER = ["runner", "device", "status", "error / max|ref|", "bound", "p50 ms", "95% interval ms", "calls",
              "h2d ms", "d2h ms", "reason"]
SHIPPED_HEADER = ["leaf", "CPU row", "vs TPU default", "vs TPU highest", "TPU default vs highest", "TPU arithmetic",
                  "converter", "explained"]
SHIPPED_NOTE = ("Each CPU row against jax.jit on the TPU at the default matmul precision (bf16 passes) and at "
                "\"highest\", as error / max|ref|. TPU arithmetic: jax.jit on the CPU against the TPU default, what "
                "the TPU alone moves; converter: the row against jax.jit on the CPU, what the export alone moves; "
                "explained: the share of the row's difference from the TPU default that the TPU's arithmetic accounts "
                "for. A model checked on the TPU and shipped to a CPU format moves by about the TPU arithmetic; a "
                "converter figure above it is the converter's own.")
_DEFAULT_PARITY = 1e-5  # comparison.tpu_stage.TPU_PARITY, for a results.json written before it was recorded


def tpu_section(results: Results) -> dict[str, Any]:
    """results.json's `device.tpu_rows` (empty when the compare added no TPU rows)."""
    found = (results.device or {}).get("tpu_rows") if isinstance(results.device, dict) else None
    return found if isinstance(found, dict) else {}


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.4g}"


def _error(row: dict[str, Any]) -> tuple[str, str | None]:
    """The row's worst leaf error (and that leaf), as text."""
    err = row.get("err") or {}
    if not err:
        return "-", None
    leaf, worst = max(err.items(), key=lambda item: float(item[1]))
    if float(worst) == 0.0:
        return ("0 (bit-exact)" if row.get("bit_exact") else "0"), leaf
    return f"{float(worst):.2g} ({leaf})" if len(err) > 1 else f"{float(worst):.2g}", leaf


def tpu_table(results: Results) -> list[list[str]]:
    """One line per TPU row. The bound: what an xla or native row may differ from the TPU reference (the larger of
    the TPU parity and what the TPU's own bf16 passes move that leaf)."""
    section = tpu_section(results)
    bounds, parity = section.get("bf16_bound") or {}, float(section.get("tpu_parity", _DEFAULT_PARITY))
    out = []
    for row in section.get("rows") or []:
        error, leaf = _error(row)
        judged = row.get("runner") in ("xla", "xla native") and leaf is not None
        bound = f"{max(parity, float(bounds.get(leaf, 0.0))):.2g}" if judged else "-"
        ci = row.get("ci95_ms")
        interval = f"[{float(ci[0]):.4g}, {float(ci[1]):.4g}]" if isinstance(ci, list) and len(ci) == 2 else "-"
        reason = str(row.get("reason") or "")
        if row.get("runner") == "jax.jit":
            reason = reason or "the TPU reference"
        out.append([str(row.get("runner", "?")), str(row.get("device", "tpu")), str(row.get("status", "?")), error,
                    bound, _ms(row.get("p50_ms")), interval, str(row.get("calls", "-")), _ms(row.get("h2d_ms")),
                    _ms(row.get("d2h_ms")), reason])
    return out


def tpu_lines(results: Results) -> list[str]:
    """Where the TPU rows ran, why there are none, the harness overhead and the TPU's arithmetic, one per line."""
    section = tpu_section(results)
    lines = []
    if section.get("rehearsal"):
        lines.append("Rehearsal: these TPU rows ran on the CPU (MULTIEXPORT_TPU_REHEARSAL=cpu), not on a TPU")
    if section.get("device"):
        lines.append(f"TPU worker's device: {section['device']}")
    if section.get("machine"):
        lines.append(f"Machine: {section['machine']}")
    if section.get("reason"):
        lines.append(f"No TPU rows ran: {section['reason']}")
    for o in section.get("overhead") or []:
        lines.append(f"Harness: multiexport's XLA runner {_ms(o.get('runner_p50_ms'))} ms p50 against a bare jitted "
                     f"loop {_ms(o.get('bare_p50_ms'))} ms on the same executable: ratio {float(o.get('ratio', 0)):.3f}")
    for leaf, figures in (section.get("arithmetic") or {}).items():
        lines.append(f"The TPU's arithmetic on '{leaf}': jax.jit on the CPU against jax.jit on the TPU "
                     f"{float(figures['vs_tpu_default']):.2g} at the default matmul precision, "
                     f"{float(figures['vs_tpu_highest']):.2g} at highest (error / max|ref|)")
    return lines


def shipped_header(results: Results) -> list[str]:
    with64 = any("vs_float64" in t for t in tpu_section(results).get("shipped") or [])
    return SHIPPED_HEADER + (["vs float64"] if with64 else [])


def shipped_table(results: Results) -> list[list[str]]:
    """Trained on TPU, shipped to CPU: one line per CPU row and output leaf."""
    rows = tpu_section(results).get("shipped") or []
    with64 = any("vs_float64" in t for t in rows)
    out = []
    for t in rows:
        line = [str(t["leaf"]), str(t["row"])] + [f"{float(t[k]):.1e}" for k in (
            "vs_tpu_default", "vs_tpu_highest", "tpu_default_vs_highest", "tpu_arithmetic", "converter")]
        line.append(f"{float(t['explained']):.0%}")
        if with64:
            line.append(f"{float(t['vs_float64']):.1e}" if "vs_float64" in t else "-")
        out.append(line)
    return out
