"""/markdown: ready and the API answer 503, health stays 200, the slot goes at shutdown."""

from __future__ import annotations

import httpx
import psycopg

from tests.support.changeserver import Harness, MakeServer


def _slots(cs: Harness) -> list[str]:
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        query = (
            "SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database()"
        )
        return [slot for (slot,) in conn.execute(query).fetchall()]


def test_markdown(cs: Harness) -> None:
    slot = cs.server.settings.slot
    assert httpx.get(f"{cs.url}/ready").status_code == 200
    assert _slots(cs) == [slot]

    assert httpx.get(f"{cs.url}/markdown").status_code == 200
    assert httpx.get(f"{cs.url}/ready").status_code == 503
    status = httpx.get(f"{cs.url}/ready", headers={"accept": "application/json"})
    assert status.json()["status"] == "NotReady"
    assert cs.get(scope="a").status_code == 503
    assert httpx.get(f"{cs.url}/health").status_code == 200

    cs.stop()
    assert _slots(cs) == []


def test_shutdown_without_markdown_keeps_the_slot(cs: Harness) -> None:
    cs.stop()
    assert _slots(cs) == [cs.server.settings.slot]


def test_markdown_is_get_only(make_server: MakeServer) -> None:
    cs = make_server(separate_management=True)
    for method in ("POST", "PUT", "HEAD"):
        assert httpx.request(method, f"{cs.mgmt_url}/markdown").status_code == 405, method
    assert httpx.get(f"{cs.mgmt_url}/ready").status_code == 200
    assert httpx.get(f"{cs.mgmt_url}/markdown").status_code == 200
    assert httpx.get(f"{cs.mgmt_url}/ready").status_code == 503
