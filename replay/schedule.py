"""``changebroker replay --every 10m``: the replay as a long-running service.

One SparkSession for every run (the JVM starts once), a run every period measured from
start to start (a run longer than the period is followed at once by the next), each run
incremental from the newest snapshot. A failed run is logged and the schedule goes on: the
previous snapshot stays the newest. SIGTERM / SIGINT end the loop after the current run; a
run killed before its manifest is published leaves no snapshot behind.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from changebroker import logs
from changebroker.replay.job import ReplayOptions, run_replay

log = logging.getLogger(__name__)


def run_every(options: ReplayOptions, every: float, say: Callable[[str], None]) -> int:
    from changebroker.replay.spark import spark_session

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    spark = spark_session(options.master, app_name="changebroker-replay")
    say(f"replay: every {every:g}s into {options.out}, Spark on {spark.sparkContext.master}")
    try:
        while not stop.is_set():
            started = time.monotonic()
            try:
                run_replay(options, spark=spark, say=say)
            except Exception:
                # The schedule outlives one failed run (Kafka or the broker away, a table
                # refused); the next run starts again from the newest snapshot.
                log.exception("replay run failed", extra=logs.fields(every=every))
            stop.wait(max(0.0, every - (time.monotonic() - started)))
    finally:
        spark.stop()
    return 0
