"""HAProxy from Debian in front of several broker processes and several changeservers.

Brokers are health-checked on ``/health``. When they serve HTTPS, HAProxy passes TLS through
(TCP mode: clients see the brokers' own certificate, and HAProxy holds no key) and checks
``/health`` over TLS, verifying the brokers' certificate against the stack's CA (else the
system's). A backend that stops answering ``/health`` with Nakadi's ``OK`` leaves the rotation
within ~2 s; a
request that finds its backend refusing connections is sent to another at once
(``redispatch``). Streams are long responses: their timeouts are the longest a stream may
last, and a stream cut by its backend's death ends for the client, who reconnects here.

Changeservers (a fleet, each with its own slot and change log) are checked on their
management port, ``/health`` then ``/ready``, once a second, and leave the rotation at the
first failed check: one check interval after a ``/markdown``, a lost slot or a process gone.
A request the chosen server refuses, closes without an answer (killed mid long poll) or
answers 503 (marked down, before the check saw it) is sent again to another server: a
``GET /changes`` is safe to repeat, and every server names a change by the same sequence.
Over HTTPS the fleet is passed through in TCP mode as the brokers are, without that retry.

``servers()`` reads each server's state from HAProxy's own stats socket.
"""

from __future__ import annotations

import hashlib
import logging
import resource
import shutil
import socket
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from changebroker import logs
from changebroker.stack.processes import (
    answers,
    port_open,
    read_pid,
    start_detached,
    stop_pid,
    wait_until,
)
from changebroker.state import StateDir

log = logging.getLogger(__name__)

NAME = "loadbalancer"
# Longer than the longest stream (Nakadi's stream_timeout is at most 4200 s).
STREAM_SECONDS = 4500


CHECK_INTERVAL = 1.0  # seconds between two health checks of one server
CHANGESERVER_CHECKS = ("/health", "/ready")  # on each changeserver's management port


def max_connections() -> int:
    """Clients HAProxy may hold at once: each takes two descriptors (client and server side),
    within the hard limit on open files it inherits (it cannot raise that unprivileged)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return 20_000
    return max(256, min(20_000, (hard - 200) // 2))


@dataclass
class LoadBalancer:
    state: StateDir
    port: int  # the brokers' public port (unused without broker backends)
    backends: list[int]  # the broker processes' ports on the loopback
    host: str = "127.0.0.1"
    tls: bool = False  # the services serve HTTPS
    ca_file: Path | None = None  # what their certificates are checked against
    changeserver_port: int | None = None  # the changeservers' public port
    # Each changeserver of a fleet: (API port, management port) on the loopback.
    changeservers: list[tuple[int, int]] = field(default_factory=list)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def backend_urls(self) -> list[str]:
        return [f"{self.scheme}://{self.host}:{port}" for port in self.backends]

    @property
    def changeserver_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.changeserver_port}"

    @property
    def changeserver_backend_urls(self) -> list[str]:
        return [f"{self.scheme}://{self.host}:{api}" for api, _ in self.changeservers]

    @property
    def stats_socket(self) -> Path:
        # A Unix socket's path has at most ~100 bytes: a short name in the temp folder, one
        # per state folder.
        digest = hashlib.sha1(str(self.state.root.resolve()).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"changebroker-haproxy-{digest}.sock"

    @property
    def pid_file(self) -> Path:
        return self.state.pid_file(NAME)

    @property
    def log_file(self) -> Path:
        return self.state.log_file(NAME)

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def start(self) -> None:
        haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
        if haproxy is None:
            raise RuntimeError(
                "several broker processes run behind HAProxy: apt-get install haproxy"
                " (scripts/install.sh does)"
            )
        config = self.state.data(NAME) / "haproxy.cfg"
        config.write_text(self.config())
        if not self.running():
            # -db: in the foreground, so the pid file names the process that serves.
            start_detached(
                [haproxy, "-db", "-f", str(config)], log_file=self.log_file, pid_file=self.pid_file
            )
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        if self.backends:
            wait_until(
                lambda: answers(f"{self.url}/health", context),
                timeout=60,
                what=f"the load balancer at {self.url} (see {self.log_file})",
            )
        if self.changeservers:
            # Listening is enough: the servers behind it may still be seeding.
            wait_until(
                lambda: port_open(self.host, self.changeserver_port or 0),
                timeout=60,
                what=f"the load balancer at {self.changeserver_url} (see {self.log_file})",
            )
        log.info(
            "load balancer ready",
            extra=logs.fields(
                url=self.url, backends=self.backends, changeservers=self.changeservers
            ),
        )

    def stop(self) -> bool:
        return stop_pid(self.pid_file, timeout=10)

    def servers(self) -> dict[str, str]:
        """Each server's state as HAProxy sees it now (``UP``, ``DOWN``, ``MAINT``...)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stats:
            stats.settimeout(5)
            stats.connect(str(self.stats_socket))
            stats.sendall(b"show stat\n")
            text = b""
            while chunk := stats.recv(65536):
                text += chunk
        lines = text.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        found = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("svname") not in (None, "FRONTEND", "BACKEND"):
                found[row["svname"]] = row["status"]
        return found

    def config(self) -> str:
        mode = "tcp" if self.tls else "http"
        sections = [
            f"""\
global
    maxconn {max_connections()}
    stats socket {self.stats_socket} mode 600 level admin

defaults
    mode {mode}
    option redispatch
    retries 3
    timeout connect 2s
    timeout client {STREAM_SECONDS}s
    timeout server {STREAM_SECONDS}s
    timeout http-keep-alive 60s
    timeout queue 10s
"""
        ]
        if self.backends:
            sections.append(self._brokers())
        if self.changeservers:
            sections.append(self._changeservers())
        return "\n".join(sections)

    def _check(self) -> str:
        # Over TLS: checks by TLS too, the services' certificates verified.
        trust = str(self.ca_file) if self.ca_file else "@system-ca"
        return f"check check-ssl verify required ca-file {trust}" if self.tls else "check"

    def _brokers(self) -> str:
        servers = "".join(
            f"    server broker-{i} {self.host}:{port} {self._check()} inter 1s fall 2 rise 1\n"
            for i, port in enumerate(self.backends, start=1)
        )
        return f"""\
frontend broker
    bind {self.host}:{self.port}
    default_backend brokers

backend brokers
    balance roundrobin
    option httpchk GET /health
    http-check expect rstring ^OK$
{servers}"""

    def _changeservers(self) -> str:
        interval = f"inter {CHECK_INTERVAL:g}s fall 1 rise 1"
        servers = "".join(
            f"    server changeserver-{i} {self.host}:{api} {self._check()} port {mgmt}"
            f" {interval}\n"
            for i, (api, mgmt) in enumerate(self.changeservers, start=1)
        )
        # Alive (/health) and taking traffic (/ready), both on the management port.
        checks = "".join(
            f"    http-check connect\n    http-check send meth GET uri {path}\n"
            f"    http-check expect status 200\n"
            for path in CHANGESERVER_CHECKS
        )
        retry = "" if self.tls else "    retry-on conn-failure empty-response 503\n"
        return f"""\
frontend changeserver
    bind {self.host}:{self.changeserver_port}
    default_backend changeservers

backend changeservers
    balance roundrobin
    option httpchk
{checks}{retry}{servers}"""
