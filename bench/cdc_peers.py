"""Our change pipeline against Debezium's, on the same machine, in one run: what a user
choosing between them would compare (the peers: ``bench/peers.py``).

Each pair of turns runs both pipelines, one after the other (who goes first alternates),
each alone on the database with a replication slot of its own, on three empty tables of the
bridge benchmark's shape (``id bigint`` key, text, numeric, selector column):

* steady: a writer commits 10-row transactions into the tables in turn at ``--steady-rate``
  changes/s (what it reached is a figure) for ``--warmup-seconds`` (not counted: Debezium's
  JVM compiles its hot code then) and ``--steady-seconds`` more; each transaction's latency
  is from its commit returning until its last row is readable by a ``read_committed`` Kafka
  consumer: p50 and p99;
* burst: ``--changes`` changes in transactions of 100 rows, committed inside Postgres as fast
  as it can; the sustained rate (first commit to the last row readable), the lag after the
  burst's last commit, and CPU per change of each of the pipeline's processes, of the Kafka
  broker, of Postgres (every server process), of this benchmark's writer and consumer, and of
  the whole machine.

Each figure is the median over the pairs, ours beside Debezium's and the ratio (above 1:
ours is better). Debezium's JVM starts anew each turn, as ours does, and warms up in the
steady phase before the burst.

    .venv/bin/python -m bench cdc_peers
    .venv/bin/python -m bench.cdc_peers --changes 20000 --warmup-seconds 2 --steady-seconds 5 \
        --pairs 1  # smaller

Flags: ``--changes`` (``CHANGEBROKER_BENCH_CHANGES``, default 200,000), ``--steady-seconds``
(``CHANGEBROKER_BENCH_STEADY_SECONDS``, 30), ``--warmup-seconds``
(``CHANGEBROKER_BENCH_WARMUP_SECONDS``, 10), ``--steady-rate``
(``CHANGEBROKER_BENCH_STEADY_RATE``, 5,000), ``--pairs`` (``CHANGEBROKER_BENCH_PAIRS``, 3); the
variables reach it through ``python -m bench cdc_peers`` too.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

from bench.peers import Peer, Readable, every_peer
from bench.report import Figure, report
from bench.services import (
    kafka_bootstrap,
    listening_pid,
    machine_busy_cpu,
    pg_server_dsn,
    server_cpu,
)
from changebroker import pg
from changebroker.stack.processes import wait_until

NAME = "cdc_peers"
TABLES = [f"public.items_{n}" for n in range(3)]
STEADY_ROWS = 10
BURST_ROWS = 100

_SETUP = (
    "".join(
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, amount numeric,"
        " _change_selector text DEFAULT 'bridge');"
        for table in TABLES
    )
    + """
CREATE PROCEDURE burst(transactions int, rows_each int, first bigint)
LANGUAGE plpgsql AS $$
BEGIN
  FOR t IN 0..transactions - 1 LOOP
    EXECUTE format('INSERT INTO items_%s (id, name, amount)'
                   ' SELECT $1 + g, ''item'', g * 1.5 FROM generate_series(1, $2) g', t % 3)
      USING first + t::bigint * rows_each, rows_each;
    COMMIT;
  END LOOP;
END $$;
"""
)


def _arguments(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_peers", description=__doc__)
    parser.add_argument(
        "--changes", type=int, default=int(env("CHANGEBROKER_BENCH_CHANGES", "200000"))
    )
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=float(env("CHANGEBROKER_BENCH_STEADY_SECONDS", "30")),
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=float(env("CHANGEBROKER_BENCH_WARMUP_SECONDS", "10")),
    )
    parser.add_argument(
        "--steady-rate", type=float, default=float(env("CHANGEBROKER_BENCH_STEADY_RATE", "5000"))
    )
    parser.add_argument("--pairs", type=int, default=int(env("CHANGEBROKER_BENCH_PAIRS", "3")))
    return parser.parse_args(argv)


@dataclass
class Ids:
    """Row ids never used twice in a run: each row's readable time is found by its id."""

    next: int = 1

    def take(self, count: int) -> int:
        first, self.next = self.next, self.next + count
        return first


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    bootstrap = kafka_bootstrap()
    server_dsn = pg_server_dsn()
    shared = {
        "kafka broker": listening_pid(int(bootstrap.rsplit(":", 1)[1])),
        "postgres": listening_pid(int(str(psycopg.conninfo.conninfo_to_dict(server_dsn)["port"]))),
    }
    turns: dict[str, list[dict[str, float]]] = {}
    with pg.scratch_database(server_dsn, "bench_peers") as app_dsn:
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute(_SETUP)
        peers = every_peer(server_dsn, app_dsn, bootstrap, TABLES)
        for peer in peers:
            print(f"{peer.label}: {peer.guarantee}")
        ids = Ids()
        for pair in range(args.pairs):
            for peer in peers if pair % 2 == 0 else reversed(peers):
                with psycopg.connect(app_dsn, autocommit=True) as conn:
                    conn.execute(f"TRUNCATE {', '.join(TABLES)}")  # no slot: nobody hears it
                figures = _turn(peer, app_dsn, bootstrap, shared, ids, args)
                turns.setdefault(peer.label, []).append(figures)
                print(f"pair {pair + 1} {peer.label}: " + ", ".join(
                    f"{name} {value:,.1f}" for name, value in figures.items()
                ), flush=True)  # fmt: skip
    report(list(_compare(turns["ours"], turns["Debezium"])))
    return 0


def _turn(
    peer: Peer,
    app_dsn: str,
    bootstrap: str,
    shared: dict[str, int],
    ids: Ids,
    args: argparse.Namespace,
) -> dict[str, float]:
    with peer.running(), psycopg.connect(app_dsn, autocommit=True) as conn:
        probe = ids.take(len(TABLES))
        for n, table in enumerate(TABLES):  # the first rows: the event types, the topics
            conn.execute(f"INSERT INTO {table} (id, name) VALUES (%s, 'first')", (probe + n,))
        readable = Readable(bootstrap, peer.topics(), peer.row)
        try:
            last = probe + len(TABLES) - 1
            wait_until(lambda: last in readable.seen, timeout=120, what="the first rows")
            figures = _steady(conn, readable, ids, args)
            figures |= _burst(conn, readable, ids, args, peer.pids | shared)
        finally:
            readable.close()
    return figures


def _steady(
    conn: psycopg.Connection, readable: Readable, ids: Ids, args: argparse.Namespace
) -> dict[str, float]:
    committed: dict[int, float] = {}  # last row id of each transaction -> its commit's return
    interval = STEADY_ROWS / args.steady_rate
    start = time.monotonic()
    measured = start + args.warmup_seconds  # commits from here on count
    n = 0
    while (now := time.monotonic()) - measured < args.steady_seconds:
        # On a schedule, not a sleep after each commit: a slow commit is caught up on.
        time.sleep(max(0.0, start + n * interval - now))
        first = ids.take(STEADY_ROWS)
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {TABLES[n % len(TABLES)]} (id, name) SELECT g, 'steady'"
                " FROM generate_series(%s::bigint, %s::bigint) g",
                (first, first + STEADY_ROWS - 1),
            )
        committed[first + STEADY_ROWS - 1] = time.monotonic()
        n += 1
    rate = n * STEADY_ROWS / (max(committed.values()) - start)
    wait_until(lambda: committed.keys() <= readable.seen.keys(), timeout=300, what="steady rows")
    latencies = sorted(readable.seen[i] - t for i, t in committed.items() if t >= measured)
    return {
        "steady phase: changes/s the writer reached": rate,
        "commit->readable p50 ms": latencies[len(latencies) // 2] * 1000,
        "commit->readable p99 ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def _burst(
    conn: psycopg.Connection,
    readable: Readable,
    ids: Ids,
    args: argparse.Namespace,
    pids: dict[str, int],
) -> dict[str, float]:
    transactions = max(1, args.changes // BURST_ROWS)
    changes = transactions * BURST_ROWS
    first = ids.take(changes)
    final = first + changes - 1
    conn.execute("SET synchronous_commit = off")
    cpu_before = {name: server_cpu(pid) for name, pid in pids.items()}
    own_before = _own_cpu()
    machine_before = machine_busy_cpu()
    began = time.monotonic()
    conn.execute("CALL burst(%s, %s, %s)", (transactions, BURST_ROWS, first - 1))
    pg_done = time.monotonic()
    wait_until(lambda: final in readable.seen, timeout=1800, what="the burst")
    delivered = readable.seen[final]
    cpu = {name: server_cpu(pid) - cpu_before[name] for name, pid in pids.items()}
    cpu["this benchmark (writer, consumer)"] = _own_cpu() - own_before
    cpu["machine"] = machine_busy_cpu() - machine_before
    conn.execute("RESET synchronous_commit")
    return {
        "sustained changes/s": changes / (delivered - began),
        "lag after the last commit ms": (delivered - pg_done) * 1000,
        **{f"{name} CPU µs/change": seconds / changes * 1e6 for name, seconds in cpu.items()},
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_LOWER_IS_BETTER = ("ms", "µs/change")
_SHARED = ("kafka broker", "postgres", "this benchmark", "machine")


def _compare(ours: list[dict[str, float]], theirs: list[dict[str, float]]) -> Iterator[Figure]:
    """Medians over the pairs, ours against Debezium's; the pipeline's own processes summed
    against Debezium's JVM, each of ours also alone (Debezium's JVM is its pipeline)."""
    for turns in (ours, theirs):
        for figures in turns:
            own = [
                v
                for k, v in figures.items()
                if k.endswith("µs/change") and not k.startswith(_SHARED)
            ]
            figures["pipeline processes CPU µs/change"] = sum(own)
    for metric in ours[0]:
        value = statistics.median(t[metric] for t in ours)
        lower = metric.endswith(_LOWER_IS_BETTER)
        unit = metric.rsplit(" ", 1)[1] if lower else "changes/s"
        name = metric.rsplit(" ", 1)[0] if lower else metric
        if metric in theirs[0]:
            baseline = statistics.median(t[metric] for t in theirs)
            yield Figure(NAME, name, value, unit, baseline, "Debezium", not lower)
        else:
            yield Figure(NAME, name, value, unit, higher_is_better=not lower)


if __name__ == "__main__":
    sys.exit(main())
