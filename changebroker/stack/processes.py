"""Start, find and stop the local stack's processes by the pids it recorded."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 now: the readiness probe for our services."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:  # URLError and HTTPError are OSErrors too
        return False


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it so it counts as gone.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done != 0:
            return False
    except ChildProcessError:
        pass
    # Another parent's zombie (a SIGKILLed service its parent has not reaped yet) is gone too:
    # counting it as running made ``up`` wait for it instead of starting a new one.
    return process_state(pid) != "Z"


def process_state(pid: int) -> str | None:
    """The state letter in ``/proc/<pid>/stat`` (R, S, T stopped, Z zombie); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name, in parentheses, may itself hold spaces and parentheses.
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def read_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def start_detached(
    argv: Sequence[str],
    *,
    log_file: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in its own session (it outlives the CLI), output to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    pid_file.write_text(f"{process.pid}\n")
    return process.pid


def stop_pid(pid_file: Path, *, timeout: float = 20.0) -> bool:
    """SIGTERM the recorded process, SIGKILL it after ``timeout``; False if none ran."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not pid_alive(pid), timeout=timeout, what=None)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), timeout=5, what=f"pid {pid} to exit")
    pid_file.unlink(missing_ok=True)
    return True


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str | None,
    interval: float = 0.1,
) -> bool:
    """Poll ``condition`` until true; raise naming ``what`` on timeout (or return False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    if condition():
        return True
    if what:
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (a local Kafka cluster's nodes take
    ``port + 2i``), below the ephemeral range so clients' own ports do not land there."""
    for _ in range(200):
        base = random.randrange(15_000, 30_000)
        if all(_bindable(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"found no {count} consecutive free ports between 15000 and 30000")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
