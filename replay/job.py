"""``run_replay``: the bridge's data-change event types -> one Parquet dataset per table and a
manifest, from the base snapshot's cursors (or the beginning) up to ``--until``.

Each table is read from Kafka (``read_committed``), unioned with the base snapshot's rows,
compacted (replay/compaction.py) and written; the manifest is published last
(replay/snapshots.py), so a failed or killed run leaves the previous snapshot the newest.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from changebroker.replay import compaction, offsets, positions, snapshots, writing
from changebroker.replay.catalog import Catalog, SpecTimeline, TableSpec, broker_client
from changebroker.replay.columns import NoPrimaryKey
from changebroker.replay.offsets import PartitionRange, Watermarks
from changebroker.replay.snapshots import Manifest, TableEntry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TABLES_DIR = "tables"
FORMATS = ("parquet", "delta")
CONCURRENT_TABLES = 4


@dataclass(frozen=True)
class ReplayOptions:
    broker_url: str
    kafka_bootstrap: str
    out: Path
    tables: tuple[str, ...] = ()  # schema.table (a bare name is public.<name>)
    event_types: tuple[str, ...] = ()
    every: bool = False  # every table the bridge writes (also when nothing is named)
    until: str = "latest"
    full: bool = False  # ignore the snapshots in ``out``: read from the beginning
    base: str | None = None  # a snapshot id in ``out``; default the newest
    master: str | None = None  # Spark master; default CHANGEBROKER_SPARK_MASTER or local[*]
    prefix: str = "changebroker"  # the bridge's --prefix and --pattern name its event types
    pattern: str = "{prefix}.{schema}.{table}"
    bridge_name: str = "bridge"  # whose position record ends ``latest`` exactly
    wait_seconds: float = 60.0  # for an --until end whose transaction is not committed yet
    format: str = "parquet"  # or "delta" (README "Snapshot format")
    client_token: str | None = None  # sent to the broker when it checks credentials
    tls_ca: Path | None = None  # CA the broker's certificate is checked against


@dataclass(frozen=True)
class _Planned:
    spec: TableSpec
    ranges: list[PartitionRange]
    base: Path | None
    base_format: str


def run_replay(
    options: ReplayOptions,
    spark: SparkSession | None = None,
    say: Callable[[str], None] = print,
) -> Manifest:
    """Write a snapshot and return its manifest. ``spark``: a session to use (and leave
    running); without one, a session on ``options.master`` is made and stopped (or the
    one this process runs is used)."""
    started = time.monotonic()
    # Its JVM starts while the broker and Kafka are asked what to read: seconds a cold
    # start would otherwise add to the plan's.
    own = _SessionStart(options.master) if spark is None else None
    try:
        for left in writing.sweep(options.out):
            say(f"replay: removed {left}, which a killed or failed run left unfinished")
        planned, base, skipped, sequence = _plan(options, say)
        total = sum(r.size for p in planned for r in p.ranges)
        say(
            f"replay: {len(planned)} tables, {total:,} offsets to read, base "
            f"{base.snapshot_id if base else 'none (from the beginning)'},"
            f" until {offsets.parse_until(options.until).describe()}"
        )
        if own is not None:
            spark = own.session()
            say(f"replay: Spark {spark.version} on {spark.sparkContext.master} ready")
        assert spark is not None
        snapshot_id = snapshots.new_snapshot_id()
        directory = options.out / snapshot_id
        with writing.writing(directory, writing.hold_in_jvm(spark.sparkContext._jvm)):
            (directory / TABLES_DIR).mkdir()
            with _Heartbeat(spark, say):
                entries = _write_tables(spark, options, planned, directory, snapshot_id, say)
            manifest = Manifest(
                snapshot_id=snapshot_id,
                created_at=snapshots.rfc3339(datetime.now(UTC)),
                base_snapshot_id=base.snapshot_id if base else None,
                changeserver_sequence=sequence,
                tables=entries,
                cursors={p.spec.event_type: offsets.cursors_of(p.spec, p.ranges) for p in planned},
                duration_seconds=round(time.monotonic() - started, 3),
            )
            published = snapshots.publish(directory, manifest)
    finally:
        if own is not None:
            own.stop()
    elapsed = time.monotonic() - started
    rows = sum(entry.rows for entry in entries.values())
    rate = total / elapsed if elapsed > 0 else 0.0
    note = f"; skipped {', '.join(skipped)}" if skipped else ""
    say(
        f"snapshot {snapshot_id}: {len(entries)} tables, {rows:,} rows, {total:,} changes read"
        f" in {elapsed:.1f}s ({rate:,.0f}/s) -> {directory}{note}"
    )
    return published


def _plan(
    options: ReplayOptions, say: Callable[[str], None]
) -> tuple[list[_Planned], Manifest | None, list[str], str | None]:
    """What each table reads, the base, the tables skipped, and the changeserver sequence
    the snapshot will be exact at (``None`` when that cannot be known)."""
    base = _base(options)
    until = offsets.parse_until(options.until)
    clusters: dict[str, Watermarks] = {}

    def watermarks(timeline: SpecTimeline) -> Watermarks:
        """Of the timeline's cluster: its storage's, or the replay's own."""
        bootstrap = timeline.bootstrap or options.kafka_bootstrap
        if bootstrap not in clusters:
            clusters[bootstrap] = Watermarks(bootstrap)
        return clusters[bootstrap]

    bridge = positions.read(options.kafka_bootstrap, options.bridge_name) if until.latest else None
    exact = bridge is not None
    planned, skipped = [], []
    with broker_client(options.broker_url, options.client_token, options.tls_ca) as broker:
        catalog = Catalog(broker, options.pattern, options.prefix)
        chosen = catalog.select(options.tables, options.event_types, options.every)
        for event_type, table in sorted(chosen.items(), key=lambda item: item[1]):
            try:
                spec = catalog.describe(event_type, table)
            except NoPrimaryKey as refused:
                if options.tables or options.event_types:
                    raise
                say(f"replay: skipped: {refused}")
                skipped.append(table)
                continue
            from_base = base is not None and table in base.tables
            # A timeline switch gives the event type a new topic; one re-created has none of
            # the topics it had.
            if from_base and base is not None and base.tables[table].topic not in spec.topics:
                say(f"replay: {table}: its event type was re-created; reading it from the start")
                from_base = False
            cursors = base.cursors.get(event_type) if from_base and base is not None else None
            written = bridge.offsets if bridge is not None else None
            ranges = offsets.plan(spec, cursors, until, watermarks, options.wait_seconds, written)
            # A partition of the active timeline with events the record does not name (written
            # before the bridge kept offsets) ends at its last stable offset: then no sequence
            # is exact. Closed timelines end where their switch recorded.
            named = bridge.written(spec.topic) if bridge is not None else {}
            exact = exact and all(
                r.partition in named or r.end == 0
                for r in ranges
                if r.timeline == spec.active.order
            )
            base_path = base.table_path(table) if from_base and base is not None else None
            base_format = base.tables[table].format if from_base and base is not None else ""
            if bridge is not None and table in bridge.snapshotting:
                say(
                    f"replay: {table}: the bridge is still publishing its existing rows;"
                    " this snapshot holds the ones published so far"
                )
                exact = False
            planned.append(_Planned(spec, ranges, base_path, base_format))
    sequence = bridge.sequence(p.spec.table for p in planned) if bridge and exact else None
    return planned, base, skipped, sequence


def _base(options: ReplayOptions) -> Manifest | None:
    if options.full:
        return None
    if options.base is not None:
        return snapshots.find(options.out, options.base)
    return snapshots.newest(options.out)


def _write_tables(
    spark: SparkSession,
    options: ReplayOptions,
    planned: list[_Planned],
    directory: Path,
    snapshot_id: str,
    say: Callable[[str], None],
) -> dict[str, TableEntry]:
    """Every table's Spark job, several at once: a small table's job is mostly waiting (planning,
    committing files), which another table's tasks fill. One table failing cancels the rest."""
    total = sum(r.size for p in planned for r in p.ranges)
    entries: dict[str, TableEntry] = {}
    read = 0

    def write(item: _Planned) -> TableEntry:
        spark.sparkContext.setJobGroup(snapshot_id, f"replay {snapshot_id}", True)
        return _write_table(spark, options, item, directory, say)

    # Delta tables one at a time: two threads' Delta jobs at once did not finish in a test run.
    concurrent = 1 if options.format == "delta" else CONCURRENT_TABLES
    with ThreadPoolExecutor(max(1, min(concurrent, len(planned)))) as pool:
        running = {pool.submit(write, item): item for item in planned}
        try:
            for done in as_completed(running):
                item, entry = running[done], done.result()
                entries[item.spec.table] = entry
                read += sum(r.size for r in item.ranges)
                say(
                    f"replay: {item.spec.table}: {entry.rows:,} rows written;"
                    f" offsets read {read:,} of {total:,}"
                )
        except BaseException:
            pool.shutdown(cancel_futures=True)
            spark.sparkContext.cancelJobGroup(snapshot_id)
            raise
    return dict(sorted(entries.items()))


def _write_table(
    spark: SparkSession,
    options: ReplayOptions,
    item: _Planned,
    directory: Path,
    say: Callable[[str], None],
) -> TableEntry:
    spec = item.spec
    reading = sum(r.size for r in item.ranges)
    say(
        f"replay: {spec.table}: reading {reading:,} offsets of {spec.event_type}"
        + (" onto the base snapshot" if item.base else "")
    )
    events = compaction.kafka_events(spark, spec, item.ranges, options.kafka_bootstrap)
    relative = f"{TABLES_DIR}/{spec.table}"
    target = str(directory / relative)
    with compacted(spark, spec, events, item.base, item.base_format) as table:
        table.write.format(options.format).save(target)
    # From the files' footers (or the Delta log): a short job, no data read.
    rows = spark.read.format(options.format).load(target).count()
    return TableEntry(
        event_type=spec.event_type,
        topic=spec.topic,
        path=relative,
        format=options.format,
        rows=rows,
        primary_key=spec.key,
        schema_versions=spec.schema_versions,
        columns=spec.columns,
    )


@contextlib.contextmanager
def compacted(
    spark: SparkSession,
    spec: TableSpec,
    events: DataFrame | None,
    base: Path | None,
    base_format: str,
) -> Iterator[DataFrame]:
    """The table's snapshot rows: ``events`` (Kafka records, or None) compacted onto the
    ``base`` snapshot's table (or none). Valid inside the ``with``: a part is kept cached."""
    # Kept: asked whether any key's last record is partial, then compacted.
    parsed = compaction.last_events(events, spec).persist() if events is not None else None
    try:
        changes, whole, ended = None, True, False
        if events is not None and parsed is not None:
            ends = compaction.table_ends(parsed)
            # A TRUNCATE or DROP TABLE read: every row there is since has events after it.
            ended = not ends.isEmpty()
            last = compaction.after_ends(parsed, ends)
            changes = last.drop("_whole")
            partial = last.where("NOT _whole")
            if not partial.isEmpty():
                whole = False
                # A record without a key is compacted as it is (compaction's docstring).
                needed = partial.where("_record_key IS NOT NULL")
                changes = last.where("_whole OR _record_key IS NULL").drop("_whole")
                history = compaction.with_history(events, needed, spec)
                changes = changes.unionByName(compaction.after_ends(history, ends))
        base_rows = None
        if base is not None and not ended:
            base_rows = compaction.base_rows(spark, base, base_format, spec)
        if changes is not None and base_rows is not None:
            yield compaction.onto_base(changes, base_rows, spec, whole=whole)
        elif changes is not None:
            yield compaction.compact(changes, spec)
        elif base_rows is not None:
            yield compaction.snapshot_columns(base_rows, spec)  # nothing new: the base as it is
        else:
            yield _empty(spark, spec)
    finally:
        if parsed is not None:
            parsed.unpersist()


def _empty(spark: SparkSession, spec: TableSpec) -> DataFrame:
    ddl = ", ".join(f"{compaction.quoted(c.name)} {c.spark_type}" for c in spec.columns)
    return spark.createDataFrame([], ddl)


class _SessionStart:
    """A one-run SparkSession (``spark_session(one_run=True)``) starting on a thread of its
    own from construction; ``stop`` waits for the start, whether or not it was used, and
    stops the session. A session this process already runs is used and left running."""

    def __init__(self, master: str | None):
        self._master = master
        self._spark: SparkSession | None = None
        self._made = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="replay-spark-start")
        self._thread.start()

    def _start(self) -> None:
        from pyspark import SparkContext

        from changebroker.replay.spark import spark_session

        try:
            self._made = SparkContext._active_spark_context is None
            self._spark = spark_session(self._master, app_name="changebroker-replay", one_run=True)
        except BaseException as error:  # handed to whoever asks for the session
            self._error = error

    def session(self) -> SparkSession:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._spark is not None
        return self._spark

    def stop(self) -> None:
        self._thread.join()
        if self._spark is not None and self._made:
            self._spark.stop()


class _Heartbeat:
    """Every few seconds, the running Spark stages' task progress: a long table shows it is
    moving."""

    def __init__(self, spark: SparkSession, say: Callable[[str], None], every: float = 5.0):
        self._tracker = spark.sparkContext.statusTracker()
        self._say = say
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-progress", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
            shown = [
                f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks"
                for s in stages
                if s is not None
            ]
            if shown:
                self._say("replay:   " + "; ".join(shown))
