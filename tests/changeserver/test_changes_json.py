"""A change's JSON, as /changes serves it, is what ``json.dumps`` gives for the change.

``changes.to_json`` writes the text without building a dict per change; a client comparing
bytes, or parsing them, must get what the encoder wrote: the same keys in the same order,
the same escaping (ASCII only: ``\\uXXXX`` for the rest, control characters and DEL too).
"""

from __future__ import annotations

import json
import random
from typing import Any

from changebroker.changeserver import api, changelog, changes, pgoutput
from changebroker.changeserver.pgoutput import NO_SELECTOR, Relation
from changebroker.changeserver.query import COMPACT, JSON, Query
from changebroker.changeserver.sequence import Sequence
from tests.support import pgoutput_messages

_BOOL = 16
_TYPES = (_BOOL, 20, 23, 25, 1700, 3802)  # bool, int8, int4, text, numeric, jsonb
_CHARACTERS = 'az09 "\\/\x01\x1f\x7f\t\n\u00f1\u00e9\u20ac\u2028\u2029\U0001f600'


def _text(rnd: random.Random) -> str:
    return "".join(rnd.choice(_CHARACTERS) for _ in range(rnd.randint(0, 6)))


def _row(relation: Relation, values: list[str | None]) -> dict[str, Any]:
    row = {}
    for (name, oid), value in zip(relation.columns, values, strict=True):
        if oid == _BOOL and value in ("t", "f"):
            value = "true" if value == "t" else "false"  # as transicator's plugin printed it
        row[name] = {"value": value, "type": oid}
    return row


def _relation(rnd: random.Random) -> Relation:
    columns = tuple((f"c{i}{_text(rnd)}", rnd.choice(_TYPES)) for i in range(rnd.randint(0, 5)))
    return Relation("public." + _text(rnd), columns)


def _random_change(
    rnd: random.Random, relation: Relation, relation_id: int
) -> tuple[tuple[int, int, int, bytes], dict[str, Any]]:
    """A stored change of ``relation`` (lsn, index, txid, body), and that change as
    ``json.dumps`` would be given it."""
    columns = relation.columns
    new = [rnd.choice([None, "t", "f", _text(rnd)]) for _ in columns]
    old = [rnd.choice([None, "t", "f", _text(rnd)]) for _ in columns]
    operation = rnd.choice([pgoutput.INSERT, pgoutput.UPDATE, pgoutput.DELETE])
    lsn, idx, txid = rnd.randrange(2**64), rnd.randrange(2**32), rnd.randrange(2**64)
    change_lsn, commit_time = rnd.randrange(2**64), rnd.randrange(2**62)
    new_row = [(name, value, oid) for (name, oid), value in zip(columns, new, strict=True)]
    old_row = [(name, value, oid) for (name, oid), value in zip(columns, old, strict=True)]
    with_old = operation == pgoutput.DELETE or (operation == pgoutput.UPDATE and bool(old_row))
    message = pgoutput_messages.message(operation, new_row, old_row if with_old else None)
    body = pgoutput.BODY.pack(change_lsn, commit_time, relation_id) + message
    expected: dict[str, Any] = {
        "operation": operation,
        "table": relation.table,
        "sequence": str(Sequence(lsn, idx)),
        "commitSequence": lsn,
        "changeSequence": change_lsn,
        "commitIndex": idx,
        "txid": txid,
        "timestamp": changes.unix_us(commit_time) // 1_000_000,
    }
    if operation != pgoutput.DELETE:
        expected["newRow"] = _row(relation, new)
    if with_old:
        expected["oldRow"] = _row(relation, old)
    return (lsn, idx, txid, body), expected


def test_to_json_is_json_dumps_of_the_change_byte_for_byte() -> None:
    rnd = random.Random(20261127)
    for _ in range(3000):
        relation = _relation(rnd)
        stored, expected = _random_change(rnd, relation, 1)

        served = changes.to_json(*stored, {1: relation}.__getitem__)

        assert served == json.dumps(expected, separators=(",", ":"))


def test_a_compact_answer_reads_back_as_the_same_answer_in_json() -> None:
    """The bridge reads the compact form: what it reads must be what the JSON answer parses
    to, change for change (bodies of several relations, every kind of value, the bounds)."""
    rnd = random.Random(20261129)
    for size in (0, 1, 2, 300):
        relations = {id: _relation(rnd) for id in rnd.sample(range(1, 2**32), 4)}
        rows = []
        for _ in range(size):
            id = rnd.choice(list(relations))
            stored, _ = _random_change(rnd, relations[id], id)
            rows.append(stored)
        first, last = Sequence(1, 2), Sequence(rnd.randrange(2**64), rnd.randrange(2**32))
        bounds = changelog.Bounds(first, last, Sequence(0, 0))
        answers = {}
        for media_type in (JSON, COMPACT):
            query = Query([NO_SELECTOR], first, 1000, 0, None, media_type)
            answers[media_type] = api._render(query, bounds, rows, relations.__getitem__)

        assert changes.from_compact(answers[COMPACT]) == json.loads(answers[JSON])
        assert len(answers[COMPACT]) < len(answers[JSON]) or not rows
