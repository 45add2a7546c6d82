"""What the changeserver's management ``/status`` says about the slot, the change log, its
long polls and the newest snapshot, as the facts the overview and the changeserver page list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from changebroker.console.upstream import Reply


@dataclass(frozen=True)
class Fact:
    id: str  # the element id tests and people's bookmarks find it by
    label: str
    value: str


def size(value: float | None) -> str:
    if value is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "bytes" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "none"
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} days"


def _written_in(seconds: float | None) -> str:
    """The replay run's duration, when its manifest recorded it."""
    return "" if seconds is None else f", written in {duration(seconds)}"


def facts(status: Reply) -> list[Fact]:
    """The facts, or one saying why there are none (the management port did not answer)."""
    if not status.ok or not isinstance(status.body, dict):
        return [Fact("changeserver-status", "changeserver status", status.problem)]
    body: dict[str, Any] = status.body
    waiters = body.get("waiters_by_selector") or {}
    by_selector = ", ".join(f"{selector or '(none)'}: {n}" for selector, n in waiters.items())
    lag_seconds = body.get("replication_lag_seconds")
    return [
        Fact("slot-retained-wal", "slot's retained WAL", size(body.get("slot_retained_wal_bytes"))),
        Fact(
            "replication-lag",
            "replication lag",
            f"{size(body.get('replication_lag_bytes'))}"
            + ("" if lag_seconds is None else f", {duration(lag_seconds)}"),
        ),
        Fact("changelog-size", "change log size", size(body.get("changelog_bytes"))),
        Fact(
            "changelog-bounds",
            "change log sequences",
            f"{body.get('first_sequence')} … {body.get('last_sequence')}",
        ),
        Fact(
            "changelog-retention",
            "retention",
            "keeps every change"
            if body.get("retention_seconds") is None
            else f"{duration(body['retention_seconds'])}",
        ),
        Fact(
            "longpoll-waiters",
            "long-poll waiters",
            f"{body.get('longpoll_waiters', 0)}" + (f" ({by_selector})" if by_selector else ""),
        ),
        Fact(
            "snapshot-age",
            "newest snapshot",
            "none yet"
            if body.get("snapshot_id") is None
            else f"{body['snapshot_id']}, {duration(body.get('snapshot_age_seconds'))} old"
            + _written_in(body.get("snapshot_duration_seconds")),
        ),
    ]
