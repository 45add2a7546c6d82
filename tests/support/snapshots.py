"""Snapshots in the replay job's layout, written straight from ``SELECT`` with pyarrow.

For tests of what reads snapshots (``/snapshots``): the snapshot is the table as Postgres
has it, typed as the replay job types Parquet columns, without a replay run.
"""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from changebroker.replay.snapshots import new_snapshot_id

# Postgres type name -> the Parquet (Arrow) type of the replay's columns; others are text.
_TYPED: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float4": pa.float64(),
    "float8": pa.float64(),
    "bytea": pa.binary(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}


def _columns(conn: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT a.attname, t.typname, a.atttypid::int, NOT a.attnotnull FROM pg_attribute a"
        " JOIN pg_type t ON t.oid = a.atttypid"
        " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY a.attnum",
        (table,),
    ).fetchall()
    return [
        {"name": name, "pg_type": typname, "type_oid": oid, "nullable": nullable}
        for name, typname, oid, nullable in rows
    ]


def write_snapshot(
    out: Path,
    dsn: str,
    tables: list[str],
    sequence: str | None,
    *,
    rows_per_file: int = 50_000,
    when: datetime.datetime | None = None,
    duration_seconds: float | None = None,
) -> str:
    """Write ``tables`` (``schema.table``) as they are now; returns the snapshot id."""
    when = when or datetime.datetime.now(datetime.UTC)
    # As the replay names them: two written within a second still sort by time.
    snapshot_id = new_snapshot_id(when)
    folder = out / snapshot_id
    manifest: dict[str, Any] = {
        "format": 1,
        "snapshot_id": snapshot_id,
        "created_at": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "duration_seconds": duration_seconds,
        "base_snapshot_id": None,
        "changeserver_sequence": sequence,
        "tables": {},
        "cursors": {},
    }
    with psycopg.connect(dsn) as conn:
        conn.execute("SET DateStyle = ISO; SET TimeZone = UTC; SET extra_float_digits = 3")
        for table in tables:
            columns = _columns(conn, table)
            schema = pa.schema(
                [(c["name"], _TYPED.get(c["pg_type"], pa.string())) for c in columns]
            )
            select = ", ".join(
                f'"{c["name"]}"' if c["pg_type"] in _TYPED else f'"{c["name"]}"::text'
                for c in columns
            )
            path = folder / "tables" / table
            path.mkdir(parents=True)
            count = 0
            with conn.cursor(name=f"snap_{uuid.uuid4().hex[:8]}") as cursor:
                cursor.execute(f"SELECT {select} FROM {table}")
                part = 0
                while batch := cursor.fetchmany(rows_per_file):
                    data = [list(column) for column in zip(*batch, strict=True)]
                    arrays = [
                        pa.array(values, type=f.type)
                        for values, f in zip(data, schema, strict=True)
                    ]
                    pq.write_table(
                        pa.Table.from_arrays(arrays, schema=schema),
                        path / f"part-{part:05d}.parquet",
                    )
                    part += 1
                    count += len(batch)
                if not count:  # as Spark does: one file with the schema and no rows
                    pq.write_table(schema.empty_table(), path / "part-00000.parquet")
            manifest["tables"][table] = {
                "event_type": f"changebroker.{table}",
                "path": f"tables/{table}",
                "rows": count,
                "primary_key": [],
                "schema_versions": ["1.0.0"],
                "columns": columns,
            }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return snapshot_id
