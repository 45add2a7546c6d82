"""What an operator does from the console, in Debian's Chromium against real services: compare
schema versions, check a schema, publish a test event, reset cursors, resume a stopped table,
mark the changeserver down."""

from __future__ import annotations

import json
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from changebroker.console.sampler import total_unconsumed
from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import Stream
from tests.support.bridge_stack import Rebuilt, Stack
from tests.support.console import people_read_by_a_subscription, published_people, screenshot


def _narrowed(schema: Any, field: str) -> Any:
    """``schema`` with every property ``field`` typed integer (a narrowing)."""
    if isinstance(schema, dict):
        out = {k: _narrowed(v, field) for k, v in schema.items()}
        properties = out.get("properties")
        if isinstance(properties, dict) and field in properties:
            properties[field] = {"type": "integer"}
        return out
    if isinstance(schema, list):
        return [_narrowed(item, field) for item in schema]
    return schema


def test_schema_diff_shows_an_added_field_and_a_refused_schema_lists_its_violations(
    stack: Stack, rebuilt: Rebuilt, console_url: str, page: Page
) -> None:
    people = published_people(stack, rebuilt, 1)
    stack.sql("ALTER TABLE people ADD COLUMN age int")
    stack.sql("INSERT INTO people (id, name, age) VALUES (7, 'bob', 42)")
    wait_until(lambda: rebuilt.equals_database(["public.people"]), timeout=30, what="the column")

    page.goto(f"{console_url}/event-types/{people}")
    page.get_by_label("Compare").select_option("1.0.0")
    page.get_by_label("with").select_option("1.1.0")
    page.get_by_role("button", name="Show the diff").click()
    expect(page.locator(".added-fields")).to_have_text("age")
    added = page.locator("table.diff tr.added")
    expect(added.first).to_be_visible()
    assert any('"age"' in row for row in added.all_inner_texts())
    screenshot(page, "schema-diff")

    # A subject of the registry's own, under BACKWARD: a string narrowed to an integer is
    # refused, and the console lists the engine's violations by path and rule, with a
    # document the old schema accepts and the new one rejects.
    subject = f"console-{stack.prefix}"
    person = {"type": "object", "properties": {"name": {"type": "string"}}}
    scope = {"tenant": "console-tests", "namespace": "checks"}
    with httpx.Client(base_url=stack.registry_url, params=scope, timeout=30) as registry:
        created = registry.post(
            f"/subjects/{subject}", json={"status": "released", "compatibility": "BACKWARD"}
        )
        assert created.is_success, created.text
        registered = registry.post(
            f"/subjects/{subject}/versions",
            json={"serialization": "json", "schemaDefinition": person},
        )
        assert registered.is_success, registered.text
    page.goto(f"{console_url}/registry?tenant=console-tests&namespace=checks&q={subject}")
    page.get_by_role("link", name=subject).click()
    expect(page.locator("#compatibility")).to_have_text("BACKWARD")
    shown = json.loads(page.get_by_label("Schema definition").input_value())
    assert shown == person
    page.get_by_label("Schema definition").fill(json.dumps(_narrowed(person, "name")))
    page.get_by_role("button", name="Check").click()
    result = page.locator("#check-result")
    expect(result).to_contain_text("Refused under BACKWARD")
    violations = result.locator("tbody tr")
    expect(violations.first).to_be_visible()
    assert any("name" in row for row in violations.all_inner_texts())
    expect(result.locator("code.example").first).to_have_text('{"name": ""}')
    screenshot(page, "registry-check")

    # The same schema with a description is accepted.
    described = {**person, "description": "a person"}
    page.get_by_label("Schema definition").fill(json.dumps(described))
    page.get_by_role("button", name="Check").click()
    expect(page.locator("#check-result")).to_contain_text("Accepted")


def test_a_test_event_publishes_and_shows_the_brokers_422(
    stack: Stack, rebuilt: Rebuilt, console_url: str, page: Page
) -> None:
    people = published_people(stack, rebuilt, 1)
    invalid = [
        {
            "metadata": {
                "eid": "5e7f1a3c-0b0e-4a53-9a0e-7d6f3c2b1a00",
                "occurred_at": "2026-01-01T00:00:00Z",
            },
            "data_type": "public.people",
            "data_op": "C",
            "data": {"id": "not a number", "name": "x"},
        }
    ]
    page.goto(f"{console_url}/event-types/{people}")
    page.get_by_label("Events (a JSON array)").fill(json.dumps(invalid))
    page.get_by_role("button", name="Publish").click()
    result = page.locator("#publish-result")
    expect(result).to_contain_text("422")
    # Exactly what the broker answers to the same batch.
    direct = httpx.post(f"{stack.broker_url}/event-types/{people}/events", json=invalid)
    assert direct.status_code == 422
    for item in direct.json():
        expect(result).to_contain_text(item["detail"])
        expect(result).to_contain_text(item["publishing_status"])
    screenshot(page, "publish-422")

    valid = [{**invalid[0], "data": {"id": 99, "name": "from the console"}}]
    page.get_by_label("Events (a JSON array)").fill(json.dumps(valid))
    page.get_by_role("button", name="Publish").click()
    expect(page.locator("#publish-result")).to_contain_text("200")

    def test_event_published() -> bool:
        rebuilt.drain()
        return any(e["data"].get("id") == 99 for e in rebuilt.events)

    wait_until(test_event_published, timeout=30, what="the test event in Kafka")


def test_a_cursor_reset_asks_for_confirmation_then_happens(
    stack: Stack, rebuilt: Rebuilt, console_url: str, page: Page
) -> None:
    people, sid = people_read_by_a_subscription(stack, rebuilt, 3, 3)
    stats_url = f"{stack.broker_url}/subscriptions/{sid}/stats"
    # Counted by offsets, as the broker's stats count: the bridge's transaction markers too.
    behind = total_unconsumed(httpx.get(stats_url).json())

    page.goto(f"{console_url}/subscriptions/{sid}")
    page.get_by_label("the oldest retained event").check()
    page.get_by_role("button", name="Review the reset").click()
    plan = page.locator("#reset-plan tbody tr")
    expect(plan).to_have_count(3)
    for partition in range(3):
        expect(page.locator("#reset-plan")).to_contain_text(people)
        expect(plan.nth(partition)).to_contain_text("begin")
    reread = sum(int(row.split("\t")[-1]) for row in plan.all_inner_texts())
    assert reread >= 3
    expect(page.get_by_text(f"{reread} event(s) will be read again")).to_be_visible()
    # Nothing happened yet: the confirmation page only names what would be re-read.
    assert total_unconsumed(httpx.get(stats_url).json()) == behind
    screenshot(page, "reset-confirmation")

    page.get_by_role("button", name="Reset the cursors").click()
    expect(page.locator("#reset-done")).to_be_visible()
    assert total_unconsumed(httpx.get(stats_url).json()) == behind + reread
    # And a consumer reads the three people again: among the events of people, each row's C
    # and the S of the snapshot run its first change started, so more than three events.
    people_names = {"person 0", "person 1", "person 2"}
    names: set[str] = set()
    with httpx.Client(base_url=stack.broker_url, timeout=30) as client:
        # The broker ends the stream after 30 s: a person never re-read fails the test there.
        stream = Stream(client, sid, batch_flush_timeout=1, stream_timeout=30)
        try:
            while not people_names <= names:
                batch = stream.batch()
                assert batch is not None, f"the stream ended having re-read only {names}"
                names |= {e["data"]["name"] for e in batch.get("events", [])}
        finally:
            stream.close()
    assert names == people_names


def test_a_stopped_bridge_table_resumes_from_its_page(
    stack: Stack, rebuilt: Rebuilt, console_url: str, page: Page
) -> None:
    people = published_people(stack, rebuilt, 1)
    # text -> int: the event type's mode refuses it, and the bridge stops this table.
    stack.sql("ALTER TABLE people ALTER COLUMN name TYPE int USING length(name)")
    stack.sql("INSERT INTO people (id, name) VALUES (3, 7)")
    wait_until(
        lambda: stack.status()["units"].get("public.people", {}).get("stopped"),
        timeout=30,
        what="people to stop",
    )

    page.goto(f"{console_url}/bridge")
    row = page.locator("tr", has_text="public.people")
    expect(row).to_contain_text("stopped")
    expect(row.locator(".reason")).to_contain_text("type-narrowed")
    screenshot(page, "bridge-stopped")
    row.get_by_label("New event type").fill(f"{people}-v2")
    row.get_by_role("button", name="Resume public.people").click()
    expect(page.locator("#resumed")).to_contain_text("public.people")

    def held_change_published() -> bool:
        rebuilt.drain()
        return rebuilt.tables["public.people"].get((3,), {}).get("name") == 7

    wait_until(held_change_published, timeout=30, what="the held change in the new event type")
    assert stack.status()["units"]["public.people"]["stopped"] is None
    page.reload()
    expect(page.locator("tr", has_text="public.people")).to_contain_text("running")


def test_the_changeserver_is_marked_down_after_a_confirmation(
    stack: Stack, console_url: str, page: Page
) -> None:
    ready = f"{stack.changeserver_url}/ready"
    assert httpx.get(ready).status_code == 200
    page.goto(f"{console_url}/changeserver")
    page.get_by_role("link", name="Mark down").click()
    expect(page.locator("h1")).to_have_text("Mark the changeserver down")
    assert httpx.get(ready).status_code == 200
    page.get_by_role("button", name="Mark the changeserver down").click()
    expect(page.locator("#markdown-done")).to_be_visible()
    assert httpx.get(ready).status_code == 503
    expect(page.locator("td.bad")).to_contain_text("failing")
    screenshot(page, "changeserver-marked-down")
