"""``up`` / ``down`` / ``status``: the whole local stack as one unit.

Postgres and Kafka (one node, or a cluster of ``kafka_nodes``) are started here unless
CHANGEBROKER_PG_DSN / CHANGEBROKER_KAFKA_BOOTSTRAP point at existing ones; the project's
own services then start as child processes of their own (``changebroker <service>``),
each with a pid file, a log file and a readiness URL. With ``broker_processes`` above one,
the broker port is HAProxy's, in front of that many broker processes on ports of their own;
with ``changeservers`` above one, so is the changeserver port, in front of a fleet of
changeservers, each with its own slot, change log, and API and management ports.
The shape chosen at ``up`` is recorded (``run/layout.json``) for ``status`` and ``down``.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from changebroker import auth, config, logs
from changebroker.auth import AuthSettings
from changebroker.changeserver.sequence import Sequence
from changebroker.http import Tls
from changebroker.stack.kafka import LocalKafkaCluster
from changebroker.stack.loadbalancer import LoadBalancer
from changebroker.stack.postgres import LocalPostgres
from changebroker.stack.processes import (
    answers,
    free_port,
    read_pid,
    start_detached,
    stop_pid,
    wait_until,
)
from changebroker.state import StateDir

log = logging.getLogger(__name__)

REPLAY = "replay"  # the scheduled replay's service name (pid and log files)
SUPERVISOR = "supervisor"  # ``changebroker supervise``'s pid and log files


@dataclass
class Ports:
    postgres: int = config.DEFAULT_PG_PORT
    kafka: int = config.DEFAULT_KAFKA_PORT
    kafka_controller: int = config.DEFAULT_KAFKA_PORT + 1
    broker: int = config.DEFAULT_BROKER_PORT
    registry: int = config.DEFAULT_REGISTRY_PORT
    changeserver: int = config.DEFAULT_CHANGESERVER_PORT
    changeserver_mgmt: int = config.DEFAULT_CHANGESERVER_MGMT_PORT
    bridge: int = config.DEFAULT_BRIDGE_PORT
    console: int = config.DEFAULT_CONSOLE_PORT


@dataclass
class Layout:
    """How many Kafka nodes, broker processes and changeservers, and the processes' own
    ports."""

    kafka_nodes: int = 1
    broker_processes: int = 1
    broker_ports: list[int] = field(default_factory=list)  # behind the load balancer
    changeservers: int = 1
    # Each changeserver's (API port, management port), behind the load balancer.
    changeserver_ports: list[tuple[int, int]] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        """Whether HAProxy runs: some service has several processes."""
        return self.broker_processes > 1 or self.changeservers > 1


# A fleet's first changeserver keeps the single server's slot and change log: growing from
# one server to several goes on from its history (the others seed from it).
FIRST_SLOT = "changebroker"
PUBLICATION = "changebroker"


@dataclass
class Service:
    """One of our own services, run as ``changebroker <command or name> <args>``."""

    name: str
    args: list[str]
    base_url: str
    ready_url: str | None  # None: no HTTP port, started once its process runs
    # What ``status`` adds from the running service (the bridge's per-table progress).
    status_url: str | None = None
    command: str | None = None  # when several processes of one service have names of their own
    management_url: str | None = None  # a changeserver's /health /ready /markdown /status

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "changebroker.cli", self.command or self.name, *self.args]


@dataclass
class LocalStack:
    state: StateDir
    ports: Ports = field(default_factory=Ports)
    external_pg_dsn: str | None = None
    external_kafka: str | None = None
    external_meta_dsn: str | None = None
    durable: bool = True
    replay_every: float | None = None  # seconds: run the replay as a service on this schedule
    # Authentication of every service (``up --auth ...``) and the token our own clients
    # (bridge, console) send; TLS on every port, and the CA our clients trust for it.
    auth: AuthSettings = field(default_factory=AuthSettings)
    client_token: str | None = None
    tls: Tls | None = None
    ca_file: Path | None = None
    # None: as recorded by the last ``up`` (one of each before any).
    kafka_nodes: int | None = None
    broker_processes: int | None = None
    changeservers: int | None = None
    # Ports our services reach Postgres, the registry, the changeserver and the broker at,
    # when something sits in between (the fault campaign's proxies); else their own ports.
    links: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_env(cls, state: StateDir, ports: Ports) -> LocalStack:
        return cls(
            state=state,
            ports=ports,
            external_pg_dsn=os.environ.get("CHANGEBROKER_PG_DSN") or None,
            external_kafka=os.environ.get("CHANGEBROKER_KAFKA_BOOTSTRAP") or None,
            external_meta_dsn=os.environ.get("CHANGEBROKER_META_PG_DSN") or None,
        )

    @property
    def postgres(self) -> LocalPostgres:
        return LocalPostgres(self.state, self.ports.postgres, durable=self.durable)

    @property
    def layout_file(self) -> Path:
        return self.state.run / "layout.json"

    def layout(self) -> Layout:
        """The shape asked for, else the one the last ``up`` recorded."""
        recorded = Layout()
        if self.layout_file.exists():
            recorded = Layout(**json.loads(self.layout_file.read_text()))
        processes = self.broker_processes or recorded.broker_processes
        ports = recorded.broker_ports if len(recorded.broker_ports) == processes else []
        changeservers = self.changeservers or recorded.changeservers
        # Kept for the servers there were; a grown fleet's new ones get theirs at ``up``.
        pairs = [(api, mgmt) for api, mgmt in recorded.changeserver_ports][:changeservers]
        if changeservers == 1:
            pairs = []
        return Layout(
            self.kafka_nodes or recorded.kafka_nodes, processes, ports, changeservers, pairs
        )

    def _record_layout(self) -> Layout:
        layout = self.layout()
        taken = set(layout.broker_ports) | {p for pair in layout.changeserver_ports for p in pair}
        if layout.broker_processes > 1 and not layout.broker_ports:
            layout.broker_ports = sorted(_free_ports(layout.broker_processes, taken))
        if layout.changeservers > 1:
            wanted = 2 * (layout.changeservers - len(layout.changeserver_ports))
            ports = sorted(_free_ports(wanted, taken | set(layout.broker_ports)))
            layout.changeserver_ports += list(zip(ports[::2], ports[1::2], strict=True))
        self.layout_file.write_text(json.dumps(asdict(layout)))
        return layout

    @property
    def kafka(self) -> LocalKafkaCluster:
        return LocalKafkaCluster(
            self.state, self.ports.kafka, self.ports.kafka_controller, self.layout().kafka_nodes
        )

    @property
    def load_balancer(self) -> LoadBalancer:
        layout = self.layout()
        return LoadBalancer(
            self.state,
            self.ports.broker,
            layout.broker_ports,
            tls=self.tls is not None,
            ca_file=self.ca_file,
            changeserver_port=self.ports.changeserver,
            changeservers=layout.changeserver_ports,
        )

    @property
    def pg_dsn(self) -> str:
        return self.external_pg_dsn or self.postgres.dsn

    @property
    def meta_dsn(self) -> str:
        """Where the broker and registry keep metadata: CHANGEBROKER_META_PG_DSN, else beside
        the application database locally, else the same database as CHANGEBROKER_PG_DSN."""
        if self.external_meta_dsn:
            return self.external_meta_dsn
        return self.external_pg_dsn or self.postgres.meta_dsn

    @property
    def kafka_bootstrap(self) -> str:
        return self.external_kafka or self.kafka.bootstrap

    @property
    def snapshots_dir(self) -> Path:
        return self.state.snapshots

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """What our probes trust: the CA file's certificates, else the system's."""
        if self.ca_file is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _server_args(self) -> list[str]:
        """Flags every server takes: authentication, TLS."""
        args = self.auth.args()
        if self.tls is not None:
            args += ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
        return args

    def _client_args(self) -> list[str]:
        """Flags of a service that calls the others: the CA to trust (the token goes in the
        environment, CHANGEBROKER_CLIENT_TOKEN, where ``ps`` does not show it)."""
        return ["--tls-ca", str(self.ca_file)] if self.ca_file is not None else []

    def _reach(self, name: str, port: int) -> str:
        """How a service reaches another service ``name`` listening on ``port``."""
        return f"{self.scheme}://127.0.0.1:{self.links.get(name, port)}"

    def _linked_dsn(self, dsn: str) -> str:
        """``dsn`` as our services reach it (through the Postgres link, if there is one)."""
        link = self.links.get("postgres")
        if link is None or self.external_pg_dsn:
            return dsn
        return dsn.replace(f":{self.ports.postgres}/", f":{link}/")

    def services(self) -> list[Service]:
        """Our services in start order: the registry before the broker that uses it."""
        p = self.ports
        loopback = f"{self.scheme}://127.0.0.1"
        meta_dsn = self._linked_dsn(self.meta_dsn)
        server, client = self._server_args(), self._client_args()
        return [
            Service(
                "registry",
                ["--port", str(p.registry), "--pg-url", meta_dsn, *server],
                f"{loopback}:{p.registry}",
                f"{loopback}:{p.registry}/health",
            ),
            *self._changeservers(),
            *self._broker_services(),
            # Last: it reads the changeserver, and creates event types on the broker.
            Service(
                "bridge",
                [
                    "--port",
                    str(p.bridge),
                    "--meta-pg-url",
                    meta_dsn,
                    "--changeserver-url",
                    self._reach("changeserver", p.changeserver),
                    "--broker-url",
                    self._reach("broker", p.broker),
                    *server,
                    *client,
                ],
                f"{loopback}:{p.bridge}",
                f"{loopback}:{p.bridge}/health",
                f"{loopback}:{p.bridge}/status",
            ),
            # Last of all: it shows every other service, through their HTTP APIs only.
            Service(
                "console",
                [
                    "--port",
                    str(p.console),
                    "--broker-url",
                    f"{loopback}:{p.broker}",
                    "--registry-url",
                    f"{loopback}:{p.registry}",
                    "--changeserver-url",
                    f"{loopback}:{p.changeserver}",
                    "--changeserver-mgmt-url",
                    self._changeserver_management(),
                    "--bridge-url",
                    f"{loopback}:{p.bridge}",
                    *client,
                    # Operators sign in with tokens checked as the services check theirs.
                    *server,
                ],
                f"{loopback}:{p.console}",
                f"{loopback}:{p.console}/health",
            ),
            *self._replay_service(),
        ]

    def _changeserver_management(self) -> str:
        """The changeserver's management URL, or a fleet's, comma-separated (the console)."""
        pairs = self.layout().changeserver_ports or [(0, self.ports.changeserver_mgmt)]
        return ",".join(f"{self.scheme}://127.0.0.1:{mgmt}" for _, mgmt in pairs)

    def _changeservers(self) -> list[Service]:
        """One changeserver on the changeserver ports, or a fleet behind HAProxy: each on ports
        of its own, with its own slot and change log, seeded from the others when new."""
        loopback = f"{self.scheme}://127.0.0.1"
        common = [
            *("--snapshots-dir", str(self.snapshots_dir), "--publication", PUBLICATION),
            *self._server_args(),
            *self._client_args(),
        ]
        pairs = self.layout().changeserver_ports
        if not pairs:
            api, mgmt = self.ports.changeserver, self.ports.changeserver_mgmt
            args = [
                *("--port", str(api), "--mgmt-port", str(mgmt), "--slot", FIRST_SLOT),
                *("--db-dir", str(self.state.data("changeserver")), *common),
            ]
            base, management = f"{loopback}:{api}", f"{loopback}:{mgmt}"
            return [
                Service(
                    "changeserver",
                    args,
                    base,
                    f"{management}/ready",
                    f"{management}/status",
                    management_url=management,
                )
            ]
        fleet = []
        for i, (api, mgmt) in enumerate(pairs, start=1):
            peers = ",".join(f"{loopback}:{m}" for _, m in pairs if m != mgmt)
            slot, data = (FIRST_SLOT, "changeserver") if i == 1 else (f"{FIRST_SLOT}_{i}", "")
            args = [
                *("--port", str(api), "--mgmt-port", str(mgmt), "--slot", slot),
                *("--db-dir", str(self.state.data(data or f"changeserver-{i}"))),
                *("--seed-from", peers, *common),
            ]
            fleet.append(
                Service(
                    f"changeserver-{i}",
                    args,
                    f"{loopback}:{api}",
                    f"{loopback}:{mgmt}/ready",
                    f"{loopback}:{mgmt}/status",
                    command="changeserver",
                    management_url=f"{loopback}:{mgmt}",
                )
            )
        return fleet

    def _broker_services(self) -> list[Service]:
        """One broker on the broker port, or several on their own ports behind HAProxy (which
        checks them over plain HTTP: TLS is for a single broker process)."""
        loopback = f"{self.scheme}://127.0.0.1"
        common = self._server_args()
        meta_dsn = self._linked_dsn(self.meta_dsn)
        layout = self.layout()
        if layout.broker_processes == 1:
            port = self.ports.broker
            args = ["--port", str(port), "--pg-url", meta_dsn, *common]
            return [Service("broker", args, f"{loopback}:{port}", f"{loopback}:{port}/health")]
        return [
            Service(
                f"broker-{i}",
                ["--port", str(port), "--pg-url", meta_dsn, *common],
                f"{loopback}:{port}",
                f"{loopback}:{port}/health",
                command="broker",
            )
            for i, port in enumerate(layout.broker_ports, start=1)
        ]

    def _replay_service(self) -> list[Service]:
        """The replay on a schedule, when asked: last, it reads what the bridge writes."""
        if not self.replay_every:
            return []
        args = [
            *("--every", f"{self.replay_every:g}s", "--out", str(self.snapshots_dir)),
            *("--broker-url", f"{self.scheme}://127.0.0.1:{self.ports.broker}"),
            *self._client_args(),
        ]
        return [Service(REPLAY, args, "", None)]

    def up(self, *, with_services: bool = True, supervise: bool = False) -> dict[str, Any]:
        layout = self._record_layout()
        if not self.external_pg_dsn:
            self.postgres.start()
        if not self.external_kafka:
            self.kafka.start()
        if with_services:
            services = self.services()
            fleet = [s for s in services if s.command == "changeserver"]
            for service in services:
                if service in fleet:
                    # Together: a new fleet's servers learn from each other that none has
                    # history (one at a time, each would wait for the next to seed it).
                    self.start_service(service, wait=False)
                    if service is fleet[-1]:
                        for each in fleet:
                            self.start_service(each)
                    continue
                if service.name == "bridge" and layout.balanced:
                    self.load_balancer.start()  # the bridge reads and writes through it
                self.start_service(service)
        if supervise:
            self._start_supervisor()
        endpoints = self.status()
        (self.state.run / "stack.json").write_text(json.dumps(endpoints, indent=2))
        return endpoints

    def save(self) -> None:
        """What ``supervise`` needs to start the same parts again: ``load`` reads it."""
        spec = {
            "root": str(self.state.root),
            "cache_root": str(self.state.cache_root) if self.state.cache_root else None,
            "ports": asdict(self.ports),
            "external_pg_dsn": self.external_pg_dsn,
            "external_kafka": self.external_kafka,
            "external_meta_dsn": self.external_meta_dsn,
            "durable": self.durable,
            "replay_every": self.replay_every,
            "links": self.links,
        }
        (self.state.run / "stack-spec.json").write_text(json.dumps(spec, indent=2))

    @classmethod
    def load(cls, state: StateDir) -> LocalStack:
        """The stack ``up`` last started in ``state`` (its ``save``; the layout beside it)."""
        path = state.run / "stack-spec.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: start the stack with `changebroker up`")
        spec = json.loads(path.read_text())
        cache_root = spec["cache_root"]
        return cls(
            state=StateDir(Path(spec["root"]), Path(cache_root) if cache_root else None),
            ports=Ports(**spec["ports"]),
            external_pg_dsn=spec["external_pg_dsn"],
            external_kafka=spec["external_kafka"],
            external_meta_dsn=spec["external_meta_dsn"],
            durable=spec["durable"],
            replay_every=spec["replay_every"],
            links=spec["links"],
        )

    def _start_supervisor(self) -> None:
        self.save()
        pid_file = self.state.pid_file(SUPERVISOR)
        if read_pid(pid_file) is None:
            command = ["supervise", "--state-dir", str(self.state.root)]
            start_detached(
                [sys.executable, "-m", "changebroker.cli", *command],
                log_file=self.state.log_file(SUPERVISOR),
                pid_file=pid_file,
            )

    def down(self, *, purge: bool = False) -> list[str]:
        # First the supervisor, or it would start again what this stops.
        stopped = [SUPERVISOR] if stop_pid(self.state.pid_file(SUPERVISOR)) else []
        # The scheduled replay whether or not this ``down`` was told about it.
        names = [REPLAY, *(s.name for s in reversed(self.services()) if s.name != REPLAY)]
        # And the processes of a shape an ``up`` before this one had (more changeservers or
        # broker processes than now asked for), by the pid files they left.
        names += sorted(
            f.stem
            for pattern in ("changeserver-*.pid", "broker-*.pid")
            for f in self.state.run.glob(pattern)
            if f.stem not in names
        )
        stopped += [name for name in names if stop_pid(self.state.pid_file(name))]
        if self.load_balancer.stop():
            stopped.append("loadbalancer")
        if not self.external_kafka:
            stopped += self.kafka.stop()
        if not self.external_pg_dsn and self.postgres.stop():
            stopped.append("postgres")
        (self.state.run / "stack.json").unlink(missing_ok=True)
        (self.state.run / "stack-spec.json").unlink(missing_ok=True)  # any supervisor left exits
        if purge:
            self.postgres.purge()
            self.kafka.purge()
            self.layout_file.unlink(missing_ok=True)
            shutil.rmtree(self.state.root / "data", ignore_errors=True)
            shutil.rmtree(self.snapshots_dir, ignore_errors=True)
            shutil.rmtree(self.state.logs, ignore_errors=True)
        return stopped

    def status(self) -> dict[str, Any]:
        """Endpoints of what is running now (external services count as running)."""
        result: dict[str, Any] = {}
        if self.external_pg_dsn or self.postgres.running():
            result["postgres"] = {
                "dsn": self.pg_dsn,
                "meta_dsn": self.meta_dsn,
                "external": bool(self.external_pg_dsn),
            }
        if self.external_kafka or self.kafka.running():
            result["kafka"] = {
                "bootstrap": self.kafka_bootstrap,
                "external": bool(self.external_kafka),
            }
            if not self.external_kafka:
                result["kafka"]["nodes"] = self.kafka.status()
        balancer = self.load_balancer
        balancer_pid = read_pid(balancer.pid_file)
        if balancer_pid is not None:
            result["loadbalancer"] = {"pid": balancer_pid}
            if balancer.backends:
                result["loadbalancer"].update(
                    url=balancer.url,
                    backends=balancer.backend_urls,
                    health_check="GET /health",
                )
            if balancer.changeservers:
                result["loadbalancer"]["changeserver"] = {
                    "url": balancer.changeserver_url,
                    "backends": balancer.changeserver_backend_urls,
                    "health_check": "GET /health and GET /ready on each management port",
                }
                result["loadbalancer"].setdefault("url", balancer.changeserver_url)
        for service in self.services():
            pid = read_pid(self.state.pid_file(service.name))
            if pid is not None:
                result[service.name] = {"url": service.base_url, "pid": pid}
                if service.management_url:
                    result[service.name]["management"] = service.management_url
                if service.ready_url:
                    # Running is not serving: a frozen or cut-off service is not ready.
                    result[service.name]["ready"] = answers(service.ready_url, self.ssl_context())
                if service.status_url:
                    result[service.name]["status"] = self._json(service.status_url)
        replay_pid = read_pid(self.state.pid_file(REPLAY))
        if replay_pid is not None:
            result[REPLAY] = {"pid": replay_pid, "log": str(self.state.log_file(REPLAY))}
        supervisor_pid = read_pid(self.state.pid_file(SUPERVISOR))
        if supervisor_pid is not None:
            result[SUPERVISOR] = {"pid": supervisor_pid, "parts": self._supervisor_parts()}
        bridge_status = result.get("bridge", {}).get("status") or {}
        snapshot = newest_snapshot(self.snapshots_dir, bridge_status.get("position"))
        if snapshot is not None and result:  # beside a running stack: its data, not a process
            result["snapshot"] = snapshot
        return result

    @property
    def supervisor_records(self) -> Path:
        """What ``changebroker supervise`` did, per part (``stack/supervisor.py`` writes it)."""
        return self.state.run / f"{SUPERVISOR}.json"

    def _supervisor_parts(self) -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads(self.supervisor_records.read_text())
        except (FileNotFoundError, ValueError):  # nothing written yet, or not what it writes
            return {}
        return loaded

    def start_service(self, service: Service, *, wait: bool = True) -> None:
        """Start ``service`` unless it runs; with ``wait``, until it answers its ready URL."""
        pid_file = self.state.pid_file(service.name)
        if read_pid(pid_file) is None:
            start_detached(
                service.argv,
                log_file=self.state.log_file(service.name),
                pid_file=pid_file,
                env={
                    "CHANGEBROKER_PG_DSN": self._linked_dsn(self.pg_dsn),
                    "CHANGEBROKER_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
                    "CHANGEBROKER_CLIENT_TOKEN": self.client_token or "",
                },
            )
        if not wait:
            return
        ready_url = service.ready_url
        context = self.ssl_context()
        wait_until(
            lambda: (
                (ready_url is None or answers(ready_url, context))
                and read_pid(pid_file) is not None
            ),
            timeout=120,
            what=f"{service.name} at {ready_url} (see {self.state.log_file(service.name)})",
        )
        log.info("service ready", extra=logs.fields(service=service.name, url=service.base_url))

    def _json(self, url: str) -> Any:
        """A service's JSON answer, or ``None`` while it does not answer."""
        headers = auth.client_headers(self.client_token)
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5, context=self.ssl_context()) as answer:
                return json.load(answer)
        except (urllib.error.URLError, OSError, ValueError):
            return None


def _free_ports(count: int, taken: set[int]) -> set[int]:
    ports: set[int] = set()
    while len(ports) < count:
        port = free_port()
        if port not in taken:
            ports.add(port)
    return ports


def newest_snapshot(directory: Path, bridge_position: str | None) -> dict[str, Any] | None:
    """The newest snapshot /snapshots serves: id, age, rows, and how far behind the bridge's
    position its changeserver sequence is (bytes of WAL), or None when there is none."""
    from changebroker.changeserver.snapshots import find_newest

    found = find_newest(directory)
    if found is None:
        return None
    snapshot_id, manifest = found
    created = datetime.datetime.fromisoformat(manifest["created_at"])
    age = datetime.datetime.now(datetime.UTC) - created
    sequence = Sequence.parse(manifest["changeserver_sequence"])
    lag = None
    if bridge_position:
        lag = max(0, Sequence.parse(bridge_position).lsn - sequence.lsn)
    return {
        "id": snapshot_id,
        "created_at": manifest["created_at"],
        "age_seconds": round(age.total_seconds(), 1),
        "rows": sum(int(table["rows"]) for table in manifest["tables"].values()),
        "tables": len(manifest["tables"]),
        "duration_seconds": manifest.get("duration_seconds"),
        "changeserver_sequence": str(sequence),
        "bridge_position": bridge_position,
        "lag_bytes_behind_bridge": lag,
        "path": str(directory / snapshot_id),
    }
