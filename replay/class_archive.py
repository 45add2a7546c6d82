"""The Spark driver's class archive: made once per machine, used by every later Spark start.

A replay in a new process spends seconds loading Spark's classes before its first task.
``ensure`` runs a small replay in a child process whose driver JVM writes the classes it
loaded to an archive as it exits (Java's dynamic application class data sharing);
``changebroker.replay.spark.spark_session`` then maps them from the archive. The small replay
goes through the same compaction as a real one (replay/job.py ``compacted``), onto a base
and from scratch, in Parquet and Delta, over Kafka-shaped records built in Spark: every path
a replay takes but reading from Kafka, which needs a broker: the Kafka source is only
defined, and the Kafka client's classes (the most a first read loads) are loaded by name.

    .venv/bin/python -m changebroker.replay.class_archive   # what scripts/install.sh runs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from changebroker import pg_types
from changebroker.replay import compaction
from changebroker.replay.catalog import SpecTimeline, TableSpec
from changebroker.replay.columns import Column
from changebroker.replay.job import compacted
from changebroker.replay.offsets import PartitionRange
from changebroker.replay.spark import class_archive, connector_jars, spark_session
from changebroker.state import StateDir, default_state_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_DUMP_TIMEOUT = 900  # seconds: a slow machine's first Spark start, the replay, the dump
_KEYS = 2_000
_NO_BROKER = "127.0.0.1:9"  # the discard port: analysing a Kafka read never connects
# The jars whose classes a Kafka read loads: the client, the connector, its consumer pool.
_KAFKA_CLIENT_JARS = ("kafka-clients-", "spark-sql-kafka-", "commons-pool2-")

# One column of each kind a snapshot converts (replay/columns.py).
_SPEC = TableSpec(
    table="public.class_archive",
    event_type="class_archive",
    timelines=(SpecTimeline(1, "class_archive", None),),
    partitions=2,
    key=("id",),
    columns=(
        Column("id", "bigint", pg_types.INT8.oid, False),
        Column("name", "text", pg_types.TEXT.oid, True),
        Column("amount", "numeric(12,2)", pg_types.NUMERIC.oid, True),
        Column("ratio", "double precision", pg_types.FLOAT8.oid, True),
        Column("flag", "boolean", pg_types.BOOL.oid, True),
        Column("at", "timestamp with time zone", pg_types.TIMESTAMPTZ.oid, True),
        Column("local", "timestamp without time zone", pg_types.TIMESTAMP.oid, True),
        Column("raw", "bytea", pg_types.BYTEA.oid, True),
        Column("doc", "jsonb", pg_types.JSONB.oid, True),
    ),
    schema_versions=("1.0.0",),
)


def ensure(state: StateDir | None = None) -> Path:
    """The class archive, made first when there is none (a minute or two)."""
    archive = class_archive(state)
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    log = archive.with_suffix(".log")  # Spark's own output: only worth reading on a failure
    try:
        with log.open("wb") as output:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "changebroker.replay.class_archive",
                    "--dump-to",
                    str(partial),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=_DUMP_TIMEOUT,
                env={
                    **os.environ,
                    **({"CHANGEBROKER_CACHE_DIR": str(state.cache)} if state else {}),
                },
            )
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            raise RuntimeError(f"the JVM wrote no class archive to {partial}: see {log}")
        partial.replace(archive)  # atomic: a concurrent Spark start sees all of it or none
    finally:
        partial.unlink(missing_ok=True)
    return archive


def _dump(to: Path) -> None:
    """In the child: a small replay, then the driver JVM's exit, which writes the archive."""
    spark = spark_session("local[2]", app_name="changebroker-class-archive", archive_classes_to=to)
    jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    try:
        with tempfile.TemporaryDirectory() as directory:
            _replay(spark, Path(directory))
    finally:
        spark.stop()
    # pyspark leaves its JVM to exit on its own once this process ends; the archive is
    # written as it exits, so end it here and wait, or the parent could take a partial file.
    jvm.stdin.close()
    jvm.wait(timeout=_DUMP_TIMEOUT)


def _replay(spark: SparkSession, directory: Path) -> None:
    # The Kafka source as far as it goes without a broker: defined and analysed, never run.
    ranges = [PartitionRange(0, 0, 10), PartitionRange(1, 0, 10)]
    kafka = compaction.kafka_events(spark, _SPEC, ranges, _NO_BROKER)
    assert kafka is not None
    compaction.last_events(kafka, _SPEC)  # analysed as it is built
    _load_classes(spark, _KAFKA_CLIENT_JARS)
    first, more = _events(spark, 0), _events(spark, 1)
    for format in ("parquet", "delta"):
        base = directory / format / "base"
        with compacted(spark, _SPEC, first, None, format) as table:
            table.write.format(format).save(str(base))
        onto = directory / format / "onto"
        with compacted(spark, _SPEC, more, base, format) as table:
            table.write.format(format).save(str(onto))
        spark.read.format(format).load(str(onto)).count()


def _load_classes(spark: SparkSession, jar_names: tuple[str, ...]) -> None:
    """Load (without initializing) every class of the connector jars named: what the
    archive holds is what was loaded, whether or not it ran."""
    jvm: Any = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    for jar in connector_jars():
        if not Path(jar).name.startswith(jar_names):
            continue
        with zipfile.ZipFile(jar) as archive:
            names = [n for n in archive.namelist() if n.endswith(".class") and "-" not in n]
        for name in names:
            # A class needing what a replay never uses (an optional library) fails: skipped.
            with contextlib.suppress(Py4JJavaError):
                jvm.java.lang.Class.forName(name[: -len(".class")].replace("/", "."), False, loader)


def _events(spark: SparkSession, round: int) -> DataFrame:
    """Kafka source rows (key, value, partition, offset) of ``C``/``U``/``D`` events of
    ``_SPEC``, a ``U`` without a column among them (its key's whole history is read)."""
    from pyspark.sql import functions as F

    offset = F.col("id") + F.lit(round * 10 * _KEYS)
    key = (F.col("id") * 7 + round) % _KEYS
    op = (
        F.when(F.col("id") % 11 == 0, F.lit("D"))
        .when(F.col("id") < _KEYS, F.lit("C"))
        .otherwise(F.lit("U"))
    )
    data = F.struct(
        key.alias("id"),
        F.concat(F.lit("name "), offset.cast("string")).alias("name"),
        (offset / 100).cast("decimal(12,2)").cast("string").alias("amount"),
        (offset / 3).alias("ratio"),
        (offset % 2 == 0).alias("flag"),
        F.lit("2026-11-27T05:00:00.123456Z").alias("at"),
        F.lit("2026-11-27T05:00:00.5").alias("local"),
        F.lit("AAEC").alias("raw"),
        F.struct(offset.alias("n")).alias("doc"),
    )
    # Every 13th update leaves "doc" out, as an unchanged TOASTed column is.
    partial = F.struct(*(data.getField(c.name).alias(c.name) for c in _SPEC.columns[:-1]))
    value = F.when(
        (op == F.lit("U")) & (F.col("id") % 13 == 0),
        F.to_json(F.struct(op.alias("data_op"), partial.alias("data"))),
    ).otherwise(F.to_json(F.struct(op.alias("data_op"), data.alias("data"))))
    return spark.range(10 * _KEYS).select(
        key.cast("string").cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        (key % 2).cast("int").alias("partition"),
        offset.alias("offset"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m changebroker.replay.class_archive", description=__doc__
    )
    parser.add_argument("--dump-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump_to is not None:
        _dump(args.dump_to)
        return 0
    state = StateDir(default_state_dir())
    archive = class_archive(state)
    if archive.exists():
        print(f"spark class archive: {archive}")
        return 0
    started = time.monotonic()
    print("spark class archive: running a small replay to record the classes Spark loads")
    ensure(state)
    print(f"spark class archive: {archive} ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
