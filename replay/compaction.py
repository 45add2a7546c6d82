"""The Spark plan of one table: its events from Kafka (and the base snapshot's rows) compacted
to the last state of each primary key.

Order: the bridge partitions by primary key, so one key's events are in one partition, in
change order (through every timeline, whose offsets are counted on: ``kafka_events``);
within a key, the greater offset is the later change. Per key:

* the last event decides whether the row exists (``D``: gone; ``C``, ``U``, ``S``: there);
* each column takes its value from the last event that carries it. ``C`` and ``S`` events
  (and the base snapshot's rows, which come before every event) carry the whole row: a
  column the event lacks did not exist when it was written, so it is null. A ``U`` event
  may omit a column (an unchanged TOASTed value the changeserver did not receive): the
  column keeps the value of an earlier event. A ``D`` event sets no column.

Parsing each event's JSON costs most of a replay, so each Kafka record key's last record is
chosen first, by offset, and only it is parsed (the bridge keys every data event by its row's
key). It stands for its key's whole history when it is a ``C``, ``S`` or ``D``, or a ``U``
that carries every column; otherwise (a ``U`` that omits a column) every record of the key is
parsed, and so is every record without a key (written before the bridge keyed them). What is
parsed is then compacted as above, so the result is the same as parsing everything.

A table event (the bridge's ``D`` with ``data`` ``{}`` after a TRUNCATE or DROP TABLE, one per
partition, its record keyed ``[]``) ends every earlier row of its partition: each partition's
last one is found with the last records, and every record before it in that partition is left
out, as is the base snapshot's every row (the events after hold every row there is since).

Everything runs in Spark (grouped aggregations, a semi-join); the driver learns only whether
any key needs its history, and whether any table event was read.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from changebroker.bridge.table_events import TABLE_EVENT_KEY
from changebroker.replay.catalog import TableSpec
from changebroker.replay.columns import Column
from changebroker.replay.offsets import PartitionRange

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

# Offsets of the base snapshot's rows: before every event.
BASE_OFFSET = -1
# How far apart timelines' offsets are put (2^48: more events than a partition ever holds),
# so that one number orders a partition's events through its timelines.
TIMELINE_OFFSET = 1 << 48
# A batch read takes whole ranges at once: fetches far larger than the consumer's defaults
# (1 MiB per partition) cut the reading's CPU time by a third (bench/replay.py). The broker
# holds a fetch it has nothing for fetch.max.wait.ms (default 500 ms) before answering;
# with the default, each task of a replay waited about that long (its time less its CPU),
# though every range it reads is already there.
_KAFKA_BATCH_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(16 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
    "kafka.fetch.max.wait.ms": "10",
}
# What ``from_json`` reads a column's JSON value as, before it becomes the column's type.
_PARSE_TYPES = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "oid": "bigint",
    "json": "variant",
}


def _parse_type(column: Column) -> str:
    return _PARSE_TYPES.get(column.kind, "string")


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def event_schema(columns: Sequence[Column]) -> str:
    fields = ", ".join(f"{quoted(c.name)}: {_parse_type(c)}" for c in columns)
    return f"data_op string, data struct<{fields}>"


def kafka_events(
    spark: SparkSession, spec: TableSpec, ranges: Sequence[PartitionRange], bootstrap: str
) -> DataFrame | None:
    """The committed records of ``ranges`` (``None`` when there are none to read), from each
    timeline's topic on its cluster (``bootstrap``: the storage ``default``'s). Their
    ``offset`` counts through the timelines: a later timeline's records come after an earlier
    one's (``TIMELINE_OFFSET`` apart), so "the greatest offset" is "the last event"."""
    from pyspark.sql import functions as F

    reads = []
    for timeline in spec.timelines:
        reading = [r for r in ranges if r.size > 0 and r.timeline == timeline.order]
        if not reading:
            continue
        topic = timeline.topic
        starts = {str(r.partition): r.start for r in reading}
        ends = {str(r.partition): r.end for r in reading}
        read = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", timeline.bootstrap or bootstrap)
            .option("kafka.isolation.level", "read_committed")
            .options(**_KAFKA_BATCH_OPTIONS)
            .option("assign", json.dumps({topic: [r.partition for r in reading]}))
            .option("startingOffsets", json.dumps({topic: starts}))
            .option("endingOffsets", json.dumps({topic: ends}))
            .load()
        )
        if timeline.order > 1:
            shift = F.lit((timeline.order - 1) * TIMELINE_OFFSET)
            read = read.withColumn("offset", F.col("offset") + shift)
        reads.append(read)
    if not reads:
        return None
    return functools.reduce(lambda a, b: a.unionByName(b), reads)


def _converted(column: Column, raw: SparkColumn, table: str) -> SparkColumn:
    """A column's JSON value (as parsed) as its snapshot type; a value the type cannot hold
    fails the job, naming it, rather than turning into null."""
    from pyspark.sql import functions as F

    kind = column.kind
    if kind in ("float4", "float8"):
        # NaN and the infinities arrive as strings, the rest as numbers: both cast exactly.
        converted = raw.try_cast(column.spark_type)
    elif kind == "timestamptz":
        converted = raw.try_cast("timestamp")
    elif kind == "timestamp":
        # Postgres prints "2026-11-23 02:37:49.5"; the event has RFC 3339's "T".
        return F.regexp_replace(raw, r"^(\d+-\d\d-\d\d)T", "$1 ")
    elif kind == "bytea":
        converted = F.try_to_binary(raw, F.lit("base64"))
    elif kind == "json":
        text = F.to_json(raw)
        # JSON null is SQL NULL in the events (the bridge writes both as null).
        return F.when(text != F.lit("null"), text)
    else:
        return raw
    message = F.concat(
        F.lit(f"table {table} column {column.name}: value "),
        raw.cast("string"),
        F.lit(f" does not fit the snapshot's {column.spark_type} ({column.pg_type})"),
    )
    return F.when(raw.isNotNull() & converted.isNull(), F.raise_error(message)).otherwise(converted)


def parsed_events(events: DataFrame, spec: TableSpec) -> DataFrame:
    """One row per event: ``_op``, ``_offset``, ``_keys`` (the columns a ``U`` carries) and
    every column in its snapshot type."""
    from pyspark.sql import functions as F

    parsed = events.select(
        F.col("key").alias("_record_key"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("value").cast("string").alias("_value"),
        F.from_json(F.col("value").cast("string"), event_schema(spec.columns)).alias("_e"),
    )
    op = F.col("_e.data_op")
    # Only an update may omit a column, and an omitted column parses as null: an update
    # with a null column has its data scanned once more for the keys it carries.
    some_null = functools.reduce(
        operator.or_,
        (F.col("_e.data").getField(c.name).isNull() for c in spec.columns),
        F.lit(False),
    )
    return parsed.select(
        "_record_key",
        "_partition",
        op.alias("_op"),
        "_offset",
        F.when(
            (op == F.lit("U")) & some_null,
            F.json_object_keys(F.get_json_object("_value", "$.data")),
        ).alias("_keys"),
        *(
            _converted(c, F.col("_e.data").getField(c.name), spec.table).alias(c.name)
            for c in spec.columns
        ),
    )


def last_events(events: DataFrame, spec: TableSpec) -> DataFrame:
    """Each record key's last record, parsed, with ``_whole``: whether it stands for its key's
    whole history (else the key's earlier records are needed too, and its base row). A
    record without a key is a group of its own, as it is; table events are one group per
    partition (``table_ends`` picks them out)."""
    from pyspark.sql import functions as F

    keyless = F.col("key").isNull()
    per_partition = keyless | (F.col("key") == F.lit(TABLE_EVENT_KEY))
    last = (
        events.groupBy(
            "key",
            F.when(per_partition, F.col("partition")).alias("_group_partition"),
            F.when(keyless, F.col("offset")).alias("_keyless_offset"),
        )
        .agg(F.max_by(F.struct("offset", "value", "partition"), "offset").alias("_last"))
        .select("key", "_last.offset", "_last.value", "_last.partition")
    )
    parsed = parsed_events(last, spec)
    keys = F.col("_keys")
    every = F.array(*(F.lit(c.name) for c in spec.columns))
    # ``_keys`` is null unless a ``U`` has a null column; then it must name every column.
    whole = (
        (F.col("_op") != F.lit("U")) | keys.isNull() | (F.size(F.array_except(every, keys)) == 0)
    )
    return parsed.withColumn("_whole", whole)


def _is_table_event(record_key: SparkColumn) -> SparkColumn:
    from pyspark.sql import functions as F

    return record_key.isNotNull() & (record_key == F.lit(TABLE_EVENT_KEY))


def table_ends(last: DataFrame) -> DataFrame:
    """Per partition, the offset of its last table event (rows of ``last_events``)."""
    from pyspark.sql import functions as F

    ends = last.where(_is_table_event(F.col("_record_key")))
    return ends.select("_partition", F.col("_offset").alias("_end"))


def after_ends(parsed: DataFrame, ends: DataFrame) -> DataFrame:
    """The row events of ``parsed`` (``last_events`` or ``with_history`` rows) that no table
    event of their partition came after, without the partition."""
    from pyspark.sql import functions as F

    rows = parsed.where(~_is_table_event(F.col("_record_key")))
    kept = rows.join(F.broadcast(ends), "_partition", "left").where(
        F.col("_end").isNull() | (F.col("_offset") > F.col("_end"))
    )
    return kept.drop("_partition", "_end")


def with_history(events: DataFrame, needed: DataFrame, spec: TableSpec) -> DataFrame:
    """Every record of the keys of ``needed`` (rows of ``last_events``), parsed."""
    keys = needed.select(needed["_record_key"].alias("key"))
    return parsed_events(events.join(keys, "key", "left_semi"), spec)


def base_rows(spark: SparkSession, path: Path, format: str, spec: TableSpec) -> DataFrame:
    """The base snapshot's rows (a table in ``format``) as ``S`` events before every offset,
    in today's columns."""
    from pyspark.sql import functions as F

    base = spark.read.format(format).load(str(path))
    have = set(base.columns)
    return base.select(
        F.lit(None).cast("binary").alias("_record_key"),
        F.lit("S").alias("_op"),
        F.lit(BASE_OFFSET).cast("bigint").alias("_offset"),
        F.lit(None).cast("array<string>").alias("_keys"),
        *(
            (F.col(quoted(c.name)) if c.name in have else F.lit(None))
            .cast(c.spark_type)
            .alias(c.name)
            for c in spec.columns
        ),
    )


def compact(changes: DataFrame, spec: TableSpec) -> DataFrame:
    """The last state of each key; deleted keys left out."""
    from pyspark.sql import functions as F

    op, offset = F.col("_op"), F.col("_offset")
    key = set(spec.key)

    def carried(name: str) -> SparkColumn:
        keys = F.col("_keys")
        present = (
            F.when(op == F.lit("D"), F.lit(False))
            .when(keys.isNotNull(), F.array_contains(keys, F.lit(name)))
            .otherwise(F.lit(True))
        )
        return F.when(present, offset)

    values = [
        F.max_by(F.col(quoted(c.name)), carried(c.name)).alias(c.name)
        for c in spec.columns
        if c.name not in key
    ]
    grouped = changes.groupBy(*(F.col(quoted(k)) for k in spec.key)).agg(
        F.max_by(op, offset).alias("_last_op"), *values
    )
    return snapshot_columns(grouped.where(F.col("_last_op") != F.lit("D")), spec)


def snapshot_columns(frame: DataFrame, spec: TableSpec) -> DataFrame:
    """``frame``'s rows as the snapshot holds them: the table's columns, in order."""
    from pyspark.sql import functions as F

    return frame.select(*(F.col(quoted(c.name)) for c in spec.columns))


def onto_base(changes: DataFrame, base: DataFrame, spec: TableSpec, *, whole: bool) -> DataFrame:
    """``changes`` compacted onto ``base`` (rows of ``base_rows``): only the keys the changes
    name are compacted; every other base row, already a snapshot's, is carried over as it is,
    so an incremental run's work grows with what changed, not with the table. ``whole``: every
    key's last change carries its whole row (or deletes it), so a base row of a key the
    changes name cannot count, and the base is read once, for the rows of every other key."""
    from pyspark.sql import functions as F

    named = changes.select(*(F.col(quoted(k)) for k in spec.key)).distinct()
    same_key = [base[quoted(k)] == named[quoted(k)] for k in spec.key]
    if not whole:
        changes = changes.unionByName(base.join(named, same_key, "left_semi"))
    untouched = base.join(named, same_key, "left_anti")
    return compact(changes, spec).unionByName(snapshot_columns(untouched, spec))
