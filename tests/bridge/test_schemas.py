"""Schemas follow DDL: an added column is a new version in the broker and the registry; a
change the event type's mode refuses stops that table alone, visibly, losing nothing, until an
operator moves it to a new event type."""

from __future__ import annotations

import json

import httpx

from changebroker.broker.event_types.store import SUBJECT_NAMESPACE, SUBJECT_TENANT
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack

TABLES = """
CREATE TABLE people (id int PRIMARY KEY, name text NOT NULL,
    _change_selector text DEFAULT 'bridge');
CREATE TABLE pets (id int PRIMARY KEY, _change_selector text DEFAULT 'bridge');
ALTER TABLE people REPLICA IDENTITY FULL;
ALTER TABLE pets REPLICA IDENTITY FULL;
"""


def _versions(stack: Stack, subject: str) -> list[int]:
    response = httpx.get(
        f"{stack.registry_url}/subjects/{subject}/versions",
        params={"tenant": SUBJECT_TENANT, "namespace": SUBJECT_NAMESPACE},
    )
    assert response.status_code == 200, response.text
    found: list[int] = response.json()["version"]
    return found


def test_add_column_evolves_and_a_refused_change_stops_one_table(
    stack: Stack, rebuilt: Rebuilt
) -> None:
    stack.sql(TABLES)
    bridge = stack.start_bridge()
    people = stack.event_type("public.people")
    stack.sql("INSERT INTO people VALUES (1, 'ann')")
    wait_until(lambda: rebuilt.equals_database(["public.people"]), timeout=30, what="people")
    assert _versions(stack, people) == [1]

    stack.sql("ALTER TABLE people ADD COLUMN age int")
    stack.sql("INSERT INTO people (id, name, age) VALUES (2, 'bob', 42)")
    wait_until(lambda: rebuilt.equals_database(["public.people"]), timeout=30, what="the column")
    assert rebuilt.tables["public.people"][(2,)]["age"] == 42
    assert _versions(stack, people) == [1, 2]
    latest = httpx.get(f"{stack.broker_url}/event-types/{people}/schemas/latest").json()
    assert latest["version"] == "1.1.0"
    assert "age" in json.loads(latest["schema"])["properties"]
    newest = next(e for e in rebuilt.events if e["data"].get("id") == 2)
    assert newest["metadata"]["version"] == "1.1.0"

    # text -> int: old consumers would get numbers where they read strings; forward refuses.
    stack.sql("ALTER TABLE people ALTER COLUMN name TYPE int USING length(name)")
    stack.sql("INSERT INTO people (id, name, age) VALUES (3, 7, 1)")
    stack.sql("INSERT INTO pets VALUES (1)")
    wait_until(lambda: "public.people" in bridge.stopped, timeout=30, what="people to stop")
    wait_until(lambda: rebuilt.equals_database(["public.pets"]), timeout=30, what="pets go on")
    health = httpx.get(f"{stack.bridge_url}/health").json()
    assert health["status"] == "DEGRADED"
    assert "type-narrowed" in health["stopped"]["public.people"]
    assert stack.status()["units"]["public.people"]["stopped"] is not None
    metrics = httpx.get(f"{stack.bridge_url}/metrics").text
    assert 'changebroker_bridge_stopped{unit="public.people"} 1' in metrics
    assert (3,) not in rebuilt.tables["public.people"]

    # The operator moves the table to a new event type; the held change is published there.
    people_v2 = f"{people}-v2"
    resumed = httpx.post(
        f"{stack.bridge_url}/units/public.people/resume", json={"event_type": people_v2}
    )
    assert resumed.status_code == 200, resumed.text

    def held_change_published() -> bool:
        rebuilt.drain()
        return rebuilt.tables["public.people"].get((3,), {}).get("name") == 7

    wait_until(held_change_published, timeout=30, what="the held change in the new event type")
    moved = next(e for e in rebuilt.events if e["data"].get("id") == 3)
    assert moved["metadata"]["event_type"] == people_v2
    assert bridge.stopped == {}
    assert stack.status()["units"]["public.people"]["event_type"] == people_v2
