"""A read past the newest change costs the same whatever the change log holds before it.

Long-pollers and the bridge read just past the newest change, again and again, while the
log keeps days of history over many selectors. The changeserver runs as its own process.
Measured: the time of a ``/changes`` read past the newest change, by selector (transicator's
clients) and by table (the bridge's form, every selector's changes), once the log holds
``HISTORY`` changes, half of them of the read's selector and the rest spread over
``OTHER_SELECTORS`` others, against the same read in the same run when the log held none. A
ratio near 1 means the read does not grow with the history.

    .venv/bin/python -m bench changeserver_history
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.report import Figure, report
from bench.services import changeserver, pg_server_dsn
from changebroker import pg

HISTORY = 1_000_000
HISTORY_TRANSACTION_ROWS = 50_000
OTHER_SELECTORS = 5_000
READS = 300
SELECTOR = "s"
MARKERS = "markers"

_SETUP = """
CREATE TABLE items (id bigint PRIMARY KEY, name text, _change_selector text);
CREATE SEQUENCE markers;
"""


def main() -> int:
    with (
        pg.scratch_database(pg_server_dsn(), "bench") as dsn,
        tempfile.TemporaryDirectory() as state,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        conn.execute(_SETUP)
        conn.execute("SET synchronous_commit = off")
        with (
            changeserver(dsn, Path(state)) as (_, port),
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=700) as client,
        ):
            short, since = _read_times(client, conn, "0.0.0")
            print(f"writing {HISTORY:,} changes", flush=True)
            for start in range(0, HISTORY, HISTORY_TRANSACTION_ROWS):
                conn.execute(
                    "INSERT INTO items SELECT g, 'item ' || g, CASE WHEN g %% 2 = 0"
                    " THEN %s ELSE 'other ' || (g / 2 %% %s) END"
                    " FROM generate_series(%s::bigint, %s::bigint) g",
                    (SELECTOR, OTHER_SELECTORS, start, start + HISTORY_TRANSACTION_ROWS - 1),
                )
            long, _ = _read_times(client, conn, since)
    figures = [
        Figure(
            "changeserver_history",
            f"read past the newest change by {form}, {HISTORY:,} changes"
            f" over {OTHER_SELECTORS + 1:,} selectors held, p50",
            statistics.median(long[form]),
            "ms",
            baseline=statistics.median(short[form]),
            baseline_name="the same read, none held",
            higher_is_better=False,
        )
        for form in ("selector", "table")
    ]
    report(figures)
    return 0


def _read_times(
    client: httpx.Client, conn: psycopg.Connection[Any], since: str
) -> tuple[dict[str, list[float]], str]:
    """Two markers committed after ``since``, then ``READS`` reads past the first (the second
    alone is past it), each form in turn: their times in ms, and the second's sequence."""
    first = _committed_marker(client, conn, since)
    second = _committed_marker(client, conn, first)
    forms = {
        "selector": [("selector", SELECTOR), ("selector", MARKERS), ("since", first)],
        "table": [("table", "public.items"), ("since", first)],
    }
    times: dict[str, list[float]] = {form: [] for form in forms}
    for read in range(READS):
        for form, params in forms.items():
            # A limit of its own makes each read a new question, as after every commit:
            # the changeserver shares one answer among identical reads of one log version.
            limit = ("limit", str(100 + read))
            started = time.perf_counter()
            changes = client.get("/changes", params=[*params, limit]).json()["changes"]
            times[form].append((time.perf_counter() - started) * 1000)
            assert len(changes) == 1, f"{form}: {len(changes)} changes past the marker"
    return times, second


def _committed_marker(client: httpx.Client, conn: psycopg.Connection[Any], since: str) -> str:
    """Commit a marker row and wait until it is served: its sequence."""
    conn.execute("INSERT INTO items VALUES (-nextval('markers'), 'marker', %s)", (MARKERS,))
    body = client.get("/changes", params={"selector": MARKERS, "since": since, "block": 600})
    changes = body.json()["changes"]
    assert len(changes) == 1, f"{len(changes)} markers past {since}"
    return str(changes[0]["sequence"])


if __name__ == "__main__":
    sys.exit(main())
