"""Publish through the broker's API and read its low-level stream back, for the reading tests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from tests.broker.swagger import validate

OFFSET_PATTERN = r"^001-0001-(-1|[0-9]{18})$"
# In any timeline (broker/timelines/): ``001-<order, 4 hex>-...``.
ANY_TIMELINE_OFFSET = r"^001-[0-9a-f]{4}-(-1|[0-9]{18})$"


def order(number: str, partition: str | None = None) -> dict[str, Any]:
    """A business event of the manual's order_received type (``partition`` for user_defined)."""
    metadata: dict[str, Any] = {
        "eid": str(uuid.uuid4()),
        "occurred_at": "2016-03-15T23:47:15+01:00",
    }
    if partition is not None:
        metadata["partition"] = partition
    return {"order_number": number, "metadata": metadata}


def publish(client: httpx.Client, name: str, events: list[dict[str, Any]]) -> None:
    response = client.post(f"/event-types/{name}/events", json=events)
    assert response.status_code == 200, response.text


def two_partition_type(make_event_type: Callable[..., str]) -> str:
    """A user_defined event type with partitions "0" and "1"."""
    return partitioned_type(make_event_type, 2)


def partitioned_type(make_event_type: Callable[..., str], partitions: int) -> str:
    """A user_defined event type with ``partitions`` partitions."""
    return make_event_type(
        partition_strategy="user_defined",
        partition_key_fields=[],
        default_statistic={
            "messages_per_minute": 100,
            "message_size": 100,
            "read_parallelism": partitions,
            "write_parallelism": partitions,
        },
    )


def stream_lines(
    client: httpx.Client,
    name: str,
    cursors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> tuple[httpx.Response, list[bytes]]:
    """Read ``GET /event-types/{name}/events`` until the server ends it (give it a limit)."""
    sent = dict(headers or {})
    if cursors is not None:
        sent["X-Nakadi-Cursors"] = json.dumps(cursors)
    with client.stream("GET", f"/event-types/{name}/events", params=params, headers=sent) as r:
        if r.status_code != 200:
            r.read()
            return r, []
        lines = [line.encode() for line in r.iter_lines()]
    return r, lines


def batches(lines: list[bytes]) -> list[dict[str, Any]]:
    """Each line parsed and checked to be an ``EventStreamBatch`` of the spec."""
    parsed = [json.loads(line) for line in lines]
    for batch in parsed:
        validate("EventStreamBatch", batch)
    return parsed


def read(
    client: httpx.Client, name: str, cursors: list[dict[str, str]] | None = None, **params: Any
) -> list[dict[str, Any]]:
    response, lines = stream_lines(client, name, cursors, **params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-json-stream")
    return batches(lines)
