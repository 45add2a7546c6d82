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

from changebroker import pg_types
from changebroker import transicator_pb2 as pb
from changebroker.changeserver import changes, errors
from changebroker.changeserver.management import State, base
from changebroker.changeserver.pgoutput import NO_SELECTOR
from changebroker.changeserver.query import PROTOBUF, parse_query

MANIFEST = "manifest.json"
SEQUENCE_HEADER = "X-Snapshot-Sequence"
ID_HEADER = "X-Snapshot-Id"
BATCH_ROWS = 2048  # rows read, rendered and sent at a time

# Postgres type OIDs whose text output is derived from a typed Parquet value.
_BOOL, _TEXT, _FLOAT4, _FLOAT8, _TIMESTAMPTZ = (
    t.oid
    for t in (pg_types.BOOL, pg_types.TEXT, pg_types.FLOAT4, pg_types.FLOAT8, pg_types.TIMESTAMPTZ)
)
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


def load(directory: Path, selector_column: str, selectors: list[str]) -> Snapshot | None:
    """The newest snapshot with the tables that hold rows of ``selectors``: those with the
    selector column, and when no selector is named (rows without one, as ``/changes``
    serves them) also the tables without it."""
    found = find_newest(directory)
    if found is None:
        return None
    snapshot_id, manifest = found
    tables = []
    for name, table in sorted(manifest["tables"].items()):
        # A type of the database's own (enum, domain) has no OID in the manifest: its
        # values are its text output, served as text.
        columns = [(c["name"], int(c.get("type_oid") or _TEXT)) for c in table["columns"]]
        if selectors == [NO_SELECTOR] or any(c == selector_column for c, _ in columns):
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
    if oid != _FLOAT4 and abs(value) < 1e15:
        # repr is the shortest round trip too, and agrees but for a trailing ".0".
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
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


def _timestamp_text(array: pa.Array, with_zone: bool) -> pa.Array:
    """``2026-11-23 14:05:01.5+00``: timestamptz under ``DateStyle=ISO, TimeZone=UTC``."""
    # Naive microseconds (of the UTC instant): %S then has six fraction digits, and no time
    # zone lookup per value.
    naive = pc.cast(array, pa.timestamp("us"), safe=False)
    text = pc.strftime(naive, "%Y-%m-%d %H:%M:%S")
    text = pc.replace_substring_regex(text, r"\.?0+$", "")  # Postgres drops trailing zeros
    return pc.binary_join_element_wise(text, "+00", "") if with_zone else text


def _double_text(array: pa.Array) -> pa.Array:
    """float8 text: Arrow's shortest digits where Postgres writes them without an exponent
    (0 and 1e-4 <= |x| < 1e15) and so does Arrow; the Python path for the rest."""
    array = pc.cast(array, pa.float64())
    magnitude = pc.abs(array)
    text = pc.cast(array, pa.string())
    plain = pc.and_(
        pc.or_(
            pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e15)),
            pc.equal(magnitude, 0.0),
        ),
        pc.invert(pc.match_substring(text, "e")),
    )
    if pc.all(pc.fill_null(plain, True)).as_py():
        return text
    return pa.array(
        [
            t if p or v is None else _float_text(v, _FLOAT8)
            for v, t, p in zip(array.to_pylist(), text.to_pylist(), plain.to_pylist(), strict=True)
        ],
        pa.string(),
    )


def _python_text(function: Callable[[Any], str]) -> Callable[[pa.Array], pa.Array]:
    return lambda array: pa.array(
        [None if v is None else function(v) for v in array.to_pylist()], pa.string()
    )


def _converter(arrow_type: pa.DataType, oid: int) -> Callable[[pa.Array], pa.Array]:
    """A column of values -> a string column of the text ``/changes`` would give."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return lambda array: pc.cast(array, pa.string())
    if pa.types.is_integer(arrow_type):
        return lambda array: pc.cast(array, pa.string())
    if pa.types.is_boolean(arrow_type):
        return lambda array: pc.if_else(array, "t", "f")
    if pa.types.is_timestamp(arrow_type):
        # Spark's Parquet timestamps read back without a zone: the type says it is an instant.
        with_zone = oid == _TIMESTAMPTZ or arrow_type.tz is not None
        return lambda array: _timestamp_text(array, with_zone)
    if pa.types.is_floating(arrow_type) and oid == _FLOAT4:
        return _python_text(lambda value: _float_text(value, _FLOAT4))
    if pa.types.is_floating(arrow_type):
        return _double_text
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return _python_text(lambda value: "\\x" + value.hex())
    return _python_text(str)


_QUOTE, _NULL = pa.scalar('"'), pa.scalar("null")
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'


def _json_strings(text: pa.Array) -> pa.Array:
    """Each value as a JSON string literal, NULL as ``null``."""
    if pc.any(pc.match_substring_regex(text, _NEEDS_ESCAPE)).as_py():
        quoted = pa.array(
            [None if v is None else orjson.dumps(v).decode() for v in text.to_pylist()],
            pa.string(),
        )
    else:  # the common case: quotes around, all in Arrow
        quoted = pc.binary_join_element_wise(_QUOTE, text, _QUOTE, _NOTHING)
    return pc.fill_null(quoted, _NULL)


def _scan(
    table: Table, selectors: list[str], selector_column: str
) -> tuple[list[tuple[str, int]], Iterator[list[pa.Array]]]:
    """The table's columns (name, OID), and its rows of ``selectors`` in batches of at most
    ``BATCH_ROWS``, each column as the text ``/changes`` gives (null for NULL)."""
    dataset = ds.dataset(table.path, format="parquet")
    present = set(dataset.schema.names)
    if not present:  # no files: a table with no rows
        return table.columns, iter(())
    columns = [(name, oid) for name, oid in table.columns if name in present]
    convert = [_converter(dataset.schema.field(name).type, oid) for name, oid in columns]
    selector = pc.field(selector_column)
    if selectors != [NO_SELECTOR]:
        matches = selector.isin(selectors)
    elif selector_column in present:  # rows without a selector: NULL or empty
        matches = selector.is_null() | (selector == NO_SELECTOR)
    else:
        matches = None  # a table without the column: every row
    scanner = dataset.scanner(
        columns=[name for name, _ in columns],
        filter=matches,
        batch_size=BATCH_ROWS,
        batch_readahead=1,
        fragment_readahead=1,
    )
    batches = (
        [to_text(batch.column(i)) for i, to_text in enumerate(convert)]
        for batch in scanner.to_batches()
        if batch.num_rows
    )
    return columns, batches


# -- JSON -----------------------------------------------------------------------------


Literals = list[tuple[pa.Scalar, pa.Scalar, bool]]


def _literals(columns: list[tuple[str, int]]) -> Literals:
    """Per column, the JSON around its value: ``{"name":{"value":`` and ``,"type":oid}``
    (Arrow scalars made once: making them per batch costs more than the batch's rows), and
    whether it is a bool."""
    return [
        (
            pa.scalar(("{" if position == 0 else ",") + orjson.dumps(name).decode() + ':{"value":'),
            pa.scalar(f',"type":{oid}}}'),
            oid == _BOOL,
        )
        for position, (name, oid) in enumerate(columns)
    ]


_ROW_END, _NOTHING, _COMMA = pa.scalar("}"), pa.scalar(""), pa.scalar(",")
_TRUE, _FALSE = pa.scalar("true"), pa.scalar("false")


def _rows_json(texts: list[pa.Array], literals: Literals) -> bytes:
    """The batch's rows as JSON objects separated by commas, assembled column-wise in Arrow:
    ``{"col":{"value":"text","type":oid},...}`` per row."""
    parts: list[Any] = []
    for (before, after, is_bool), text in zip(literals, texts, strict=True):
        if is_bool:  # as /changes spells a bool in JSON (transicator's), not "t"/"f"
            text = pc.if_else(pc.equal(text, "t"), _TRUE, _FALSE)
        parts += [before, _json_strings(text), after]
    rows = pc.binary_join_element_wise(*parts, _ROW_END, _NOTHING)
    offsets = pa.array([0, len(rows)], pa.int32())
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, rows), _COMMA)
    return bytes(joined[0].as_buffer())


def _table_json(table: Table, selectors: list[str], selector_column: str) -> Iterator[bytes]:
    """``{"name": ..., "rows": [...]}`` in pieces of at most ``BATCH_ROWS`` rows."""
    yield b'{"name":' + orjson.dumps(table.name) + b',"rows":['
    columns, batches = _scan(table, selectors, selector_column)
    literals = _literals(columns)
    for position, texts in enumerate(batches):
        body = _rows_json(texts, literals)
        yield body if position == 0 else b"," + body
    yield b"]}"


def render_json(snapshot: Snapshot, selectors: list[str], selector_column: str) -> Iterator[bytes]:
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
        yield from _table_json(table, selectors, selector_column)
    yield b"]}"


# -- protobuf -------------------------------------------------------------------------
# Transicator's snapshot stream: messages each behind a 4-byte big-endian length, a
# SnapshotHeaderPb first, then per table a StreamMessagePb holding its TableHeaderPb and one
# per row holding a RowPb (values in the table header's column order). Those four wrappers
# are only nested length-delimited fields, assembled here; values are transicator's ValuePb.


def _varint(number: int) -> bytes:
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, nested messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _framed(message: bytes) -> bytes:
    return struct.pack(">i", len(message)) + message


def _table_protobuf(table: Table, selectors: list[str], selector_column: str) -> Iterator[bytes]:
    columns, batches = _scan(table, selectors, selector_column)
    header = _field(1, table.name.encode()) + b"".join(
        _field(2, pb.ColumnPb(name=name, type=oid).SerializeToString()) for name, oid in columns
    )
    yield _framed(_field(1, header))  # StreamMessagePb.table
    oids = [oid for _, oid in columns]
    for texts in batches:
        values = [text.to_pylist() for text in texts]
        yield b"".join(
            _framed(_field(2, _row_protobuf(row, oids)))  # StreamMessagePb.row
            for row in zip(*values, strict=True)
        )


def _row_protobuf(row: tuple[str | None, ...], oids: list[int]) -> bytes:
    """RowPb: a ValuePb per column, typed as ``/changes`` types them; NULL is an empty one."""
    return b"".join(
        _field(1, b"" if text is None else changes.typed_value(text, oid).SerializeToString())
        for text, oid in zip(row, oids, strict=True)
    )


def render_protobuf(
    snapshot: Snapshot, selectors: list[str], selector_column: str
) -> Iterator[bytes]:
    # SnapshotHeaderPb: timestamp, snapshot (no Postgres snapshot behind a replayed one).
    yield _framed(_field(1, snapshot.created_at.encode()) + _field(2, b""))
    for table in snapshot.tables:
        yield from _table_protobuf(table, selectors, selector_column)


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


def snapshots_route(state: State, directory: Path, selector_column: str, prefix: str) -> Route:
    """``/snapshots`` under ``prefix``, like ``/changes``."""

    async def snapshots(request: Request) -> Response:
        if state.marked_down:
            return errors.error_response(503, "MARKED_DOWN", "the server is marked down")
        try:
            query = parse_query(request)
        except errors.BadRequest as bad:
            return errors.error_response(bad.status, bad.code, bad.error, bad.description)
        snapshot = load(directory, selector_column, query.selectors)
        if snapshot is None or not snapshot.tables:
            return errors.error_response(
                404,
                "NOT_FOUND",
                f"no snapshot covers selector {', '.join(query.selectors) or '(none)'}",
                f"no published snapshot in {directory} has a table with a {selector_column}"
                " column: run `changebroker replay` (or `up --replay-every`) first",
            )
        headers = {SEQUENCE_HEADER: snapshot.sequence, ID_HEADER: snapshot.snapshot_id}
        render = render_protobuf if query.media_type == PROTOBUF else render_json
        body = render(snapshot, query.selectors, selector_column)
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            headers["Content-Encoding"] = "gzip"
            body = _gzipped(body)
        headers["Vary"] = "Accept-Encoding"
        return StreamingResponse(body, media_type=query.media_type, headers=headers)

    return Route(base(prefix) + "/snapshots", snapshots, methods=["GET"])
