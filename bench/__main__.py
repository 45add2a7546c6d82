"""Run every benchmark against the local stack and print one table of figures and ratios.

    .venv/bin/python -m bench                 # all of them
    .venv/bin/python -m bench broker_publish  # some of them, by module name

The local stack (Postgres, Kafka) is started first if it is not running, and then stopped
again: left up, it would hold the default ports a later `up` or test run wants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import RESULTS_ENV, Figure, format_table
from bench.services import local_stack

BENCH_DIR = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "__main__", "peers", "report", "services"}  # helpers, not benchmarks


def discover() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("*.py") if p.stem not in NOT_BENCHMARKS)


def main(argv: list[str]) -> int:
    names = argv or discover()
    unknown = sorted(set(names) - set(discover()))
    if unknown:
        print(f"no such benchmark: {', '.join(unknown)}; have: {', '.join(discover())}")
        return 2
    stack = local_stack()
    started_here = not {"postgres", "kafka"} <= stack.status().keys()
    stack.up(with_services=False)
    try:
        failed, figures = _run(names, stack.pg_dsn, stack.kafka_bootstrap)
    finally:
        if started_here:
            stack.down()
    print("\nsummary\n" + format_table(figures))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def _run(names: list[str], pg_dsn: str, kafka_bootstrap: str) -> tuple[list[str], list[Figure]]:
    """Each benchmark in a process of its own; the ones that failed, and every figure."""
    env = {
        **os.environ,
        "CHANGEBROKER_PG_DSN": pg_dsn,
        "CHANGEBROKER_KAFKA_BOOTSTRAP": kafka_bootstrap,
    }
    failed: list[str] = []
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as results:
        env[RESULTS_ENV] = results.name
        for index, name in enumerate(names, 1):
            print(f"\n[{index}/{len(names)}] bench.{name}", flush=True)
            started = time.monotonic()
            # A process each, so one benchmark's threads and memory never skew the next.
            code = f"import sys, bench.{name} as b; sys.exit(b.main())"
            done = subprocess.run([sys.executable, "-c", code], env=env)
            print(
                f"[{index}/{len(names)}] bench.{name}: exit {done.returncode} "
                f"in {time.monotonic() - started:.0f}s",
                flush=True,
            )
            if done.returncode != 0:
                failed.append(name)
        figures = [
            Figure(**json.loads(line)) for line in Path(results.name).read_text().splitlines()
        ]
    return failed, figures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
