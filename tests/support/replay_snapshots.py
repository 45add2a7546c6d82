"""Reading a replay snapshot back in the form the events have, to compare with ``SELECT *``
and apply events to."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

from pyspark.sql import SparkSession

from changebroker.replay.columns import Column
from changebroker.replay.snapshots import Manifest

Rows = dict[tuple[Any, ...], dict[str, Any]]


def _float4(value: float) -> float:
    """The shortest decimal that is this float4, as Postgres prints it (and the events)."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        shortest = float(f"{value:.{digits}g}")
        if struct.pack("<f", shortest) == packed:
            return shortest
    return value


def event_value(value: Any, column: Column) -> Any:
    """A snapshot value as the bridge's events carry it (bridge/values.py)."""
    if value is None:
        return None
    kind = column.kind
    if kind in ("float4", "float8"):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return _float4(value) if kind == "float4" else value
    if kind == "timestamp":
        return value.replace(" ", "T", 1)
    if kind == "timestamptz":
        # Read as microseconds since the epoch (below): Postgres prints UTC, offset +00:00.
        seconds, micros = divmod(value, 1_000_000)
        from datetime import UTC, datetime

        text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        if micros:
            text += f".{micros:06d}".rstrip("0")
        return text + "+00:00"
    if kind == "bytea":
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == "json":
        return json.loads(value)
    return value


def snapshot_tables(spark: SparkSession, manifest: Manifest) -> dict[str, Rows]:
    """Every table of the snapshot: key (sorted key columns' values) -> row, values as the
    events carry them. Tests may collect; the job never does."""
    out = {}
    for table, entry in manifest.tables.items():
        frame = spark.read.format(entry.format).load(str(manifest.table_path(table)))
        selected = [
            f"unix_micros(`{c.name}`) AS `{c.name}`" if c.kind == "timestamptz" else f"`{c.name}`"
            for c in entry.columns
        ]
        rows: Rows = {}
        for row in frame.selectExpr(*selected).collect():
            data = {c.name: event_value(row[c.name], c) for c in entry.columns}
            rows[tuple(data[k] for k in sorted(entry.primary_key))] = data
        out[table] = rows
    return out
