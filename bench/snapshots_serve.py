"""``GET /snapshots`` for a selector of 100k rows: time to first byte and rows/s.

A table of 200k rows (eight columns of common types; half of them the benchmark's selector)
is written as a snapshot in the replay's layout (Parquet, from ``SELECT``), and a
changeserver, as its own process, serves it. Baselines, measured in the same run on the
same rows: Postgres's ``COPY (SELECT ... WHERE _change_selector = ...) TO STDOUT`` (what a
snapshot server reading the database streams before any rendering), and pyarrow reading
the same Parquet with the same filter into Python values (the read alone, without the
text values and JSON that /snapshots adds).

    .venv/bin/python -m bench snapshots_serve
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
import pyarrow.compute as pc
import pyarrow.dataset as ds

from bench.report import Figure, report
from bench.services import pg_server_dsn
from changebroker import pg
from changebroker.stack.processes import answers, free_port, wait_until
from tests.support.snapshots import write_snapshot

ROWS = 200_000
SELECTED = ROWS // 2
RUNS = 3
TABLE = """
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer integer, amount numeric(12, 2), note text,
    placed timestamptz, paid boolean, weight double precision, _change_selector text)
"""
FILL = f"""
INSERT INTO orders SELECT g, g % 1000, (g * 1.37)::numeric(12, 2), 'order note ' || g,
    '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second', g % 2 = 0, g / 7.0,
    CASE WHEN g % 2 = 0 THEN 'bench' ELSE 'other' END
FROM generate_series(1, {ROWS}) g
"""


def _get(port: int, path: str, gzip: bool) -> tuple[float, float, int]:
    """(seconds to the first row's bytes, seconds to the last byte, body bytes), read off
    the socket (the first chunks are the body's head, sent before any Parquet is read)."""
    encoding = "Accept-Encoding: gzip\r\n" if gzip else ""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        started = time.perf_counter()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{encoding}\r\n".encode())
        stream = sock.makefile("rb")
        assert stream.readline().startswith(b"HTTP/1.1 200")
        while stream.readline().strip():
            pass
        first, total = 0.0, 0
        while size := int(stream.readline().strip(), 16):
            data = stream.read(size)
            if not first and (gzip or b'"value"' in data):
                first = time.perf_counter() - started
            total += size
            stream.readline()
        return first, time.perf_counter() - started, total


def _copy_seconds(dsn: str) -> float:
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        query = "COPY (SELECT * FROM orders WHERE _change_selector = 'bench') TO STDOUT"
        with conn.cursor().copy(query) as copy:
            for _ in copy:
                pass
        return time.perf_counter() - started


def _pyarrow_seconds(path: Path) -> float:
    started = time.perf_counter()
    dataset = ds.dataset(path, format="parquet")
    rows = 0
    for batch in dataset.to_batches(filter=pc.field("_change_selector") == "bench"):
        rows += len(batch.to_pylist())
    assert rows == SELECTED, rows
    return time.perf_counter() - started


def main() -> int:
    server_dsn = pg_server_dsn()
    name = "snapshots_serve"
    with pg.scratch_database(server_dsn, "bench") as dsn, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TABLE)
            conn.execute(FILL)
        snapshots = Path(tmp) / "snapshots"
        snapshot_id = write_snapshot(snapshots, dsn, ["public.orders"], "0.1.0")
        port, mgmt = free_port(), free_port()
        log = open(Path(tmp) / "changeserver.log", "ab")  # noqa: SIM115 (the child's output)
        command = [
            sys.executable, "-m", "changebroker.cli", "changeserver", "--pg-url", dsn,
            "--slot", "bench_snapshots", "--db-dir", str(Path(tmp) / "log"),
            "--port", str(port), "--mgmt-port", str(mgmt), "--snapshots-dir", str(snapshots),
        ]  # fmt: skip
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: answers(f"http://127.0.0.1:{mgmt}/ready"), timeout=60, what="cs")
            path = "/snapshots?selector=bench"
            body = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=120).json()
            assert len(body["tables"][0]["rows"]) == SELECTED
            plain = [_get(port, path, gzip=False) for _ in range(RUNS)]
            gzipped = [_get(port, path, gzip=True) for _ in range(RUNS)]
            httpx.get(f"http://127.0.0.1:{mgmt}/markdown")  # the slot goes at shutdown
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()
        copy = statistics.median(_copy_seconds(dsn) for _ in range(RUNS))
        direct = statistics.median(
            _pyarrow_seconds(snapshots / snapshot_id / "tables" / "public.orders")
            for _ in range(RUNS)
        )
    first = statistics.median(run[0] for run in plain)
    total = statistics.median(run[1] for run in plain)
    gzip_total = statistics.median(run[1] for run in gzipped)
    size = plain[0][2]
    report(
        [
            Figure(name, f"time to first row, {SELECTED:,} rows", first * 1000, "ms",
                   higher_is_better=False),
            Figure(name, "rows/s", SELECTED / total, "rows/s", baseline=SELECTED / copy,
                   baseline_name="Postgres COPY TO STDOUT"),
            Figure(name, "rows/s (same run)", SELECTED / total, "rows/s",
                   baseline=SELECTED / direct, baseline_name="pyarrow read to Python"),
            Figure(name, "rows/s, gzip", SELECTED / gzip_total, "rows/s"),
            Figure(name, "body", size / 1e6, "MB"),
        ]
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
