"""``changebroker broker``: the Nakadi-compatible event broker on Kafka."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from starlette.types import ASGIApp

from changebroker import auth, config, http, logs, metrics
from changebroker.broker.app import create_app
from changebroker.broker.authorization import Scopes
from changebroker.broker.settings import (
    DEFAULT_PARTITIONS,
    DELETABLE_SUBSCRIPTION_CONSUMER_GROUP,
    DELETABLE_SUBSCRIPTION_OWNING_APPLICATION,
    KPI_SALT,
    MAX_COMMIT_TIMEOUT,
    MAX_PARTITIONS,
    STREAM_MEMORY_LIMIT,
    SUBSCRIPTION_MAX_PARTITIONS,
    TIMELINE_WAIT_TIMEOUT,
    Settings,
)
from changebroker.state import default_state_dir

# How the parent hands its settings to worker processes (--workers above 1).
SETTINGS_ENV = "CHANGEBROKER_BROKER_WORKER_SETTINGS"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.service_options(parser, "broker", config.DEFAULT_BROKER_PORT)
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
    option(
        "--max-commit-timeout",
        type=config.parse_duration,
        default=MAX_COMMIT_TIMEOUT,
        help="longest commit_timeout a subscription stream may ask for, and the one it gets"
        " when it asks for none (Nakadi's nakadi.stream.max.commitTimeout)",
    )
    option(
        "--stream-memory-limit",
        type=int,
        default=STREAM_MEMORY_LIMIT,
        help="bytes of events a stream holds for batches not yet due; past it the largest"
        " batch is sent early (Nakadi's maxStreamMemoryBytes)",
    )
    option(
        "--subscription-max-partitions",
        type=int,
        default=SUBSCRIPTION_MAX_PARTITIONS,
        help="most partitions the event types of one subscription may have together",
    )
    option(
        "--timeline-wait-timeout",
        type=config.parse_duration,
        default=TIMELINE_WAIT_TIMEOUT,
        help="how long a timeline switch waits for every event writer to pause, and a publish"
        " to a switching event type for the switch (Nakadi's nakadi.timeline.wait.timeoutMs)",
    )
    config.add_replication_options(parser)
    option("--pool-size", type=int, default=10, help="Postgres connections at most (per worker)")
    auth.add_options(parser)
    defaults = Scopes()
    for name in ("config_write", "event_type_write", "event_stream_write", "event_stream_read"):
        option(
            f"--scope-{name.replace('_', '-')}",
            default=getattr(defaults, name),
            help=f"the token scope Nakadi calls {getattr(defaults, name)} (auth on)",
        )
    http.add_server_options(parser)
    option(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port; publishing is CPU-bound, so one per core scales it",
    )
    option(
        "--metrics-dir",
        type=Path,
        help="with --workers above 1: where the workers keep their /metrics values (emptied"
        " at start; default: run/broker-<port>-metrics under the state folder)",
    )
    option(
        "--lag-interval",
        type=config.parse_duration,
        default=15.0,
        help="longest the per-subscription lag in /metrics may be old",
    )
    option(
        "--deletable-subscription-owning-application",
        default=DELETABLE_SUBSCRIPTION_OWNING_APPLICATION,
        help="with --deletable-subscription-consumer-group: subscriptions of this application"
        " and consumer group do not keep an event type from being deleted (they go with it)",
    )
    option(
        "--deletable-subscription-consumer-group",
        default=DELETABLE_SUBSCRIPTION_CONSUMER_GROUP,
        help="see --deletable-subscription-owning-application",
    )
    config.add_switch(
        parser,
        "--no-nakadi-event-types",
        scope="broker",
        help="do not create Nakadi's own event types (nakadi.access.log, nakadi.audit.log, ...,"
        " nakadi.dead.letter.queue) at start nor publish the broker's KPI and audit events",
    )
    option(
        "--kpi-salt",
        default=KPI_SALT,
        help="what the app names in KPI and audit events are hashed with (app_hashed,"
        " user_hash: SHA-256 of this and the name; Nakadi's nakadi.hasher.salt)",
    )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.default_partitions <= args.max_partitions:
        raise SystemExit("--default-partitions must be between 1 and --max-partitions")
    if args.max_commit_timeout <= 0:
        raise SystemExit("--max-commit-timeout must be more than 0 seconds")
    if args.stream_memory_limit < 1 or args.subscription_max_partitions < 1:
        raise SystemExit("--stream-memory-limit and --subscription-max-partitions must be >= 1")
    if args.timeline_wait_timeout <= 0:
        raise SystemExit("--timeline-wait-timeout must be more than 0 seconds")
    settings = settings_of(args)
    auth.start(settings.auth, "broker")
    for entry in settings.auth.admins:
        if auth.admin_attribute(entry)[0] == "*":
            log.warning(
                "--admins names a subject under any data_type: a user and a service of that"
                " name both administer the broker",
                extra=logs.fields(admin=entry, instead=f"service:{entry} or user:{entry}"),
            )
    tls = http.tls_of(args)
    log.info(
        "broker starting", extra=logs.fields(host=args.host, port=args.port, workers=args.workers)
    )
    if args.workers <= 1:
        app = create_app(settings)
        http.tune_gc()
        http.serve(app, args.host, args.port, tls=tls, limits=http.limits_of(args))
        return 0
    # Workers share nothing but Postgres, Kafka and the metrics directory, whose files each
    # worker writes and whichever answers a scrape adds up.
    metrics.use_multiprocess_dir(
        args.metrics_dir or default_state_dir() / "run" / f"broker-{args.port}-metrics"
    )
    os.environ[SETTINGS_ENV] = json.dumps(settings.to_json())
    http.serve_workers("changebroker.broker.main:worker_app", args)
    return 0


def settings_of(args: argparse.Namespace) -> Settings:
    """What the flags (and their environment variables) say."""
    return config.from_args(
        Settings,
        args,
        pg_dsn=args.pg_url,
        nakadi_event_types=not args.no_nakadi_event_types,
        auth=auth.AuthSettings.from_args(args),
        scopes=Scopes(
            config_write=args.scope_config_write,
            event_type_write=args.scope_event_type_write,
            event_stream_write=args.scope_event_stream_write,
            event_stream_read=args.scope_event_stream_read,
        ),
    )


def worker_app() -> ASGIApp:
    """The app of one worker process, from the settings its parent left in the environment."""
    logs.configure("broker")
    http.drain_in_worker()
    app = http.FlowIdMiddleware(
        create_app(Settings.from_json(json.loads(os.environ[SETTINGS_ENV])))
    )
    http.tune_gc()
    return app
