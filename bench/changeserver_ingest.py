"""The changeserver's durable ingest rate vs the rate Postgres committed the same burst.

One burst, generated inside Postgres so the client is never the bottleneck:
many small transactions (4 rows each) and a few large ones (50,000 rows each),
committed with ``synchronous_commit=off`` (Postgres's fastest). The changeserver
runs as its own process, as deployed, and streams while the burst commits.

Each rate is over its own span. Postgres's: from the burst's first commit (a
start marker row) to its last (an end marker row). The changeserver's: from the
start marker being durable and served to the end marker being durable and served
(a long poll on each marker's selector, so both ends pay the same HTTP latency).
A ratio of 1 means it kept pace; the lag after the last commit is reported too.
Measuring both from the burst's start would make 1 unreachable by construction:
the last change is durable only after it commits.

The large transactions sit in the middle of the burst, not at its end: Postgres
decodes a transaction for the walsender only once it commits, so a 50,000-row
transaction as the last one holds back even a reader that discards everything
(measured: 0.91-0.94x for a bare COPY reader). In the middle the changeserver
must still catch up with that backlog while the small ones keep committing.

    .venv/bin/python -m bench changeserver_ingest
"""

from __future__ import annotations

import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg

from bench.report import Figure, report
from bench.services import changeserver, pg_server_dsn
from changebroker import pg

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
  INSERT INTO items VALUES (-2, 'start', 0, 'start');
  COMMIT;
  FOR t IN 1..small LOOP
    INSERT INTO items SELECT next_id + g, 'item ' || (next_id + g), g * 1.5, 's' || (t % 100)
      FROM generate_series(1, small_rows) g;
    next_id := next_id + small_rows;
    COMMIT;
    IF t % (small / large) = small / large / 2 THEN
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
    with (
        pg.scratch_database(pg_server_dsn(), "bench") as dsn,
        tempfile.TemporaryDirectory() as state,
    ):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_SETUP)
        with changeserver(dsn, Path(state)) as (_, port):
            changes = SMALL_TRANSACTIONS * SMALL_ROWS + LARGE_TRANSACTIONS * LARGE_ROWS + 2
            with ThreadPoolExecutor(1) as pool:
                start_served = pool.submit(_served, port, "start")
                time.sleep(1.0)  # the long poll is blocked before the burst starts
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SET synchronous_commit = off")
                    started = time.monotonic()  # the start marker commits first, at once
                    conn.execute(
                        "CALL burst(%s, %s, %s, %s)",
                        (SMALL_TRANSACTIONS, SMALL_ROWS, LARGE_TRANSACTIONS, LARGE_ROWS),
                    )
                    committed = time.monotonic()
                durable = _served(port, "end")
                durable_from = start_served.result()
    report(
        [
            Figure(
                benchmark="changeserver_ingest",
                metric=f"durable changes/s ({changes:,} changes)",
                value=changes / (durable - durable_from),
                unit="changes/s",
                baseline=changes / (committed - started),
                baseline_name="postgres commit rate",
            ),
            Figure(
                benchmark="changeserver_ingest",
                metric="lag after the last commit",
                value=(durable - committed) * 1000,
                unit="ms",
                higher_is_better=False,
            ),
        ]
    )
    return 0


def _served(port: int, selector: str) -> float:
    """When the (one) change of ``selector`` was served: waits for it with a long poll."""
    body = httpx.get(
        f"http://127.0.0.1:{port}/changes",
        params={"scope": selector, "block": 600},
        timeout=700,
    ).json()
    assert body["changes"], f"the {selector} marker never arrived"
    return time.monotonic()


if __name__ == "__main__":
    sys.exit(main())
