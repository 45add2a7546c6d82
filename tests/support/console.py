"""The console against the real services of the bridge tests' stack (changeserver, registry,
broker, bridge on the test's own databases), and Debian's Chromium driven by Playwright.

The browser is Debian's ``chromium`` package at its executable path: no browser build is
downloaded (``scripts/install.sh --test`` installs the package when it is absent).
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright

from changebroker.stack.run import serve_in_thread
from changebroker.stack.state import REPO_ROOT
from console.app import create_app
from console.upstream import Endpoints
from tests.support.bridge_stack import Stack

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO_ROOT / ".state" / "test" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def console_url(stack: Stack) -> Iterator[str]:
    """The console on the stack, its bridge started first (the console needs its URL)."""
    stack.start_bridge()
    endpoints = Endpoints(
        broker=stack.broker_url,
        registry=stack.registry_url,
        changeserver=stack.changeserver_url,
        # The test changeserver serves its management paths beside /changes.
        changeserver_mgmt=stack.changeserver_url,
        bridge=stack.bridge_url,
    )
    with serve_in_thread(create_app(endpoints, sample_interval=0.5)) as url:
        yield url


# Per module: Playwright's sync API keeps an asyncio loop marked running in this thread while
# it is open, which would break every later test that runs a loop of its own.
@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with (
        tempfile.TemporaryDirectory(prefix="console-chromium-") as profile,
        sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    opened = browser.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        with contextlib.suppress(Exception):
            opened.close()


def screenshot(page: Page, name: str) -> Path:
    """The page as the browser drew it, under .state/test/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / (re.sub(r"[^a-z0-9_-]+", "-", name.lower()) + ".png")
    page.screenshot(path=str(path), full_page=True)
    return path
