"""``GET /snapshots``: a selector's rows of the newest replay snapshot, then ``/changes``.

The replay job writes snapshots under one directory: a folder per snapshot (its id sorts
by time), a Parquet dataset per table in it, and ``manifest.json`` (tables, columns with
their type OIDs, the changeserver sequence) written last. This module answers
transicator's snapshot shape from the newest::

    {"snapshotInfo": "", "timestamp": "<created at>", "snapshotId": "<id>",
     "sequence": "<changeserver sequence>",
     "tables": [{"name": "public.orders", "rows": [{"id": {"value": "1", "type": 20}}]}]}

Values are what ``/changes`` gives: Postgres's text output under the changeserver's
session settings, with the column's type OID. ``sequence`` (also the
``X-Snapshot-Sequence`` header) is where ``/changes?since=`` continues: the snapshot holds
exactly the changes up to it. ``snapshotInfo`` (transicator's ``txid_current_snapshot()``)
is empty: a replayed snapshot has no Postgres transaction behind it.

The body is streamed: Parquet is read in record batches filtered on the selector column,
and each batch is rendered and sent before the next is read, so memory does not grow with
the snapshot. gzip when the client accepts it.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from changeserver import api

MANIFEST = "manifest.json"
SEQUENCE_HEADER = "X-Snapshot-Sequence"
ID_HEADER = "X-Snapshot-Id"
BATCH_ROWS = 2048  # rows read, rendered and sent at a time

# Postgres type OIDs whose text output is derived from a typed Parquet value.
_BOOL, _FLOAT4, _FLOAT8 = 16, 700, 701
_FLT_DIG, _DBL_DIG = 6, 15  # Postgres's shortest float output goes exponential from here


@dataclass(frozen=True)
class Table:
    name: str  # schema.table
    path: Path
    columns: list[tuple[str, int]]  # (name, type OID) in the manifest's order


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    created_at: str
    sequence: str
    tables: list[Table]  # those with the selector column


def find_newest(directory: Path) -> tuple[str, dict[str, Any]] | None:
    """(snapshot id, manifest) of the newest published snapshot that names its changeserver
    sequence: a folder without ``manifest.json`` is a replay still writing (or killed)."""
    if not directory.is_dir():
        return None
    for folder in sorted((p for p in directory.iterdir() if p.is_dir()), reverse=True):
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
        except FileNotFoundError:
            continue
        if manifest.get("changeserver_sequence"):
            return folder.name, manifest
    return None


def load(directory: Path, selector_column: str) -> Snapshot | None:
    found = find_newest(directory)
    if found is None:
        return None
    snapshot_id, manifest = found
    tables = []
    for name, table in sorted(manifest["tables"].items()):
        columns = [(c["name"], int(c["type_oid"])) for c in table["columns"]]
        if any(column == selector_column for column, _ in columns):
            tables.append(Table(name, directory / snapshot_id / table["path"], columns))
    return Snapshot(
        snapshot_id, manifest.get("created_at", ""), manifest["changeserver_sequence"], tables
    )


def _float_text(value: float, oid: int) -> str:
    """Postgres's ``float4out``/``float8out`` with ``extra_float_digits`` > 0: the shortest
    digits that read back as the same value, exponential below 1e-4 and from 1e15 (1e6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if oid == _FLOAT4:
        single = struct.unpack("f", struct.pack("f", value))[0]
        digits = next(
            text
            for precision in range(1, 10)
            if struct.unpack("f", struct.pack("f", float(text := f"{single:.{precision}e}")))[0]
            == single
        )
        limit = _FLT_DIG
    else:
        digits, limit = repr(value), _DBL_DIG
    sign, figures, exponent = decimal.Decimal(digits).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, figures))
    point = len(mantissa) + exponent  # decimal point position, counted from the left
    prefix = "-" if sign else ""
    if mantissa == "0":
        return prefix + "0"
    if -4 < point <= limit:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{mantissa}"
        if point >= len(mantissa):
            return prefix + mantissa + "0" * (point - len(mantissa))
        return f"{prefix}{mantissa[:point]}.{mantissa[point:]}"
    power = point - 1
    body = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{prefix}{body}e{'-' if power < 0 else '+'}{abs(power):02d}"


def _timestamp_text(value: datetime.datetime) -> str:
    """``2026-11-23 14:05:01.5+00``: timestamptz under ``DateStyle=ISO, TimeZone=UTC``."""
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value:%H:%M:%S}"
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + ("+00" if value.tzinfo is not None else "")


def _converter(arrow_type: pa.DataType, oid: int) -> Callable[[pa.Array], list[Any]]:
    """Column values -> the text ``/changes`` would give (None for NULL)."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return lambda array: array.to_pylist()
    if pa.types.is_integer(arrow_type):
        return lambda array: pc.cast(array, pa.string()).to_pylist()
    if pa.types.is_boolean(arrow_type):
        return lambda array: pc.if_else(array, "t", "f").to_pylist()
    if pa.types.is_floating(arrow_type):
        float_oid = oid if oid in (_FLOAT4, _FLOAT8) else _FLOAT8
        return lambda array: [
            None if v is None else _float_text(v, float_oid) for v in array.to_pylist()
        ]
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return lambda array: [None if v is None else "\\x" + v.hex() for v in array.to_pylist()]
    if pa.types.is_timestamp(arrow_type):
        return lambda array: [None if v is None else _timestamp_text(v) for v in array.to_pylist()]
    return lambda array: [None if v is None else str(v) for v in array.to_pylist()]


def _table_chunks(table: Table, selectors: list[str], selector_column: str) -> Iterator[bytes]:
    """``{"name": ..., "rows": [...]}`` in pieces of at most ``BATCH_ROWS`` rows."""
    yield b'{"name":' + orjson.dumps(table.name) + b',"rows":['
    dataset = ds.dataset(table.path, format="parquet")
    present = set(dataset.schema.names)
    if selector_column not in present:  # no files: a table with no rows
        yield b"]}"
        return
    columns = [(name, oid) for name, oid in table.columns if name in present]
    names = [name for name, _ in columns]
    convert = [_converter(dataset.schema.field(name).type, oid) for name, oid in columns]
    scanner = dataset.scanner(
        columns=names,
        filter=pc.field(selector_column).isin(selectors),
        batch_size=BATCH_ROWS,
        batch_readahead=1,
        fragment_readahead=1,
    )
    first = True
    for batch in scanner.to_batches():
        if batch.num_rows == 0:
            continue
        texts = [to_text(batch.column(i)) for i, to_text in enumerate(convert)]
        rows = [
            {
                name: {"value": values[i], "type": oid}
                for (name, oid), values in zip(columns, texts, strict=True)
            }
            for i in range(batch.num_rows)
        ]
        body = orjson.dumps(rows)[1:-1]  # the rows without the list's brackets
        yield body if first else b"," + body
        first = False
    yield b"]}"


def render(snapshot: Snapshot, selectors: list[str], selector_column: str) -> Iterator[bytes]:
    """The JSON body, piece by piece."""
    head = {
        "snapshotInfo": "",
        "timestamp": snapshot.created_at,
        "snapshotId": snapshot.snapshot_id,
        "sequence": snapshot.sequence,
    }
    yield orjson.dumps(head)[:-1] + b',"tables":['
    for position, table in enumerate(snapshot.tables):
        if position:
            yield b","
        yield from _table_chunks(table, selectors, selector_column)
    yield b"]}"


def _gzipped(chunks: Iterator[bytes]) -> Iterator[bytes]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    for chunk in chunks:
        # A sync flush per piece: the client gets each batch as it is rendered.
        yield compressor.compress(chunk) + compressor.flush(zlib.Z_SYNC_FLUSH)
    yield compressor.flush()


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        name, *params = (piece.strip() for piece in part.split(";"))
        if name.lower() in ("gzip", "*"):
            return not any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00") for p in params)
    return False


def snapshots_route(state: api.State, directory: Path, selector_column: str, prefix: str) -> Route:
    """``/snapshots`` under ``prefix``, like ``/changes``."""

    async def snapshots(request: Request) -> Response:
        if state.marked_down:
            return api.error_response(503, "MARKED_DOWN", "the server is marked down")
        try:
            query = api.parse_query(request)
        except api.BadRequest as bad:
            return api.error_response(bad.status, bad.code, bad.error, bad.description)
        if query.media_type != api.JSON:
            return api.error_response(
                415, "UNSUPPORTED_FORMAT", "/snapshots is served as application/json only"
            )
        snapshot = load(directory, selector_column)
        if snapshot is None or not snapshot.tables:
            return api.error_response(
                404,
                "NOT_FOUND",
                f"no snapshot covers selector {', '.join(query.selectors)}",
                f"no published snapshot in {directory} has a table with a {selector_column}"
                " column: run `changebroker replay` (or `up --replay-every`) first",
            )
        headers = {SEQUENCE_HEADER: snapshot.sequence, ID_HEADER: snapshot.snapshot_id}
        body = render(snapshot, query.selectors, selector_column)
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            headers["Content-Encoding"] = "gzip"
            body = _gzipped(body)
        headers["Vary"] = "Accept-Encoding"
        return StreamingResponse(body, media_type=api.JSON, headers=headers)

    base = "/" + prefix.strip("/") if prefix.strip("/") else ""
    return Route(base + "/snapshots", snapshots, methods=["GET"])
