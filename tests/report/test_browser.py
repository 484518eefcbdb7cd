"""The HTML report in a real headless Chromium: it renders its plots and requests nothing."""

from __future__ import annotations

import zlib

import pytest

from multiexport import examples
from multiexport.comparison import compare
from multiexport.measure.bench import BenchConfig
from multiexport.report.screenshot import find_browser, screenshot

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium on PATH (.ci/run installs it with apt-get)")


def png_pixels_vary(path) -> bool:
    """True when the PNG's image data is not a flat fill (a blank page compresses to a handful of byte values)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    idat, pos = b"", 8
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    return len(set(raw[: 4_000_000])) > 64


def test_report_renders_in_chromium_without_requests(tmp_path):
    compare(examples.mlp_dynamic(), out_dir=tmp_path, trials=1, batch_sizes=(1, 8),
            bench=BenchConfig(warmup_iters=2, warmup_time=0.0, min_iters=10, bench_time=0.0))
    png = tmp_path / "report.png"
    requests = screenshot(tmp_path / "report.html", png)
    assert requests == []
    assert png.stat().st_size > 20_000 and png_pixels_vary(png)


def test_a_page_that_fetches_is_caught(tmp_path):
    # the detector itself must see a page's request (CSP off, a loopback URL nothing listens on)
    page = tmp_path / "fetching.html"
    page.write_text("<html><body><img src='http://127.0.0.1:9/x.png'>hello</body></html>")
    requests = screenshot(page, tmp_path / "f.png", width=400, height=300)
    assert requests == ["http://127.0.0.1:9/x.png"]
