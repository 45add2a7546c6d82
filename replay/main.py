"""``changebroker replay``: write a snapshot; ``changebroker replay subscribe``: hand off from
one to the live stream through a Nakadi subscription."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from pathlib import Path

from changebroker import auth, config, http
from changebroker.client import SubscriptionRefused, create_snapshot_subscription
from changebroker.replay import schedule
from changebroker.replay.catalog import CatalogError
from changebroker.replay.columns import NoPrimaryKey
from changebroker.replay.job import FORMATS, ReplayOptions, run_replay
from changebroker.replay.offsets import RangeError
from changebroker.replay.snapshots import SnapshotNotFound, find
from changebroker.state import default_snapshots_dir

log = logging.getLogger(__name__)

SCOPE = "replay"


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _format(text: str) -> str:
    if text not in FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: the formats are {', '.join(FORMATS)}")
    return text


def _common(parser: argparse.ArgumentParser) -> None:
    option = config.options(parser, SCOPE)

    option(
        "--broker-url",
        default=f"http://127.0.0.1:{config.DEFAULT_BROKER_PORT}",
        help="the broker: event types, schemas, topics; subscriptions",
    )
    option(
        "--out",
        type=Path,
        default=default_snapshots_dir(),
        help="the directory snapshots are written to and read from",
    )
    # A client of the broker like the bridge: its token and the CA it trusts.
    auth.add_client_options(parser)
    http.add_tls_options(parser, server=False)


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.options(parser, SCOPE)

    _common(parser)
    option(
        "--kafka-bootstrap",
        env="CHANGEBROKER_KAFKA_BOOTSTRAP",
        default=f"127.0.0.1:{config.DEFAULT_KAFKA_PORT}",
        help="Kafka, where the events are read (read_committed)",
    )
    option("--tables", type=_names, default=(), help="comma-separated schema.table to replay")
    option("--event-types", type=_names, default=(), help="comma-separated event types to replay")
    config.add_switch(
        parser, "--all", scope=SCOPE, help="every table the bridge writes (also the default)"
    )
    option(
        "--until",
        default="latest",
        help="where the snapshot ends: latest, an ISO 8601 time, or Nakadi cursors as JSON"
        ' {"<event type>": [{"partition": "0", "offset": "001-0001-..."}]}',
    )
    config.add_switch(
        parser, "--full", scope=SCOPE, help="read from the beginning, not from the newest snapshot"
    )
    option("--base", help="the snapshot id (in --out) to continue from; default the newest")
    option(
        "--format",
        type=_format,
        default="parquet",
        help="each table as a Parquet dataset, or as a Delta Lake table (delta)",
    )
    option(
        "--master",
        env="CHANGEBROKER_SPARK_MASTER",
        default="local[*]",
        help="the Spark master: local[*], local[2], spark://host:7077, ...",
    )
    option("--prefix", default="changebroker", help="the bridge's --prefix")
    option(
        "--bridge-name",
        default="bridge",
        help="the bridge's --name: its position record ends --until latest exactly",
    )
    option("--pattern", default="{prefix}.{schema}.{table}", help="the bridge's --pattern")
    option(
        "--every",
        type=config.parse_duration,
        default=None,
        help="keep running: a replay every this long (e.g. 10m), as `up --replay-every` does",
    )
    commands = parser.add_subparsers(dest="replay_command")
    sub = commands.add_parser(
        "subscribe", help="a Nakadi subscription that starts right after a snapshot"
    )
    _common(sub)
    sub.add_argument("--snapshot", help="the snapshot id in --out (default: the newest)")
    sub.add_argument("--owning-application", required=True, help="the subscription's owner")
    sub.add_argument(
        "--consumer-group", help="the subscription's consumer group (default snapshot-<id>)"
    )
    parser.set_defaults(replay_handler=_replay)
    sub.set_defaults(replay_handler=_subscribe)


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.replay_handler(args))
    except (CatalogError, NoPrimaryKey, RangeError, SnapshotNotFound, SubscriptionRefused) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2


def _replay(args: argparse.Namespace) -> int:
    options = config.from_args(
        ReplayOptions, args, every=args.all, client_token=args.client_token or None
    )
    say = functools.partial(print, flush=True)
    if args.every:
        return schedule.run_every(options, args.every, say)
    run_replay(options, say=say)
    return 0


def _subscribe(args: argparse.Namespace) -> int:
    manifest = find(args.out, args.snapshot)
    found = create_snapshot_subscription(
        args.broker_url,
        manifest.as_json(),
        args.owning_application,
        args.consumer_group,
        token=args.client_token or None,
        verify=auth.client_verify(args.tls_ca),
    )
    print(found)
    return 0
