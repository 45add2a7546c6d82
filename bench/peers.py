"""The two change pipelines ``cdc_peers`` and ``writer_overhead`` put side by side, each
started on a replication slot of its own and stopped (the slot dropped) before the other
starts, on the same Postgres and Kafka:

* ours: changeserver -> bridge -> Kafka, exactly once (the bridge commits each batch's events
  and its position in one Kafka transaction), with the registry and broker it needs;
* Debezium's Postgres connector 3.6.1.Final (pgoutput) in its embedded engine, run by
  ``debezium/DebeziumToKafka.java``: each record produced to Kafka as JSON without schemas,
  one topic per table, acks=all, at least once (offsets are stored after Kafka acknowledged
  the records, every ``offset.flush.interval.ms``; a crash re-sends what followed the last
  stored offset).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson
import psycopg
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from psycopg.conninfo import conninfo_to_dict

from bench.bridge_latency import services
from changebroker import kafka, pg
from changebroker.maven import resolve_jars
from changebroker.stack.processes import wait_until
from changebroker.state import StateDir, default_state_dir

DEBEZIUM_DIR = Path(__file__).resolve().parent / "debezium"
PARTITIONS = 4  # the bridge's default; Debezium's topics get as many


class Peer(Protocol):
    label: str
    guarantee: str  # its delivery guarantee, as printed beside the figures
    pids: dict[str, int]  # the pipeline's own processes, by name

    def running(self) -> contextlib.AbstractContextManager[None]: ...

    def topics(self) -> list[str]:
        """The Kafka topics its events of the tables are in (waits until they exist)."""
        ...

    def row(self, value: dict[str, Any]) -> dict[str, Any] | None:
        """The row a record's JSON value carries (the old row of a delete)."""
        ...

    def snapshotted(self) -> bool:
        """Whether the rows the tables held at its start are all readable in Kafka."""
        ...


class Ours:
    guarantee = "exactly once (each batch's events and the position in one Kafka transaction)"

    def __init__(
        self,
        server_dsn: str,
        app_dsn: str,
        bootstrap: str,
        tables: list[str],
        bridge_args: tuple[str, ...] = (),
        label: str = "ours",
    ) -> None:
        """``bridge_args``: flags the bridge gets beside the stack's (``label`` says them)."""
        self._server_dsn, self._app_dsn, self._bootstrap = server_dsn, app_dsn, bootstrap
        self._tables = tables
        self._bridge_args = bridge_args
        self.label = label
        self.pids: dict[str, int] = {}
        self._meta_dsn = self._bridge_url = ""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with (
            pg.scratch_database(self._server_dsn, "bench_meta") as meta_dsn,
            tempfile.TemporaryDirectory() as tmp,
        ):
            state = Path(tmp) / f"peer_{uuid.uuid4().hex[:8]}"
            state.mkdir()
            self._meta_dsn = meta_dsn
            try:
                with services(
                    self._app_dsn, meta_dsn, self._bootstrap, state, *self._bridge_args
                ) as (url, pids):
                    self._bridge_url = url
                    self.pids = pids._asdict()
                    yield
            finally:
                _delete_topics(self._bootstrap, list(self._event_types().values()))

    def _event_types(self) -> dict[str, str]:
        names = [f"changebroker.{table}" for table in self._tables]
        with psycopg.connect(self._meta_dsn) as conn:
            rows = conn.execute(
                "SELECT name, topic FROM broker_event_types WHERE name = ANY(%s)", (names,)
            ).fetchall()
        return dict(rows)

    def topics(self) -> list[str]:
        wait_until(
            lambda: len(self._event_types()) == len(self._tables), timeout=120, what="event types"
        )
        return sorted(self._event_types().values())

    def row(self, value: dict[str, Any]) -> dict[str, Any] | None:
        data: dict[str, Any] = value["data"]
        return data

    def snapshotted(self) -> bool:
        try:
            # Converting a chunk of rows holds the bridge's loop: its answer may be slow.
            units = httpx.get(f"{self._bridge_url}/status", timeout=60).json()["units"]
        except httpx.TimeoutException:
            return False
        return all(
            (units.get(table, {}).get("snapshot") or {}).get("state") == "done"
            for table in self._tables
        )


class Debezium:
    label = "Debezium"
    guarantee = (
        "at least once (offsets stored after Kafka acknowledged the records, every"
        " offset.flush.interval.ms: a crash re-sends what followed the last stored offset)"
    )

    def __init__(self, app_dsn: str, bootstrap: str, tables: list[str], classpath: str) -> None:
        self._app_dsn, self._bootstrap, self._tables = app_dsn, bootstrap, tables
        self._classpath = classpath
        self._prefix = ""
        self._rows_at_start: dict[str, int] = {}
        self.pids: dict[str, int] = {}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        name = self._prefix = f"bench_dbz_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self._app_dsn, autocommit=True) as conn:
            self._rows_at_start = {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
                for table in self._tables
            }
        _create_topics(self._bootstrap, self.topics())
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "engine.properties"
            config.write_text(_properties(self._app_dsn, name, self._tables, Path(tmp)))
            log = Path(tmp) / "debezium.log"
            with open(log, "wb") as err:
                process = subprocess.Popen(
                    [
                        "java",
                        "-cp",
                        self._classpath,
                        "DebeziumToKafka",
                        str(config),
                        self._bootstrap,
                    ],
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
            try:
                assert process.stdout is not None
                if process.stdout.readline().strip() != b"started":
                    raise RuntimeError(f"Debezium did not start: {log.read_text()[-3000:]}")
                self.pids = {"debezium": process.pid}
                yield
            finally:
                process.terminate()  # its shutdown hook closes the engine: the slot goes
                process.wait(timeout=120)
                _drop_slot(self._app_dsn, name)
                with psycopg.connect(self._app_dsn, autocommit=True) as conn:
                    conn.execute(f'DROP PUBLICATION IF EXISTS "{name}"')
                _delete_topics(self._bootstrap, self.topics())

    def topics(self) -> list[str]:
        return [f"{self._prefix}.{table}" for table in self._tables]

    def row(self, value: dict[str, Any]) -> dict[str, Any] | None:
        row: dict[str, Any] | None = value.get("after") or value.get("before")
        return row

    def snapshotted(self) -> bool:
        consumer = Consumer(kafka.client_config(self._bootstrap, **{"group.id": self._prefix}))
        try:
            for table, topic in zip(self._tables, self.topics(), strict=True):
                held = sum(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(PARTITIONS)
                )
                if held < self._rows_at_start[table]:
                    return False
            return True
        finally:
            consumer.close()


def _properties(app_dsn: str, name: str, tables: list[str], state: Path) -> str:
    """The engine's settings: Debezium's defaults but for what a user must name (the
    database, slot, publication, tables, where offsets go) and JSON without schemas."""
    dsn = conninfo_to_dict(app_dsn)
    settings = {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(state / "offsets.dat"),
        "database.hostname": dsn.get("host", "127.0.0.1"),
        "database.port": dsn.get("port", "5432"),
        "database.user": dsn.get("user", "postgres"),
        "database.dbname": dsn["dbname"],
        "topic.prefix": name,
        "plugin.name": "pgoutput",
        "slot.name": name,
        "slot.drop.on.stop": "true",
        "publication.name": name,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(t.replace(".", r"\.") for t in tables),
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
    }
    if dsn.get("password"):
        settings["database.password"] = dsn["password"]
    return "".join(f"{key}={value}\n" for key, value in settings.items()).replace("\\", "\\\\")


def debezium_classpath() -> str:
    """Debezium's jars from Maven Central (cached) and DebeziumToKafka compiled against them."""
    cache = StateDir(default_state_dir()).cache / "debezium-peer"
    jars = ":".join(str(jar) for jar in resolve_jars(DEBEZIUM_DIR / "pom.xml", cache / "jars"))
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac (a JDK) is needed: scripts/install.sh --test installs one")
    classes = cache / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [javac, "-d", str(classes), "-cp", jars, str(DEBEZIUM_DIR / "DebeziumToKafka.java")],
        check=True,
    )
    return f"{classes}:{jars}"


def _create_topics(bootstrap: str, topics: list[str]) -> None:
    replication = kafka.replication(bootstrap, None, None)
    new = [
        NewTopic(t, PARTITIONS, replication.factor, config=replication.topic_config())
        for t in topics
    ]
    admin = kafka.admin(bootstrap)  # held until the answers came: the futures need it alive
    for future in admin.create_topics(new).values():
        future.result()


def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    """A turn's topics, gone with it: runs after runs would otherwise pile them up."""
    if not topics:
        return
    admin = kafka.admin(bootstrap)  # held until the answers came: the futures need it alive
    for future in admin.delete_topics(topics).values():
        future.result()


def _drop_slot(dsn: str, slot: str) -> None:
    """The slot, if the engine left it (a slot left behind holds the server's WAL)."""
    with psycopg.connect(dsn, autocommit=True) as conn:

        def released() -> bool:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            return row is None or not row[0]

        wait_until(released, timeout=60, what=f"slot {slot} released")
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        )


class Readable:
    """A ``read_committed`` consumer of a peer's topics: when each row id became readable."""

    def __init__(self, bootstrap: str, topics: list[str], row: Callable[[dict[str, Any]], Any]):
        self.seen: dict[int, float] = {}
        self._row = row
        self._stop = threading.Event()
        self._consumer = Consumer(
            kafka.client_config(
                bootstrap,
                **{
                    "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 5,
                },
            )
        )
        self._consumer.assign(
            [TopicPartition(topic, p, 0) for topic in topics for p in range(PARTITIONS)]
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # A short wait, or it would count as latency; orjson, for this consumer shares
            # the cores with what it measures.
            for message in self._consumer.consume(10_000, 0.002):
                value = message.value()
                if message.error() is None and value is not None:
                    row = self._row(orjson.loads(value))
                    if row is not None:
                        self.seen[row["id"]] = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def wait_snapshotted(peer: Peer) -> None:
    wait_until(peer.snapshotted, timeout=1800, what=f"{peer.label}'s initial snapshot")


def every_peer(
    server_dsn: str, app_dsn: str, bootstrap: str, tables: list[str]
) -> tuple[Ours, Debezium]:
    return (
        Ours(server_dsn, app_dsn, bootstrap, tables),
        Debezium(app_dsn, bootstrap, tables, debezium_classpath()),
    )
