"""HAProxy from Debian in front of several broker processes, health-checked on ``/health``.

When the broker processes serve HTTPS, HAProxy passes TLS through (TCP mode: clients see the
brokers' own certificate, and HAProxy holds no key) and checks ``/health`` over TLS,
verifying the brokers' certificate against the stack's CA (else the system's).

A backend that stops answering ``/health`` with Nakadi's ``OK`` leaves the rotation within ~2 s;
a request that finds its backend refusing connections is sent to another at once
(``redispatch``). Streams are long responses: their timeouts are the longest a stream may last,
and a stream cut by its backend's death ends for the client, who reconnects through here.
"""

from __future__ import annotations

import logging
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path

from changebroker import logs
from changebroker.stack.processes import answers, read_pid, start_detached, stop_pid, wait_until
from changebroker.stack.state import StateDir

log = logging.getLogger(__name__)

NAME = "loadbalancer"
# Longer than the longest stream (Nakadi's stream_timeout is at most 4200 s).
STREAM_SECONDS = 4500


@dataclass
class LoadBalancer:
    state: StateDir
    port: int
    backends: list[int]  # the broker processes' ports on the loopback
    host: str = "127.0.0.1"
    tls: bool = False  # the broker processes serve HTTPS
    ca_file: Path | None = None  # what their certificates are checked against

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
        wait_until(
            lambda: answers(f"{self.url}/health", context),
            timeout=60,
            what=f"the load balancer at {self.url} (see {self.log_file})",
        )
        log.info("load balancer ready", extra=logs.fields(url=self.url, backends=self.backends))

    def stop(self) -> bool:
        return stop_pid(self.pid_file, timeout=10)

    def config(self) -> str:
        # Over TLS: checks by TLS too, the brokers' certificates verified.
        trust = str(self.ca_file) if self.ca_file else "@system-ca"
        check = f"check check-ssl verify required ca-file {trust}" if self.tls else "check"
        servers = "".join(
            f"    server broker-{i} {self.host}:{port} {check} inter 1s fall 2 rise 1\n"
            for i, port in enumerate(self.backends, start=1)
        )
        return f"""\
global
    maxconn 4096

defaults
    mode {"tcp" if self.tls else "http"}
    option redispatch
    retries 3
    timeout connect 2s
    timeout client {STREAM_SECONDS}s
    timeout server {STREAM_SECONDS}s
    timeout http-keep-alive 60s
    timeout queue 10s

frontend broker
    bind {self.host}:{self.port}
    default_backend brokers

backend brokers
    balance roundrobin
    option httpchk GET /health
    http-check expect rstring ^OK$
{servers}"""
