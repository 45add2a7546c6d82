"""``GET /snapshots``: the newest snapshot's rows of a selector, as ``/changes`` gives values.

Snapshots here are written from ``SELECT`` (tests/support/snapshots.py) in the replay job's
layout; the handoff from a real replay is tested with the bridge (tests/bridge).
"""

from __future__ import annotations

import datetime
import gzip
import json
import shutil
import socket
import struct
from pathlib import Path
from typing import Any

import httpx

from changebroker import transicator_pb2 as pb
from changebroker.changeserver import changes
from changebroker.changeserver.query import PROTOBUF
from changebroker.changeserver.snapshots import ID_HEADER, SEQUENCE_HEADER
from tests.support.changeserver import Harness, MakeServer
from tests.support.snapshots import write_snapshot

TYPES = """
CREATE TABLE typed (
    id bigint PRIMARY KEY, b boolean, s smallint, i integer, r real, d double precision,
    n numeric, m money, t text, tz timestamptz, ts timestamp, day date, j jsonb, by bytea,
    u uuid, iv interval, arr int[], _change_selector text)
"""
ROWS = [
    "(1, true, -32768, 2147483647, 0.1, 0.1, 3.14159265358979323846264338327950288, 12.34,"
    " 'ünï''code', '2026-11-23 02:37:49.5+00', '2026-11-23 02:37:49.123456', '2026-11-23',"
    " '{\"b\": [1, 2.50], \"a\": null}', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',"
    " '1 day 02:03:04', '{1,NULL,3}', 'tenant_a')",
    "(2, false, 0, 0, 1e6, 1e15, -0.000001, -1, '', '0099-01-01 00:00:00+00',"
    " '2000-01-01 00:00:00', '0099-01-01', '[]', '\\x', NULL, '-1 mons', '{}', 'tenant_a')",
    "(3, NULL, NULL, NULL, 'NaN', 'Infinity', 'NaN', NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, 'tenant_a')",
    "(4, true, 1, 1, 1234567, 1e-5, 1e20, 0, 'x', '2026-01-01 00:00:00.000001+00', NULL, NULL,"
    " '1', NULL, NULL, NULL, NULL, 'tenant_a')",
    "(5, true, 1, 1, 1.5e-5, 123456789012345.6, 0, 0, 'x', NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, 'tenant_a')",
    "(6, true, 1, 1, 3.4028235e38, -1e-300, 0, 0, 'other tenant', NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, 'tenant_b')",
    "(7, true, 1, 1, -1e-40, 1e-4, 0, 0, 'x', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " 'tenant_a')",
]


def _snapshots(cs: Harness, headers: dict[str, str] | None = None, **params: str) -> httpx.Response:
    return httpx.get(f"{cs.url}/snapshots", params=params, headers=headers, timeout=60)


def _serve(make_server: MakeServer, tmp_path: Path) -> tuple[Harness, Path]:
    directory = tmp_path / "snapshots"
    return make_server(snapshots_dir=directory), directory


def test_rows_have_the_values_and_types_changes_gives(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs, directory = _serve(make_server, tmp_path)
    cs.sql(TYPES)
    cs.sql("INSERT INTO typed VALUES " + ", ".join(ROWS))
    changes = cs.wait_for(6, selector="tenant_a")
    snapshot_id = write_snapshot(directory, cs.dsn, ["public.typed"], changes["lastSequence"])

    response = _snapshots(cs, selector="tenant_a")

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers[SEQUENCE_HEADER] == changes["lastSequence"]
    assert response.headers[ID_HEADER] == snapshot_id
    body = response.json()
    assert body["sequence"] == changes["lastSequence"]
    assert body["snapshotId"] == snapshot_id
    assert body["snapshotInfo"] == ""
    assert [table["name"] for table in body["tables"]] == ["public.typed"]
    served = {row["id"]["value"]: row for row in body["tables"][0]["rows"]}
    expected = {change["newRow"]["id"]["value"]: change["newRow"] for change in changes["changes"]}
    assert served.keys() == expected.keys() == {"1", "2", "3", "4", "5", "7"}
    for key, row in expected.items():
        assert served[key] == row, key


def test_only_the_selectors_rows_and_tables_with_the_selector_column(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs, directory = _serve(make_server, tmp_path)
    cs.sql("CREATE TABLE no_selector (id int PRIMARY KEY)")
    cs.sql("CREATE TABLE other (id int PRIMARY KEY, _change_selector text)")
    cs.sql("INSERT INTO no_selector VALUES (1)")
    cs.sql("INSERT INTO other VALUES (1, 'c')")
    cs.sql("INSERT INTO items VALUES (1, 'a', 'a'), (2, 'b', 'b'), (3, 'c', 'c'), (4, 'a2', 'a')")
    day = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    tables = ["public.items", "public.no_selector", "public.other"]
    write_snapshot(directory, cs.dsn, tables, "0.1.0", when=day)

    body = _snapshots(cs, scope="a", selector="b").json()

    assert [table["name"] for table in body["tables"]] == ["public.items", "public.other"]
    names = sorted(row["name"]["value"] for row in body["tables"][0]["rows"])
    assert names == ["a", "a2", "b"]
    assert body["tables"][1]["rows"] == []

    # No selector: the rows without one, as /changes serves them, and whole tables
    # without the column.
    cs.sql("INSERT INTO items VALUES (5, 'null', NULL), (6, 'empty', '')")
    write_snapshot(directory, cs.dsn, tables, "0.2.0", when=day + datetime.timedelta(hours=1))
    body = httpx.get(f"{cs.url}/snapshots", timeout=60).json()
    rows = {table["name"]: table["rows"] for table in body["tables"]}
    assert sorted(row["name"]["value"] for row in rows["public.items"]) == ["empty", "null"]
    assert [row["id"]["value"] for row in rows["public.no_selector"]] == ["1"]
    assert rows["public.other"] == []


def test_a_table_without_rows_is_served_empty(make_server: MakeServer, tmp_path: Path) -> None:
    cs, directory = _serve(make_server, tmp_path)
    write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0")

    body = _snapshots(cs, selector="a").json()

    assert body["tables"] == [{"name": "public.items", "rows": []}]


def test_404_without_a_snapshot_and_the_newest_published_one_wins(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs, directory = _serve(make_server, tmp_path)
    missing = _snapshots(cs, selector="a")
    assert missing.status_code == 404
    assert missing.json()["code"] == "NOT_FOUND"
    assert "snapshot" in missing.json()["error"]

    cs.sql("INSERT INTO items VALUES (1, 'old', 'a')")
    day = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    older = write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0", when=day)
    cs.sql("UPDATE items SET name = 'new'")
    newest = write_snapshot(
        directory, cs.dsn, ["public.items"], "0.2.0", when=day + datetime.timedelta(hours=1)
    )
    assert _snapshots(cs, selector="a").headers[ID_HEADER] == newest

    # A replay killed before its manifest: not a snapshot, the previous one is served.
    (directory / newest / "manifest.json").unlink()
    response = _snapshots(cs, selector="a")
    assert response.headers[ID_HEADER] == older
    assert response.json()["tables"][0]["rows"][0]["name"]["value"] == "old"

    shutil.rmtree(directory / older)
    assert _snapshots(cs, selector="a").status_code == 404


def test_bad_selectors_are_refused_as_changes_refuses_them(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs, directory = _serve(make_server, tmp_path)
    write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0")
    for params in ({"selector": "Bad!"}, {"scope": "a", "selector": "UPPER"}):
        response = httpx.get(f"{cs.url}/snapshots", params=params, timeout=60)
        assert response.status_code == 400
        assert response.json()["code"] == "PARAMETER_INVALID"


def test_the_bridges_compact_form_is_not_a_snapshot_format(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs, directory = _serve(make_server, tmp_path)
    write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0")

    response = _snapshots(cs, {"accept": changes.COMPACT}, selector="a")

    assert response.status_code == 415
    assert response.json()["code"] == "UNSUPPORTED_FORMAT"


def test_gzip_when_the_client_accepts_it(make_server: MakeServer, tmp_path: Path) -> None:
    cs, directory = _serve(make_server, tmp_path)
    cs.sql("INSERT INTO items SELECT g, repeat('x', 100), 'a' FROM generate_series(1, 5000) g")
    write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0")
    plain = _snapshots(cs, {"accept-encoding": "identity"}, selector="a")
    assert "content-encoding" not in plain.headers

    with httpx.stream(
        "GET",
        f"{cs.url}/snapshots",
        params={"selector": "a"},
        headers={"accept-encoding": "gzip"},
        timeout=60,
    ) as response:
        assert response.headers["content-encoding"] == "gzip"
        compressed = b"".join(response.iter_raw())

    assert json.loads(gzip.decompress(compressed)) == plain.json()
    assert len(compressed) * 10 < len(plain.content)


def _chunk_sizes(url: str, path: str) -> tuple[dict[str, str], bytes, list[int]]:
    """(headers, first chunk, every chunk's size) of a chunked answer, read off the socket:
    the sizes the server sent, which an HTTP client would hide."""
    parsed = httpx.URL(url)
    with socket.create_connection((parsed.host, parsed.port), timeout=60) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parsed.host}\r\n\r\n".encode())
        stream = sock.makefile("rb")
        assert stream.readline().startswith(b"HTTP/1.1 200")
        headers = {}
        while (line := stream.readline().strip()) != b"":
            name, _, value = line.decode().partition(":")
            headers[name.lower()] = value.strip()
        assert headers.get("transfer-encoding") == "chunked", headers
        first, sizes = b"", []
        while size := int(stream.readline().strip(), 16):
            data = stream.read(size)
            first = first or data
            sizes.append(size)
            stream.readline()
    return headers, first, sizes


def test_a_large_snapshot_is_streamed_in_pieces(make_server: MakeServer, tmp_path: Path) -> None:
    cs, directory = _serve(make_server, tmp_path)
    cs.sql(
        "INSERT INTO items SELECT g, repeat('y', 200), CASE WHEN g % 10 = 0 THEN 'b' ELSE 'a' END"
        " FROM generate_series(1, 200000) g"
    )
    write_snapshot(directory, cs.dsn, ["public.items"], "0.1.0")

    headers, first, sizes = _chunk_sizes(cs.url, "/snapshots?selector=a")

    # No length up front: the body is sent as it is read, one record batch at a time.
    assert "content-length" not in headers
    assert first.startswith(b'{"snapshotInfo":""')
    assert sum(sizes) > 40_000_000
    assert max(sizes) < 2_000_000


def test_protobuf_is_transicators_snapshot_stream(make_server: MakeServer, tmp_path: Path) -> None:
    cs, directory = _serve(make_server, tmp_path)
    cs.sql(TYPES)
    cs.sql("INSERT INTO typed VALUES " + ", ".join(ROWS))
    write_snapshot(directory, cs.dsn, ["public.typed", "public.items"], "0.1.0")
    as_json = _snapshots(cs, selector="tenant_a").json()

    response = _snapshots(cs, {"accept": PROTOBUF}, selector="tenant_a")

    assert response.status_code == 200
    assert response.headers["content-type"] == PROTOBUF
    assert response.headers[SEQUENCE_HEADER] == "0.1.0"
    data, frames = response.content, []
    while data:
        (length,) = struct.unpack(">i", data[:4])
        frames.append(data[4 : 4 + length])
        data = data[4 + length :]
    header = pb.SnapshotHeaderPb.FromString(frames[0])
    assert header.timestamp == as_json["timestamp"]
    tables: list[dict[str, Any]] = []
    for frame in frames[1:]:
        stream = pb.StreamMessagePb.FromString(frame)
        if stream.WhichOneof("message") == "table":
            columns = [(c.name, c.type) for c in stream.table.columns]
            tables.append({"name": stream.table.name, "columns": columns, "rows": []})
        else:
            # As bytes: a NaN value is not equal to itself.
            tables[-1]["rows"].append([v.SerializeToString() for v in stream.row.values])
    assert [t["name"] for t in tables] == [t["name"] for t in as_json["tables"]]
    # The JSON answer's values typed as /changes types them in protobuf (from Postgres's
    # text: a bool is "t"/"f" there, "true"/"false" in JSON).
    text = {"true": "t", "false": "f"}
    for table, expected in zip(tables, as_json["tables"], strict=True):
        wanted = [
            [
                changes.typed_value(text.get(value, value), oid).SerializeToString()
                if (value := row[name]["value"]) is not None
                else b""
                for name, oid in table["columns"]
            ]
            for row in expected["rows"]
        ]
        assert table["rows"] == wanted
    assert [len(t["rows"]) for t in tables] == [0, 6]  # public.items, public.typed
