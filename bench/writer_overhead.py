"""What a change pipeline costs the database's own writers: Postgres's benchmark, ``pgbench``
TPC-B, with no capture, with Debezium's Postgres connector and with our pipeline (the peers:
``bench/peers.py``), on one database, in one run; ours twice, as shipped and with 100 ms
between the bridge's Kafka transactions (``--commit-interval-ms``: Kafka's CPU for latency).

``pgbench -i`` fills the database (``--scale``); ``pgbench_history`` gets a primary key so
our bridge publishes it too (it refuses a table without one; Debezium publishes it either
way), in every phase alike. Each phase starts its pipeline on a slot of its own, waits until
the pipeline's initial snapshot of the tables is readable in Kafka, vacuums, then runs
``pgbench -n -c CLIENTS -j CLIENTS -T SECONDS``; the pipeline is stopped (its slot dropped)
before the next phase. Figures: transactions/s of each phase against no capture and ours
against Debezium; CPU per transaction of Postgres (every server process, the walsender
too), of the pipeline's processes and of the whole machine, and how busy the machine was:
whether the writer lost to CPU or to something else (the disk).

    .venv/bin/python -m bench writer_overhead
    .venv/bin/python -m bench.writer_overhead --seconds 10 --scale 1  # smaller

Flags: ``--seconds`` (``CHANGEBROKER_BENCH_PGBENCH_SECONDS``, default 60), ``--clients``
(``CHANGEBROKER_BENCH_PGBENCH_CLIENTS``, 4), ``--scale`` (``CHANGEBROKER_BENCH_PGBENCH_SCALE``,
2), ``--rounds`` (``CHANGEBROKER_BENCH_ROUNDS``, 1: each phase once); the variables reach it
through ``python -m bench writer_overhead`` too.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.peers import Ours, Peer, every_peer, wait_snapshotted
from bench.report import Figure, report
from bench.services import (
    kafka_bootstrap,
    listening_pid,
    machine_busy_cpu,
    pg_server_dsn,
    server_cpu,
)
from changebroker import pg

NAME = "writer_overhead"
TABLES = [f"public.pgbench_{name}" for name in ("accounts", "branches", "tellers", "history")]
NONE = "no capture"
SPACED_MS = 100
SPACED = f"ours, {SPACED_MS} ms between Kafka transactions"


def _arguments(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m bench.writer_overhead", description=__doc__)
    parser.add_argument(
        "--seconds", type=int, default=int(env("CHANGEBROKER_BENCH_PGBENCH_SECONDS", "60"))
    )
    parser.add_argument(
        "--clients", type=int, default=int(env("CHANGEBROKER_BENCH_PGBENCH_CLIENTS", "4"))
    )
    parser.add_argument(
        "--scale", type=int, default=int(env("CHANGEBROKER_BENCH_PGBENCH_SCALE", "2"))
    )
    parser.add_argument("--rounds", type=int, default=int(env("CHANGEBROKER_BENCH_ROUNDS", "1")))
    return parser.parse_args(argv)


def pgbench() -> str:
    """Debian's pgbench: on PATH, or beside the server's binaries."""
    found = shutil.which("pgbench") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))), None
    )
    if found is None:
        raise RuntimeError("pgbench is needed: scripts/install.sh installs Debian's postgresql")
    return found


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    bootstrap = kafka_bootstrap()
    server_dsn = pg_server_dsn()
    postgres = listening_pid(int(str(conninfo_to_dict(server_dsn)["port"])))
    phases: dict[str, list[dict[str, float]]] = {}
    with pg.scratch_database(server_dsn, "bench_pgbench") as app_dsn:
        _pgbench(app_dsn, "-i", "-q", "-s", str(args.scale))
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY")
        ours, debezium = every_peer(server_dsn, app_dsn, bootstrap, TABLES)
        # The bridge's commit interval trades latency for Kafka's CPU (bridge/README.md,
        # "Exactly once"): ours as shipped, and ours with Kafka Streams' interval.
        spaced = Ours(server_dsn, app_dsn, bootstrap, TABLES,
                      ("--commit-interval-ms", str(SPACED_MS)), SPACED)  # fmt: skip
        print(f"{ours.label}: {ours.guarantee}\n{debezium.label}: {debezium.guarantee}")
        for _ in range(args.rounds):
            for capture in (None, debezium, ours, spaced):
                label = NONE if capture is None else capture.label
                figures = _phase(capture, app_dsn, postgres, args)
                phases.setdefault(label, []).append(figures)
                print(f"{label}: " + ", ".join(
                    f"{name} {value:,.1f}" for name, value in figures.items()
                ), flush=True)  # fmt: skip
    report(list(_compare(phases)))
    return 0


def _phase(
    peer: Peer | None, app_dsn: str, postgres: int, args: argparse.Namespace
) -> dict[str, float]:
    with _running(peer):
        if peer is not None:
            wait_snapshotted(peer)
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")
        pids = {"postgres": postgres, **(peer.pids if peer is not None else {})}
        cpu_before = {name: server_cpu(pid) for name, pid in pids.items()}
        machine_before = machine_busy_cpu()
        began = time.monotonic()
        out = _pgbench(app_dsn, "-n", "-c", str(args.clients), "-j", str(args.clients),
                       "-T", str(args.seconds))  # fmt: skip
        elapsed = time.monotonic() - began
        cpu = {name: server_cpu(pid) - cpu_before[name] for name, pid in pids.items()}
        machine = machine_busy_cpu() - machine_before
    tps = float(_field(out, r"tps = ([\d.]+)"))
    transactions = int(_field(out, r"number of transactions actually processed: (\d+)"))
    capture = sum(seconds for name, seconds in cpu.items() if name != "postgres")
    return {
        "transactions/s": tps,
        "postgres CPU µs/transaction": cpu["postgres"] / transactions * 1e6,
        "pipeline processes CPU µs/transaction": capture / transactions * 1e6,
        "machine CPU µs/transaction": machine / transactions * 1e6,
        "machine busy %": machine / elapsed / (os.cpu_count() or 1) * 100,
    }


@contextlib.contextmanager
def _running(peer: Peer | None) -> Iterator[None]:
    if peer is None:
        yield
    else:
        with peer.running():
            yield


def _pgbench(dsn: str, *args: str) -> str:
    params = conninfo_to_dict(dsn)
    env = {**os.environ, "PGPASSWORD": str(params.get("password", ""))}
    host, port = str(params.get("host", "127.0.0.1")), str(params.get("port", 5432))
    user = str(params.get("user", "postgres"))
    argv = [pgbench(), "-h", host, "-p", port, "-U", user, *args, str(params["dbname"])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _field(out: str, pattern: str) -> str:
    match = re.search(pattern, out)
    if match is None:
        raise RuntimeError(f"pgbench printed no {pattern!r}:\n{out}")
    return match.group(1)


def _compare(phases: dict[str, list[dict[str, float]]]) -> Iterator[Figure]:
    """Medians over the rounds: each phase's rate against no capture, and ours against
    Debezium's in every figure."""

    def median(label: str, metric: str) -> float:
        return statistics.median(figures[metric] for figures in phases[label])

    rate = "transactions/s"
    yield Figure(NAME, f"pgbench {rate}, {NONE}", median(NONE, rate), rate)
    for label in ("Debezium", "ours", SPACED):
        yield Figure(NAME, f"pgbench {rate} with {label}", median(label, rate), rate,
                     median(NONE, rate), NONE)  # fmt: skip
    for label in ("ours", SPACED):
        yield Figure(NAME, f"pgbench {rate}, {label}", median(label, rate), rate,
                     median("Debezium", rate), "Debezium")  # fmt: skip
        for metric in [m for m in phases[label][0] if m != rate]:
            name, unit = metric.rsplit(" ", 1)
            debezium = median("Debezium", metric)
            yield Figure(NAME, f"{name}, {label}", median(label, metric), unit, debezium,
                         "Debezium", higher_is_better=False)  # fmt: skip
    for metric in ("postgres CPU µs/transaction", "machine CPU µs/transaction", "machine busy %"):
        name, unit = metric.rsplit(" ", 1)
        yield Figure(NAME, f"{name}, {NONE}", median(NONE, metric), unit, higher_is_better=False)


if __name__ == "__main__":
    sys.exit(main())
