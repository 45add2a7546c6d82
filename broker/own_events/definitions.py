"""The event types Nakadi creates for itself at start, as Nakadi defines them.

Its KPI event types (``nakadi.event.type.log``, ``nakadi.subscription.log``,
``nakadi.data.streamed``, ``nakadi.batch.published``, ``nakadi.access.log``: business events
with Avro schemas), its audit log (``nakadi.audit.log``: data-change events, JSON) and its
dead-letter queue (``nakadi.dead.letter.queue``). Names, fields and types, categories,
partitioning, statistics, retention and compatibility modes are Nakadi's; their owner is
Nakadi's default application, and every authenticated caller may read them (Nakadi's default
for the audit log and the queue; docs/nakadi-differences.md).
"""

from __future__ import annotations

import json
from typing import Any

from changebroker.broker.subscriptions.dead_letters import QUEUE_EVENT_TYPE

OWNING_APPLICATION = "stups_nakadi"
KPI_NAMESPACE = "org.zalando.nakadi.kpi.event"
EVENT_TYPE_LOG = "nakadi.event.type.log"
SUBSCRIPTION_LOG = "nakadi.subscription.log"
DATA_STREAMED = "nakadi.data.streamed"
BATCH_PUBLISHED = "nakadi.batch.published"
ACCESS_LOG = "nakadi.access.log"
AUDIT_LOG = "nakadi.audit.log"
FOUR_DAYS_MS = 345_600_000
ONE_DAY_MS = 86_400_000
_ANYONE = [{"data_type": "*", "value": "*"}]


def _fields(*pairs: tuple[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "type": kind, "default": None}
        if isinstance(kind, list)
        else {"name": name, "type": kind}
        for name, kind in pairs
    ]


# Each KPI event type's Avro record: (record name, fields) in Nakadi's order.
KPI_SCHEMAS: dict[str, dict[str, Any]] = {
    name: {"name": record, "namespace": KPI_NAMESPACE, "type": "record", "fields": _fields(*fields)}
    for name, record, fields in (
        (
            BATCH_PUBLISHED,
            "NakadiBatchPublished",
            [
                ("event_type", "string"),
                ("app", "string"),
                ("app_hashed", "string"),
                ("token_realm", "string"),
                ("number_of_events", "int"),
                ("ms_spent", "long"),
                ("batch_size", "long"),
            ],
        ),
        (
            DATA_STREAMED,
            "NakadiDataStreamed",
            [
                ("api", "string"),
                ("subscription", ["null", "string"]),
                ("event_type", "string"),
                ("app", "string"),
                ("app_hashed", "string"),
                ("token_realm", "string"),
                ("number_of_events", "long"),
                ("bytes_streamed", "long"),
                ("batches_streamed", "int"),
            ],
        ),
        (
            ACCESS_LOG,
            "NakadiAccessLog",
            [
                ("method", "string"),
                ("path", "string"),
                ("query", "string"),
                ("user_agent", "string"),
                ("app", "string"),
                ("app_hashed", "string"),
                ("status_code", "int"),
                ("response_time_ms", "long"),
                ("accept_encoding", "string"),
                ("content_encoding", "string"),
                ("request_length", "long"),
                ("response_length", "long"),
            ],
        ),
        (
            EVENT_TYPE_LOG,
            "NakadiEventTypeLog",
            [
                ("event_type", "string"),
                ("status", "string"),
                ("category", "string"),
                ("authz", "string"),
                ("compatibility_mode", "string"),
            ],
        ),
        (
            SUBSCRIPTION_LOG,
            "NakadiSubscriptionLog",
            [("subscription_id", "string"), ("status", "string")],
        ),
    )
}

# (compatibility mode, partitions, audience) of each KPI event type, as Nakadi creates it.
_KPI_SHAPES: dict[str, tuple[str, int, str | None]] = {
    BATCH_PUBLISHED: ("compatible", 10, "component-internal"),
    DATA_STREAMED: ("compatible", 8, "component-internal"),
    ACCESS_LOG: ("forward", 8, None),
    EVENT_TYPE_LOG: ("forward", 1, "component-internal"),
    SUBSCRIPTION_LOG: ("compatible", 1, None),
}

_AUDIT_SCHEMA = {
    "properties": {
        "previous_object": {"type": "object", "description": "the resource before the change"},
        "previous_text": {"type": "string", "description": "previous_object as text"},
        "new_object": {"type": "object", "description": "the resource after the change"},
        "new_text": {"type": "string", "description": "new_object as text"},
        "resource_type": {
            "x-extensible-enum": [
                "event_type",
                "subscription",
                "timeline",
                "storage",
                "feature",
                "admins",
                "cursors",
                "blacklist_entry",
            ],
            "type": "string",
        },
        "resource_id": {"description": "with resource_type, names the resource", "type": "string"},
        "user": {"description": "who requested the change", "type": "string"},
        "user_hash": {"description": "user, hashed", "type": "string"},
    },
    "required": ["user", "user_hash", "resource_id", "resource_type"],
}

_QUEUE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "subscription_id": {"type": "string", "format": "uuid"},
        "event_type": {"type": "string"},
        "partition": {"type": "string"},
        "offset": {"type": "string"},
        "error": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
        "event": {
            "type": "object",
            "additionalProperties": True,
            "properties": {
                "metadata": {
                    "type": "object",
                    "additionalProperties": True,
                    "properties": {
                        "event_type": {"type": "string"},
                        "eid": {"type": "string", "format": "uuid"},
                        "occurred_at": {"type": "string", "format": "date-time"},
                    },
                    "required": ["event_type", "eid", "occurred_at"],
                }
            },
            "required": ["metadata"],
        },
    },
    "required": ["subscription_id", "event_type", "partition", "offset", "error", "event"],
}


def _event_type(
    name: str,
    category: str,
    schema: dict[str, Any],
    schema_type: str,
    mode: str,
    partitions: int,
    *,
    audience: str | None,
    retention_ms: int = FOUR_DAYS_MS,
    messages: tuple[int, int] = (100, 100),
    **more: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "owning_application": OWNING_APPLICATION,
        "category": category,
        "enrichment_strategies": ["metadata_enrichment"],
        "partition_strategy": "random",
        "cleanup_policy": "delete",
        "schema": {"type": schema_type, "schema": json.dumps(schema)},
        "default_statistic": {
            "messages_per_minute": messages[0],
            "message_size": messages[1],
            "read_parallelism": partitions,
            "write_parallelism": partitions,
        },
        "options": {"retention_time": retention_ms},
        "compatibility_mode": mode,
        "authorization": {"admins": _ANYONE, "readers": _ANYONE, "writers": _ANYONE},
        **more,
    }
    if audience is not None:
        body["audience"] = audience
    return body


def event_types() -> list[dict[str, Any]]:
    """The bodies that create them."""
    kpi = [
        _event_type(name, "business", KPI_SCHEMAS[name], "avro_schema", mode, n, audience=audience)
        for name, (mode, n, audience) in _KPI_SHAPES.items()
    ]
    audit = _event_type(
        AUDIT_LOG,
        "data",
        _AUDIT_SCHEMA,
        "json_schema",
        "forward",
        10,
        audience="company-internal",
        partition_strategy="hash",
        partition_key_fields=["resource_id"],
    )
    queue = _event_type(
        QUEUE_EVENT_TYPE,
        "business",
        _QUEUE_SCHEMA,
        "json_schema",
        "forward",
        1,
        audience="component-internal",
        retention_ms=ONE_DAY_MS,
        messages=(1, 1000),
    )
    return [*kpi, audit, queue]
