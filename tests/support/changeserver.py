"""A changeserver in this process against the test's own database."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import psycopg
import pytest
import yaml

from changebroker.auth import Authenticator
from changebroker.changeserver.server import ChangeServer, Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support import SPECS

TABLE = "CREATE TABLE items (id int PRIMARY KEY, name text, _change_selector text)"
SPEC = SPECS / "changeserver-api.yaml"


@functools.cache
def _definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = yaml.safe_load(SPEC.read_text())["definitions"]
    return definitions


def conforms(body: Any, definition: str) -> None:
    """Fail unless ``body`` matches the Swagger spec's ``definition`` (ChangeList, Error...)."""
    schema = {**_definitions()[definition], "definitions": _definitions()}
    jsonschema.validate(body, schema)


@dataclass
class Harness:
    url: str
    dsn: str
    server: ChangeServer
    context: Any
    mgmt_url: str  # the management port's; the API's unless started with separate_management

    def stop(self) -> None:
        """Shut the server down (its lifespan ends: replication stops, markdown drops the slot)."""
        if self.context is not None:
            context, self.context = self.context, None
            context.close()

    def sql(self, statement: str, params: Any = None) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement, params)

    def get(self, accept: str | None = None, **params: Any) -> httpx.Response:
        headers = {"accept": accept} if accept else {}
        return httpx.get(f"{self.url}/changes", params=params, headers=headers, timeout=60)

    def changes(self, **params: Any) -> dict[str, Any]:
        response = self.get(**params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        # The table extension also serves table events (operations past transicator's 1-3).
        changes = [c for c in body["changes"] if "table" not in params or c["operation"] <= 3]
        conforms({**body, "changes": changes}, "ChangeList")
        return body

    def wait_for(self, count: int, **params: Any) -> dict[str, Any]:
        """Changes once ``count`` are served (changes become durable asynchronously)."""
        found: dict[str, Any] = {}

        def enough() -> bool:
            found.update(self.changes(**params))
            return len(found["changes"]) >= count

        wait_until(enough, timeout=30, what=f"{count} changes")
        return found


MakeServer = Callable[..., Harness]


@pytest.fixture
def make_server(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> Iterator[MakeServer]:
    """Start a changeserver (settings overridable, even its ``dsn``: the harness's ``sql``
    still writes to the test's Postgres directly); all are stopped at the end."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    stack: list[Harness] = []

    def make(
        separate_management: bool = False,
        authenticator: Authenticator | None = None,
        **overrides: Any,
    ) -> Harness:
        # unique_name is one token per test: number the servers so each has its own slot
        # and its own change log.
        slot = unique_name(f"cs{len(stack)}")
        settings = Settings(**{"dsn": pg_dsn, "slot": slot, "db_dir": tmp_path / slot, **overrides})
        server = ChangeServer(
            settings, separate_management=separate_management, authenticator=authenticator
        )
        context = contextlib.ExitStack()
        url = mgmt_url = context.enter_context(serve_in_thread(server.api_app))
        if server.management_app is not None:
            mgmt_url = context.enter_context(serve_in_thread(server.management_app))
        wait_until(server.replicator.streaming.is_set, timeout=30, what="replication")
        harness = Harness(url, pg_dsn, server, context, mgmt_url)
        stack.append(harness)
        return harness

    yield make
    for harness in reversed(stack):
        harness.stop()


@pytest.fixture
def cs(make_server: MakeServer) -> Harness:
    return make_server()
