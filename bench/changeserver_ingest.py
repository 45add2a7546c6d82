"""The changeserver's durable ingest rate vs the rate Postgres committed the same burst.

One burst, generated inside Postgres so the client is never the bottleneck:
many small transactions (4 rows each) and a few large ones (50,000 rows each),
committed with ``synchronous_commit=off`` (Postgres's fastest). The changeserver
runs as its own process, as deployed, and streams while the burst commits; its
rate is the burst's changes over the time from the burst's start until the last
change is durable in its log and served (a long poll on a marker row's selector).
A ratio of 1 means it never fell behind.

    .venv/bin/python -m bench changeserver_ingest
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from bench.report import Figure, report
from changebroker import pg
from changebroker.stack.processes import free_port, wait_until

SMALL_TRANSACTIONS = 40_000
SMALL_ROWS = 4
LARGE_TRANSACTIONS = 3
LARGE_ROWS = 50_000

_SETUP = """
CREATE TABLE items (id bigint PRIMARY KEY, name text, amount numeric, _change_selector text);
CREATE PROCEDURE burst(small int, small_rows int, large int, large_rows int)
LANGUAGE plpgsql AS $$
DECLARE next_id bigint := 0;
BEGIN
  FOR t IN 1..small LOOP
    INSERT INTO items SELECT next_id + g, 'item ' || (next_id + g), g * 1.5, 's' || (t % 100)
      FROM generate_series(1, small_rows) g;
    next_id := next_id + small_rows;
    COMMIT;
    IF t % (small / large) = 0 THEN
      INSERT INTO items SELECT next_id + g, 'bulk ' || (next_id + g), g, 'bulk'
        FROM generate_series(1, large_rows) g;
      next_id := next_id + large_rows;
      COMMIT;
    END IF;
  END LOOP;
  INSERT INTO items VALUES (-1, 'end', 0, 'end');
  COMMIT;
END $$;
"""


def main() -> int:
    server_dsn = os.environ.get(
        "CHANGEBROKER_PG_DSN", "postgresql://postgres@127.0.0.1:55432/postgres"
    )
    database = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    dsn = pg.with_database(server_dsn, database)
    port, mgmt = free_port(), free_port()
    with tempfile.TemporaryDirectory() as state:
        log = open(Path(state) / "changeserver.log", "ab")  # noqa: SIM115 (the child's output)
        command = [
            sys.executable, "-m", "changebroker.cli", "changeserver", "--pg-url", dsn,
            "--slot", database, "--db-dir", str(Path(state) / "log"),
            "--port", str(port), "--mgmt-port", str(mgmt),
        ]  # fmt: skip
        server = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(_SETUP)
            ready = f"http://127.0.0.1:{mgmt}/ready"
            wait_until(lambda: _answers(ready), timeout=60, what="the changeserver")
            changes = SMALL_TRANSACTIONS * SMALL_ROWS + LARGE_TRANSACTIONS * LARGE_ROWS + 1
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = off")
                started = time.monotonic()
                conn.execute(
                    "CALL burst(%s, %s, %s, %s)",
                    (SMALL_TRANSACTIONS, SMALL_ROWS, LARGE_TRANSACTIONS, LARGE_ROWS),
                )
                committed = time.monotonic() - started
            marker = httpx.get(
                f"http://127.0.0.1:{port}/changes",
                params={"scope": "end", "block": 600},
                timeout=700,
            ).json()
            durable = time.monotonic() - started
            assert marker["changes"], "the marker change never arrived"
            httpx.get(f"http://127.0.0.1:{mgmt}/markdown")  # the slot goes at shutdown
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
    report(
        [
            Figure(
                benchmark="changeserver_ingest",
                metric=f"durable changes/s ({changes:,} changes)",
                value=changes / durable,
                unit="changes/s",
                baseline=changes / committed,
                baseline_name="postgres commit rate",
            )
        ]
    )
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
