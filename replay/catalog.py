"""Which event types the bridge writes, and what each holds, from the broker's Nakadi API.

``GET /event-types``: the bridge's are category ``data`` and named by its pattern
(``{prefix}.{schema}.{table}``); ``GET /event-types/{name}/schemas``: every schema version;
``GET /event-types/{name}/timelines``: the Kafka topics the events have been in, in order,
and where each closed one ends; ``GET /storages/{id}``: the cluster of a timeline on
another storage than ``default`` (the replay's own ``--kafka-bootstrap``);
``GET /event-types/{name}/partitions``: how many partitions. Nothing here reads the
broker's metadata database: the API is the contract (the timelines and storages need the
token of one of the broker's administrators' readers).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from changebroker import auth
from changebroker.replay.columns import Column, primary_key, union_columns


def broker_client(url: str, token: str | None, ca_file: Path | None) -> httpx.Client:
    """The replay's client of the broker: the token it sends when the broker checks
    credentials, and the CA it trusts besides the system's."""
    return httpx.Client(
        base_url=url,
        timeout=30,
        headers=auth.client_headers(token),
        verify=auth.client_verify(ca_file),
    )


class CatalogError(Exception):
    """A table or event type that cannot be replayed; the message says what to do."""


OWN_STORAGE = "default"  # the broker's own Kafka, which is the replay's --kafka-bootstrap


@dataclass(frozen=True)
class SpecTimeline:
    """One of an event type's timelines: its topic, the cluster it is on, where it ends."""

    order: int
    topic: str
    bootstrap: str | None  # None: the replay's own --kafka-bootstrap
    # Per partition, the offset of its last event, once the next timeline took over.
    latest: tuple[int, ...] | None = None
    gone: bool = False  # retention is over: its topic is deleted (or about to be)

    def end(self, partition: int) -> int | None:
        """The offset after a closed timeline's last event in ``partition``; None while
        active."""
        if self.latest is None:
            return None
        return (self.latest[partition] if partition < len(self.latest) else -1) + 1


@dataclass(frozen=True)
class TableSpec:
    """One table's event type, where its events are, and what its rows look like."""

    table: str  # schema.table
    event_type: str
    timelines: tuple[SpecTimeline, ...]  # oldest first
    partitions: int
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    schema_versions: tuple[str, ...]  # oldest first

    @property
    def active(self) -> SpecTimeline:
        return self.timelines[-1]

    @property
    def topic(self) -> str:
        """The active timeline's topic: where the bridge writes now."""
        return self.active.topic

    @property
    def topics(self) -> set[str]:
        return {t.topic for t in self.timelines}

    def timeline(self, order: int) -> SpecTimeline | None:
        return next((t for t in self.timelines if t.order == order), None)


def pattern_regex(pattern: str, prefix: str) -> re.Pattern[str]:
    """The bridge's ``--pattern`` as a regex with groups ``schema`` and ``table``."""
    out = ""
    for literal, field, _, _ in string.Formatter().parse(pattern):
        out += re.escape(literal)
        if field == "prefix":
            out += re.escape(prefix)
        elif field in ("schema", "table"):
            out += f"(?P<{field}>[^.]+)"
        elif field is not None:
            raise CatalogError(f"pattern {pattern!r}: unknown field {{{field}}}")
    return re.compile(out)


def qualified(table: str) -> str:
    return table if "." in table else f"public.{table}"


class Catalog:
    def __init__(self, broker: httpx.Client, pattern: str, prefix: str) -> None:
        self._broker = broker
        self._regex = pattern_regex(pattern, prefix)
        self._storages: dict[str, str] = {}  # storage id -> its bootstrap servers

    def bridged(self) -> dict[str, str]:
        """Event type name -> table, of every data event type named by the pattern."""
        found: dict[str, str] = {}
        for event_type in self._get("/event-types"):
            if event_type.get("category") != "data":
                continue
            match = self._regex.fullmatch(event_type["name"])
            if match is not None:
                schema = match.groupdict().get("schema") or "public"
                found[event_type["name"]] = f"{schema}.{match.group('table')}"
        return found

    def select(
        self, tables: Sequence[str], event_types: Sequence[str], every: bool
    ) -> dict[str, str]:
        """Event type -> table of what was asked for (``every``: all the bridge writes)."""
        bridged = self.bridged()
        if every or not (tables or event_types):
            return bridged
        chosen: dict[str, str] = {}
        by_table = {table: name for name, table in bridged.items()}
        for table in tables:
            name = by_table.get(qualified(table))
            if name is None:
                raise CatalogError(
                    f"no event type of the bridge holds table {qualified(table)}: the bridge"
                    " creates it on the table's first change, and refuses a table without a"
                    " primary key (its /status lists those)"
                    f" (tables it holds: {', '.join(sorted(by_table)) or 'none'})"
                )
            chosen[name] = qualified(table)
        for name in event_types:
            if name not in bridged:
                raise CatalogError(
                    f"event type {name} is not a data event type named by the bridge's pattern"
                    f" (known: {', '.join(sorted(bridged)) or 'none'})"
                )
            chosen[name] = bridged[name]
        return chosen

    def describe(self, event_type: str, table: str) -> TableSpec:
        """The table's event type, topic, key and columns over every schema version."""
        body = self._get(f"/event-types/{event_type}")
        key = primary_key(body, table)
        versions = self._schema_versions(event_type)
        schemas = [json.loads(v["schema"]) for v in versions]
        partitions = self._get(f"/event-types/{event_type}/partitions")
        return TableSpec(
            table=table,
            event_type=event_type,
            timelines=self._timelines(event_type),
            partitions=len(partitions),
            key=tuple(key),
            columns=tuple(union_columns(schemas)),
            schema_versions=tuple(v["version"] for v in versions),
        )

    def _timelines(self, event_type: str) -> tuple[SpecTimeline, ...]:
        now = datetime.now(UTC)
        found = []
        for item in self._get(f"/event-types/{event_type}/timelines"):
            storage = item["storage_id"]
            latest = item.get("latest_position")
            cleaned_up = item.get("cleaned_up_at")
            found.append(
                SpecTimeline(
                    order=int(item["order"]),
                    topic=item["topic"],
                    bootstrap=None if storage == OWN_STORAGE else self._bootstrap(storage),
                    latest=None if latest is None else tuple(int(o) for o in latest["offsets"]),
                    gone=cleaned_up is not None
                    and datetime.fromisoformat(cleaned_up.replace("Z", "+00:00")) <= now,
                )
            )
        return tuple(sorted(found, key=lambda t: t.order))

    def _bootstrap(self, storage: str) -> str:
        """The bootstrap servers of a storage other than the broker's own."""
        if storage not in self._storages:
            found = self._get(f"/storages/{storage}")
            self._storages[storage] = str(found["kafka_configuration"]["bootstrap_servers"])
        return self._storages[storage]

    def _schema_versions(self, event_type: str) -> list[dict[str, Any]]:
        """Every schema version, oldest first (the API pages them newest first)."""
        items: list[dict[str, Any]] = []
        path: str | None = f"/event-types/{event_type}/schemas?limit=1000"
        while path is not None:
            page = self._get(path)
            items.extend(page["items"])
            path = page["_links"].get("next", {}).get("href")
        return list(reversed(items))

    def _get(self, path: str) -> Any:
        response = self._broker.get(path)
        if response.status_code != 200:
            raise CatalogError(f"GET {path} on the broker: {response.status_code} {response.text}")
        return response.json()
