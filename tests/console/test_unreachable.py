"""The console with no service answering: every page still renders, saying which service did
not answer; and a read-only console refuses every action."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from changebroker.console.app import create_app
from changebroker.console.upstream import Endpoints
from changebroker.stack.processes import free_port
from changebroker.stack.run import serve_in_thread

PAGES = [
    "/",
    "/event-types",
    "/event-types/orders",
    "/event-types/orders/partitions/0/events",
    "/subscriptions",
    "/subscriptions/s1",
    "/subscriptions/s1/reset",
    "/registry",
    "/registry/subjects/orders",
    "/changeserver",
    "/changeserver/markdown",
    "/bridge",
]
ACTIONS = [
    "/event-types/orders/publish",
    "/subscriptions/s1/reset",
    "/changeserver/markdown",
    "/bridge/units/public.people/resume",
]


def unreachable_console(read_only: bool = False, **options: Any) -> Iterator[httpx.Client]:
    """A console whose services do not answer (``options``: create_app's, e.g. the
    authenticator)."""
    nowhere = f"http://127.0.0.1:{free_port()}"  # a free port: nothing listens there
    endpoints = Endpoints(nowhere, nowhere, nowhere, nowhere, nowhere)
    app = create_app(endpoints, read_only=read_only, **options)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture
def console() -> Iterator[httpx.Client]:
    yield from unreachable_console(read_only=False)


@pytest.fixture
def read_only() -> Iterator[httpx.Client]:
    yield from unreachable_console(read_only=True)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_when_no_service_answers(console: httpx.Client, path: str) -> None:
    response = console.get(path)
    assert response.status_code == 200, response.text
    assert "<main" in response.text
    if path not in ("/changeserver/markdown",):
        assert "no answer from http://127.0.0.1:" in response.text or "failing" in response.text


def test_a_read_only_console_refuses_every_action_and_offers_none(read_only: httpx.Client) -> None:
    for path in ACTIONS:
        response = read_only.post(path, data={"events": "[]", "to": "begin"})
        assert response.status_code == 403, path
        assert "--read-only" in response.text
    page = read_only.get("/event-types/orders").text
    assert "publishing is off" in page and 'action="/event-types/orders/publish"' not in page
    assert "read-only" in read_only.get("/").text


def test_a_form_posted_from_another_site_is_refused(console: httpx.Client) -> None:
    response = console.post(
        "/changeserver/markdown", headers={"Origin": "http://elsewhere.example"}
    )
    assert response.status_code == 403
    assert "own pages" in response.text
