"""Run our services for tests and benchmarks: an app in a thread (fast), or
``changebroker <service>`` as a child process on a free port (crash tests, whole-process
measurements)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from changebroker import http
from changebroker.stack.processes import answers, free_port, wait_until


@contextlib.contextmanager
def serve_in_thread(
    app: ASGIApp, limits: http.ConnectionLimits | None = None, tls: http.Tls | None = None
) -> Iterator[str]:
    """Serve ``app`` on a free loopback port (HTTPS with ``tls``); yields its base URL."""
    limits = limits or http.ConnectionLimits()
    server = uvicorn.Server(http.config(app, "127.0.0.1", 0, lifespan="on", limits=limits, tls=tls))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=30, what="uvicorn to start")
    if not server.started:
        raise RuntimeError("the app failed to start: see the log above")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class CliProcess:
    """``changebroker <args>`` as a child process that a test can SIGKILL and restart."""

    def __init__(
        self, args: Sequence[str], ready_url: str, log_path: Path, env: dict[str, str] | None = None
    ):
        self.args = list(args)
        self.ready_url = ready_url
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> CliProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "changebroker.cli", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        process = self.process
        wait_until(
            lambda: answers(self.ready_url) or process.poll() is not None,
            timeout=timeout,
            what=f"{self.args[0]} to be ready at {self.ready_url}",
        )
        if process.poll() is not None:
            raise RuntimeError(
                f"{self.args[0]} exited {process.returncode}: {self.log_path.read_text()[-3000:]}"
            )
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> int | None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode if self.process else None


def broker_process(
    pg_dsn: str, kafka_bootstrap: str, log_path: Path, *args: str
) -> tuple[CliProcess, str]:
    """``changebroker broker`` on a free port (not started yet), and its base URL."""
    env = {"CHANGEBROKER_KAFKA_BOOTSTRAP": kafka_bootstrap}
    return _service_process("broker", pg_dsn, log_path, args, env)


def registry_process(pg_dsn: str, log_path: Path, *args: str) -> tuple[CliProcess, str]:
    """``changebroker registry`` on a free port (not started yet, authentication off), and its
    base URL."""
    return _service_process("registry", pg_dsn, log_path, args, {"CHANGEBROKER_AUTH": ""})


def _service_process(
    command: str, pg_dsn: str, log_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> tuple[CliProcess, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = CliProcess(
        [command, "--port", str(port), "--pg-url", pg_dsn, *args],
        ready_url=f"{url}/health",
        log_path=log_path,
        env=env,
    )
    return process, url


def changeserver_process(
    pg_dsn: str, state: Path, slot: str, *args: str
) -> tuple[CliProcess, int, int]:
    """``changebroker changeserver`` on free API and management ports (not started yet), its
    change log and output under ``state``; the process and the two ports."""
    port, mgmt = free_port(), free_port()
    process = CliProcess(
        [
            *("changeserver", "--pg-url", pg_dsn, "--slot", slot, "--db-dir", str(state / "log")),
            *("--port", str(port), "--mgmt-port", str(mgmt), *args),
        ],
        ready_url=f"http://127.0.0.1:{mgmt}/ready",
        log_path=state / "changeserver.log",
    )
    return process, port, mgmt
