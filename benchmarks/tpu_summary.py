"""The one page benchmarks/tpu_check.py writes (OUT/summary.md) from its results.json."""

from __future__ import annotations

from typing import Any


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} us" if value < 1 else f"{value:.2f} ms"


def _err(row: dict[str, Any]) -> str:
    err = row.get("err")
    if not err:
        return "-"
    worst = max(err.values())
    exact = " (bit-exact)" if row.get("bit_exact") else ""
    return f"{worst:.1e}{exact}" if worst else f"0{exact or ' (equal)'}"


def summary_markdown(data: dict[str, Any]) -> str:
    env = data.get("environment", {})
    lines = ["# TPU check", "",
             f"- TPU: {data.get('tpu_device') or data.get('tpu_reason') or '-'}",
             f"- Machine: {env.get('tpu', '-')}; Python {env.get('python', '?')}, {env.get('cores', '?')} cores; "
             + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items()),
             f"- libtpu plugin: {env.get('libtpu') or 'not installed'}; TPU_* variables: "
             f"{', '.join(env.get('tpu_env', [])) or 'none'}",
             f"- {data.get('seconds', 0):.0f} s in all. Latency: p50 per call [95 % interval of the median], inputs "
             "on the device, each call synchronised; transfers (h2d, d2h) timed apart. Error: max|out - ref| / "
             "max|ref| against the row's reference.", "",
             "| model | runner | device | status | error | vs | p50 [95 % CI] | calls | h2d | d2h | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in data.get("rows", []):
        ci = row.get("ci95_ms")
        p50 = _ms(row.get("p50_ms")) + (f" [{_ms(ci[0])}, {_ms(ci[1])}]" if ci else "")
        note = row.get("reason", "")
        if note and note == data.get("tpu_reason"):
            note = "JAX sees no TPU (the TPU line above)"
        if row.get("compile_ms"):
            note = (note + "; " if note else "") + f"compile {row['compile_ms']:.0f} ms"
        lines.append(f"| {row['model']} | {row['runner']} | {row['device']} | {row['status']} | {_err(row)} | "
                     f"{row.get('vs', '-')} | {p50 if row.get('p50_ms') is not None else '-'} | "
                     f"{row.get('calls', '-')} | {_ms(row.get('h2d_ms'))} | {_ms(row.get('d2h_ms'))} | "
                     f"{note.replace('|', '/')} |")
    overhead = data.get("overhead") or []
    if overhead:
        lines += ["", "## Harness overhead on the TPU", "",
                  "multiexport's XlaRunner timed call against a bare `jax.block_until_ready(jax.jit(Exported.call)"
                  "(*args))` loop on the same executable, interleaved rounds:", "",
                  "| model | XlaRunner p50 | bare loop p50 | ratio |", "|---|---|---|---|"]
        for o in overhead:
            lines.append(f"| {o['model']} | {_ms(o['runner_p50_ms'])} | {_ms(o['bare_p50_ms'])} | {o['ratio']:.3f} |")
    table = data.get("precision") or []
    if table:
        lines += ["", "## Trained on TPU, shipped to CPU", "",
                  "Each CPU row against jax.jit on the TPU at the default matmul precision (bf16 passes) and at "
                  "\"highest\". *TPU arithmetic*: jax.jit on the CPU against the TPU default, what the TPU alone "
                  "moves; *converter*: the row against jax.jit on the CPU, what the export alone moves; *explained*: "
                  "the share of the row's difference from the TPU default that the TPU's arithmetic accounts for.", "",
                  "| model | leaf | CPU row | vs TPU default | vs TPU highest | TPU default vs highest | TPU "
                  "arithmetic | converter | explained |", "|---|---|---|---|---|---|---|---|---|"]
        for t in table:
            lines.append(f"| {t['model']} | {t['leaf']} | {t['row']} | {t['vs_tpu_default']:.1e} | "
                         f"{t['vs_tpu_highest']:.1e} | {t['tpu_default_vs_highest']:.1e} | {t['tpu_arithmetic']:.1e} | "
                         f"{t['converter']:.1e} | {t['explained']:.0%} |")
    compare = data.get("compare")
    if compare:
        rows = ", ".join(f"{k}: {v}" for k, v in (compare.get("rows") or {}).items()) or "no results.json"
        lines += ["", "## The default compare", "",
                  f"`{compare['command']}` (no option, no variable set by hand): exit {compare['exit']} in "
                  f"{compare['seconds']:.0f} s; JAX_PLATFORMS of its processes: {compare.get('jax_platforms') or '-'};"
                  f" rows: {rows}."]
    return "\n".join(lines) + "\n"
