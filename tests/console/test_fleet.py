"""The changeserver page of a fleet: every server with its slot, sequences and readiness,
and one server marked down from its own row, the others left in rotation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
from playwright.sync_api import Page, expect

from changebroker.console.app import create_app
from changebroker.console.upstream import Endpoints
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.console import screenshot
from tests.support.fleet import TABLE, changeserver_fleet


def test_the_fleet_is_listed_and_one_server_is_marked_down_from_its_row(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str], page: Page
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    with changeserver_fleet(pg_dsn, tmp_path, unique_name, 2) as fleet:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO fleet_rows (writer, n) VALUES (1, 1)")
        first, second = fleet.members
        away = f"http://127.0.0.1:{free_port()}"  # the other services: not needed here
        endpoints = Endpoints(
            broker=away,
            registry=away,
            changeserver=fleet.url,
            changeserver_mgmt=first.mgmt_url,
            bridge=away,
            changeserver_fleet=(first.mgmt_url, second.mgmt_url),
        )
        with serve_in_thread(create_app(endpoints, sample_interval=0.5)) as console:
            wait_until(
                lambda: "0.0.0" not in {m.status()["last_sequence"] for m in fleet.members},
                timeout=30,
                what="both servers to show the change",
            )
            last = first.status()["last_sequence"]
            assert second.status()["last_sequence"] == last
            page.goto(f"{console}/changeserver")
            for member in fleet.members:
                row = page.locator(f"#fleet #server-{fleet.members.index(member) + 1}")
                expect(row).to_contain_text(member.slot)
                expect(row).to_contain_text(last)
                expect(row.locator("td.ok")).to_have_text("ready")
            screenshot(page, "changeserver-fleet")

            page.locator("#server-2").get_by_role("link", name="Mark down").click()
            expect(page.locator("h1")).to_have_text("Mark the changeserver down")
            expect(page.locator("main")).to_contain_text(second.mgmt_url)
            page.get_by_role("button", name="Mark the changeserver down").click()
            expect(page.locator("#markdown-done")).to_be_visible()
            assert httpx.get(f"{second.mgmt_url}/ready").status_code == 503
            assert httpx.get(f"{first.mgmt_url}/ready").status_code == 200
            expect(page.locator("#server-2 td.bad")).to_contain_text("marked down")
            expect(page.locator("#server-1 td.ok")).to_have_text("ready")
