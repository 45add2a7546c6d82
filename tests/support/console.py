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
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright

from changebroker.console.app import create_app
from changebroker.console.upstream import Endpoints
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.broker.subscription_support import Stream, commit
from tests.support import REPO_ROOT
from tests.support.bridge_stack import Rebuilt, Stack, snapshot_of

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


PEOPLE = """
CREATE TABLE people (id int PRIMARY KEY, name text NOT NULL,
    _change_selector text DEFAULT 'bridge');
ALTER TABLE people REPLICA IDENTITY FULL;
"""


def published_people(stack: Stack, rebuilt: Rebuilt, rows: int) -> str:
    """``people`` with ``rows`` rows, every one published by the bridge; its event type.

    Also once the table's first snapshot run is done: it starts at the table's first change
    and publishes the rows it finds again, as ``S`` events (bridge README "Which tables"), so
    until then the event type still grows and counts taken of it would not hold.
    """
    stack.sql(PEOPLE)
    for i in range(rows):
        stack.sql("INSERT INTO people VALUES (%s, %s)", (i, f"person {i}"))
    wait_until(lambda: rebuilt.equals_database(["public.people"]), timeout=60, what="people")
    wait_until(
        lambda: snapshot_of(stack, "public.people").get("state") == "done",
        timeout=60,
        what="the first snapshot run of people",
    )
    return stack.event_type("public.people")


def subscribe(stack: Stack, event_type: str, **overrides: Any) -> str:
    """A new subscription of the console tests' application to ``event_type``; its id."""
    body = {
        "owning_application": "console-tests",
        "event_types": [event_type],
        "consumer_group": "console",
        **overrides,
    }
    response = httpx.post(f"{stack.broker_url}/subscriptions", json=body, timeout=30)
    assert response.status_code in (200, 201), response.text
    subscription_id: str = response.json()["id"]
    return subscription_id


def consume(stack: Stack, sid: str, events: int) -> None:
    """A consumer reads ``events`` events of the subscription and commits them."""
    with httpx.Client(base_url=stack.broker_url, timeout=30) as client:
        stream = Stream(client, sid, batch_limit=1, batch_flush_timeout=1)
        try:
            for batch in stream.read_events(events):
                committed = commit(client, sid, stream.id, [batch["cursor"]])
                assert committed.status_code in (200, 204), committed.text
        finally:
            stream.close()


def people_read_by_a_subscription(
    stack: Stack, rebuilt: Rebuilt, rows: int, consumed: int
) -> tuple[str, str]:
    """``people`` with ``rows`` rows, and a subscription from the beginning of which
    ``consumed`` events were read and committed: (event type, subscription id)."""
    people = published_people(stack, rebuilt, rows)
    subscription_id = subscribe(stack, people, read_from="begin")
    consume(stack, subscription_id, consumed)
    return people, subscription_id
