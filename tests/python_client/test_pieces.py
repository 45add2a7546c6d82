"""The client's pieces that need no server: streams cut anywhere, delays, the position file,
error bodies."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from changebroker import transicator_pb2 as pb
from changebroker.client import Backoff, FilePositionStore, Position
from changebroker.client.errors import ChangeFeedError, SubscriptionError
from changebroker.client.snapshots import SnapshotDecoder
from changebroker.client.subscription import Lines, batch_of
from changebroker.client.wire import Refusal


def _framed(message: bytes) -> bytes:
    return struct.pack(">i", len(message)) + message


def _snapshot_stream() -> bytes:
    header = pb.SnapshotHeaderPb(timestamp="2026-11-23T14:05:01.123Z", snapshot="")
    table = pb.StreamMessagePb(
        table=pb.TableHeaderPb(
            name="public.t",
            columns=[pb.ColumnPb(name="id", type=20), pb.ColumnPb(name="note", type=25)],
        )
    )
    rows = [
        pb.StreamMessagePb(row=pb.RowPb(values=[pb.ValuePb(int=i), pb.ValuePb(string=f"n{i}")]))
        for i in range(50)
    ] + [pb.StreamMessagePb(row=pb.RowPb(values=[pb.ValuePb(int=50), pb.ValuePb()]))]
    messages = [header, table, *rows]
    return b"".join(_framed(m.SerializeToString()) for m in messages)


def test_a_snapshot_stream_cut_anywhere_decodes_to_the_same_rows() -> None:
    stream = _snapshot_stream()
    rng = random.Random(3)
    for _ in range(20):
        decoder = SnapshotDecoder()
        rows, offset = [], 0
        while offset < len(stream):
            step = rng.randint(1, 40)
            rows += decoder.feed(stream[offset : offset + step])
            offset += step
        decoder.finish()
        assert decoder.timestamp == "2026-11-23T14:05:01.123Z"
        assert [(r.table, r.row["id"].value, r.row["note"].value) for r in rows] == [
            *(("public.t", i, f"n{i}") for i in range(50)),
            ("public.t", 50, None),
        ]


def test_a_snapshot_stream_that_stops_inside_a_message_is_an_error() -> None:
    decoder = SnapshotDecoder()
    decoder.feed(_snapshot_stream()[:-3])
    with pytest.raises(ChangeFeedError, match="part way through a message"):
        decoder.finish()


def test_lines_cut_anywhere_come_out_whole() -> None:
    text = b"".join(json.dumps({"n": i, "pad": "x" * i}).encode() + b"\n" for i in range(200))
    rng = random.Random(5)
    lines, offset, splitter = [], 0, Lines()
    while offset < len(text):
        step = rng.randint(1, 300)
        lines += splitter.feed(text[offset : offset + step])
        offset += step
    assert [json.loads(line)["n"] for line in lines] == list(range(200))


def test_backoff_grows_to_its_ceiling_with_jitter_and_refuses_nonsense() -> None:
    delays = Backoff(first=0.1, most=1.0, factor=2.0).delays()
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    drawn = [next(delays) for _ in ceilings]
    assert all(c / 2 <= d <= c for d, c in zip(drawn, ceilings, strict=True))
    assert len(set(drawn)) == len(drawn)  # jittered
    with pytest.raises(ValueError, match="0 < first <= most"):
        Backoff(first=2.0, most=1.0)


def test_the_position_file_is_replaced_whole_and_a_broken_one_says_what_to_do(
    tmp_path: Path,
) -> None:
    store = FilePositionStore(tmp_path / "feed" / "position.json")
    assert store.load() is None
    store.save(Position("0.1a.2", ("a", "b")))
    store.save(Position("0.1b.0", ("a", "b")))
    assert store.load() == Position("0.1b.0", ("a", "b"))
    assert [p.name for p in (tmp_path / "feed").iterdir()] == ["position.json"]
    (tmp_path / "feed" / "position.json").write_text('{"sequence": "x"}')
    with pytest.raises(ValueError, match=r"not a change feed position.*remove it to start over"):
        store.load()


def test_what_is_not_a_batch_is_an_error_naming_the_stream() -> None:
    with pytest.raises(SubscriptionError, match="stream s-1 sent what is not a batch"):
        batch_of(b'{"events": []}', "s-1")  # no cursor
    batch = batch_of(
        b'{"cursor": {"partition": "0", "offset": "001-0001-000000000000000004"}}', "s"
    )
    assert (batch.cursor.partition, batch.events, batch.info) == ("0", [], None)


def test_refusals_read_both_error_shapes() -> None:
    changeserver = b'{"code": "SNAPSHOT_TOO_OLD", "error": "changes after 0.1.0 are not held"}'
    assert str(Refusal.of(400, changeserver)) == (
        "400 SNAPSHOT_TOO_OLD: changes after 0.1.0 are not held"
    )
    nakadi = (
        b'{"type": "about:blank", "title": "Conflict", "status": 409, "detail": "No free slots"}'
    )
    assert (Refusal.of(409, nakadi).code, Refusal.of(409, nakadi).message) == (
        "Conflict",
        "No free slots",
    )
    assert str(Refusal.of(502, b"<html>Bad Gateway</html>")) == "502: <html>Bad Gateway</html>"
