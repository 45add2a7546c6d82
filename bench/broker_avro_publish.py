"""Publishing Avro binary (Nakadi's envelope, ``application/avro-binary``) against JSON, in one run.

One event type of ~1 KB business events (an order number and a padding string), its schema
moved from JSON (1.0.0) to Avro (2.0.0), so the same events can be published either way: JSON
ones are validated against the JSON schema, Avro ones are decoded against the Avro one. The
broker runs as its own process (``changebroker broker --workers <cores>``); 4 keep-alive
connections post batches of 1 and of 100 and wait for each answer. Figures: events/s and the
request bytes per event, Avro against JSON as the baseline.

    .venv/bin/python -m bench broker_avro_publish
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import httpx

from bench import services
from bench.report import Figure, report
from changebroker.broker.avro import envelope
from changebroker.broker.avro.envelope import Record
from changebroker.broker.avro.metadata import FIELDS
from changebroker.broker.avro.payloads import compile_schema

BATCH_SIZES = (1, 100)
THREADS = 4
WORKERS = os.cpu_count() or 1
PARTITIONS = 4
SECONDS_PER_RUN = 8.0
PADDING = 960  # characters of padding: ~1 KB JSON events
OCCURRED_AT = "2026-11-22T10:00:00.000Z"
JSON_SCHEMA = {
    "properties": {"order_number": {"type": "string"}, "payload": {"type": "string"}},
    "required": ["order_number"],
}
AVRO_SCHEMA = {
    "name": "Order",
    "type": "record",
    "fields": [{"name": "order_number", "type": "string"}, {"name": "payload", "type": "string"}],
}


def _json_batch(size: int) -> bytes:
    events = [
        {
            "order_number": f"order-{i:08d}",
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": OCCURRED_AT},
            "payload": "x" * PADDING,
        }
        for i in range(size)
    ]
    return json.dumps(events, separators=(",", ":")).encode()


def _avro_batch(name: str, size: int) -> bytes:
    schema = compile_schema(json.dumps(AVRO_SCHEMA), "2.0.0")
    records = []
    for i in range(size):
        number = f"order-{i:08d}"
        metadata = dict.fromkeys(FIELDS)
        metadata.update(
            eid=str(uuid.uuid4()),
            occurred_at=1_795_341_600_000,
            event_type=name,
            version="2.0.0",
            partition_keys=[number],
        )
        records.append(
            Record(metadata, schema.encode({"order_number": number, "payload": "x" * PADDING}))
        )
    return envelope.publishing_batch(records)


def _rate(port: int, name: str, body: bytes, content_type: str, size: int) -> float:
    request = services.http_request("POST", f"/event-types/{name}/events", body, content_type)
    answers, _ = services.keep_alive_fleet(port, request, THREADS, SECONDS_PER_RUN)
    return answers * size


def main() -> int:
    with services.broker("broker", "--workers", str(WORKERS)) as (url, _):
        name = f"bench.avro_{uuid.uuid4().hex[:8]}"
        services.create_event_type(
            url,
            name,
            PARTITIONS,
            category="business",
            enrichment_strategies=["metadata_enrichment"],
            partition_strategy="hash",
            partition_key_fields=["order_number"],
            schema={"type": "json_schema", "schema": json.dumps(JSON_SCHEMA)},
        )
        moved = httpx.post(
            f"{url}/event-types/{name}/schemas",
            json={"type": "avro_schema", "schema": json.dumps(AVRO_SCHEMA)},
            timeout=60,
        )
        moved.raise_for_status()
        port = int(url.rsplit(":", 1)[1])
        figures = []
        for size in BATCH_SIZES:
            as_json, as_avro = _json_batch(size), _avro_batch(name, size)
            for body, content_type in (
                (as_json, "application/json"),
                (as_avro, "application/avro-binary"),
            ):
                answer = httpx.post(
                    f"{url}/event-types/{name}/events",
                    content=body,
                    headers={"Content-Type": content_type},
                    timeout=60,
                )
                if answer.status_code != 200:
                    raise RuntimeError(
                        f"{content_type} answered {answer.status_code}: {answer.text}"
                    )
            json_rate = _rate(port, name, as_json, "application/json", size)
            avro_rate = _rate(port, name, as_avro, "application/avro-binary", size)
            what = f"~1 KB events, batches of {size}, {WORKERS} workers"
            figures += [
                Figure("broker_avro_publish", f"{what}: Avro events/s", avro_rate, "events/s",
                       json_rate, "JSON"),
                Figure("broker_avro_publish", f"{what}: Avro request bytes per event",
                       len(as_avro) / size, "bytes", len(as_json) / size, "JSON",
                       higher_is_better=False),
            ]  # fmt: skip
        report(figures)
        return 0


if __name__ == "__main__":
    sys.exit(main())
