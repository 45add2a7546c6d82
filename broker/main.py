"""``changebroker broker``: the Nakadi-compatible event broker on Kafka."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os

import uvicorn
from starlette.types import ASGIApp

from broker.app import create_app
from broker.settings import DEFAULT_PARTITIONS, MAX_PARTITIONS, Settings
from changebroker import config, http, logs

# How the parent hands its settings to worker processes (--workers above 1).
SETTINGS_ENV = "CHANGEBROKER_BROKER_WORKER_SETTINGS"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    def option(flag: str, **kwargs: object) -> None:
        config.add_option(parser, flag, scope="broker", **kwargs)  # type: ignore[arg-type]

    option("--host", default="127.0.0.1", help="address to listen on")
    option("--port", type=int, default=config.DEFAULT_BROKER_PORT, help="port to listen on")
    option("--pg-url", required=True, help="Postgres DSN of the broker's metadata database")
    option(
        "--kafka-bootstrap",
        env="CHANGEBROKER_KAFKA_BOOTSTRAP",
        default=f"127.0.0.1:{config.DEFAULT_KAFKA_PORT}",
        help="Kafka bootstrap servers holding the events",
    )
    option(
        "--default-partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help="partitions of an event type created without default_statistic",
    )
    option(
        "--max-partitions",
        type=int,
        default=MAX_PARTITIONS,
        help="most partitions default_statistic may ask for",
    )
    config.add_replication_options(parser)
    option(
        "--registry-url",
        help="the schema registry's URL, as `changebroker up` passes it; the broker writes event"
        " type schemas into the registry's tables in its own --pg-url database, so run the"
        " registry on that database too",
    )
    option("--pool-size", type=int, default=10, help="Postgres connections at most (per worker)")
    option(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port; publishing is CPU-bound, so one per core scales it",
    )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.default_partitions <= args.max_partitions:
        raise SystemExit("--default-partitions must be between 1 and --max-partitions")
    settings = Settings(
        pg_dsn=args.pg_url,
        kafka_bootstrap=args.kafka_bootstrap,
        default_partitions=args.default_partitions,
        max_partitions=args.max_partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        registry_url=args.registry_url or None,
        pool_size=args.pool_size,
    )
    log.info(
        "broker starting", extra=logs.fields(host=args.host, port=args.port, workers=args.workers)
    )
    if args.workers <= 1:
        app = create_app(settings)
        tune_gc()
        http.serve(app, args.host, args.port)
        return 0
    # Workers share nothing but Postgres and Kafka, as separate broker processes do.
    os.environ[SETTINGS_ENV] = json.dumps(dataclasses.asdict(settings))
    uvicorn.run(
        "broker.main:worker_app",
        factory=True,
        workers=args.workers,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


def worker_app() -> ASGIApp:
    """The app of one worker process, from the settings its parent left in the environment."""
    logs.configure("broker")
    app = http.FlowIdMiddleware(create_app(Settings(**json.loads(os.environ[SETTINGS_ENV]))))
    tune_gc()
    return app


def tune_gc() -> None:
    """Publishing allocates thousands of short-lived dicts per batch, which refcounting frees;
    at the default threshold (700) the cycle collector ran every few events and cost ~1 us per
    published event (5%). Cycles are still collected, once 20,000 objects accumulate, and what
    start-up created is frozen out of the full collections."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
