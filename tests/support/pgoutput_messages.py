"""pgoutput messages built from rows, for tests that write a change log without Postgres."""

from __future__ import annotations

import struct

from changebroker.changeserver import pgoutput


def message(operation: int, new: pgoutput.Row | None, old: pgoutput.Row | None) -> bytes:
    """The pgoutput message (relation OID 0) of a change given as rows."""
    relid = b"\0\0\0\0"
    if operation == pgoutput.INSERT and new is not None:
        return b"I" + relid + b"N" + _tuple_data(new)
    if operation == pgoutput.UPDATE and new is not None:
        return b"U" + relid + (b"O" + _tuple_data(old) if old else b"") + b"N" + _tuple_data(new)
    if operation == pgoutput.DELETE and old is not None:
        return b"D" + relid + b"O" + _tuple_data(old)
    raise ValueError(f"no pgoutput message for operation {operation} with these rows")


def _tuple_data(row: pgoutput.Row) -> bytes:
    parts = [struct.pack("!h", len(row))]
    for _, value, _ in row:
        if value is None:
            parts.append(b"n")
        else:
            encoded = value.encode()
            parts.append(b"t" + struct.pack("!i", len(encoded)) + encoded)
    return b"".join(parts)
