"""A PNG of report.html as headless Chromium renders it, with the page's network requests recorded.

Chromium is looked up on PATH (`chromium`, `chromium-browser`, `google-chrome`); on Debian,
`apt-get install chromium` provides it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..errors import UsageError
from ..files import write_bytes_atomic
from ..files.owned import check_overwritable, stamped_bytes
from ..files.temporary import make_temporary
from ..system.process import run_command

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

    profile = make_temporary("chromium")  # marked: the next command removes it if this one is killed outright
    try:
        netlog, shot = profile / "netlog.json", profile / "screenshot.png"
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={shot}", f"--log-net-log={netlog}", html_path.as_uri()]

        outcome = run_command(cmd, timeout=timeout)
        if outcome.returncode != 0 or not shot.is_file():
            raise UsageError(f"Screenshot '{html_path}' | Chromium {outcome.how_it_ended()}: "
                             f"{(outcome.stderr.strip().splitlines() or ['no output'])[-1]}")
        # Written by multiexport, not by the browser: only over a file multiexport wrote, with its stamp
        # after the PNG's last chunk (image readers ignore it).
        check_overwritable(png_path, "Screenshot")
        write_bytes_atomic(png_path, stamped_bytes(shot.read_bytes()))
        return page_requests(netlog)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


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
