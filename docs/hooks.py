"""MkDocs hooks for the docs site (mkdocs.yml `hooks:`).

- `cli.md` is generated from the parsers at build time (docs/gen_cli.py), never committed: the CLI changes
  with the code, and a committed copy would need a second edit (and a test forcing it) on every option.
- Pages that live beside what they describe are served from where they are, not copied: the benchmark pages
  (`benchmarks/*.md`, each beside the script that made its figures) and the native section's specification
  (`multiexport/native/csrc/README.md`, beside the C sources, as `reference/native-section.md`).
- Links are written as GitHub resolves them (from the page's place in the repository: `../benchmarks/native.md`
  in a docs page); each one that lands on a page of the site is rewritten to that page's place in the site.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parent.parent
# site path -> repository file, for the pages served from outside docs/.
MOUNTED = {
    "reference/native-section.md": REPO / "multiexport" / "native" / "csrc" / "README.md",
    **{f"benchmarks/{p.name}": p for p in sorted((REPO / "benchmarks").glob("*.md"))},
}
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def _gen_cli():
    spec = importlib.util.spec_from_file_location("multiexport_docs_gen_cli", Path(__file__).with_name("gen_cli.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Repository file -> its path in the site, for every file of the site that has one (set by on_files).
SITE_PATHS: dict[Path, str] = {}


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "cli.md", content=_gen_cli().render()))
    for site_path, source in MOUNTED.items():
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    SITE_PATHS.clear()
    SITE_PATHS.update({Path(f.abs_src_path).resolve(): f.src_uri for f in files if f.abs_src_path})
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = page.file.abs_src_path
    if source is None:  # a generated page: its links are written relative to its place in the site
        return markdown
    here = Path(source).resolve().parent
    site_dir = Path(page.file.src_uri).parent

    def rewrite(match: re.Match) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        site = SITE_PATHS.get((here / target).resolve())
        if site is None:
            return match.group(0)
        return f"{match.group(1)}{Path(os.path.relpath(site, site_dir)).as_posix()}{match.group(3) or ''}{match.group(4)}"

    return LINK.sub(rewrite, markdown)
