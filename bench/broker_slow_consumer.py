"""A subscription stream to a slow client: the broker's memory growth while events wait.

About 100 MB of 1 KB events wait in an event type's topic; one subscription stream
is read at 1 KB/s for a minute (a receive buffer of 4 KB, so the kernel holds little).
Measured: the broker process's resident memory before the stream and its peak during
it. The baseline is the goal (growth <= 64 MB), not another system.

    .venv/bin/python -m bench broker_slow_consumer
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import httpx
import psycopg
from confluent_kafka import Producer

from bench import services
from bench.report import Figure, report
from bench.services import rss_bytes
from changebroker import kafka, pg
from changebroker.stack.processes import answers, free_port, wait_until

EVENTS = 100_000
EVENT_BYTES = 1000
SECONDS = 60
GOAL_MB = 64.0


def _fill(bootstrap: str, topic: str) -> None:
    producer = Producer(kafka.producer_config(bootstrap, **{"linger.ms": 20}))
    value = json.dumps({"payload": "x" * EVENT_BYTES}).encode()
    for _ in range(EVENTS):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise RuntimeError("the events were not all written")


def main() -> int:
    server_dsn = services.pg_server_dsn()
    bootstrap = services.kafka_bootstrap()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        pg.scratch_database(server_dsn, "bench_slow") as meta_dsn,
        tempfile.TemporaryFile() as log,
    ):
        command = [sys.executable, "-m", "changebroker.cli", "broker", "--port", str(port)]
        broker = subprocess.Popen(
            [*command, "--pg-url", meta_dsn],
            env={**os.environ, "CHANGEBROKER_KAFKA_BOOTSTRAP": bootstrap},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: answers(f"{url}/health") or broker.poll() is not None,
                timeout=120,
                what="the broker",
            )
            name = f"bench.slow_{uuid.uuid4().hex[:8]}"
            statistic = {
                "messages_per_minute": 1,
                "message_size": 1,
                "read_parallelism": 1,
                "write_parallelism": 1,
            }
            event_type = {
                "name": name,
                "owning_application": "bench",
                "category": "undefined",
                "enrichment_strategies": [],
                "partition_strategy": "random",
                "default_statistic": statistic,
                "schema": {"type": "json_schema", "schema": "{}"},
            }
            httpx.post(f"{url}/event-types", json=event_type, timeout=60).raise_for_status()
            with psycopg.connect(meta_dsn) as conn:
                row = conn.execute(
                    "SELECT topic FROM broker_event_types WHERE name = %s", (name,)
                ).fetchone()
            assert row is not None
            _fill(bootstrap, row[0])
            subscription = {
                "owning_application": "bench",
                "event_types": [name],
                "read_from": "begin",
                "consumer_group": uuid.uuid4().hex,
            }
            created = httpx.post(f"{url}/subscriptions", json=subscription, timeout=60)
            created.raise_for_status()
            before = rss_bytes(broker.pid)
            peak, received = before, 0
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port))
                query = (
                    f"batch_limit=1&max_uncommitted_events={EVENTS}&stream_timeout={SECONDS + 30}"
                )
                path = f"/subscriptions/{created.json()['id']}/events?{query}"
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
                for _ in range(SECONDS):
                    received += len(sock.recv(1024))
                    peak = max(peak, rss_bytes(broker.pid))
                    time.sleep(1)  # the slow client's pace, 1 KB a second
            if received < SECONDS * 512:
                raise RuntimeError(f"the stream sent only {received} bytes")
        finally:
            broker.terminate()
            broker.wait(30)
    report(
        [
            Figure(
                "broker_slow_consumer",
                f"RSS growth, stream read at 1 KB/s for {SECONDS} s, "
                f"{EVENTS * EVENT_BYTES // 1_000_000} MB waiting",
                (peak - before) / 1e6,
                "MB",
                baseline=GOAL_MB,
                baseline_name="goal",
                higher_is_better=False,
            )
        ]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
