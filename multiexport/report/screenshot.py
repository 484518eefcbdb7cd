"""A PNG of report.html as headless Chromium renders it, with the page's network requests recorded.

Chromium is looked up on PATH (`chromium`, `chromium-browser`, `google-chrome`); on Debian,
`apt-get install chromium` provides it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..errors import UsageError

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Quiet, sandbox-free headless flags: no background traffic of its own where Chromium allows it.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1",
         # let layout and paint finish before the capture (otherwise the bottom can be cut mid-paint)
         "--run-all-compositor-stages-before-draw", "--virtual-time-budget=5000"]


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def screenshot(html_path: str | Path, png_path: str | Path, width: int = 1200, height: int = 2400,
               timeout: float = 120.0) -> list[str]:
    """Render `html_path` to `png_path`; returns the URLs the page itself requested (should be none)."""
    browser = find_browser()
    if browser is None:
        raise UsageError(f"Screenshot | no Chromium on PATH (looked for {', '.join(BROWSERS)}); "
                         "install it, e.g. `apt-get install chromium`")
    html_path, png_path = Path(html_path).resolve(), Path(png_path).resolve()
    with tempfile.TemporaryDirectory(prefix="multiexport-chromium-") as profile:
        netlog = Path(profile) / "netlog.json"
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png_path}", f"--log-net-log={netlog}", html_path.as_uri()]
        from ..run.supervisor import run_command

        outcome = run_command(cmd, timeout=timeout)
        if outcome.returncode != 0 or not png_path.is_file():
            raise UsageError(f"Screenshot '{html_path}' | Chromium {outcome.how_it_ended()}: "
                             f"{(outcome.stderr.strip().splitlines() or ['no output'])[-1]}")
        return page_requests(netlog)


def page_requests(netlog: Path) -> list[str]:
    """Network URLs requested on behalf of a page (the browser's own service traffic has no origin)."""
    data = json.loads(netlog.read_text())
    types = {v: k for k, v in data["constants"]["logEventTypes"].items()}
    urls = []
    for event in data["events"]:
        params = event.get("params") or {}
        url = str(params.get("url", ""))
        if types.get(event["type"]) == "URL_REQUEST_START_JOB" and params.get("initiator") != "not an origin":
            if url and not url.startswith(("file:", "data:")):
                urls.append(url)
    return urls
