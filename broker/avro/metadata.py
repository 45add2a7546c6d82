"""An event's metadata both ways: the JSON object JSON readers see, the Avro ``Metadata`` record.

Timestamps are RFC 3339 text in JSON (``2026-01-02T03:04:05.678Z``, milliseconds as Nakadi
writes them) and milliseconds since the epoch in Avro; ``span_ctx`` is an object in JSON and
its JSON text in Avro; fields without a value are absent in JSON and null in Avro.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from changebroker.timestamps import utc_second

TIMESTAMPS = ("occurred_at", "received_at")
# The Avro record's fields (version 1), in its order.
FIELDS = (
    "occurred_at",
    "eid",
    "flow_id",
    "received_at",
    "version",
    "published_by",
    "event_type",
    "partition",
    "partition_keys",
    "partition_compaction_key",
    "parent_eids",
    "span_ctx",
    "event_owner",
)


def rfc3339(millis: int) -> str:
    """Milliseconds since the epoch as Nakadi writes a moment."""
    second, rest = divmod(millis, 1000)
    return f"{utc_second(second)}.{rest:03d}Z"


def millis(text: str) -> int:
    """RFC 3339 text as milliseconds since the epoch; ValueError when it is not one."""
    moment = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return int(moment.astimezone(UTC).timestamp() * 1000)


def to_json(record: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro record as JSON metadata."""
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = record.get(name)
        if value is None:
            continue
        if name in TIMESTAMPS:
            value = rfc3339(value)
        elif name == "span_ctx":
            value = _span_context(value)
        out[name] = value
    return out


def _span_context(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def to_avro(metadata: Mapping[str, Any], version: str) -> dict[str, Any]:
    """JSON metadata as the Avro record, its payload being of schema ``version``; ValueError
    names a field the record cannot hold."""
    record: dict[str, Any] = {name: None for name in FIELDS}
    for name in FIELDS:
        value = metadata.get(name)
        if value is None:
            continue
        if name in TIMESTAMPS:
            if not isinstance(value, str):
                raise ValueError(f"metadata.{name} is not an RFC 3339 date-time")
            value = millis(value)
        elif name == "span_ctx" and not isinstance(value, str):
            value = json.dumps(value, separators=(",", ":"))
        record[name] = value
    for required in ("occurred_at", "eid", "event_type"):
        if record[required] is None:
            raise ValueError(f"metadata.{required} is required in an Avro envelope")
    record["version"] = version
    return record
