"""Every console page in Debian's Chromium, against real services with real data."""

from __future__ import annotations

import json
import re
import uuid

import httpx
from playwright.sync_api import Page, expect

from changebroker.broker.event_types.store import SUBJECT_NAMESPACE, SUBJECT_TENANT
from changebroker.console.sampler import total_unconsumed
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack
from tests.support.console import people_read_by_a_subscription, screenshot
from tests.support.event_types import business_event_type

NOW = "2026-11-23T12:00:00Z"


def test_every_page_renders_real_data(
    stack: Stack, rebuilt: Rebuilt, console_url: str, page: Page
) -> None:
    people, sid = people_read_by_a_subscription(stack, rebuilt, 3, 1)

    page.goto(console_url + "/")
    pipeline = page.locator("ol.pipeline")
    for stage in ["Postgres", "changeserver", "bridge", "Kafka / broker", "subscriptions"]:
        expect(pipeline).to_contain_text(stage)
    expect(pipeline).to_contain_text("last sequence")
    expect(pipeline).to_contain_text("WAL bytes")
    # The slot, the change log and the newest snapshot, from the changeserver's /status.
    expect(page.locator("#slot-retained-wal")).to_contain_text(re.compile(r"\d (bytes|KiB|MiB)"))
    last = httpx.get(f"{stack.changeserver_url}/changes", params={"limit": 0}).json()
    expect(page.locator("#changelog-bounds")).to_contain_text(last["lastSequence"])
    expect(page.locator("#changelog-retention")).to_have_text("keeps every change")
    expect(page.locator("#snapshot-age")).to_have_text("none yet")
    health = page.locator("section[aria-labelledby=health-h] tbody tr")
    expect(health).to_have_count(5)
    expect(page.locator("section[aria-labelledby=health-h] td.bad")).to_have_count(0)
    # Live updates on: once the sampler has seen the subscription, its unconsumed events (as
    # the broker's stats count them) are the last arrow's lag, without reloading the page.
    behind = total_unconsumed(httpx.get(f"{stack.broker_url}/subscriptions/{sid}/stats").json())
    assert behind > 0
    page.get_by_label("Live updates").check()
    expect(page.locator("ol.pipeline")).to_contain_text(
        f"lag {behind} unconsumed events", timeout=30_000
    )
    screenshot(page, "overview")

    page.goto(console_url + "/event-types")
    page.get_by_label("Search by name or owning application").fill(stack.prefix)
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name=people)).to_be_visible()
    screenshot(page, "event-types")
    page.get_by_role("link", name=people).click()
    expect(page.locator("h1")).to_have_text(people)
    expect(page.locator("section[aria-labelledby=partitions-h] tbody tr")).to_have_count(3)
    screenshot(page, "event-type")

    # The newest events of each partition, through the broker's low-level stream.
    names: set[str] = set()
    for partition in range(3):
        page.goto(f"{console_url}/event-types/{people}/partitions/{partition}/events")
        names |= {
            json.loads(text)["data"]["name"]
            for text in page.locator("ol.events pre").all_inner_texts()
        }
    assert names == {"person 0", "person 1", "person 2"}
    screenshot(page, "events")

    page.goto(console_url + "/subscriptions")
    row = page.locator("tr", has=page.get_by_role("link", name=sid))
    expect(row).to_contain_text("console-tests")
    expect(row.locator("td").last).to_have_text(str(behind))
    screenshot(page, "subscriptions")
    page.get_by_role("link", name=sid).click()
    expect(page.locator("h1")).to_contain_text(sid)
    screenshot(page, "subscription")
    expect(page.locator("td.unconsumed")).to_have_count(3)
    unconsumed = page.locator("td.unconsumed").all_inner_texts()
    assert sum(map(int, unconsumed)) == behind, unconsumed

    page.goto(
        f"{console_url}/registry?tenant={SUBJECT_TENANT}&namespace={SUBJECT_NAMESPACE}"
        f"&q={stack.prefix}"
    )
    page.get_by_role("link", name=people).click()
    expect(page.locator("#compatibility")).not_to_be_empty()
    expect(page.locator("pre.schema")).to_contain_text("name")
    screenshot(page, "registry-subject")

    page.goto(console_url + "/changeserver")
    expect(page.locator("#last-sequence")).to_have_text(
        httpx.get(f"{stack.changeserver_url}/changes", params={"limit": 0}).json()["lastSequence"]
    )

    # The bridge long-polls every table (the ``*`` selector of table reads). Between two of
    # its polls (one just answered) the page, read once, shows none: it is read again.
    def bridge_waits() -> bool:
        page.goto(console_url + "/changeserver")
        return "*: 1" in page.locator("#longpoll-waiters").inner_text()

    wait_until(bridge_waits, timeout=30, what="the console to show the bridge's long poll")
    expect(page.locator("#changelog-size")).to_contain_text(re.compile(r"\d (KiB|MiB)"))
    screenshot(page, "changeserver")

    page.goto(console_url + "/bridge")
    unit = page.locator("tr", has_text="public.people")
    expect(unit).to_contain_text("running")
    expect(unit).to_contain_text(people)
    screenshot(page, "bridge")


def test_the_latest_events_of_a_partition_page_back_to_the_oldest(
    stack: Stack, console_url: str, page: Page
) -> None:
    name = f"{stack.prefix}.orders"
    created = httpx.post(
        f"{stack.broker_url}/event-types",
        json=business_event_type(name),
        timeout=60,
    )
    assert created.status_code == 201, created.text
    orders = [
        {"order_number": str(i), "metadata": {"eid": str(uuid.uuid4()), "occurred_at": NOW}}
        for i in range(45)
    ]
    published = httpx.post(f"{stack.broker_url}/event-types/{name}/events", json=orders)
    assert published.status_code == 200, published.text

    def shown() -> list[str]:
        return [
            json.loads(text)["order_number"]
            for text in page.locator("ol.events pre").all_inner_texts()
        ]

    page.goto(f"{console_url}/event-types/{name}/partitions/0/events")
    expect(page.locator("ol.events > li")).to_have_count(20)
    assert shown() == [str(i) for i in range(44, 24, -1)]  # newest first
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("ol.events > li")).to_have_count(20)
    assert shown() == [str(i) for i in range(24, 4, -1)]
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("ol.events > li")).to_have_count(5)
    assert shown() == ["4", "3", "2", "1", "0"]
    expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    page.get_by_role("link", name="Previous page").click()
    expect(page.locator("ol.events > li").first).to_contain_text('"order_number": "24"')
