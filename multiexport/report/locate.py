"""The 'Where parity breaks' section of a compare's reports: what `compare --locate` found per failing backend,
read from OUT/locate/*/locate.json (plain JSON: no JAX, no backend), added after the rest."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

TITLE = "Where parity breaks"


def locate_files(out_dir: Path) -> list[Path]:
    return sorted(Path(out_dir).glob("locate/*/locate.json"))


def section_lines(found: list[dict[str, Any]]) -> list[str]:
    """One bullet per backend: its verdict, the op, its source line, the cone and the repro."""
    lines = []
    for data in found:
        for b in data.get("backends", []):
            lines.append(f"- **{b['backend']}**, trial '{data.get('trial')}': {b.get('verdict') or b.get('error')}")
            anchor = b.get("culprit") or b.get("first")
            if anchor:
                s, e = anchor["site"], anchor["error"]
                lines.append(f"  - `{s['key']} {s['op']}` {s['dtype']}{s['shape']} at `{s['location'] or 'unknown'}` "
                             f"({s['scope']}): max abs {e['max_abs']:.3g}, {e['relative']:.3g} of max|ref|")
                if anchor.get("replay"):
                    lines.append(f"  - {anchor['replay']['text']}")
            for f in b.get("cone", [])[:3]:
                s = f["site"]
                lines.append(f"  - then `{s['key']} {s['op']}` at `{s['location'] or 'unknown'}`")
            lines.append(f"  - {b.get('mapped', 0)} of {b.get('total', 0)} op results mapped: {b.get('how', '')}")
        if data.get("cross"):
            lines.append(f"- {data['cross']}")
    return lines


def with_locate_section(out_dir: Path, markdown: str, page: str) -> tuple[str, str]:
    """The reports with the section added when `compare --locate` wrote locate.json files; unchanged otherwise."""
    files = locate_files(out_dir)
    if not files:
        return markdown, page
    found = [json.loads(p.read_text()) for p in files]
    lines = section_lines(found)
    md = markdown.rstrip("\n") + f"\n\n## {TITLE}\n\n" + "\n".join(lines) + "\n"
    items = "".join(f"<li>{html.escape(line.strip().lstrip('- '))}</li>" for line in lines)
    part = f"<h2>{TITLE}</h2><ul>{items}</ul>"
    page = page.replace("</body>", part + "</body>", 1) if "</body>" in page else page + part
    return md, page
