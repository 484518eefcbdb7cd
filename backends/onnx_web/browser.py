"""Headless Chromium (the system's, Debian's package) driven by Playwright's Python API.

Playwright's own browser download is not used (nor reachable here): `executable_path` points at the
system Chromium. The flags keep the browser off the network and quiet in a closed sandbox: no QUIC, no
background fetches, no component updates or sync, a fresh profile directory per launch (removed at close).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMIUM_ENV = "MULTIEXPORT_CHROMIUM"  # a browser elsewhere (a CI image's)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
# WebGPU in headless Chromium needs these (and a GPU, or SwiftShader's Vulkan where the build has it): asked for
# only when the runner wants the webgpu execution provider, so the wasm rows run exactly with FLAGS.
WEBGPU_FLAGS = ("--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-angle=swiftshader",
                "--use-webgpu-adapter=swiftshader")


def chromium_path() -> str | None:
    """The Chromium executable to drive: $MULTIEXPORT_CHROMIUM, else the first system one found; None: none."""
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    return next((p for p in CHROMIUM_CANDIDATES if os.access(p, os.X_OK)), None)


@dataclass
class Browser:
    """One launched browser and its page; `close` ends both and removes the profile directory.

    playwright, browser, page: Playwright's objects (browser: the persistent context). profile: the fresh
        --user-data-dir.
    executable: the Chromium binary. version: its user agent (which names its version).
    """

    playwright: Any
    browser: Any
    page: Any
    profile: Path
    executable: str
    version: str

    def close(self) -> None:
        try:
            self.browser.close()
        except Exception:  # noqa: BLE001  (closing must finish: the profile is removed below either way)
            pass
        shutil.rmtree(self.profile, ignore_errors=True)
        _PROFILES.discard(self.profile)


_DRIVER: list[Any] = []  # the process's one Playwright driver (its sync API allows one running instance)


def driver() -> Any:
    """Playwright's sync driver for this process, started on first use and stopped at exit: a second
    `sync_playwright().start()` while one runs is refused ("Sync API inside the asyncio loop"), and an export's
    load check, a compare worker and a test may each hold a browser at once."""
    if not _DRIVER:
        import atexit

        from playwright.sync_api import sync_playwright

        _DRIVER.append(sync_playwright().start())
        atexit.register(_stop_driver)
    return _DRIVER[0]


_PROFILES: set[Path] = set()  # profiles of browsers not closed yet: removed at exit


def _stop_driver() -> None:
    while _DRIVER:  # stopping the driver ends the browsers it launched
        try:
            _DRIVER.pop().stop()
        except Exception:  # noqa: BLE001  (at exit: the driver process may already be gone)
            pass
    for profile in list(_PROFILES):
        shutil.rmtree(profile, ignore_errors=True)


PROFILE_PREFIX = "multiexport-chromium-"


def profile_root() -> Path:
    """Where profiles go: /tmp itself, not $TMPDIR. Chromium puts its singleton socket under the profile, and a
    Unix socket's path must fit in 108 bytes: under a compare worker's deep private $TMPDIR it did not, and
    every launch there failed ("Target page, context or browser has been closed")."""
    short = Path("/tmp")
    return short if short.is_dir() and os.access(short, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())


def reap_stale_profiles(parent: Path | None = None) -> list[Path]:
    """Remove the profiles that processes now gone left behind (a worker ended by a signal or `os._exit` runs
    no atexit handler): a profile is named PROFILE_PREFIX + its process id, and only this user's real
    directories (no link) of a pid that no longer exists are removed. Returns what it removed."""
    parent = Path(parent or profile_root())
    removed = []
    for path in parent.glob(PROFILE_PREFIX + "*"):
        pid = path.name[len(PROFILE_PREFIX):].split("-")[0]
        try:
            info = path.lstat()
            if not pid.isdigit() or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:  # gone meanwhile, or a process of another user (alive): leave it
            continue
    return removed


def launch(webgpu: bool = False, executable: str | None = None) -> Browser:
    """Headless Chromium with the closed-network flags and a fresh profile, one blank page open."""
    executable = executable or chromium_path()
    if executable is None:
        raise FileNotFoundError(f"no Chromium found ({', '.join(CHROMIUM_CANDIDATES)} or ${CHROMIUM_ENV})")
    reap_stale_profiles()
    profile = Path(tempfile.mkdtemp(prefix=f"{PROFILE_PREFIX}{os.getpid()}-", dir=profile_root()))
    flags = [*FLAGS, *(WEBGPU_FLAGS if webgpu else ())]
    if webgpu:
        flags.remove("--disable-gpu")
    pw = driver()
    try:
        # Playwright takes the profile directory as user_data_dir (it refuses the flag in `args`).
        # Chromium's own temporary files (its singleton socket directory) inside the profile: removed with it,
        # even after a kill, instead of one org.chromium.Chromium.* directory per launch in the temp dir.
        (profile / "t").mkdir()
        context = pw.chromium.launch_persistent_context(str(profile), executable_path=executable, headless=True,
                                                        args=flags, chromium_sandbox=False,
                                                        env={**os.environ, "TMPDIR": str(profile / "t")})
        page = context.pages[0] if context.pages else context.new_page()
        version = str(page.evaluate("navigator.userAgent"))
    except Exception:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    _PROFILES.add(profile)
    return Browser(pw, context, page, profile, executable, version)
