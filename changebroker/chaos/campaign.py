"""``changebroker chaos --minutes N --seed S``: the whole local stack under a mixed workload,
with faults injected on a seeded random schedule, and invariants checked as it runs and at
the end. Exit status 1 on any violation.

The stack is a private one (its own state folder, free ports) with two broker processes and
two changeservers, each pair behind the load balancer, and the supervisor; the changeservers
run ``--on-slot-loss recreate``, the first one's change log on a small filesystem of its
own; our services reach Postgres, the registry, the changeservers and the broker through
the fault proxy (``proxy.py``), the latter two by the load balancer. Fault categories come
in rounds, each round every category once in a seeded order, so each is injected about as
often. ``lanes`` injectors run side by side, never two faults on one component at once;
after each fault the time until its component is healthy again is measured (and bounded),
and, when no other fault was under way, the time until the whole stack is.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from confluent_kafka.admin import AdminClient

from changebroker import kafka as kafka_client
from changebroker.chaos import faults, workload
from changebroker.chaos.proxy import BLACKHOLE, CUT, SLOW, Link, Proxies
from changebroker.chaos.workload import Violations
from changebroker.stack.local import FIRST_SLOT, LocalStack, Ports
from changebroker.stack.processes import answers, free_port, read_pid, wait_until
from changebroker.state import StateDir, default_state_dir

CHANGESERVERS = ("changeserver-1", "changeserver-2")  # the first holds the slot faults hit
SERVICES = (*CHANGESERVERS, "broker-1", "broker-2", "bridge", "registry")
PROCESSES = (*SERVICES, "kafka", "postgres")
LINKS = ("postgres", "changeserver", "broker", "registry")
RECOVERY_BOUND = 180.0  # seconds every part has to be healthy again after a fault ends
DRAIN_BOUND = 15.0  # seconds a service has to exit after SIGTERM (its graceful timeout + 5)
DISK_SIZE = "256m"  # the change log's filesystem
LONG_HOLD = 60.0  # seconds a fault lasts, one time in ten
HEALTH_POLL = 0.5  # seconds between health checks while a component recovers


@dataclass
class Report:
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why it was not injected
    recovery: dict[str, list[float]] = field(default_factory=dict)  # component -> seconds
    drains: dict[str, list[float]] = field(default_factory=dict)  # service -> SIGTERM to exit
    failed_injections: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def render(self, violations: list[str], seed: int, minutes: float, lanes: int) -> str:
        lines = [f"== chaos campaign: seed {seed}, {minutes:g} min of faults, {lanes} at a time"]
        lines.append(f"{'fault':<28}{'count':>7}")
        kinds = collections.Counter(kind.split(":")[0] for kind in self.faults.elements())
        for kind, count in sorted(kinds.items()):
            lines.append(f"{kind:<28}{count:>7}")
        for kind, count in sorted(self.faults.items()):
            lines.append(f"  {kind:<26}{count:>7}")
        for kind, why in sorted(self.skipped.items()):
            lines.append(f"skipped {kind}: {why}")
        lines.append(f"{'recovery (s)':<28}{'n':>5}{'p50':>8}{'max':>8}")
        for component, times in sorted(self.recovery.items()):
            lines.append(
                f"{component:<28}{len(times):>5}{statistics.median(times):>8.1f}{max(times):>8.1f}"
            )
        for service, times in sorted(self.drains.items()):
            lines.append(f"SIGTERM drain {service:<14}{len(times):>5}{'':>8}{max(times):>8.1f}")
        for name, value in self.counts.items():
            lines.append(f"{name:<40}{value:>10}")
        for failure in self.failed_injections:
            lines.append(f"injection failed: {failure}")
        lines.append(f"violations: {len(violations)}")
        lines += violations
        return "\n".join(lines)


def claims(kind: str) -> set[str]:
    """The components fault ``kind`` occupies: no other lane's fault may touch them."""
    action, target = kind.split(":")
    if action in (CUT, SLOW, BLACKHOLE):
        return {f"{target} link"}
    if action == "slot":
        return {CHANGESERVERS[0], "postgres"}  # the slot's reader, and Postgres to reach it
    if action == "disk":
        return {CHANGESERVERS[0]}
    return {target}


def recovered_by(component: str) -> tuple[str, ...]:
    """The parts that answer for ``component``'s health (the broker link ends at the load
    balancer, before both broker processes)."""
    if component == "broker link":
        return ("broker-1", "broker-2")
    if component == "changeserver link":
        return CHANGESERVERS
    return (component.removesuffix(" link"),)


class Schedule:
    """Fault kinds in rounds: each round every category once, in a seeded order; a lane
    takes the next category and a target in it that no other lane's fault occupies."""

    def __init__(self, kinds: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.by_category: dict[str, list[str]] = {}
        for kind in kinds:
            self.by_category.setdefault(kind.split(":")[0], []).append(kind)
        self.round: list[str] = []
        self.busy: set[str] = set()
        self.lock = threading.Lock()

    def take(self) -> str | None:
        """The next fault to inject, its components now occupied; None if every target of
        the next category is occupied (try again shortly)."""
        with self.lock:
            if not self.round:
                self.round = sorted(self.by_category)
                self.rng.shuffle(self.round)
            free = [k for k in self.by_category[self.round[-1]] if not claims(k) & self.busy]
            if not free:
                return None
            self.round.pop()
            kind = self.rng.choice(free)
            self.busy |= claims(kind)
            return kind

    def release(self, kind: str) -> None:
        with self.lock:
            self.busy -= claims(kind)

    def others_active(self, kind: str) -> bool:
        with self.lock:
            return bool(self.busy - claims(kind))


class Campaign:
    def __init__(
        self, minutes: float, seed: int, root: Path, lanes: int = 1, hold: float = 10.0
    ) -> None:
        self.minutes, self.seed, self.root = minutes, seed, root
        self.lanes, self.hold = lanes, hold
        self.rng = random.Random(seed)
        self.report_lock = threading.Lock()
        self.violations = Violations()
        self.report = Report()
        ports = Ports(*(free_port() for _ in range(9)))
        self.links = {name: free_port() for name in LINKS}
        targets = {
            "postgres": ports.postgres,
            "changeserver": ports.changeserver,
            "broker": ports.broker,
            "registry": ports.registry,
        }
        self.proxies = Proxies([Link(n, self.links[n], targets[n]) for n in LINKS])
        self.stack = LocalStack(
            StateDir(root, cache_root=StateDir(default_state_dir()).cache),
            ports,
            broker_processes=2,  # behind the load balancer on the broker port
            changeservers=2,  # behind it on the changeserver port
            links=self.links,
        )
        self.disk: Path | None = None
        self._admin: AdminClient | None = None

    # -- the stack ------------------------------------------------------------------------

    def _mount_disk(self) -> None:
        folder = self.stack.state.data("changeserver")  # the first server's
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            self.disk = folder
        else:
            self.report.skipped["disk"] = f"cannot mount a small filesystem: {done.stderr.strip()}"

    @contextlib.contextmanager
    def running_stack(self) -> Iterator[None]:
        for name in ("PG_DSN", "KAFKA_BOOTSTRAP", "META_PG_DSN"):
            os.environ.pop(f"CHANGEBROKER_{name}", None)
        # Inherited by every service the stack and its supervisor start.
        os.environ["CHANGEBROKER_CHANGESERVER_ON_SLOT_LOSS"] = "recreate"
        self._mount_disk()
        self.proxies.start()
        try:
            print(f"starting a private stack in {self.root}", flush=True)
            self.stack.up(supervise=True)
            yield
        finally:
            self.stack.down(purge=False)
            self.proxies.stop()
            if self.disk is not None:
                subprocess.run(["umount", "-l", str(self.disk)], check=False)

    def url(self, service: str) -> str:
        return next(s.base_url for s in self.stack.services() if s.name == service)

    def healthy(self, component: str) -> bool:
        if component == "postgres":
            try:
                with psycopg.connect(self.stack.pg_dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                return False
        if component == "kafka":
            if self._admin is None:
                config = kafka_client.client_config(self.stack.kafka_bootstrap, log_level=0)
                self._admin = AdminClient(config)
            try:
                self._admin.list_topics(timeout=2)
                return True
            except Exception:
                return False
        service = next(s for s in self.stack.services() if s.name == component)
        return service.ready_url is None or answers(service.ready_url)

    def pid(self, component: str) -> int | None:
        if component == "postgres":
            return self.stack.postgres.pid()
        return read_pid(self.stack.state.pid_file(component))

    # -- faults ---------------------------------------------------------------------------

    def kinds(self) -> list[str]:
        kinds = [f"{action}:{p}" for action in ("kill", "freeze") for p in PROCESSES]
        kinds += [f"term:{s}" for s in SERVICES]
        # Taken out of the fleet as management software does: its slot goes at exit, and the
        # supervisor's restart is a new server that seeds its log from the other.
        kinds += [f"markdown:{s}" for s in CHANGESERVERS]
        kinds += [f"{mode}:{n}" for mode in (CUT, SLOW, BLACKHOLE) for n in LINKS]
        kinds += ["slot:drop", "slot:invalidate"]
        if self.disk is not None:
            kinds.append("disk:full")
        return kinds

    def inject(self, kind: str, rng: random.Random) -> tuple[str, faults.Heal]:
        """Start fault ``kind``; returns the component it hits and how to end it."""
        action, target = kind.split(":")
        if action in ("kill", "freeze", "term", "markdown"):
            pid = self.pid(target)
            if pid is None:
                raise RuntimeError(f"{target} is not running")
            if action == "markdown":
                service = next(s for s in self.stack.services() if s.name == target)
                marked = httpx.get(f"{service.management_url}/markdown", timeout=10)
                marked.raise_for_status()
            if action == "kill":
                return target, faults.kill(pid)
            if action == "freeze":
                return target, faults.freeze(pid, whole_family=target == "postgres")
            took = faults.terminate(pid, DRAIN_BOUND)
            with self.report_lock:
                self.report.drains.setdefault(target, []).append(took)
            if took > DRAIN_BOUND:
                self.violations.add(
                    "SIGTERM drains within a bound",
                    f"{target} gone in {DRAIN_BOUND:g}s",
                    f"{took:.1f}s",
                )
            return target, lambda: None
        if action in (CUT, SLOW, BLACKHOLE):
            delay = rng.uniform(0.05, 0.5) if action == SLOW else 0.0
            return f"{target} link", faults.link(self.proxies, target, action, delay)
        if kind == "slot:drop":
            faults.drop_slot_behind(self.stack.pg_dsn, FIRST_SLOT)
            return CHANGESERVERS[0], lambda: None
        if kind == "slot:invalidate":
            reader = self.pid(CHANGESERVERS[0])
            if reader is None:
                raise RuntimeError(f"{CHANGESERVERS[0]} is not running")
            faults.invalidate_slot(self.stack.pg_dsn, FIRST_SLOT, reader)
            return CHANGESERVERS[0], lambda: None
        if kind == "disk:full":
            assert self.disk is not None
            return CHANGESERVERS[0], faults.fill_disk(self.disk)
        raise ValueError(kind)

    def one_fault(self, kind: str, rng: random.Random, schedule: Schedule) -> None:
        # Mostly short, now and then a long one (a process frozen for a minute).
        hold = rng.uniform(1.0, self.hold) if rng.random() < 0.9 else LONG_HOLD
        if kind.split(":")[0] in ("kill", "term", "markdown", "slot"):
            hold = 0.0  # over once injected: recovery (the supervisor, a new slot) is measured
        print(f"{time.strftime('%H:%M:%S')} fault {kind} for {hold:.0f}s", flush=True)
        try:
            component, heal = self.inject(kind, rng)
        except Exception as error:
            with self.report_lock:
                self.report.failed_injections.append(f"{kind}: {error}")
            return
        with self.report_lock:
            self.report.faults[kind] += 1
        try:
            time.sleep(hold)  # the fault lasts this long: wall time is the point here
        finally:
            heal()
        self.measure_recovery(component, kind, schedule)

    def measure_recovery(self, component: str, kind: str, schedule: Schedule) -> None:
        """Seconds from the fault's end until ``component`` is healthy again; then, if no
        other lane's fault is under way, until every part is."""
        took = self._healthy_within(recovered_by(component))
        if took is None:
            self.violations.add(
                "healthy again within a bound",
                f"{component} healthy {RECOVERY_BOUND:g}s after {kind} ended",
                "not",
            )
            return
        with self.report_lock:
            self.report.recovery.setdefault(component, []).append(took)
        if schedule.others_active(kind):
            return  # the whole stack waits on another fault too: its time is not this one's
        whole = self._healthy_within(PROCESSES)
        if whole is None:
            self.violations.add(
                "healthy again within a bound",
                f"every part healthy {RECOVERY_BOUND:g}s after {kind} ended",
                f"{[p for p in PROCESSES if not self.healthy(p)]} not",
            )
            return
        with self.report_lock:
            self.report.recovery.setdefault("whole stack", []).append(took + whole)

    def _healthy_within(self, parts: tuple[str, ...]) -> float | None:
        """Seconds until every one of ``parts`` was seen healthy; None past the bound."""
        started = time.monotonic()
        pending = set(parts)
        while time.monotonic() - started < RECOVERY_BOUND:
            pending = {each for each in pending if not self.healthy(each)}
            if not pending:
                return time.monotonic() - started
            time.sleep(HEALTH_POLL)
        return None

    def lane(self, number: int, schedule: Schedule, deadline: float) -> None:
        rng = random.Random(self.seed * 1000 + number)
        while time.monotonic() < deadline:
            kind = schedule.take()
            if kind is None:
                time.sleep(HEALTH_POLL)  # every target of the next category is under a fault
                continue
            try:
                self.one_fault(kind, rng, schedule)
            finally:
                schedule.release(kind)
            time.sleep(rng.uniform(0.5, 2.0))  # the stack under load, between faults

    # -- the run --------------------------------------------------------------------------

    def run(self) -> int:
        with self.running_stack():
            app_dsn = self.stack.pg_dsn
            workload.setup_tables(app_dsn)
            brokers = [self.url("broker-1"), self.url("broker-2")]
            created = httpx.post(
                f"{brokers[0]}/event-types", json=workload.event_type_body(), timeout=60
            )
            if created.status_code not in (201, 409):
                raise RuntimeError(f"creating {workload.EVENT_TYPE}: {created.text}")
            schemas_before = self.schemas(brokers[0])
            txns: list[workload.Txn] = []
            acked: set[str] = set()
            refused: set[str] = set()
            writers: list[workload.Worker] = [
                workload.Writer(i, app_dsn, self.seed, txns) for i in range(1, 4)
            ]
            ddl = workload.Ddl(app_dsn, every=15.0)
            writers.append(ddl)
            publishers = [workload.Publisher(i, brokers, acked, refused) for i in range(1, 3)]
            # Through the load balancer, on the public changeserver port.
            public = f"http://127.0.0.1:{self.stack.ports.changeserver}"
            changes = workload.ChangesReader(public, self.violations)
            subscription = workload.SubscriptionReader(brokers[1], self.violations)
            stream = workload.StreamReader(brokers[0], self.violations)
            readers = [changes, subscription, stream]
            for worker in (*writers, *publishers, *readers):
                worker.start()
            # Faults begin once /changes has served the reader a change. Before that it reads
            # from 0.0.0, "whatever the log holds", which is never SNAPSHOT_TOO_OLD: changes a
            # slot loss took then would be gone without the reader being told of a gap.
            wait_until(lambda: bool(changes.seen), timeout=120, what="the first change served")

            schedule = Schedule(self.kinds(), self.rng)
            deadline = time.monotonic() + self.minutes * 60
            with ThreadPoolExecutor(self.lanes, thread_name_prefix="chaos-lane") as pool:
                running = [pool.submit(self.lane, n, schedule, deadline) for n in range(self.lanes)]
                for each in running:
                    each.result()  # an injector's own crash ends the campaign

            print(f"{time.strftime('%H:%M:%S')} faults over: settling", flush=True)
            for worker in (*writers, *publishers):
                worker.stop()
            committed = {v for t in txns if t.certain for _, _, v in t.rows}
            wait_until(
                lambda: committed <= set(changes.seen) or bool(changes.too_old_at),
                timeout=120,
                what=None,
            )
            wait_until(lambda: acked <= subscription.seen, timeout=300, what=None)
            wait_until(lambda: self.bridge_matches(app_dsn, []), timeout=180, what=None)
            for worker in readers:
                worker.stop()
            self.check_end(app_dsn, brokers[0], changes, txns, acked, refused, subscription)
            self.check_schemas(brokers[0], schemas_before)
            self.report.counts.update(
                {
                    "transactions committed": sum(t.certain for t in txns),
                    "DDL statements (TRUNCATE, ADD/RENAME COLUMN)": len(ddl.done),
                    "events acknowledged": len(acked),
                    "events refused by a 207": len(refused),
                    "workload errors (retried)": sum(
                        w.errors for w in (*writers, *publishers, *readers)
                    ),
                    "supervisor restarts": sum(
                        r.get("restarts", 0)
                        for r in (self.stack.status().get("supervisor") or {})
                        .get("parts", {})
                        .values()
                    ),
                }
            )
        print(
            self.report.render(self.violations.found, self.seed, self.minutes, self.lanes),
            flush=True,
        )
        return 1 if self.violations.found else 0

    # -- final checks ---------------------------------------------------------------------

    def check_end(
        self,
        app_dsn: str,
        broker: str,
        changes: workload.ChangesReader,
        txns: list[workload.Txn],
        acked: set[str],
        refused: set[str],
        subscription: workload.SubscriptionReader,
    ) -> None:
        checked, excused = changes.check_end(txns)
        self.report.counts["changes checked in /changes"] = checked
        self.report.counts["changes excused by SNAPSHOT_TOO_OLD"] = excused
        readable = {e["metadata"]["eid"] for e in workload.read_events(broker, workload.EVENT_TYPE)}
        missing = acked - readable
        if missing:
            self.violations.add(
                "acknowledged events readable",
                f"all {len(acked)} acknowledged events",
                f"{len(missing)} missing, e.g. {sorted(missing)[:3]}",
            )
        stored_anyway = refused & readable
        if stored_anyway:
            self.violations.add(
                "a 207 names exactly what was not stored",
                "no refused item readable",
                f"{len(stored_anyway)} readable, e.g. {sorted(stored_anyway)[:3]}",
            )
        unseen = acked - subscription.seen
        if unseen:
            self.violations.add(
                "subscription sees every event",
                f"all {len(acked)} acknowledged events",
                f"{len(unseen)} never delivered, e.g. {sorted(unseen)[:3]}",
            )
        self.report.counts["events checked"] = len(acked)
        problems: list[str] = []
        if not self.bridge_matches(app_dsn, problems):
            for problem in problems:
                self.violations.add("bridge data equals the tables", "equal", problem)

    def bridge_matches(self, app_dsn: str, problems: list[str]) -> bool:
        """The bridge's committed events, applied in each partition's order by the bridge
        README's rules, equal the tables, every column; no eid twice."""
        broker = self.url("broker-1")
        tables: dict[str, dict[int, dict[str, Any]]] = {}
        with psycopg.connect(app_dsn) as conn:
            for table in workload.TABLES:
                cursor = conn.execute(f"SELECT * FROM {table}")
                names = [d.name for d in cursor.description or ()]
                rows = (dict(zip(names, row, strict=True)) for row in cursor.fetchall())
                tables[table] = {row["id"]: row for row in rows}
        ok = True
        for table, expected in tables.items():
            events = workload.read_events(broker, f"changebroker.public.{table}")
            eids = [e["metadata"]["eid"] for e in events]
            if len(eids) != len(set(eids)):
                problems.append(f"{table}: {len(eids) - len(set(eids))} eids committed twice")
                ok = False
            rebuilt: dict[int, dict[str, Any]] = {}
            partition_of: dict[int, str] = {}
            for event in events:
                data, op = event.get("data") or {}, event.get("data_op")
                partition = event["metadata"]["partition"]
                if op == "D" and not data:  # TRUNCATE: every earlier row of the partition
                    for key in [k for k, p in partition_of.items() if p == partition]:
                        del rebuilt[key], partition_of[key]
                elif op == "D":
                    rebuilt.pop(int(data["id"]), None)
                    partition_of.pop(int(data["id"]), None)
                else:
                    key = int(data["id"])
                    rebuilt[key] = {**rebuilt.get(key, {}), **data} if op == "U" else data
                    partition_of[key] = partition
            rebuilt = {
                key: {c: rebuilt[key].get(c) for c in expected[key]} if key in expected else row
                for key, row in rebuilt.items()
            }
            if rebuilt != expected:
                wrong = [k for k in expected if rebuilt.get(k) != expected[k]]
                extra = sorted(rebuilt.keys() - expected.keys())
                problems.append(
                    f"{table}: {len(wrong)} of {len(expected)} rows differ, e.g. "
                    f"{[(k, expected[k], rebuilt.get(k)) for k in wrong[:3]]};"
                    f" {len(extra)} rows the table lacks, e.g. {extra[:3]}"
                )
                ok = False
        self.report.counts["bridge rows checked"] = sum(len(t) for t in tables.values())
        return ok

    def schemas(self, broker: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{broker}/event-types/{workload.EVENT_TYPE}/schemas", timeout=30)
        response.raise_for_status()
        return list(response.json()["items"])

    def check_schemas(self, broker: str, before: list[dict[str, Any]]) -> None:
        after = {s["version"]: s for s in self.schemas(broker)}
        for schema in before:
            if after.get(schema["version"]) != schema:
                self.violations.add(
                    "registered schemas never lost or changed",
                    json.dumps(schema),
                    json.dumps(after.get(schema["version"])),
                )


def run(
    minutes: float, seed: int, state_dir: Path | None, lanes: int = 1, hold: float = 10.0
) -> int:
    root = state_dir or Path(tempfile.mkdtemp(prefix=f"changebroker-chaos-{seed}-"))
    campaign = Campaign(minutes, seed, root, lanes, hold)
    try:
        return campaign.run()
    except Exception as error:
        # On stdout beside the report, not only in a traceback after the stack's logs.
        print(f"CAMPAIGN FAILED: {type(error).__name__}: {error}", flush=True)
        raise
    finally:
        if state_dir is None:
            shutil.rmtree(root, ignore_errors=True)
