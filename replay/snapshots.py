"""Snapshots on disk: ``<out>/<snapshot id>/tables/<schema.table>/`` and ``manifest.json``.

The manifest is written last, atomically (a temporary file, fsync, rename, fsync of the
directory): a directory without one is an unfinished or killed run and not a snapshot.
Snapshot ids sort by time, so the newest snapshot is the greatest id with a manifest.
The format is described in replay/README.md.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from changebroker.files import write_atomically
from changebroker.replay.columns import Column

FORMAT = 1
MANIFEST = "manifest.json"


class SnapshotNotFound(Exception):
    pass


@dataclass(frozen=True)
class TableEntry:
    event_type: str
    topic: str
    path: str  # relative to the snapshot's directory
    format: str  # "parquet" or "delta"
    rows: int
    primary_key: tuple[str, ...]
    schema_versions: tuple[str, ...]
    columns: tuple[Column, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "event_type": self.event_type,
            "topic": self.topic,
            "path": self.path,
            "format": self.format,
            "rows": self.rows,
            "primary_key": list(self.primary_key),
            "schema_versions": list(self.schema_versions),
            "columns": [c.as_json() for c in self.columns],
        }

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> TableEntry:
        return cls(
            item["event_type"],
            item["topic"],
            item["path"],
            item.get("format", "parquet"),
            int(item["rows"]),
            tuple(item["primary_key"]),
            tuple(item["schema_versions"]),
            tuple(Column.of(c) for c in item["columns"]),
        )


Cursors = dict[str, list[dict[str, str]]]  # event type -> [{"partition", "offset"}]


@dataclass(frozen=True)
class Manifest:
    snapshot_id: str
    created_at: str
    base_snapshot_id: str | None
    changeserver_sequence: str | None
    tables: dict[str, TableEntry] = field(default_factory=dict)  # schema.table -> entry
    cursors: Cursors = field(default_factory=dict)
    directory: Path | None = None  # where it was read from or written to
    duration_seconds: float | None = None  # the run's, until the manifest (None: not recorded)

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "snapshot_id": self.snapshot_id,
            "created_at": self.created_at,
            "duration_seconds": self.duration_seconds,
            "base_snapshot_id": self.base_snapshot_id,
            "changeserver_sequence": self.changeserver_sequence,
            "tables": {name: entry.as_json() for name, entry in sorted(self.tables.items())},
            "cursors": {name: cursors for name, cursors in sorted(self.cursors.items())},
        }

    @classmethod
    def of(cls, item: Mapping[str, Any], directory: Path | None = None) -> Manifest:
        if item.get("format") != FORMAT:
            raise SnapshotNotFound(
                f"{directory}: manifest format {item.get('format')!r}; this replay reads {FORMAT}"
            )
        return cls(
            item["snapshot_id"],
            item["created_at"],
            item.get("base_snapshot_id"),
            item.get("changeserver_sequence"),
            {name: TableEntry.of(entry) for name, entry in item["tables"].items()},
            {name: list(cursors) for name, cursors in item["cursors"].items()},
            directory,
            item.get("duration_seconds"),
        )

    def table_path(self, table: str) -> Path:
        assert self.directory is not None
        return self.directory / self.tables[table].path


def new_snapshot_id(now: datetime | None = None) -> str:
    """``20261123T140501123Z-3f9a1c``: sorts by creation time to the millisecond (scheduled
    runs may follow each other within a second); the suffix keeps two runs apart."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    millis = f"{moment.microsecond // 1000:03d}"
    return moment.strftime("%Y%m%dT%H%M%S") + millis + "Z-" + secrets.token_hex(3)


def rfc3339(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def load(directory: Path) -> Manifest:
    path = directory / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SnapshotNotFound(f"{directory} is not a snapshot: it has no {MANIFEST}") from None
    return Manifest.of(json.loads(text), directory)


def newest(out: Path) -> Manifest | None:
    """The snapshot with the greatest id that has a manifest; ``None`` when there is none."""
    if not out.is_dir():
        return None
    for directory in sorted((d for d in out.iterdir() if d.is_dir()), reverse=True):
        if (directory / MANIFEST).is_file():
            return load(directory)
    return None


def find(out: Path, snapshot_id: str | None) -> Manifest:
    """Snapshot ``snapshot_id`` in ``out``, or the newest one when it is ``None``."""
    if snapshot_id is None:
        found = newest(out)
        if found is None:
            raise SnapshotNotFound(f"no snapshot in {out}: run `changebroker replay` first")
        return found
    return load(out / snapshot_id)


def publish(directory: Path, manifest: Manifest) -> Manifest:
    """Write the manifest last and atomically: from now on the directory is a snapshot."""
    write_atomically(directory / MANIFEST, json.dumps(manifest.as_json(), indent=2) + "\n")
    return dataclasses.replace(manifest, directory=directory)
