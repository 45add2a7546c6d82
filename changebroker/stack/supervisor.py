"""``changebroker supervise``: restart what dies in the local stack, as systemd would.

``up`` starts one supervisor beside the stack (``down`` stops it first). It looks at every
part ``up`` started, in start order, about once a second: a part whose process is gone is
started again, after a backoff that doubles while the part keeps dying soon after each
start (1 s up to a minute) and resets once it has run a while. A frozen (SIGSTOPped)
process is alive: it is not restarted, ``status`` shows it not ready.

What it did is in ``run/supervisor.json`` (per part: restarts, the last exit, when it
tries next), which ``status --json`` shows under ``supervisor``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from changebroker import logs
from changebroker.stack.local import LocalStack
from changebroker.stack.processes import read_pid

log = logging.getLogger(__name__)

FIRST_BACKOFF = 1.0  # seconds before restarting a part that died
MAX_BACKOFF = 60.0
STABLE_AFTER = 60.0  # seconds a part must run for its backoff to start again from the first
INTERVAL = 1.0  # seconds between looks


@dataclass
class Record:
    """One part's restart history, as ``status`` shows it."""

    restarts: int = 0
    last_exit: str | None = None  # how its process ended, as far as we know
    last_exit_at: float | None = None  # Unix seconds
    last_start_at: float | None = None
    next_attempt_at: float | None = None  # set while the part is down
    backoff: float = FIRST_BACKOFF
    last_error: str | None = None  # why the last start failed, if it did

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Part:
    """A part of the stack: how to tell it runs, how to start it."""

    name: str
    pid: Callable[[], int | None]
    start: Callable[[], None]


def parts(stack: LocalStack) -> list[Part]:
    """What ``up`` started, in its order (Postgres, Kafka, then our services)."""
    found: list[Part] = []
    if not stack.external_pg_dsn:
        postgres = stack.postgres
        found.append(Part("postgres", postgres.pid, postgres.start))
    if not stack.external_kafka:
        found += [Part(node.name, node.pid, node.start) for node in stack.kafka.all_nodes()]
    for service in stack.services():
        pid_file = stack.state.pid_file(service.name)
        # Started, not waited for: one part not getting ready must not hold up the others.
        start = functools.partial(stack.start_service, service, wait=False)
        found.append(Part(service.name, functools.partial(read_pid, pid_file), start))
    if stack.layout().balanced:
        balancer = stack.load_balancer
        found.append(
            Part("loadbalancer", functools.partial(read_pid, balancer.pid_file), balancer.start)
        )
    return found


@dataclass
class Supervisor:
    stack: LocalStack
    records: dict[str, Record] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    _pids: dict[str, int] = field(default_factory=dict)  # the pid each part ran as, last seen
    _exits: dict[int, str] = field(default_factory=dict)  # our reaped children: pid -> how

    @property
    def path(self) -> Path:
        return self.stack.supervisor_records

    def run(self) -> None:
        log.info("supervising", extra=logs.fields(state=str(self.stack.state.root)))
        watched = parts(self.stack)
        spec = self.stack.state.run / "stack-spec.json"
        while not self.stopping.is_set():
            if not spec.exists():  # ``down`` removed it, or the state folder is gone
                log.info("the stack is gone: supervisor exits", extra=logs.fields(spec=str(spec)))
                return
            for part in watched:
                if self.stopping.is_set():
                    break
                self.check(part)
            self._save()
            self.stopping.wait(INTERVAL)

    def check(self, part: Part) -> None:
        self._reap()
        record = self.records.setdefault(part.name, Record())
        now = time.time()
        pid = part.pid()
        if pid is not None:
            self._pids[part.name] = pid
            if record.last_start_at is not None and now - record.last_start_at > STABLE_AFTER:
                record.backoff = FIRST_BACKOFF
            record.next_attempt_at = None
            return
        if record.next_attempt_at is None:  # just found dead: wait out its backoff first
            last_pid = self._pids.pop(part.name, None)
            record.last_exit = self._exits.pop(last_pid, "exited") if last_pid else "not running"
            record.last_exit_at = now
            record.next_attempt_at = now + record.backoff
            log.warning(
                "part is down, restarting after backoff",
                extra=logs.fields(
                    part=part.name, last_exit=record.last_exit, backoff_s=record.backoff
                ),
            )
            return
        if now < record.next_attempt_at:
            return
        record.restarts += 1
        record.last_start_at = now
        record.next_attempt_at = None
        record.backoff = min(record.backoff * 2, MAX_BACKOFF)
        try:
            part.start()
            # Known from now: dead before the next check, it still has its exit read.
            if (started := part.pid()) is not None:
                self._pids[part.name] = started
            record.last_error = None
            log.info("part restarted", extra=logs.fields(part=part.name, restarts=record.restarts))
        except Exception as error:  # noted and retried after the next backoff
            record.last_error = f"{type(error).__name__}: {error}"
            log.warning(
                "restart failed", extra=logs.fields(part=part.name, error=record.last_error)
            )

    def _reap(self) -> None:
        """Collect the exit status of the services we restarted (our children)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFSIGNALED(status):
                self._exits[pid] = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
            else:
                self._exits[pid] = f"exit code {os.waitstatus_to_exitcode(status)}"

    def _save(self) -> None:
        text = json.dumps({name: r.as_json() for name, r in self.records.items()}, indent=2)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(text)
        temporary.replace(self.path)
