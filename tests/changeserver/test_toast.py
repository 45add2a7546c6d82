"""Unchanged TOASTed values: taken from the old row when it has them, else left out."""

from __future__ import annotations

from tests.support.changeserver import Harness


def test_unchanged_toast_is_never_a_wrong_value(cs: Harness) -> None:
    big = "".join(f"{n:05d}" for n in range(4000))  # 20 kB stored out of line, uncompressed
    cs.sql("CREATE TABLE docs (id int PRIMARY KEY, body text, n int, _change_selector text)")
    cs.sql("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
    cs.sql("INSERT INTO docs VALUES (1, %s, 1, 'd')", (big,))
    cs.sql("UPDATE docs SET n = 2")
    cs.sql("ALTER TABLE docs REPLICA IDENTITY FULL")
    cs.sql("UPDATE docs SET n = 3")
    inserted, default_identity, full_identity = cs.wait_for(3, scope="d")["changes"]
    assert inserted["newRow"]["body"]["value"] == big
    assert "body" not in default_identity["newRow"]
    assert default_identity["newRow"]["n"]["value"] == "2"
    assert full_identity["newRow"]["body"]["value"] == big
    assert full_identity["oldRow"]["n"]["value"] == "2"


def test_unchanged_toast_with_a_key_only_old_row_is_left_out(cs: Harness) -> None:
    # An update that moves the key sends the old key (its other columns NULL): not the value.
    big = "".join(f"{n:05d}" for n in range(4000))
    cs.sql("CREATE TABLE keyed (id int PRIMARY KEY, body text, _change_selector text)")
    cs.sql("ALTER TABLE keyed ALTER COLUMN body SET STORAGE EXTERNAL")
    cs.sql("INSERT INTO keyed VALUES (1, %s, 'k')", (big,))
    cs.sql("UPDATE keyed SET id = 2")
    _, moved = cs.wait_for(2, scope="k")["changes"]
    assert moved["oldRow"]["id"]["value"] == "1"
    assert moved["newRow"]["id"]["value"] == "2"
    assert "body" not in moved["newRow"]
