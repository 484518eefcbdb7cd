"""The docs site and the README (issue #47 item 6) and examples/cpp's OUT= (item 9).

The site is built as CI builds it (`mkdocs build --strict`: a broken link or anchor, a page missing from the nav
or a docstring mkdocstrings cannot read fails it); the other checks need no MkDocs and say which page or link."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _gen_cli():
    spec = importlib.util.spec_from_file_location("docs_gen_cli", REPO / "docs" / "gen_cli.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages() -> list[str]:
    yaml = pytest.importorskip("yaml", reason="reading mkdocs.yml needs PyYAML: pip install 'multiexport[docs]'")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages: list[str] = []

    def walk(node) -> None:
        if isinstance(node, str):
            pages.append(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(config["nav"])
    return pages


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs and mkdocstrings are not installed: pip install 'multiexport[docs]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    # The generated pages are there and hold what they are generated from.
    cli = (site / "cli" / "index.html").read_text()
    assert "multiexport compare" in cli and "--backend-option" in cli
    api = (site / "api" / "index.html").read_text()
    assert "CompareConfig" in api and "register_backend" in api
    # A page served from outside docs/ (the benchmark pages) and its links rewritten to the site's pages.
    bench = (site / "benchmarks" / "precision" / "index.html").read_text()
    assert "hk.nets.ResNet" in bench and 'href="../../precision/"' in bench


def test_every_docs_page_is_in_the_nav():
    pages = set(_nav_pages())
    written = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    served = {f"benchmarks/{p.name}" for p in (REPO / "benchmarks").glob("*.md")}
    missing = sorted((written | served) - pages)
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"
    generated = {"cli.md", "reference/native-section.md"}
    dangling = sorted(pages - written - served - generated)
    assert not dangling, f"mkdocs.yml's nav names pages that do not exist: {dangling}"


def test_the_readme_links_resolve():
    text = (REPO / "README.md").read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("#")]
    assert sum(t.startswith("docs/") for t in targets) >= 10 and any(t.startswith("benchmarks/") for t in targets)
    broken = [t for t in targets if not (REPO / t.split("#")[0]).is_file()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_the_readme_stays_short():
    assert len((REPO / "README.md").read_text().splitlines()) < 150, "README.md: move explanations to docs/"


def test_the_cli_page_covers_every_subcommand_and_option():
    """The page is generated at build time from the parsers: every command and every visible option is on it."""
    gen = _gen_cli()
    page = gen.render()
    parsers = gen.parsers()
    names = {title.split(" ", 1)[1] for title, _ in parsers if " " in title}
    assert {"signature", "export", "run", "native", "compare", "report", "diff", "sweep", "history"} <= names
    for title, parser in parsers:
        assert f"# {title}\n" in page, f"no section for {title!r}"
        section = page.split(f"# {title}\n", 1)[1]
        for option in gen.options_of(parser):
            assert f"`{option}" in section, f"{title}: option {option!r} is not on the page"


def test_the_cli_page_sees_an_option_it_was_not_written_for(monkeypatch):
    """Not vacuous: an option added to a parser appears on the page with its help, no edit to the generator."""
    import multiexport.cli.parser as cli_parser

    gen = _gen_cli()
    build = cli_parser.build_parser

    def with_extra():
        parser = build()
        parser.add_argument("--an-option-nobody-wrote", metavar="N", help="help that nobody wrote")
        return parser

    monkeypatch.setattr(cli_parser, "build_parser", with_extra)
    assert "| `--an-option-nobody-wrote N` | help that nobody wrote |" in gen.render()


def test_make_examples_cpp_creates_its_out_dir(tmp_path):
    """`make -C examples/cpp OUT=newdir` failed when newdir did not exist: nothing made it."""
    if shutil.which("make") is None or shutil.which("c++") is None or shutil.which("cc") is None:
        pytest.skip("no make, cc or c++ on PATH")
    cflags = subprocess.run([sys.executable, "-m", "multiexport.native.build", "--cflags"], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    if cflags.returncode != 0 or not cflags.stdout.strip():
        pytest.skip("no pjrt_c_api.h for this Python: pip install 'multiexport[native]'")
    out = tmp_path / "new" / "dir"
    proc = subprocess.run(["make", "-C", str(REPO / "examples" / "cpp"), f"PYTHON={sys.executable}", f"OUT={out}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "seed_pjrt").is_file() and (out / "mx_util.o").is_file()
