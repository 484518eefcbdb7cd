"""The command-line reference page, generated from the parsers `multiexport` itself runs
(`multiexport.cli.parser.build_parser`), so the page cannot drift from `--help`.

The docs build calls `render()` (docs/hooks.py) and serves the result as `cli.md`; nothing is committed, so a
change to an option needs no second edit here. `python docs/gen_cli.py` prints the page.
"""

from __future__ import annotations

import argparse
import os
import sys

# argparse wraps usage lines to the terminal's width: fix it, so the page is the same on every machine.
WIDTH = "100"

HEADER = """# Command line

Generated from the parsers `multiexport` runs (`multiexport.cli.parser.build_parser`) each time the site is built:
every subcommand, its option groups and every option with its help, as `multiexport COMMAND --help` prints them.
Exit codes are on [Verdicts and exit codes](concepts/verdicts.md).
"""


def _cell(text: str) -> str:
    """One Markdown table cell: no line breaks, pipes escaped, angle brackets kept as text."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _spelling(action: argparse.Action) -> str:
    """How an action is written on the command line: `--out DIR`, `-j N`, or a positional's name."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{s}`" for s in action.option_strings)
    if isinstance(action.metavar, tuple):
        metavar = " ".join(action.metavar)
    elif action.metavar:
        metavar = action.metavar
    elif action.choices:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = action.dest.upper()
    return ", ".join(f"`{s} {metavar}`" for s in action.option_strings)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each subcommand, in the order `--help` lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser twice
                    seen.add(id(sub))
                    out.append((name, sub, helps.get(name, "")))
    return out


def options_of(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional a parser takes, hidden ones excluded (the test checks the page
    names each of them)."""
    names = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        names.extend(action.option_strings or [action.metavar or action.dest])
    return names


def _section(title: str, parser: argparse.ArgumentParser, summary: str, level: int) -> list[str]:
    formatter = parser._get_formatter()
    lines = [f"{'#' * level} {title}", ""]
    if summary:
        lines += [summary[:1].upper() + summary[1:] + ".", ""] if not summary.endswith(".") else [summary, ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS
                   and not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))]
        if not actions:
            continue
        lines += [f"**{group.title[:1].upper() + group.title[1:]}**", ""]
        if group.description:
            lines += [" ".join(group.description.split()), ""]
        lines += ["| option | meaning |", "| --- | --- |"]
        for action in actions:
            lines.append(f"| {_spelling(action)} | {_cell(formatter._expand_help(action) if action.help else '')} |")
        lines.append("")
    if parser.epilog:
        lines += [" ".join(parser.epilog.split()), ""]
    for name, sub, helptext in _subcommands(parser):
        lines += _section(f"{title} {name}", sub, helptext, min(level + 1, 4))
    return lines


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(full command, parser) for multiexport and every subcommand under it, depth first."""
    from multiexport.cli.parser import build_parser

    out = []

    def walk(title: str, parser: argparse.ArgumentParser) -> None:
        out.append((title, parser))
        for name, sub, _ in _subcommands(parser):
            walk(f"{title} {name}", sub)

    walk("multiexport", build_parser())
    return out


def render() -> str:
    """The whole page, as Markdown."""
    from multiexport.cli.parser import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        lines = _section("multiexport", build_parser(), "", 2)
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return HEADER + "\n" + "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
