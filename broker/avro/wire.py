"""Avro's binary encoding of the envelope's own records, by hand.

The envelope's ``Metadata`` record is fixed (:mod:`changebroker.broker.avro.envelope`), so it is
read and written here field by field: a few microseconds an event, where a general codec's per-call
cost is several times that on the publishing path. Event payloads, of schemas not known in
advance, are fastavro's (:mod:`changebroker.broker.avro.payloads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The Metadata record's fields in order, and their types: "long", "string", or nullable ("?")
# longs, strings and arrays of strings ("*"). Version 0 lacks the last, event_owner.
METADATA: tuple[tuple[str, str], ...] = (
    ("occurred_at", "long"),
    ("eid", "string"),
    ("flow_id", "?string"),
    ("received_at", "?long"),
    ("version", "string"),
    ("published_by", "?string"),
    ("event_type", "string"),
    ("partition", "?string"),
    ("partition_keys", "?*"),
    ("partition_compaction_key", "?string"),
    ("parent_eids", "?*"),
    ("span_ctx", "?string"),
    ("event_owner", "?string"),
)
METADATA_V0 = METADATA[:-1]


class WireError(ValueError):
    """Bytes that end early or do not encode the record."""


class Reader:
    """Reads Avro binary values from ``data`` at ``pos``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def long(self) -> int:
        data, pos = self.data, self.pos
        try:
            byte = data[pos]
            if byte < 0x80:  # most lengths and small numbers: one byte
                self.pos = pos + 1
                return (byte >> 1) ^ -(byte & 1)
            n, shift = byte & 0x7F, 7
            while byte & 0x80:
                pos += 1
                byte = data[pos]
                n |= (byte & 0x7F) << shift
                shift += 7
        except IndexError:
            raise WireError("the datum ends inside a number") from None
        if shift > 70:
            raise WireError("a number longer than a long")
        self.pos = pos + 1
        return (n >> 1) ^ -(n & 1)

    def raw(self) -> bytes:
        size = self.long()
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.data):
            raise WireError(f"a length of {size} bytes past the datum's end")
        self.pos = end
        return self.data[start:end]

    def string(self) -> str:
        try:
            return self.raw().decode()
        except UnicodeDecodeError as exc:
            raise WireError(f"a string that is not UTF-8: {exc}") from None

    def strings(self) -> list[str]:
        out: list[str] = []
        while count := self.long():
            if count < 0:  # a block with its size in bytes first
                count = -count
                self.long()
            out += [self.string() for _ in range(count)]
        return out

    def metadata(self, fields: tuple[tuple[str, str], ...] = METADATA) -> dict[str, Any]:
        out: dict[str, Any] = {}
        data = self.data
        for name, kind in fields:
            if kind[0] == "?":
                # Most optional fields are null: one zero byte, read without a call.
                branch = data[self.pos] if self.pos < len(data) else -1
                if branch == 0:
                    self.pos += 1
                    out[name] = None
                    continue
                if branch != 2:
                    raise WireError(f"metadata.{name}: not a union branch of null and a value")
                self.pos += 1
                kind = kind[1:]
            if kind == "string":
                out[name] = self.string()
            elif kind == "long":
                out[name] = self.long()
            else:
                out[name] = self.strings()
        out.setdefault("event_owner", None)
        return out


def long(value: int) -> bytes:
    """Zig-zag, then base-128 varint."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def raw(value: bytes) -> bytes:
    return long(len(value)) + value


def string(value: str) -> bytes:
    return raw(value.encode())


def metadata(record: Mapping[str, Any]) -> bytes:
    """The Metadata record (version 1); TypeError or ValueError when a field does not fit."""
    out: list[bytes] = []
    for name, kind in METADATA:
        value: Any = record.get(name)
        if kind[0] == "?":
            if value is None:
                out.append(b"\x00")
                continue
            out.append(b"\x02")
            kind = kind[1:]
        try:
            if kind == "long":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise TypeError("not a long")
                out.append(long(value))
            elif kind == "string":
                out.append(string(value))
            elif value:
                out.append(long(len(value)) + b"".join(map(string, value)) + b"\x00")
            else:
                out.append(b"\x00")
        except (AttributeError, TypeError):
            raise TypeError(f"metadata.{name} cannot be {value!r} in Avro") from None
    return b"".join(out)
