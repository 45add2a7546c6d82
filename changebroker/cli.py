"""The ``changebroker`` command: the local stack (up, down, status, demo) and each service."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Protocol

from changebroker import auth, config, http, logs, services
from changebroker.stack.local import LocalStack, Ports
from changebroker.state import StateDir, default_state_dir


class ServiceMain(Protocol):
    """What each service package's ``main`` module provides to the CLI."""

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# Each port of the local stack and its option.
PORT_FLAGS = {
    "postgres": "--pg-port",
    "kafka": "--kafka-port",
    "kafka_controller": "--kafka-controller-port",
    "broker": "--broker-port",
    "registry": "--registry-port",
    "changeserver": "--changeserver-port",
    "changeserver_mgmt": "--changeserver-mgmt-port",
    "bridge": "--bridge-port",
    "console": "--console-port",
}


def _stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="data, logs, pids and jar cache [env CHANGEBROKER_STATE_DIR; default: .state/ in a"
        " checkout, else $XDG_STATE_HOME/changebroker (~/.local/state/changebroker)]",
    )
    defaults = Ports()
    for attr, flag in PORT_FLAGS.items():
        config.add_option(
            parser,
            flag,
            scope="",
            type=int,
            default=getattr(defaults, attr),
            help=f"port for {attr}",
        )
    # Passed on to every service (auth, TLS); the client token and CA to the bridge and console.
    auth.add_options(parser)
    auth.add_client_options(parser)
    http.add_tls_options(parser)


def _stack(args: argparse.Namespace) -> LocalStack:
    ports = Ports(
        **{attr: getattr(args, flag[2:].replace("-", "_")) for attr, flag in PORT_FLAGS.items()}
    )
    stack = LocalStack.from_env(StateDir(args.state_dir), ports)
    stack.replay_every = getattr(args, "replay_every", None)
    stack.kafka_nodes = getattr(args, "kafka_nodes", None)
    stack.broker_processes = getattr(args, "broker_processes", None)
    stack.changeservers = getattr(args, "changeservers", None)
    stack.auth = auth.AuthSettings.from_args(args)
    stack.client_token = args.client_token or None
    stack.tls = http.tls_of(args)
    stack.ca_file = args.tls_ca
    return stack


def stack_from_env() -> LocalStack:
    """The local stack as ``changebroker up`` without options addresses it: its state dir and
    ports from the environment (``CHANGEBROKER_STATE_DIR``, ``CHANGEBROKER_PG_PORT``, ...) or
    their defaults."""
    parser = argparse.ArgumentParser()
    _stack_options(parser)
    return _stack(parser.parse_args([]))


def _print_endpoints(endpoints: dict[str, dict[str, object]]) -> None:
    for name, info in endpoints.items():
        where = info.get("dsn") or info.get("bootstrap") or info.get("url")
        print(f"  {name:<14} {where}")
        nodes = info.get("nodes")
        if isinstance(nodes, list) and len(nodes) > 1:
            for node in nodes:
                state = f"pid {node['pid']}" if node["pid"] else "down"
                print(f"    node {node['node_id']:<7} {node['bootstrap']} ({state})")


def cmd_up(args: argparse.Namespace) -> int:
    stack = _stack(args)
    print(f"starting the local stack (state: {stack.state.root})", flush=True)
    endpoints = stack.up(supervise=not args.no_supervise)
    print("running:")
    _print_endpoints(endpoints)
    if args.demo:
        from changebroker import demo

        return demo.run(stack)
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    import signal

    from changebroker.stack.supervisor import Supervisor

    supervisor = Supervisor(LocalStack.load(StateDir(args.state_dir)))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: supervisor.stopping.set())
    supervisor.run()
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from changebroker.chaos import campaign

    return campaign.run(args.minutes, args.seed, args.state_dir, args.lanes, args.hold)


def cmd_down(args: argparse.Namespace) -> int:
    stack = _stack(args)
    stopped = stack.down(purge=args.purge)
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    if args.purge:
        print(f"purged data and logs under {stack.state.root}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    endpoints = _stack(args).status()
    if args.json:
        print(json.dumps(endpoints, indent=2))
    elif endpoints:
        _print_endpoints(endpoints)
    else:
        print("nothing is running: start it with `changebroker up`")
    return 0


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="changebroker", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser(
        "up", help="start the local stack (idempotent) and print its endpoints"
    )
    _stack_options(up)
    up.add_argument("--demo", action="store_true", help="then run a short demo against it")
    up.add_argument(
        "--no-supervise",
        action="store_true",
        help="start no supervisor (by default one restarts whatever part of the stack dies)",
    )
    config.add_option(
        up,
        "--replay-every",
        scope="",
        type=config.parse_duration,
        default=None,
        help="also run `changebroker replay` on this schedule (e.g. 10m), as a service",
    )
    config.add_option(
        up,
        "--kafka-nodes",
        scope="",
        type=_at_least_one,
        help="Kafka nodes (controller and broker each) on --kafka-port + 2i and"
        " --kafka-controller-port + 2i; 3 or more replicate every topic 3 times"
        " (default: as the last `up`, else 1)",
    )
    config.add_option(
        up,
        "--broker-processes",
        scope="",
        type=_at_least_one,
        help="broker processes; above 1 they run on ports of their own behind HAProxy on"
        " --broker-port, health-checked on /health (default: as the last `up`, else 1)",
    )
    config.add_option(
        up,
        "--changeservers",
        scope="",
        type=_at_least_one,
        help="changeservers, each with its own slot and change log; above 1 they run on"
        " ports of their own behind HAProxy on --changeserver-port, checked on /health and"
        " /ready, a new one seeded from the others (default: as the last `up`, else 1)",
    )
    up.set_defaults(handler=cmd_up)

    supervise = commands.add_parser(
        "supervise", help="restart whatever part of the stack `up` started dies (`up` runs it)"
    )
    supervise.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="the stack's state folder [env CHANGEBROKER_STATE_DIR; default as for up]",
    )
    supervise.set_defaults(handler=cmd_supervise)

    chaos = commands.add_parser(
        "chaos",
        help="a fault campaign: a private stack under load, faults on a seeded schedule,"
        " invariants checked; exit 1 on any violation",
    )
    chaos.add_argument("--minutes", type=float, default=2.0, help="how long faults are injected")
    chaos.add_argument("--seed", type=int, default=1, help="the schedule's random seed")
    chaos.add_argument(
        "--state-dir", type=Path, default=None, help="keep the stack here (default: a temp dir)"
    )
    chaos.add_argument(
        "--lanes",
        type=_at_least_one,
        default=1,
        help="faults under way at once, never two on one component (denser schedules)",
    )
    chaos.add_argument(
        "--hold",
        type=float,
        default=10.0,
        help="a fault lasts 1 to this many seconds (one in ten lasts a minute)",
    )
    chaos.set_defaults(handler=cmd_chaos)

    down = commands.add_parser("down", help="stop what `up` started; data is kept")
    _stack_options(down)
    down.add_argument("--purge", action="store_true", help="also delete data and logs")
    down.set_defaults(handler=cmd_down)

    status = commands.add_parser("status", help="endpoints of what is running")
    _stack_options(status)
    status.add_argument("--json", action="store_true", help="as a JSON object")
    status.set_defaults(handler=cmd_status)

    commands_of = {**services.SERVICE_MODULES, **services.JOB_MODULES}
    for name, (module_name, help_text) in commands_of.items():
        service: ServiceMain = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=help_text)
        service.configure(sub)
        sub.set_defaults(handler=service.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.command)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
