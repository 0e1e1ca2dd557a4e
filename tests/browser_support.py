"""Real headless Chromium (Debian's package, never a downloaded browser) driven by Playwright,
for the web UI tests and benchmarks. Screenshots go to test-artifacts/web-ui/ (or
$CAO_TEST_ARTIFACTS): look at them.

Without /usr/bin/chromium the browser tests skip, unless CAO_REQUIRE_REAL_CLIS=1 (as in CI,
whose .ci/run installs the package first), where a missing browser fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cao_support import REPO, CaoServer, cli

CHROMIUM = os.environ.get("CAO_CHROMIUM") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("CAO_TEST_ARTIFACTS") or REPO / "test-artifacts") / "web-ui"
# What a headless browser needs on a machine with no network but the package registries:
# no sandbox (root in CI), and none of the background connections Chromium makes on its own.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
DESKTOP = {"width": 1280, "height": 720}
PHONE = {"width": 390, "height": 844}


def require_chromium() -> str:
    if os.path.exists(CHROMIUM) and shutil.which("tmux"):
        return CHROMIUM
    message = f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CAO_REQUIRE_REAL_CLIS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def launch(playwright):
    return playwright.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS, headless=True)


def cao_ui(cao: CaoServer, *args: str) -> subprocess.CompletedProcess:
    """`cao ui ARGS` against this server, where no graphical browser can be opened."""
    return cli(cao, "ui", *args, env={"DISPLAY": "", "WAYLAND_DISPLAY": "", "BROWSER": ""}, timeout=60)


def login_link(cao: CaoServer) -> str:
    """The one-time link, from `cao ui` itself as a user would get it."""
    out = cao_ui(cao, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["url"]


class PageErrors:
    """Console errors and uncaught exceptions of a page: a clean page has none."""

    def __init__(self, page):
        self.seen: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self.seen.append(f"console: {msg.text}"))
        page.on("pageerror", lambda exc: self.seen.append(f"pageerror: {exc}"))

    def assert_none(self, allowed: tuple[str, ...] = ()) -> None:
        unexpected = [e for e in self.seen if not any(a in e for a in allowed)]
        assert not unexpected, unexpected


@contextmanager
def signed_in(browser, cao: CaoServer, viewport: dict | None = None) -> Iterator[tuple[object, PageErrors]]:
    """A fresh browser context signed in through `cao ui`'s link, on the board."""
    context = browser.new_context(viewport=viewport or DESKTOP)
    try:
        page = context.new_page()
        errors = PageErrors(page)
        page.goto(login_link(cao))
        page.wait_for_selector("main[data-page=board] #live-state.on", timeout=15000)
        yield page, errors
    finally:
        context.close()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
