"""What one broker process needs to know: where its metadata and events live, and its limits."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from changebroker.auth import AuthSettings
from changebroker.broker.authorization import Scopes

# Nakadi's defaults: one partition unless default_statistic asks for more; 4 days of events.
DEFAULT_PARTITIONS = 1
MAX_PARTITIONS = 32
DEFAULT_RETENTION_MS = 345_600_000
# Nakadi's defaults for consumption: the longest commit_timeout a stream may ask for (and the
# one it gets unless it asks), the bytes a stream holds waiting for their batch before it sends
# the largest one early, the partitions one subscription may span.
MAX_COMMIT_TIMEOUT = 60.0
STREAM_MEMORY_LIMIT = 50_000_000
SUBSCRIPTION_MAX_PARTITIONS = 100
# Nakadi's nakadi.eventType.deletableSubscription: subscriptions of this application and
# consumer group (its archiver's) do not keep an event type from being deleted.
DELETABLE_SUBSCRIPTION_OWNING_APPLICATION = "nakadi_archiver"
DELETABLE_SUBSCRIPTION_CONSUMER_GROUP = "nakadi_to_s3"
# Nakadi's nakadi.timeline.wait.timeoutMs: how long a timeline switch waits for writers to
# pause, and a write to a switching event type for the switch.
TIMELINE_WAIT_TIMEOUT = 40.0
# Nakadi's nakadi.hasher.salt: what its KPI events' app_hashed is salted with.
KPI_SALT = "salt"


@dataclass(frozen=True)
class Settings:
    pg_dsn: str
    kafka_bootstrap: str
    default_partitions: int = DEFAULT_PARTITIONS
    max_partitions: int = MAX_PARTITIONS
    default_retention_ms: int = DEFAULT_RETENTION_MS
    # Kafka replication of new topics; None: what the cluster allows (3 and 2 on 3+ nodes).
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    pool_size: int = 10
    # The longest the per-subscription lag in /metrics may be old (read from Postgres and
    # Kafka in the background, never per scrape).
    lag_interval: float = 15.0
    max_commit_timeout: float = MAX_COMMIT_TIMEOUT
    stream_memory_limit: int = STREAM_MEMORY_LIMIT
    subscription_max_partitions: int = SUBSCRIPTION_MAX_PARTITIONS
    deletable_subscription_owning_application: str = DELETABLE_SUBSCRIPTION_OWNING_APPLICATION
    deletable_subscription_consumer_group: str = DELETABLE_SUBSCRIPTION_CONSUMER_GROUP
    timeline_wait_timeout: float = TIMELINE_WAIT_TIMEOUT
    # Nakadi's own event types (broker/own_events/): created at start and receiving the
    # broker's KPI and audit events. The CLI turns them on unless --no-nakadi-event-types;
    # an app built in a test has them only when it asks.
    nakadi_event_types: bool = False
    kpi_salt: str = KPI_SALT
    auth: AuthSettings = field(default_factory=AuthSettings)
    scopes: Scopes = field(default_factory=Scopes)

    def to_json(self) -> dict[str, Any]:
        """As JSON, for worker processes (``from_json`` makes it again)."""
        return {**asdict(self), "auth": self.auth.to_json()}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Settings:
        auth = AuthSettings.from_json(raw["auth"])
        return cls(**{**raw, "auth": auth, "scopes": Scopes(**raw["scopes"])})
