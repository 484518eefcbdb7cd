"""Text from results is user input (target, leaf and reason strings): escaped for every medium it goes to.

Markdown goes to GitHub step summaries, so raw HTML, link syntax, table pipes and newlines (which would
start headings) are neutralised; HTML is entity-escaped; terminal text is printed by the CLI without markup.
"""

from __future__ import annotations

import html
import math
import re

from ..files.text import visible

_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])")
# `_` starts emphasis only at a word boundary (CommonMark): `mlp_dynamic` stays readable, `_x_` is escaped.
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What GitHub turns into a link by itself (extended autolinks): a scheme's "://" and "www.". A backslash
# before the ':' / '.' (a CommonMark escape, rendered as the character) breaks the match (checked with
# cmark-gfm, GitHub's renderer). An e-mail address stays a mailto link: no escape breaks that match.
_MD_AUTOLINK = re.compile(r"(?i)(?<=https)(:)(?=//)|(?<=http)(:)(?=//)|(?<=ftp)(:)(?=//)|(?<=www)(\.)")


def md(value: object) -> str:
    """`value` as literal Markdown text: one line, no HTML, no links (a bare URL included), no emphasis, no
    table breaks, no terminal or bidirectional controls."""
    text = " ".join(visible(value).split())
    text = html.escape(text, quote=False)
    text = _MD_UNDERSCORE.sub(r"\\_", _MD_SPECIAL.sub(r"\\\1", text))
    text = _MD_AUTOLINK.sub(lambda m: "\\" + m.group(), text)
    return "\\" + text if text.startswith(("#", ">")) else text


def md_code(value: object) -> str:
    """`value` as one Markdown code span (a command line): literal inside, a fence longer than any backtick run in it."""
    text = " ".join(visible(value).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"{fence}{text}{fence}"


def esc(value: object) -> str:
    """`value` as HTML text."""
    return html.escape(visible(value), quote=True)


def one_line(value: object, limit: int = 600) -> str:
    text = " ".join(visible(value).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def sci(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.2e}"


def si(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def human_bytes(n) -> str:
    if n is None:
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def mib(n) -> str:
    return "-" if n is None else f"{float(n) / 2**20:.1f} MiB"
