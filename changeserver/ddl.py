"""DDL in the change stream: what a table's CREATE, ALTER or DROP means for the rows its
earlier changes describe.

Logical replication carries no DDL. ``sql/changeserver/001_ddl.sql`` (installed by
:func:`install`) keeps a row per published table in ``changebroker_ddl``, written by event
triggers in the DDL's own transaction: a CREATE inserts it, an ALTER that changes the
table's name or columns (or rewrites its rows) updates it, a DROP deletes it. Those changes
stream like any other, at their place among the data changes, and :func:`table_events`
reads each into what it means for the table:

* ``CREATE``: a new table; every row it will have comes through the stream.
* ``DROP``: the table and every row of it are gone (a renamed table is dropped under its
  old name).
* ``REDEFINE``: an ALTER after which earlier changes no longer describe the rows (Postgres
  15's ALTER TABLE, action by action): a column renamed or dropped (rows no longer have
  it), a column retyped (``ALTER TYPE``, ``USING``: values may read otherwise), a column
  added with a value for existing rows (a non-volatile ``DEFAULT`` stored in the catalog, or
  a rewrite by a volatile default, an identity, a stored generated column), a generated
  column made plain (``DROP EXPRESSION``: values Postgres never streamed), a table renamed
  or moved to another schema (its rows now under the new name), or a rewrite whose reason
  is new values. The rest changes no row's content: ``SET``/``DROP DEFAULT``, ``NOT NULL``,
  constraints, indexes, statistics, storage, triggers, rules, row security, ownership,
  replica identity, tablespace, ``SET LOGGED``, access method, ``ADD COLUMN`` without a
  value for existing rows (they read NULL, as the changes say), and ``ATTACH``/``DETACH
  PARTITION`` (each partition streams under its own name).

TRUNCATE needs none of this: pgoutput streams it (``pgoutput.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from changebroker import logs, pg

log = logging.getLogger(__name__)

DDL_TABLE = "public.changebroker_ddl"
TRUNCATE, DROP, CREATE, REDEFINE = 4, 5, 6, 7  # change operations after 1-3 (pgoutput.py)
_NEW_VALUES = 0x02 | 0x04  # rewrite reasons: a column's default, a column's type


@dataclass(frozen=True)
class TableEvent:
    table: str  # schema.table
    operation: int  # TRUNCATE, DROP, CREATE or REDEFINE
    detail: str  # what happened, for people
    selected: bool  # the table has the selector column: its rows may be any selector's


def install(dsn: str, publication: str) -> bool:
    """Apply ``sql/changeserver/`` and make sure ``publication`` streams ``changebroker_ddl``;
    False (logged) when the database refuses: event triggers need a superuser."""
    try:
        pg.migrate(dsn, "changeserver")
        with pg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT puballtables, EXISTS (SELECT 1 FROM pg_publication_tables t"
                " WHERE t.pubname = p.pubname AND t.schemaname || '.' || t.tablename = %s)"
                " FROM pg_publication p WHERE pubname = %s",
                (DDL_TABLE, publication),
            ).fetchone()
            if row is not None and not row[0] and not row[1]:
                conn.execute(
                    sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                        sql.Identifier(publication), sql.Identifier(*DDL_TABLE.split("."))
                    )
                )
    except psycopg.errors.InsufficientPrivilege as refused:
        log.error(
            "DDL is not captured: DROP TABLE, RENAME COLUMN and other ALTER TABLE reach no"
            " reader. Apply sql/changeserver/001_ddl.sql as a superuser (event triggers need"
            " one), then restart",
            extra=logs.fields(error=str(refused).strip()),
        )
        return False
    return True


def table_events(
    operation: int,
    new: Mapping[str, str | None] | None,
    old: Mapping[str, str | None] | None,
    selector_column: str,
) -> list[TableEvent]:
    """What one change of ``changebroker_ddl`` (operation 1-3, its rows as column -> text)
    means for its table."""
    before = _State.of(old) if old else None
    after = _State.of(new) if new else None
    if after is None:
        if before is None:
            return []
        return [TableEvent(before.table, DROP, "dropped", before.selected(selector_column))]
    selected = after.selected(selector_column)
    if before is None:
        if after.command == "existing":
            return []  # installed: the tables that were there
        if after.command.startswith(("CREATE", "SELECT")):
            return [TableEvent(after.table, CREATE, after.command, selected)]
        unseen = f"{after.command} of a table not described before"
        return [TableEvent(after.table, REDEFINE, unseen, selected)]
    if before.table != after.table:
        was_selected = before.selected(selector_column)
        return [
            TableEvent(before.table, DROP, f"renamed to {after.table}", was_selected),
            TableEvent(after.table, REDEFINE, f"renamed from {before.table}", selected),
        ]
    reasons = _redefinitions(before, after)
    if not reasons:
        return []
    return [TableEvent(after.table, REDEFINE, "; ".join(reasons), selected)]


@dataclass(frozen=True)
class _State:
    table: str
    columns: dict[int, Mapping[str, Any]]  # attnum -> the column as the trigger saw it
    command: str
    rewrite: int

    @classmethod
    def of(cls, row: Mapping[str, str | None]) -> _State:
        columns = json.loads(row.get("columns") or "[]")
        return cls(
            str(row.get("name")),
            {int(c["n"]): c for c in columns},
            str(row.get("command") or ""),
            int(row.get("rewrite") or 0),
        )

    def selected(self, selector_column: str) -> bool:
        return any(c["name"] == selector_column for c in self.columns.values())


def _redefinitions(before: _State, after: _State) -> list[str]:
    """Why rows no longer read as their earlier changes said (empty: they still do)."""
    found = []
    for number, was in before.columns.items():
        now = after.columns.get(number)
        if now is None:
            found.append(f"column {was['name']} dropped")
            continue
        if now["name"] != was["name"]:
            found.append(f"column {was['name']} renamed to {now['name']}")
        if (now["type"], now["typmod"]) != (was["type"], was["typmod"]):
            found.append(f"column {now['name']} retyped")
        if was["generated"] and not now["generated"]:
            found.append(f"column {now['name']} no longer generated")
    for number, now in after.columns.items():
        if number not in before.columns and now["missing"]:
            found.append(f"column {now['name']} added with a value for existing rows")
    if after.rewrite & _NEW_VALUES:
        found.append("rows rewritten (a type changed, or a volatile default filled)")
    return found
