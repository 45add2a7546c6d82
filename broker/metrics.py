"""The broker's metrics (served at ``/metrics`` with the process and request metrics).

Counted as it happens, per worker process and added up across workers by prometheus_client's
multiprocess mode: publishing (events, bytes, batches by status, latency, batch size,
failures by step), Kafka delivery errors and producer queue depth, open streams, cursor
commits. Labels are bounded: event type names (configuration, as Nakadi labels them), a
step, a status, a result; never an eid, a cursor or a raw path.

Per-subscription lag is read from Postgres and Kafka on an interval instead:
``changebroker.broker.subscriptions.lag``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PREFIX = "changebroker_broker"

events = Counter(
    f"{PREFIX}_events_published_total", "Events written to Kafka, per event type.", ["event_type"]
)
published_bytes = Counter(
    f"{PREFIX}_published_bytes_total",
    "Bytes of events written to Kafka (as encoded), per event type.",
    ["event_type"],
)
batches = Counter(
    f"{PREFIX}_publish_batches_total",
    "Publish requests per event type and response status (200, 207, 422).",
    ["event_type", "status"],
)
publish_duration = Histogram(
    f"{PREFIX}_publish_duration_seconds",
    "Publish requests from the body read to Kafka's acknowledgement of every event.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
batch_events = Histogram(
    f"{PREFIX}_publish_batch_events",
    "Events per publish request.",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
failures = Counter(
    f"{PREFIX}_publish_failures_total",
    "Events that failed publishing, by step (validating, partitioning, enriching, publishing).",
    ["step"],
)
delivery_errors = Counter(
    f"{PREFIX}_kafka_delivery_errors_total",
    "Events Kafka refused or did not acknowledge in time.",
)
producer_queue = Gauge(
    f"{PREFIX}_kafka_producer_queue_messages",
    "Messages in the Kafka producers' queues, awaiting delivery (librdkafka's statistics).",
    multiprocess_mode="livesum",
)
open_streams = Gauge(
    f"{PREFIX}_open_streams",
    "Event streams open now, by kind (low_level, subscription).",
    ["kind"],
    multiprocess_mode="livesum",
)
cursor_commits = Counter(
    f"{PREFIX}_cursor_commits_total",
    "Subscription cursors committed, by result (committed, outdated, rejected).",
    ["result"],
)
own_events_dropped = Counter(
    f"{PREFIX}_own_events_dropped_total",
    "Events of Nakadi's own event types (KPI, audit) dropped: their queue was full.",
)
