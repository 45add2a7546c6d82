"""What one broker process needs to know: where its metadata and events live, and its limits."""

from __future__ import annotations

from dataclasses import dataclass

# Nakadi's defaults: one partition unless default_statistic asks for more; 4 days of events.
DEFAULT_PARTITIONS = 1
MAX_PARTITIONS = 32
DEFAULT_RETENTION_MS = 345_600_000


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
    registry_url: str | None = None
    pool_size: int = 10
    # The longest the per-subscription lag in /metrics may be old (read from Postgres and
    # Kafka in the background, never per scrape).
    lag_interval: float = 15.0
