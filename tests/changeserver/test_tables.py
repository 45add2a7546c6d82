"""The ``table`` extension of GET /changes (the bridge's read): every change of the named
tables whatever its selector, windows that move past other tables' changes, and
transicator's own queries unaffected."""

from __future__ import annotations

import json
import threading

from changebroker.changeserver import changes
from changebroker.changeserver.ddl import CREATE
from changebroker.changeserver.sequence import Sequence
from tests.support.changeserver import Harness


def test_every_change_of_named_tables_whatever_the_selector(cs: Harness) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY, v text)")
    cs.sql("CREATE TABLE other (id int PRIMARY KEY)")
    cs.sql(
        "INSERT INTO items VALUES (1, 'one', 'a'), (2, 'two', NULL);"
        " INSERT INTO plain VALUES (1, 'x'); INSERT INTO other VALUES (1);"
        " UPDATE plain SET v = 'y'; DELETE FROM plain"
    )
    body = cs.wait_for(6, table=["public.plain", "public.it*"])
    served = [(c["table"], c["operation"]) for c in body["changes"]]
    assert served == [
        ("public.plain", CREATE),  # a table event (test_table_events.py)
        ("public.items", 1),
        ("public.items", 1),
        ("public.plain", 1),
        ("public.plain", 2),
        ("public.plain", 3),
    ]
    # Transicator's own query is what it was: scope "a" names one row.
    assert [c["table"] for c in cs.changes(scope="a")["changes"]] == ["public.items"]


def test_a_window_moves_past_other_tables_changes(cs: Harness) -> None:
    cs.sql("CREATE TABLE noise (id int PRIMARY KEY)")
    cs.sql("INSERT INTO noise SELECT generate_series(1, 30)")
    cs.sql("INSERT INTO items VALUES (1, 'one', NULL)")
    cs.wait_for(1, table="public.items")
    since, seen = "0.0.0", []
    for _ in range(10):
        body = cs.changes(table="public.items", since=since, limit=8)
        seen += [c["table"] for c in body["changes"]]
        if body["lastSequence"] == since:
            break
        assert Sequence.parse(body["lastSequence"]) > Sequence.parse(since)
        since = body["lastSequence"]
    # 31 changes in windows of 8: the noise is skipped, the one items change is served once.
    assert seen == ["public.items"]


def test_a_long_poll_on_tables_wakes_on_a_change(cs: Harness) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY)")
    cs.sql("INSERT INTO plain VALUES (0)")
    last = cs.wait_for(2, table="public.plain")["lastSequence"]  # its CREATE and the insert
    timer = threading.Timer(0.5, cs.sql, ("INSERT INTO plain VALUES (1)",))
    timer.start()
    body = cs.changes(table="public.plain", since=last, block=20)
    timer.join()
    assert [c["newRow"]["id"]["value"] for c in body["changes"]] == ["1"]


def test_table_with_a_selector_is_refused(cs: Harness) -> None:
    response = cs.get(table="public.items", scope="a")
    assert response.status_code == 400
    assert response.json()["code"] == "PARAMETER_INVALID"


def test_the_compact_form_reads_back_as_the_json_answer(cs: Harness) -> None:
    """The bridge's form of a ``table`` read: named in Accept it is served (smaller), and it
    reads back as the JSON answer to the same query does, table events too; a wildcard still
    gets JSON."""
    cs.sql("CREATE TABLE typed (id int PRIMARY KEY, ok boolean, doc jsonb, amount numeric)")
    cs.sql(
        'INSERT INTO typed VALUES (1, true, \'{"a": [1, "é"]}\', 1.50), (2, false, NULL, NULL);'
        " UPDATE typed SET ok = NULL, amount = 2 WHERE id = 1; DELETE FROM typed WHERE id = 2"
    )
    cs.sql("TRUNCATE typed")
    as_json = cs.wait_for(5, table="public.typed")
    assert as_json["changes"][-1]["detail"] == "truncated"

    compact = cs.get(accept=changes.COMPACT, table="public.typed")

    assert compact.status_code == 200
    assert compact.headers["content-type"] == changes.COMPACT
    assert changes.from_compact(compact.content) == as_json
    assert len(compact.content) < len(json.dumps(as_json))
    wildcard = cs.get(accept=f"*/*, {changes.COMPACT};q=0.1", table="public.typed")
    assert wildcard.headers["content-type"] == "application/json"
