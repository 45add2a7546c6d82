"""The bridge's settings: what ``changebroker bridge``'s flags say (``main.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    changeserver_url: str
    broker_url: str
    meta_dsn: str  # the broker's metadata database (event types)
    app_dsn: str  # the application database (the tables' catalog)
    kafka_bootstrap: str
    name: str = "bridge"
    include: tuple[str, ...] = ()  # globs of schema.table; empty: every published table
    exclude: tuple[str, ...] = ()
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # table -> key columns
    publication: str = "changebroker"  # the changeserver's: the tables there are to snapshot
    snapshot_chunk: int = 10_000  # rows read at once
    prefix: str = "changebroker"
    pattern: str = "{prefix}.{schema}.{table}"
    outbox_table: str = "public.changebroker_outbox"
    partitions: int = 4
    limit: int = 10_000
    block: int = 5
    commit_interval_ms: int = 0  # a Kafka transaction at most this often (commits.py)
    # Of the positions topic; None: what the cluster allows (event types: the broker's).
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    client_token: str | None = None  # sent to the changeserver and the broker
    ca_file: Path | None = None  # trusted for their HTTPS besides the system's CAs
