"""A real browser for the web pages' tests: Debian's Chromium, headless, driven by Playwright.

Playwright launches the system's binary (``executable_path``): it never downloads a browser of
its own. ``./run test`` installs Chromium when it is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
#: no sandbox (tests run as root in a container), and nothing that would reach the network
FLAGS = ("--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync")
#: where the tests leave screenshots for a person to look at (the README names it)
SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Playwright ``Browser`` on Debian's Chromium; closed on exit."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise RuntimeError(
            f"{CHROMIUM} is missing: ./run test installs it (apt-get install chromium chromium-driver)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()
