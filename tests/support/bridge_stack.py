"""The whole path in one test: the test's application database, a changeserver on it, a
registry and a broker on a metadata database of the test's own, and a bridge; plus a
consumer that rebuilds every table from the committed events.

The consumer reads committed data straight from Kafka (``isolation.level=read_committed``),
which is what a subscription stream serves.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from changebroker import kafka, pg
from changebroker.bridge import values
from changebroker.bridge.bridge import Bridge
from changebroker.bridge.main import create_app as bridge_app
from changebroker.bridge.settings import Settings
from changebroker.broker.app import create_app as broker_app
from changebroker.broker.settings import Settings as BrokerSettings
from changebroker.changeserver.server import ChangeServer
from changebroker.changeserver.server import Settings as ChangeServerSettings
from changebroker.registry.app import create_app as registry_app
from changebroker.replay.job import ReplayOptions
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import CliProcess, serve_in_thread


@dataclass
class Stack:
    app_dsn: str
    meta_dsn: str
    kafka_bootstrap: str
    changeserver_url: str
    broker_url: str
    registry_url: str
    prefix: str
    tmp: Path
    snapshots_dir: Path  # where the changeserver's /snapshots reads
    publication: str = ""
    bridge_url: str = ""
    _bridge: Any = None

    def settings(self, **overrides: Any) -> Settings:
        return Settings(
            changeserver_url=self.changeserver_url,
            broker_url=self.broker_url,
            meta_dsn=self.meta_dsn,
            app_dsn=self.app_dsn,
            kafka_bootstrap=self.kafka_bootstrap,
            name=self.prefix,
            prefix=self.prefix,
            publication=self.publication,
            partitions=3,
            block=1,
            **overrides,
        )

    def replay_options(self, out: Path | None = None, **overrides: Any) -> ReplayOptions:
        """A replay of this stack's bridge's event types into ``out`` (by default where the
        changeserver's /snapshots reads), ending ``latest`` at the bridge's position."""
        defaults: dict[str, Any] = {
            "broker_url": self.broker_url,
            "kafka_bootstrap": self.kafka_bootstrap,
            "out": out or self.snapshots_dir,
            "prefix": self.prefix,
            "bridge_name": self.prefix,
        }
        return ReplayOptions(**{**defaults, **overrides})

    def start_bridge(self, **overrides: Any) -> Bridge:
        bridge = Bridge(self.settings(**overrides))
        self._bridge = serve_in_thread(bridge_app(bridge))
        self.bridge_url = self._bridge.__enter__()
        wait_until(bridge.ready.is_set, timeout=60, what="the bridge to load its position")
        return bridge

    def bridge_process(self, *extra: str) -> CliProcess:
        """``changebroker bridge`` as a child process, for tests that SIGKILL it; ``extra``
        flags added."""
        port = free_port()
        self.bridge_url = f"http://127.0.0.1:{port}"
        args = [
            "bridge",
            *("--port", str(port), "--pg-url", self.app_dsn, "--meta-pg-url", self.meta_dsn),
            *(
                "--kafka-bootstrap",
                self.kafka_bootstrap,
                "--changeserver-url",
                self.changeserver_url,
            ),
            *("--broker-url", self.broker_url),
            *("--name", self.prefix, "--prefix", self.prefix, "--partitions", "3"),
            *("--publication", self.publication, *extra),
        ]
        return CliProcess(args, f"{self.bridge_url}/health", self.tmp / "bridge.log")

    def stop_bridge(self) -> None:
        if self._bridge is not None:
            context, self._bridge = self._bridge, None
            context.__exit__(None, None, None)

    def sql(self, statement: str, params: Any = None) -> None:
        with psycopg.connect(self.app_dsn, autocommit=True) as conn:
            conn.execute(statement, params)

    def event_type(self, table: str) -> str:
        return f"{self.prefix}.{table}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.bridge_url}/status", timeout=10).json()
        return body


def snapshot_of(stack: Stack, table: str) -> dict[str, Any]:
    """The bridge's newest snapshot run of ``table`` as ``status`` shows it ({} before one)."""
    unit = stack.status()["units"].get(table) or {}
    return dict(unit.get("snapshot") or {})


def table_rows(dsn: str, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``SELECT *`` keyed by primary key, each value as the bridge renders it from the text
    Postgres prints under the changeserver's session settings."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET DateStyle = ISO; SET TimeZone = UTC; SET extra_float_digits = 3")
        key = [
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (table,),
            ).fetchall()
        ]
        cur = conn.execute(f"SELECT * FROM {table}")
        assert cur.description is not None
        columns = [(d.name, d.type_code) for d in cur.description]
        # Text output, as the changeserver receives it from pgoutput.
        cur = conn.execute(
            "SELECT " + ", ".join(f'"{name}"::text' for name, _ in columns) + f" FROM {table}"
        )
        out = {}
        for row in cur.fetchall():
            data = {
                name: values.to_json(text, oid)
                for (name, oid), text in zip(columns, row, strict=True)
            }
            out[tuple(data[k] for k in sorted(key))] = data
        return out


@dataclass
class Rebuilt:
    """Tables rebuilt from committed events by the bridge README's rules, and every eid seen
    (to catch duplicates)."""

    stack: Stack
    consumer: Consumer | None = None  # None: events come from elsewhere, through apply()
    assigned: set[str] = field(default_factory=set)
    keys: dict[str, list[str]] = field(default_factory=dict)  # topic -> key fields
    tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    # table -> key -> the partition of the event that last wrote the row (None: loaded)
    partitions: dict[str, dict[tuple[Any, ...], int | None]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    record_keys: dict[str, bytes | None] = field(default_factory=dict)  # eid -> Kafka key

    def _assign_new_topics(self) -> None:
        with psycopg.connect(self.stack.meta_dsn) as conn:
            rows = conn.execute(
                "SELECT topic, partitions, body FROM broker_event_types WHERE name LIKE %s",
                (self.stack.prefix + ".%",),
            ).fetchall()
        new = []
        for topic, partitions, body in rows:
            if topic not in self.assigned:
                self.assigned.add(topic)
                self.keys[topic] = sorted(body.get("partition_key_fields") or [])
                new += [TopicPartition(topic, p, 0) for p in range(partitions)]
        if new:
            assert self.consumer is not None
            self.consumer.incremental_assign(new)

    def drain(self) -> None:
        """Apply every committed event available now."""
        self._assign_new_topics()
        assert self.consumer is not None
        while True:
            message = self.consumer.poll(0.2)
            if message is None:
                return
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                continue
            value = message.value()
            topic = message.topic()
            assert value is not None and topic is not None
            event = json.loads(value)
            self.record_keys[event["metadata"]["eid"]] = message.key()
            partition = message.partition()
            assert partition is not None
            self.apply(event, self.keys[topic], partition)

    def load(self, table: str, rows: dict[tuple[Any, ...], dict[str, Any]]) -> None:
        """Rows of a snapshot, before any event: no event wrote them."""
        self.tables[table] = dict(rows)
        self.partitions[table] = dict.fromkeys(rows)

    def apply(self, event: dict[str, Any], key_fields: list[str], partition: int | str) -> None:
        """One event of ``partition``, as the bridge README says a consumer applies it."""
        self.events.append(event)
        if "data_op" not in event:
            return
        table = self.tables.setdefault(event["data_type"], {})
        written = self.partitions.setdefault(event["data_type"], {})
        data, op, partition = event["data"], event["data_op"], int(partition)
        if op == "D" and not data:
            # A table event: every row of this partition so far is gone, and every row
            # loaded from a snapshot that no event wrote since.
            for key in [k for k, p in written.items() if p is None or p == partition]:
                del table[key], written[key]
            return
        key = tuple(data[k] for k in key_fields)
        if op == "D":
            table.pop(key, None)
            written.pop(key, None)
            return
        # C and S carry the whole row; an update may leave out an unchanged TOASTed value.
        table[key] = {**table.get(key, {}), **data} if op == "U" else dict(data)
        written[key] = partition

    def equals_database(self, tables: list[str]) -> bool:
        """Every row equal to ``SELECT *``: a column an event did not carry (added to the
        table after it) reads as null, as consumers of an evolved schema read it."""
        self.drain()
        for table in tables:
            rebuilt = self.tables.get(table, {})
            expected = table_rows(self.stack.app_dsn, table)
            if rebuilt.keys() != expected.keys():
                return False
            for key, row in expected.items():
                if {column: rebuilt[key].get(column) for column in row} != row:
                    return False
        return True

    def duplicate_eids(self) -> list[str]:
        seen: set[str] = set()
        twice = []
        for event in self.events:
            eid = event["metadata"]["eid"]
            if eid in seen:
                twice.append(eid)
            seen.add(eid)
        return twice


@pytest.fixture
def rebuilt(stack: Stack) -> Iterator[Rebuilt]:
    with rebuilding(stack) as found:
        yield found


@contextlib.contextmanager
def rebuilding(stack: Stack) -> Iterator[Rebuilt]:
    """A consumer of committed events only, rebuilding the stack's tables."""
    consumer = Consumer(
        kafka.client_config(
            stack.kafka_bootstrap,
            **{
                "group.id": f"rebuild-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
    )
    try:
        yield Rebuilt(stack, consumer)
    finally:
        consumer.close()


@pytest.fixture
def make_stack(
    pg_dsn: str,
    pg_server_dsn: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> Iterator[Callable[..., Stack]]:
    """``make_stack(kafka_bootstrap, on_slot_loss)``: a changeserver on the test's database,
    a registry and a broker on a metadata database of the test's own; the test starts the
    bridge."""
    with contextlib.ExitStack() as exits:

        def make(kafka_bootstrap: str, on_slot_loss: str = "fail") -> Stack:
            meta_dsn = exits.enter_context(pg.scratch_database(pg_server_dsn, "t_meta"))
            slot = unique_name("bridge")
            snapshots_dir = tmp_path / f"{slot}-snapshots"
            changeserver = ChangeServer(
                ChangeServerSettings(
                    dsn=pg_dsn,
                    slot=slot,
                    db_dir=tmp_path / slot,
                    snapshots_dir=snapshots_dir,
                    on_slot_loss=on_slot_loss,
                )
            )
            changeserver_url = exits.enter_context(serve_in_thread(changeserver.api_app))
            wait_until(changeserver.replicator.streaming.is_set, timeout=30, what="replication")
            registry_url = exits.enter_context(serve_in_thread(registry_app(meta_dsn)))
            broker_settings = BrokerSettings(pg_dsn=meta_dsn, kafka_bootstrap=kafka_bootstrap)
            broker_url = exits.enter_context(serve_in_thread(broker_app(broker_settings)))
            stack = Stack(
                app_dsn=pg_dsn,
                meta_dsn=meta_dsn,
                kafka_bootstrap=kafka_bootstrap,
                changeserver_url=changeserver_url,
                broker_url=broker_url,
                registry_url=registry_url,
                prefix=unique_name("cdc"),
                tmp=tmp_path,
                snapshots_dir=snapshots_dir,
                publication=slot,
            )
            exits.callback(stack.stop_bridge)
            return stack

        yield make


@pytest.fixture
def stack(make_stack: Callable[[str], Stack], kafka_bootstrap: str) -> Stack:
    return make_stack(kafka_bootstrap)
