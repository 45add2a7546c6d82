"""Nakadi's Avro envelope without services: schema fingerprints, framing, metadata both ways."""

from __future__ import annotations

import io

import fastavro
import pytest

from changebroker.broker.avro import envelope, metadata
from changebroker.broker.avro.envelope import EnvelopeError, Record

# The CRC-64-AVRO fingerprints (little-endian, as single-object encoding writes them) of
# Nakadi's schemas, as Apache Avro's Java SchemaNormalization.parsingFingerprint64 computes
# them: a client's PublishingBatch must start with C3 01 and one of these.
FINGERPRINTS = {
    ("envelope", "0"): "5cfd16145b3fba56",
    ("envelope", "1"): "56e804ed54719440",
    ("batch.publishing", "0"): "140bb3ddfd107df8",
    ("batch.publishing", "1"): "9c6b2afa57662485",
    ("batch.consumption", "0"): "dcdcfc583923f971",
    ("batch.consumption", "1"): "451a7f6089e7f57e",
}

METADATA = {
    "occurred_at": 1_700_000_000_123,
    "eid": "CE8C9EBC-3F19-4B9D-A453-08AD2EDA6028",
    "version": "2.0.0",
    "event_type": "shop.order",
    "partition_keys": ["a", "b"],
}


@pytest.mark.parametrize(("name", "version"), sorted(FINGERPRINTS))
def test_fingerprints_are_apache_avros(name: str, version: str) -> None:
    header = envelope.single_object_header(envelope.SCHEMAS[name][version])
    assert header == b"\xc3\x01" + bytes.fromhex(FINGERPRINTS[(name, version)])


def test_a_version_0_batch_is_read_too() -> None:
    """Written by fastavro with Nakadi's version 0 schema itself, as an older client would."""
    schema = envelope.SCHEMAS["batch.publishing"]["0"]
    datum = io.BytesIO()
    meta = {k: v for k, v in METADATA.items()}
    fastavro.schemaless_writer(
        datum,
        fastavro.parse_schema(envelope.plain(schema)),
        {"events": [{"metadata": meta, "payload": b"x"}]},
    )
    body = envelope.single_object_header(schema) + datum.getvalue()
    (record,) = envelope.read_publishing_batch(body)
    assert record.payload == b"x"
    assert record.metadata["eid"] == METADATA["eid"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'[{"foo": 1}]', "single-object encoding"),
        (b"\xc3\x01" + bytes.fromhex(FINGERPRINTS[("envelope", "1")]), "single-object encoding"),
        (envelope.publishing_batch([Record(METADATA, b"")])[:-3], "not a valid Avro datum"),
        (envelope.publishing_batch([Record(METADATA, b"")]) + b"\x00", "bytes after its datum"),
    ],
)
def test_what_is_not_a_publishing_batch_is_named(body: bytes, says: str) -> None:
    with pytest.raises(EnvelopeError, match=says):
        envelope.read_publishing_batch(body)


def test_a_consumption_batch_splices_stored_envelopes_and_reads_back() -> None:
    stored = envelope.stored(METADATA, b"\x06bar")
    assert envelope.is_envelope(stored) and not envelope.is_envelope(b'{"a":1}')
    cursor = {"partition": "3", "offset": "001-0001-000000000000000007", "event_type": "e",
              "cursor_token": "t"}  # fmt: skip
    batch = envelope.consumption_batch(cursor, "Stream started", [envelope.envelope_datum(stored)])
    keep_alive = envelope.consumption_batch(cursor, None, [])
    first, second = envelope.read_consumption_batches(batch + keep_alive)
    assert first["cursor"] == cursor and first["info"] == "Stream started"
    assert first["events"][0]["payload"] == b"\x06bar"
    assert first["events"][0]["metadata"]["partition_keys"] == ["a", "b"]
    assert second["events"] == [] and second["info"] is None


def test_metadata_both_ways() -> None:
    as_json = {
        "eid": METADATA["eid"],
        "occurred_at": "2023-11-14T22:13:20.123Z",
        "event_type": "shop.order",
        "span_ctx": {"ot-tracer-traceid": "1"},
        "partition": "0",
    }
    record = metadata.to_avro(as_json, "3.0.0")
    assert record["occurred_at"] == 1_700_000_000_123
    assert record["version"] == "3.0.0" and record["span_ctx"] == '{"ot-tracer-traceid":"1"}'
    assert record["received_at"] is None
    assert metadata.to_json(record) == {**as_json, "version": "3.0.0"}
    # An offset other than Z is the same moment.
    assert metadata.millis("2023-11-14T23:13:20.123+01:00") == 1_700_000_000_123
    with pytest.raises(ValueError, match="eid"):
        metadata.to_avro({"occurred_at": "2023-11-14T22:13:20Z", "event_type": "e"}, "1.0.0")


FULL_METADATA = {
    "occurred_at": -1,  # before the epoch: a negative long
    "eid": "e",
    "flow_id": "flöw",
    "received_at": 2**62,
    "version": "1.0.0",
    "published_by": "me",
    "event_type": "shop.order",
    "partition": "7",
    "partition_keys": [f"key-{i}" for i in range(200)],  # more than one varint byte of count
    "partition_compaction_key": "k",
    "parent_eids": [],
    "span_ctx": '{"a": "b"}',
    "event_owner": "team",
}


@pytest.mark.parametrize("fields", [METADATA, FULL_METADATA])
def test_the_hand_written_envelope_and_fastavro_agree(fields: dict[str, object]) -> None:
    """The broker reads and writes envelopes by hand; fastavro, with Nakadi's schema, is the
    independent judge both ways."""
    record = {name: fields.get(name) for name in metadata.FIELDS}
    schema = fastavro.parse_schema(envelope.plain(envelope.SCHEMAS["envelope"]["1"]))
    by_fastavro = io.BytesIO()
    fastavro.schemaless_writer(by_fastavro, schema, {"metadata": record, "payload": b"\x00\xff"})
    assert envelope.datum(record, b"\x00\xff") == by_fastavro.getvalue()
    read = envelope.read_stored(envelope.stored(record, b"\x00\xff"))
    assert (read.metadata, read.payload) == (record, b"\x00\xff")


def test_a_metadata_field_of_the_wrong_type_is_named() -> None:
    with pytest.raises(TypeError, match=r"metadata\.occurred_at"):
        envelope.stored({**METADATA, "occurred_at": "yesterday"}, b"")
