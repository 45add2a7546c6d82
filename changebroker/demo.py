"""A short tour of the running local stack, for `changebroker up --demo`.

Each step talks to a real part the way a user would (SQL, Kafka clients,
HTTP) and prints what came back; a step that gets an unexpected answer says
where to look and the demo exits non-zero. Every step can be run again on the
same stack.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from changebroker import auth, kafka, pg
from changebroker.client import (
    Change,
    ChangeFeed,
    ClientError,
    EventBatch,
    Operation,
    SnapshotEnd,
    SnapshotRow,
    SnapshotStart,
    Subscription,
    sequence_order,
)
from changebroker.stack.local import LocalStack
from changebroker.stack.processes import wait_until


class DemoError(RuntimeError):
    """A step got an answer it did not expect."""


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _say(text: str) -> None:
    print(f"   {text}", flush=True)


# How the demo's calls reach a stack with TLS or authentication on (``run`` sets them).
_tls_context: ssl.SSLContext | None = None
_token: str | None = None


def _http(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    headers = {**auth.client_headers(_token), **(headers or {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    request.add_header("X-Flow-Id", "changebroker-demo")
    try:
        with urllib.request.urlopen(request, timeout=30, context=_tls_context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _client_options() -> dict[str, Any]:
    """What the Python client needs to reach a stack with TLS or authentication on."""
    return {"token": _token, "verify": _tls_context or True}


WAIT_SECONDS = 30  # the longest a tour waits for what it expects


def _until(
    stop: Callable[[], None], items: Iterable[Any], done: Callable[[Any], bool]
) -> list[Any] | None:
    """The items up to the first that is ``done``; None when ``stop`` (called after
    WAIT_SECONDS) ended them first."""
    timer = threading.Timer(WAIT_SECONDS, stop)
    timer.start()
    seen = []
    try:
        for item in items:
            seen.append(item)
            if done(item):
                return seen
        return None
    finally:
        timer.cancel()


def _expect(status: int, body: bytes, *wanted: int) -> Any:
    if status not in wanted:
        raise DemoError(f"expected HTTP {' or '.join(map(str, wanted))}, got {status}: {body!r}")
    return json.loads(body) if body else None


def postgres_tour(stack: LocalStack) -> None:
    _step("Postgres: a table change read back through a pgoutput logical slot")
    slot = f"demo_{uuid.uuid4().hex[:8]}"
    with pg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS demo_items (id serial PRIMARY KEY, name text)")
        conn.execute("DROP PUBLICATION IF EXISTS demo_pub")
        conn.execute("CREATE PUBLICATION demo_pub FOR TABLE demo_items")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            conn.execute("INSERT INTO demo_items (name) VALUES ('hello from the demo')")
            rows = conn.execute(
                "SELECT lsn, substr(data, 1, 1) FROM pg_logical_slot_get_binary_changes("
                "%s, NULL, NULL, 'proto_version', '1', 'publication_names', 'demo_pub')",
                (slot,),
            ).fetchall()
            kinds = "".join(bytes(kind).decode() for _, kind in rows)
            _say(
                f"slot {slot} decoded {len(rows)} pgoutput messages: {kinds} "
                "(B=begin R=relation I=insert C=commit)"
            )
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute("DROP PUBLICATION demo_pub")


def kafka_tour(stack: LocalStack) -> None:
    _step("Kafka: produce and consume one record")
    topic = f"demo-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin(stack.kafka_bootstrap)
    replication = kafka.replication(stack.kafka_bootstrap, None, None)
    new = NewTopic(
        topic,
        num_partitions=1,
        replication_factor=replication.factor,
        config=replication.topic_config(),
    )
    admin.create_topics([new])[topic].result()
    producer = Producer(kafka.producer_config(stack.kafka_bootstrap))
    producer.produce(topic, json.dumps({"hello": "kafka"}).encode())
    producer.flush(10)
    consumer = Consumer(
        kafka.client_config(
            stack.kafka_bootstrap, **{"group.id": topic, "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    message = None
    for _ in range(100):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
    consumer.close()
    admin.delete_topics([topic])
    if message is None or message.error() is not None:
        raise DemoError("no record came back: see kafka.log")
    _say(f"{topic}: offset {message.offset()} value {(message.value() or b'').decode()}")


def changeserver_tour(stack: LocalStack, base_url: str) -> None:
    _step(f"Changeserver ({base_url}): one transaction, long-polled from /changes")
    selector = "demo"
    with pg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS demo_accounts"
            " (id serial PRIMARY KEY, owner text NOT NULL, balance numeric(12, 2),"
            " _change_selector text)"
        )
    # A feed from "now" (the newest change when it is opened), long polling: the transaction
    # comes as soon as the change log has made it durable.
    with ChangeFeed(base_url, [selector], start="now", block=10, **_client_options()) as feed:
        with pg.connect(stack.pg_dsn, autocommit=True) as conn, conn.transaction():
            for owner, balance in (("ada", "10.50"), ("grace", "99999.99")):
                conn.execute(
                    "INSERT INTO demo_accounts (owner, balance, _change_selector)"
                    " VALUES (%s, %s, %s)",
                    (owner, balance, selector),
                )
        changes = _until(feed.stop, feed, lambda change: change.new_row["owner"].value == "grace")
    if changes is None or len(changes) != 2:
        raise DemoError(f"expected the 2 inserted rows, got {changes}")
    for change in changes:
        row = change.new_row or {}
        _say(
            f"{change.sequence} {change.table} op {change.operation}: "
            f"owner={row['owner'].value!s} balance={row['balance'].value!s} "
            f"(commit {change.commit_sequence}, index {change.commit_index})"
        )


def registry_tour(base_url: str) -> None:
    _step(f"Registry ({base_url}): register a schema, again, then a breaking change")
    subject = "demo-orders-value"
    query = "?tenant=demo&namespace=shop"
    status, body = _http("GET", f"{base_url}/subjects/{subject}{query}")
    if status == 404:
        status, body = _http(
            "POST",
            f"{base_url}/subjects/{subject}{query}",
            {"tenant": "demo", "namespace": "shop", "status": "released", "format": "JSON"},
        )
    _expect(status, body, 200)
    order_v1 = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "total": {"type": "number"}},
        "required": ["id"],
    }
    versions = f"{base_url}/subjects/{subject}/versions{query}"
    register = {"serialization": "JSON", "schemaDefinition": json.dumps(order_v1)}
    first = _expect(*_http("POST", versions, register), 200)
    again = _expect(*_http("POST", versions, register), 200)
    _say(f"{subject}: schema id {first['id']}; the same definition again gives id {again['id']}")
    breaking = {**order_v1, "properties": {"id": {"type": "integer"}}, "required": ["id", "total"]}
    breaking_body = {"serialization": "JSON", "schemaDefinition": json.dumps(breaking)}
    refused = _expect(*_http("POST", versions, breaking_body), 409)
    _say(f"a breaking change is refused ({refused['errorCode']}), and the registry says why:")
    for violation in refused.get("violations", []):
        _say(f"  {violation['path']}  {violation['rule']}: {violation['message']}")
        if violation.get("proven"):
            example = json.dumps(violation["example"])
            _say(f"    shown by {example}: version 1 takes it, the new schema does not")


def broker_tour(base_url: str) -> None:
    _step(f"Broker ({base_url}): a Nakadi event type, two events published and read back")
    name = "demo.order-placed"
    status, body = _http("GET", f"{base_url}/event-types/{name}")
    if status == 404:
        schema = {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "total": {"type": "number"}},
            "required": ["order_id"],
        }
        event_type = {
            "name": name,
            "owning_application": "changebroker-demo",
            "category": "business",
            "enrichment_strategies": ["metadata_enrichment"],
            "partition_strategy": "hash",
            "partition_key_fields": ["order_id"],
            "schema": {"type": "json_schema", "schema": json.dumps(schema)},
        }
        status, body = _http("POST", f"{base_url}/event-types", event_type)
        _expect(status, body, 201)
        _say(f"created event type {name}")
    else:
        _expect(status, body, 200)
    events: list[dict[str, Any]] = [
        {
            "order_id": f"o-{uuid.uuid4().hex[:6]}",
            "total": total,
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T12:00:00Z"},
        }
        for total in (12.5, 99.0)
    ]
    _expect(*_http("POST", f"{base_url}/event-types/{name}/events", events), 200)
    _say(f"published {len(events)} events (200: both stored)")
    invalid = _expect(
        *_http("POST", f"{base_url}/event-types/{name}/events", [{"total": "twelve"}]), 422
    )
    _say(f"an invalid event is refused, nothing stored: {invalid[0]['detail']}")

    # Each event's partition is the hash of its order_id; read each one from there.
    wanted = {e["order_id"] for e in events}
    partitions = _expect(*_http("GET", f"{base_url}/event-types/{name}/partitions"), 200)
    seen: dict[str, dict[str, Any]] = {}
    for partition in partitions:
        cursors = json.dumps([{"partition": partition["partition"], "offset": "begin"}])
        status, body = _http(
            "GET",
            f"{base_url}/event-types/{name}/events?stream_timeout=2&batch_flush_timeout=1",
            headers={"X-Nakadi-Cursors": cursors},
        )
        _expect(status, b"{}", 200)
        for line in body.splitlines():
            for event in json.loads(line).get("events", []):
                if event["order_id"] in wanted:
                    seen[event["order_id"]] = event
    if set(seen) != wanted:
        raise DemoError(f"read back {sorted(seen)}, expected {sorted(wanted)}")
    for event in seen.values():
        metadata = event["metadata"]
        _say(
            f"read {event['order_id']} from partition {metadata['partition']}: "
            f"received_at {metadata['received_at']}, flow_id {metadata['flow_id']}"
        )


def _bridge_caught_up(bridge_url: str, changeserver_url: str) -> None:
    """Until the bridge has published every change the changeserver holds now."""
    last = _expect(*_http("GET", f"{changeserver_url}/changes?limit=0"), 200)["lastSequence"]
    wanted = sequence_order(last)

    def published() -> bool:
        status, body = _http("GET", f"{bridge_url}/status")
        return status == 200 and sequence_order(json.loads(body)["position"]) >= wanted

    if not wait_until(published, timeout=60, what=None):
        raise DemoError(f"the bridge did not reach {last}: see bridge.log")


def _bridge_snapshot_done(bridge_url: str, table: str) -> None:
    """Until the bridge's run over ``table``'s existing rows, which it starts when it first
    sees the table (up to its next look, 30 s), has finished: a replay while it runs is not
    exact, and /snapshots serves no snapshot that is not."""

    def done() -> bool:
        status, body = _http("GET", f"{bridge_url}/status")
        if status != 200:
            return False
        unit = json.loads(body)["units"].get(table) or {}
        return (unit.get("snapshot") or {}).get("state") == "done"

    if not wait_until(done, timeout=120, what=None):
        raise DemoError(f"the bridge did not finish publishing {table}'s rows: see bridge.log")


def snapshots_tour(stack: LocalStack, running: dict[str, Any]) -> None:
    _step("Replay: a table changed, replayed by Spark into a snapshot, handed off")
    changeserver, broker = running["changeserver"]["url"], running["broker"]["url"]
    with pg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS demo_orders (id serial PRIMARY KEY, item text NOT NULL,"
            " qty int NOT NULL, _change_selector text DEFAULT 'bridge')"
        )
        conn.execute("ALTER TABLE demo_orders REPLICA IDENTITY FULL")
        with conn.transaction():
            ids = [
                conn.execute(
                    "INSERT INTO demo_orders (item, qty) VALUES (%s, %s) RETURNING id", row
                ).fetchone()[0]  # type: ignore[index]
                for row in (("tea", 2), ("scones", 6), ("jam", 1))
            ]
        conn.execute("UPDATE demo_orders SET qty = qty + 1 WHERE id = %s", (ids[0],))
        conn.execute("DELETE FROM demo_orders WHERE id = %s", (ids[2],))
    _say(f"demo_orders: inserted ids {ids}, updated {ids[0]}, deleted {ids[2]}")
    _bridge_caught_up(running["bridge"]["url"], changeserver)
    _bridge_snapshot_done(running["bridge"]["url"], "public.demo_orders")

    from changebroker.replay.job import ReplayOptions, run_replay

    options = ReplayOptions(
        broker_url=broker,
        kafka_bootstrap=stack.kafka_bootstrap,
        out=stack.snapshots_dir,
        tables=("public.demo_orders",),
        master="local[2]",
        client_token=_token,
        tls_ca=stack.ca_file,
    )
    try:
        manifest = run_replay(options, say=_say)
    except Exception as error:  # the replay's own errors say what to do
        raise DemoError(f"the replay failed: {error}") from error
    table = manifest.tables["public.demo_orders"]
    _say(f"snapshot {manifest.snapshot_id}: demo_orders has {table.rows} rows,")
    _say(f"  exact at changeserver sequence {manifest.changeserver_sequence} and cursors")
    for event_type, cursors in manifest.cursors.items():
        _say(f"  {event_type}: " + ", ".join(f"{c['partition']}@{c['offset']}" for c in cursors))

    with pg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO demo_orders (item, qty) VALUES ('cream', 1)")
    # A new consumer of the selector from the snapshot: its rows, then only the changes after
    # it (earlier changes under the selector, demo_orders' updates among them, are in it).
    rows: list[SnapshotRow] = []

    def shown(item: Any) -> bool:
        if isinstance(item, SnapshotStart):
            rows.clear()  # a snapshot taken again (one that broke off) replaces the last
        elif isinstance(item, SnapshotRow) and item.table == "public.demo_orders":
            rows.append(item)
        elif isinstance(item, SnapshotEnd):
            _say(f"GET /snapshots?selector=bridge: {len(rows)} demo_orders rows, sequence"
                 f" {item.sequence} (snapshot {item.snapshot_id})")  # fmt: skip
            for row in (r.row for r in rows[-3:]):
                _say(
                    f"  id={row['id'].value!s} item={row['item'].value!s} qty={row['qty'].value!s}"
                )
            _say(f"GET /changes?since={item.sequence}: only what came after the snapshot:")
        elif isinstance(item, Change) and item.table == "public.demo_orders":
            row = item.new_row or item.old_row or {}
            _say(f"  {item.sequence} op {item.operation} {item.table} item={row['item'].value!s}")
            return item.operation == Operation.INSERT
        return False

    with ChangeFeed(
        changeserver, ["bridge"], start="snapshot", block=10, snapshot_wait=WAIT_SECONDS,
        **_client_options(),
    ) as feed:  # fmt: skip
        if _until(feed.stop, feed, shown) is None:
            raise DemoError("no new demo_orders row came after the snapshot")

    _bridge_caught_up(running["bridge"]["url"], changeserver)
    consumer = Subscription.from_snapshot(
        broker, manifest.as_json(), "changebroker-demo", batch_flush_timeout=1,
        **_client_options(),
    )  # fmt: skip
    _say(f"subscription {consumer.subscription_id} (read_from: cursors = the snapshot's)"
         " streams, each batch committed once handled:")  # fmt: skip
    events: list[dict[str, Any]] = []

    def handle(batch: EventBatch) -> None:
        for event in batch.events:
            _say(f"  {event['data_op']} {event['data_type']} {event['data']}")
        events.extend(batch.events)
        consumer.stop()

    with consumer:
        timer = threading.Timer(WAIT_SECONDS, consumer.stop)
        timer.start()
        try:
            consumer.run(handle)
        finally:
            timer.cancel()
    if not events:
        raise DemoError(
            f"subscription {consumer.subscription_id} sent no events after the snapshot"
        )


def run(stack: LocalStack) -> int:
    global _tls_context, _token
    _tls_context, _token = stack.ssl_context(), stack.client_token
    running = stack.status()
    if "loadbalancer" in running:
        # Several broker processes: the tours use the broker port, HAProxy in front of them.
        running["broker"] = running["loadbalancer"]
    try:
        postgres_tour(stack)
        kafka_tour(stack)
        if "changeserver" in running:
            changeserver_tour(stack, running["changeserver"]["url"])
        if "registry" in running:
            registry_tour(running["registry"]["url"])
        if "broker" in running:
            broker_tour(running["broker"]["url"])
        if {"changeserver", "broker", "bridge"} <= running.keys():
            snapshots_tour(stack, running)
    except (DemoError, ClientError, OSError) as error:
        print(f"\ndemo failed: {error} (logs: {stack.state.logs})")
        return 1
    _step("Done. `changebroker status --json` lists the endpoints; `changebroker down` stops it.")
    return 0
