"""Publishing and subscription rates on a three-node Kafka cluster vs one node, in the same
run, and the publish latency while one node of the three is down.

Both Kafkas are started here (local, ports and folders of their own), each with a broker
process on a metadata database of its own and an event type of 4 partitions: the one node
gets replication 1, the cluster 3 copies with ``min.insync.replicas`` 2 (what each is given
by default), producers ``acks=all`` on both. Rates: 1 KB events in batches of 100 from 4
client threads; a subscription read from ``begin`` committing every 1000-event batch.
Measured alternately, one node then three, twice; the better of each.

Latency: 4 threads post batches of 10 to the cluster; p50 / p99 per request with every
node up, then in the first 15 s after the node leading partition 0 is SIGKILLed (its
leaderships move once it is fenced) and in the 15 s after that (two nodes, steady).

    .venv/bin/python -m bench cluster_scale_out
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.broker_publish import _event, _through_api
from bench.broker_stream import PARTITIONS, BenchBroker, _fill, broker_with_event_type
from bench.broker_subscription import _through_subscription
from bench.report import Figure, report
from changebroker import kafka
from changebroker.stack.kafka import LocalKafkaCluster
from changebroker.stack.processes import free_port_run, pid_alive, wait_until
from changebroker.state import StateDir, default_state_dir

PUBLISH_BATCH = 100
SUBSCRIPTION_EVENTS = 40_000
ROUNDS = 2
LATENCY_BATCH = 10
LATENCY_THREADS = 4
PHASE_SECONDS = 15.0


@contextlib.contextmanager
def _kafka(nodes: int) -> Iterator[LocalKafkaCluster]:
    root = Path(tempfile.mkdtemp(prefix=f"bench-kafka-{nodes}-"))
    base = free_port_run(2 * nodes)
    cache = StateDir(default_state_dir()).cache
    cluster = LocalKafkaCluster(StateDir(root, cache_root=cache), base, base + 1, nodes)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.purge()


def _publish_rate(broker: BenchBroker) -> float:
    encoded = [json.dumps(_event(i), separators=(",", ":")).encode() for i in range(PUBLISH_BATCH)]
    body = b"[" + b",".join(encoded) + b"]"
    return _through_api(broker.url, broker.event_type, body, PUBLISH_BATCH)


def _subscription_rate(broker: BenchBroker) -> float:
    """Fill ``SUBSCRIPTION_EVENTS`` more, read exactly them from the cursors before the fill."""
    with httpx.Client(base_url=broker.url, timeout=60) as client:
        partitions = client.get(f"/event-types/{broker.event_type}/partitions")
        partitions.raise_for_status()
        answer = client.post(
            "/subscriptions",
            json={
                "owning_application": "bench",
                "event_types": [broker.event_type],
                "consumer_group": uuid.uuid4().hex[:8],
                "read_from": "cursors",
                "initial_cursors": [
                    {
                        "event_type": broker.event_type,
                        "partition": p["partition"],
                        "offset": p["newest_available_offset"],
                    }
                    for p in partitions.json()
                ],
            },
        )
        answer.raise_for_status()
    _fill(broker.bootstrap, broker.topic, SUBSCRIPTION_EVENTS)
    return _through_subscription(broker.url, str(answer.json()["id"]), SUBSCRIPTION_EVENTS)


def _latencies(broker: BenchBroker, seconds: float) -> tuple[list[float], int]:
    """Seconds per publish request of ``LATENCY_THREADS`` threads for ``seconds``; and how
    many requests were not answered 200."""
    encoded = [json.dumps(_event(i), separators=(",", ":")).encode() for i in range(LATENCY_BATCH)]
    body = b"[" + b",".join(encoded) + b"]"
    deadline = time.monotonic() + seconds
    times: list[float] = []
    failed = [0]

    def loop() -> None:
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            while time.monotonic() < deadline:
                started = time.monotonic()
                response = client.post(
                    f"/event-types/{broker.event_type}/events",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                times.append(time.monotonic() - started)
                if response.status_code != 200:
                    failed[0] += 1

    threads = [threading.Thread(target=loop) for _ in range(LATENCY_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times, failed[0]


def _p(times: list[float], quantile: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


def _node_down_latency(cluster: LocalKafkaCluster, broker: BenchBroker) -> list[Figure]:
    up, _ = _latencies(broker, PHASE_SECONDS)
    metadata = kafka.admin(cluster.bootstrap).list_topics(broker.topic, timeout=10)
    victim = cluster.node(int(metadata.topics[broker.topic].partitions[0].leader))
    pid = victim.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), timeout=30, what="the node to die")
    failover, failover_failed = _latencies(broker, PHASE_SECONDS)
    down, down_failed = _latencies(broker, PHASE_SECONDS)
    victim.start(wait=False)
    kafka.wait_until_ready(cluster.bootstrap, timeout=120, brokers=cluster.nodes)
    figures = []
    for label, times, failed in (
        (f"first {PHASE_SECONDS:.0f} s after a node's SIGKILL", failover, failover_failed),
        (f"the {PHASE_SECONDS:.0f} s after that (two nodes)", down, down_failed),
    ):
        for quantile in (0.5, 0.99):
            figures.append(
                Figure(
                    "cluster_scale_out",
                    f"publish p{quantile * 100:.0f}, batches of {LATENCY_BATCH}, {label}"
                    f" ({len(times)} requests, {failed} not 200)",
                    _p(times, quantile),
                    "ms",
                    baseline=_p(up, quantile),
                    baseline_name="all three nodes up",
                    higher_is_better=False,
                )
            )
    return figures


def main() -> int:
    with (
        _kafka(1) as one,
        _kafka(3) as three,
        broker_with_event_type("one_node", bootstrap=one.bootstrap) as single,
        broker_with_event_type("cluster", bootstrap=three.bootstrap) as clustered,
    ):
        publish: dict[str, list[float]] = {"one": [], "three": []}
        subscribe: dict[str, list[float]] = {"one": [], "three": []}
        for _ in range(ROUNDS):
            for key, broker in (("one", single), ("three", clustered)):
                publish[key].append(_publish_rate(broker))
                subscribe[key].append(_subscription_rate(broker))
        figures = [
            Figure(
                "cluster_scale_out",
                f"publish 1 KB events/s, batches of {PUBLISH_BATCH}, 4 threads,"
                f" {PARTITIONS} partitions x3 replicas, min.insync 2",
                max(publish["three"]),
                "events/s",
                baseline=max(publish["one"]),
                baseline_name="one Kafka node, 1 replica",
            ),
            Figure(
                "cluster_scale_out",
                "subscription 1 KB events/s, commit per 1000-event batch, 3 nodes",
                max(subscribe["three"]),
                "events/s",
                baseline=max(subscribe["one"]),
                baseline_name="one Kafka node",
            ),
        ]
        print(
            "rounds: publish "
            + json.dumps({k: [round(v) for v in vs] for k, vs in publish.items()})
            + ", subscription "
            + json.dumps({k: [round(v) for v in vs] for k, vs in subscribe.items()}),
            flush=True,
        )
        figures += _node_down_latency(three, clustered)
        report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
