"""A short tour of the running local stack, for `changebroker up --demo`."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from changebroker import kafka, pg
from changebroker.stack.local import LocalStack


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run(stack: LocalStack) -> int:
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
            print(
                f"   slot {slot} decoded {len(rows)} pgoutput messages: {kinds} "
                "(B=begin R=relation I=insert C=commit)"
            )
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute("DROP PUBLICATION demo_pub")

    _step("Kafka: produce and consume one record")
    topic = f"demo-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin(stack.kafka_bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result()
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
        print("   no record came back: see .state/logs/kafka.log")
        return 1
    print(f"   {topic}: offset {message.offset()} value {(message.value() or b'').decode()}")

    _step("Done. `changebroker status --json` lists the endpoints; `changebroker down` stops it.")
    return 0
