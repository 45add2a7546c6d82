"""What a change of ``changebroker_ddl`` means for its table (changeserver/ddl.py), case by
case; the event triggers that write it are exercised in test_table_events.py."""

from __future__ import annotations

import json
from typing import Any

from changebroker.changeserver.ddl import CREATE, DROP, REDEFINE, TableEvent, table_events

INSERT, UPDATE, DELETE = 1, 2, 3


def _column(n: int, name: str, **overrides: Any) -> dict[str, Any]:
    return {"n": n, "name": name, "type": 25, "typmod": -1, "generated": "", "missing": False,
            **overrides}  # fmt: skip


def _row(columns: list[dict[str, Any]], command: str = "ALTER TABLE", rewrite: int = 0,
         name: str = "public.t") -> dict[str, str | None]:  # fmt: skip
    return {"name": name, "columns": json.dumps(columns), "command": command,
            "rewrite": str(rewrite)}  # fmt: skip


BASE = [_column(1, "id", type=23), _column(2, "v"), _column(3, "_change_selector")]


def _events(new: dict[str, str | None] | None, old: dict[str, str | None] | None) -> list[Any]:
    operation = UPDATE if new and old else INSERT if new else DELETE
    return [
        (e.table, e.operation, e.detail)
        for e in table_events(operation, new, old, "_change_selector")
    ]


def test_a_volatile_default_or_an_identity_fills_existing_rows_by_a_rewrite() -> None:
    added = [*BASE, _column(4, "at", type=1184)]
    assert _events(_row(added, rewrite=2), _row(BASE)) == [
        ("public.t", REDEFINE, "rows rewritten (a type changed, or a volatile default filled)")
    ]


def test_moving_rows_elsewhere_rewrites_nothing_they_hold() -> None:
    # SET LOGGED (1) and SET ACCESS METHOD (8) rewrite the table, values unchanged.
    assert _events(_row(BASE, rewrite=1 | 8), _row(BASE)) == []


def test_a_generated_column_made_plain_holds_values_never_streamed() -> None:
    generated = [*BASE, _column(4, "g", generated="s")]
    plain = [*BASE, _column(4, "g")]
    assert _events(_row(plain), _row(generated)) == [
        ("public.t", REDEFINE, "column g no longer generated")
    ]


def test_a_table_never_described_is_redefined_unless_it_was_just_created() -> None:
    assert _events(_row(BASE, "CREATE TABLE AS"), None) == [("public.t", CREATE, "CREATE TABLE AS")]
    assert _events(_row(BASE, "existing"), None) == []
    assert _events(_row(BASE, "ALTER TABLE"), None) == [
        ("public.t", REDEFINE, "ALTER TABLE of a table not described before")
    ]


def test_whose_readers_a_table_event_concerns() -> None:
    without = [_column(1, "id", type=23)]
    dropped = table_events(DELETE, None, _row(without), "_change_selector")
    assert dropped == [TableEvent("public.t", DROP, "dropped", selected=False)]
    assert table_events(DELETE, None, _row(BASE), "_change_selector")[0].selected
