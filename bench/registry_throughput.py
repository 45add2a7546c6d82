"""Registry throughput and p99 latency, each against a baseline measured in the same run.

    .venv/bin/python -m bench registry_throughput

* registration (HTTP, new compatible versions of one subject, from the lookups' cheap
  keep-alive client) vs a raw psycopg INSERT of the same row in its own transaction;
* lookups by id, by subject/version and latest (HTTP, from 8 keep-alive connections of
  a client that costs little CPU, so the figure is the registry's) vs a raw psycopg
  SELECT of the same row;
* compatibility checks (BACKWARD_TRANSITIVE against the subject's whole history) vs
  jsonschema's ``check_schema`` of the same schema, the least any registry does with a
  schema it is sent: in process, and through ``POST /compatibility`` from the lookups'
  connections, of the same definition again and again (the registry keeps its verdict)
  and of a new definition each time;
* lookups by id, and checks of a new definition each time, again from a registry with a
  worker process per core (from more connections: each stays with the worker that took it);
* Protobuf (PB) checks against 25 versions (BACKWARD_TRANSITIVE, Buf's WIRE_JSON rules), in
  process and through ``POST /compatibility`` with a new definition each time, vs protoc
  compiling the same definition (the least a registry does with a .proto it is sent).
* an incompatible check (in process), with each violation's example built and proven,
  against the same check with examples off: the cost of the examples, also per example as a
  share of the check without them.

Each HTTP figure also has the registry's CPU time per operation, steadier than
rates on a shared machine.

The registry runs as its own process (``changebroker registry``) on a scratch
database of the server in ``CHANGEBROKER_PG_DSN``, dropped at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import jsonschema
import psycopg

from bench import services
from bench.report import Figure, report
from bench.services import pg_server_dsn, server_cpu
from changebroker import pg
from changebroker.registry.compat import Mode, check, share_subtrees
from changebroker.registry.compat.protobuf import protobuf_check
from changebroker.registry.compat.protobuf_source import proto_definition
from changebroker.stack.processes import answers, free_port, wait_until

CLIENTS = 4
REGISTRATIONS = 400
LOOKUPS = 2000  # the raw SELECT's
# Lookups over HTTP: keep-alive connections of one cheap client (services.keep_alive_fleet).
LOOKUP_CONNECTIONS = 8
# A keep-alive connection stays with the worker that accepted it, and a burst of new ones is
# not spread evenly: with 8, the workers' lookups read 6.2k-7.9k ops/s as one of them got
# most; with 32 (16 a worker) every run spread them, 9.0k-9.2k.
WORKERS_CONNECTIONS = 32
LOOKUP_SECONDS = 4.0
HISTORY = 25
COMPAT_CHECKS = 300
JSON = "application/json"
COMPAT_SUBJECT = "bench-lookup"  # the lookups' subject, with HISTORY versions
COMPAT_PATH = f"/compatibility/subjects/{COMPAT_SUBJECT}/versions/latest"
COMPAT_METRIC = f"POST /compatibility vs {HISTORY} versions (HTTP)"
# Lookups are the HTTP path alone once answered from memory: one worker process per core.
WORKERS = os.cpu_count() or 1


def schema_version(index: int) -> dict[str, Any]:
    """Version ``index`` of an order schema: each adds an optional property (BACKWARD-safe)."""
    properties: dict[str, Any] = {
        "order_id": {"type": "string", "format": "uuid"},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
                "required": ["sku", "quantity"],
            },
        },
    }
    for extra in range(index):
        properties[f"note_{extra}"] = {"type": "string", "maxLength": 200}
    return {
        "type": "object",
        "properties": properties,
        "required": ["order_id", "amount"],
        "additionalProperties": False,
    }


NEXT_VERSION = schema_version(HISTORY)  # what the compatibility checks ask about
# A next version that breaks every earlier one twice: amounts narrowed to integers, and the
# currency required. Each violation gets an example when examples are on.
BREAKING = {
    **NEXT_VERSION,
    "properties": {**NEXT_VERSION["properties"], "amount": {"type": "integer", "minimum": 0}},
    "required": [*NEXT_VERSION["required"], "currency"],
}


def timed(work: Callable[[int], None], count: int, clients: int) -> tuple[float, float]:
    """Run ``work(i)`` for i in range(count) on ``clients`` threads: (ops/s, p99 ms)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        mine: list[float] = []
        for i in range(offset, count, clients):
            started = time.perf_counter()
            work(i)
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000
    return count / elapsed, p99


@contextmanager
def registry_process(dsn: str, workers: int = 1) -> Iterator[tuple[str, int]]:
    """(its URL, its pid)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        command = [sys.executable, "-m", "changebroker.cli", "registry", "--port", str(port)]
        if workers > 1:
            command += ["--workers", str(workers)]
        process = subprocess.Popen(
            [*command, "--pg-url", dsn],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CHANGEBROKER_AUTH": ""},
        )
        try:
            wait_until(
                lambda: process.poll() is not None or answers(f"{url}/health"),
                timeout=60,
                what="the registry to start",
            )
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the registry exited: {log.read()[-2000:]!r}")
            yield url, process.pid
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> int:
    server_dsn = pg_server_dsn()
    figures: list[Figure] = []
    with pg.scratch_database(server_dsn, "bench_registry") as dsn:
        with registry_process(dsn) as (url, pid):
            clients = [httpx.Client(base_url=url, timeout=60) for _ in range(CLIENTS)]
            connections = [psycopg.connect(dsn, autocommit=True) for _ in range(CLIENTS)]
            try:
                figures += registration(clients, connections, url, pid)
                figures += lookups(clients, connections, url, pid)
                figures += compatibility_endpoint(clients, url, pid)
                figures += protobuf_compatibility(clients[0], url, pid)
            finally:
                for client in clients:
                    client.close()
                for conn in connections:
                    conn.close()
        if WORKERS > 1:
            figures += lookups_by_workers(dsn)
    figures += compatibility()
    report(figures)
    return 0


def cpu_figure(metric: str, micros: float) -> Figure:
    return Figure("registry_throughput", metric, micros, "µs", higher_is_better=False)


def registration(
    clients: list[httpx.Client], connections: list[psycopg.Connection], url: str, pid: int
) -> list[Figure]:
    """New versions of one subject from LOOKUP_CONNECTIONS keep-alive connections, against
    a psycopg INSERT of the same row in its own transaction from CLIENTS threads."""
    # Titles make each definition distinct while every version stays compatible.
    base = schema_version(3)
    titles = itertools.count()

    def ours() -> bytes:
        body = {"serialization": "json", "schemaDefinition": {**base, "title": f"v{next(titles)}"}}
        path = "/subjects/bench-register/versions"
        return services.http_request("POST", path, json.dumps(body).encode(), "application/json")

    clients[0].post(  # the subject and its format exist: what the registrations measure
        "/subjects/bench-register/versions",
        json={"serialization": "json", "schemaDefinition": base},
    ).raise_for_status()
    subject_id = _subject_id(connections[0], "bench-register")

    def baseline(i: int) -> None:
        text = json.dumps({**base, "title": f"raw{i}"}, sort_keys=True)
        conn = connections[i % CLIENTS]
        with conn.transaction():
            conn.execute(
                "INSERT INTO registry_schemas (subject_id, version, serialization, definition,"
                " canonical) VALUES (%s, %s, 'json', %s::json, %s)",
                (subject_id, 1_000_000 + i, text, text),
            )

    ours_rate, ours_p99, cpu = _fleet(url, pid, ours)
    base_rate, base_p99 = timed(baseline, REGISTRATIONS, CLIENTS)
    name, raw = "registry_throughput", "psycopg INSERT"
    return [
        Figure(name, "register ops/s", ours_rate, "ops/s", base_rate, raw),
        Figure(name, "register p99", ours_p99, "ms", base_p99, raw, higher_is_better=False),
        cpu_figure("register, server CPU per op", cpu),
    ]


def _subject_id(conn: psycopg.Connection, subject: str) -> int:
    # The HTTP run creates the subject on its first registration; make sure it exists first.
    conn.execute(
        "INSERT INTO registry_subjects (subject) VALUES (%s) ON CONFLICT DO NOTHING", (subject,)
    )
    row = conn.execute("SELECT id FROM registry_subjects WHERE subject = %s", (subject,)).fetchone()
    assert row is not None
    return int(row[0])


def lookups(
    clients: list[httpx.Client], connections: list[psycopg.Connection], url: str, pid: int
) -> list[Figure]:
    for version in range(HISTORY):
        body = {"serialization": "json", "schemaDefinition": schema_version(version)}
        clients[0].post("/subjects/bench-lookup/versions", json=body).raise_for_status()
    latest = clients[0].get("/subjects/bench-lookup/versions/latest/schema").json()["schema"]
    base_rate, base_p99 = timed(_raw_select(connections, int(latest["id"])), LOOKUPS, CLIENTS)
    figures = []
    for label, path in [
        ("by id", f"/schemas/{latest['id']}"),
        ("by subject/version", "/subjects/bench-lookup/versions/10/schema"),
        ("latest", "/subjects/bench-lookup/versions/latest/schema"),
    ]:
        figures += _lookup_figures(label, url, path, pid, base_rate, base_p99)
    return figures


def _raw_select(connections: list[psycopg.Connection], schema_id: int) -> Callable[[int], None]:
    def select(i: int) -> None:
        connections[i % CLIENTS].execute(
            "SELECT * FROM registry_schemas WHERE id = %s", (schema_id,)
        ).fetchone()

    return select


def _fleet(
    url: str,
    pid: int,
    request: bytes | Callable[[], bytes],
    connections: int = LOOKUP_CONNECTIONS,
) -> tuple[float, float, float]:
    """(answers/s, p99 ms, server CPU µs per answer) of ``request`` sent over and over from
    ``connections`` keep-alive connections for LOOKUP_SECONDS."""
    port = int(url.rsplit(":", 1)[1])
    services.keep_alive_fleet(port, request, connections, 0.5)  # connections warm
    before = server_cpu(pid)
    rate, latencies = services.keep_alive_fleet(port, request, connections, LOOKUP_SECONDS)
    cpu = (server_cpu(pid) - before) / len(latencies) * 1e6
    return rate, statistics.quantiles(latencies, n=100)[98] * 1000, cpu


def _lookup_figures(
    label: str,
    url: str,
    path: str,
    pid: int,
    base_rate: float,
    base_p99: float,
    connections: int = LOOKUP_CONNECTIONS,
) -> list[Figure]:
    """GET ``path`` from ``connections`` keep-alive connections against the raw SELECT."""
    rate, p99, cpu = _fleet(url, pid, services.http_request("GET", path), connections)
    name, raw = "registry_throughput", "psycopg SELECT"
    return [
        Figure(name, f"lookup {label} ops/s", rate, "ops/s", base_rate, raw),
        Figure(name, f"lookup {label} p99", p99, "ms", base_p99, raw, higher_is_better=False),
        cpu_figure(f"lookup {label}, server CPU per op", cpu),
    ]


def lookups_by_workers(dsn: str) -> list[Figure]:
    """Lookups by id from a registry with a worker process per core, vs the raw SELECT."""
    with registry_process(dsn, WORKERS) as (url, pid):
        latest = httpx.get(f"{url}/subjects/bench-lookup/versions/latest/schema").json()
        connections = [psycopg.connect(dsn, autocommit=True) for _ in range(CLIENTS)]
        try:
            select = _raw_select(connections, int(latest["schema"]["id"]))
            base_rate, base_p99 = timed(select, LOOKUPS, CLIENTS)
        finally:
            for conn in connections:
                conn.close()
        path = f"/schemas/{latest['schema']['id']}"
        label = f"{WORKERS} workers, {WORKERS_CONNECTIONS} connections"
        figures = _lookup_figures(
            f"by id, {label}", url, path, pid, base_rate, base_p99, WORKERS_CONNECTIONS
        )
        check_schema_rate, _ = timed(_check_schema_baseline, COMPAT_CHECKS, 1)
        return figures + _fresh_compatibility_figures(
            f", {label}", url, pid, check_schema_rate, WORKERS_CONNECTIONS
        )


def compatibility_endpoint(clients: list[httpx.Client], url: str, pid: int) -> list[Figure]:
    """POST /compatibility against the lookup subject's stored history, over HTTP: the same
    definition over and over from the lookups' keep-alive connections (as a build checks its
    schema on every run: the registry keeps its verdict), and a new definition each time."""
    config = {"compatibility": "BACKWARD_TRANSITIVE"}
    clients[0].put(f"/config/{COMPAT_SUBJECT}", json=config).raise_for_status()
    body = _compatibility_body("again")  # the definition sent again and again
    answer = clients[0].post(COMPAT_PATH, content=body, headers={"Content-Type": JSON})
    if not answer.json()["isCompatible"]:
        raise AssertionError(f"the bench's history is meant to be compatible: {answer.text}")
    again = services.http_request("POST", COMPAT_PATH, body, JSON)
    rate, p99, cpu = _fleet(url, pid, again)
    base_rate, _ = timed(_check_schema_baseline, COMPAT_CHECKS, 1)
    name, raw = "registry_throughput", "jsonschema check_schema"
    return [
        Figure(name, COMPAT_METRIC, rate, "checks/s", base_rate, raw),
        Figure(name, f"{COMPAT_METRIC} p99", p99, "ms"),
        cpu_figure(f"{COMPAT_METRIC}, server CPU per check", cpu),
        *_fresh_compatibility_figures("", url, pid, base_rate),
    ]


def _compatibility_body(title: str) -> bytes:
    """A POST /compatibility of the bench's next version: a title of its own makes it a
    definition of its own, with the same verdict."""
    return json.dumps({"schema": {**NEXT_VERSION, "title": title}}).encode()


def _check_schema_baseline(i: int) -> None:
    jsonschema.Draft7Validator.check_schema(NEXT_VERSION)


def _fresh_compatibility_figures(
    label: str, url: str, pid: int, base_rate: float, connections: int = LOOKUP_CONNECTIONS
) -> list[Figure]:
    """POST /compatibility with a new definition each time, against check_schema's rate."""
    titles = itertools.count()

    def fresh() -> bytes:
        body = _compatibility_body(f"check {next(titles)}")
        return services.http_request("POST", COMPAT_PATH, body, JSON)

    rate, p99, cpu = _fleet(url, pid, fresh, connections)
    name, raw = "registry_throughput", "jsonschema check_schema"
    metric = f"{COMPAT_METRIC}, a new definition each time{label}"
    return [
        Figure(name, metric, rate, "checks/s", base_rate, raw),
        Figure(name, f"{metric} p99", p99, "ms"),
        cpu_figure(f"{metric}, server CPU per check", cpu),
    ]


def compatibility() -> list[Figure]:
    """In process: against a history of separate objects, and against one loaded as the
    registry loads it, with what versions share as one object."""
    plain = [schema_version(v) for v in range(HISTORY)]
    figures = []
    base_rate, _ = timed(_check_schema_baseline, COMPAT_CHECKS, 1)
    for label, history in (("", plain), (", history shared", share_subtrees(plain))):

        def ours(i: int, history: list[Any] = history) -> None:
            if check(Mode.BACKWARD_TRANSITIVE, NEXT_VERSION, history, "JSON"):
                raise AssertionError("the bench's history is meant to be compatible")

        ours_rate, _ = timed(ours, COMPAT_CHECKS, 1)
        metric = f"BACKWARD_TRANSITIVE check vs {HISTORY} versions{label}"
        raw = "jsonschema check_schema"
        figures.append(Figure("registry_throughput", metric, ours_rate, "checks/s", base_rate, raw))
    return figures + examples(share_subtrees(plain))


def examples(history: list[Any]) -> list[Figure]:
    """An incompatible check with examples on against the same check with them off, in turns
    (so both see the same machine), and what one example costs against the check."""
    violations = check(Mode.BACKWARD_TRANSITIVE, BREAKING, history, "JSON")
    if not violations or not all(v.proven for v in violations):
        raise AssertionError(f"every violation of the bench's check has an example: {violations}")
    spent = {True: 0.0, False: 0.0}
    for _ in range(COMPAT_CHECKS // 10):
        for on in (True, False):
            started = time.perf_counter()
            for _ in range(10):
                check(Mode.BACKWARD_TRANSITIVE, BREAKING, history, "JSON", examples=on)
            spent[on] += time.perf_counter() - started
    rates = {on: COMPAT_CHECKS / seconds for on, seconds in spent.items()}
    per_check = spent[False] / COMPAT_CHECKS
    per_example = (spent[True] - spent[False]) / COMPAT_CHECKS / len(violations)
    name = "registry_throughput"
    metric = f"incompatible check vs {HISTORY} versions, {len(violations)} examples"
    return [
        Figure(name, metric, rates[True], "checks/s", rates[False], "examples off"),
        Figure(
            name,
            "one example, as a share of the check without examples",
            per_example / per_check * 100,
            "%",
            higher_is_better=False,
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())


PB_SUBJECT = "bench-pb"
PB_PATH = f"/compatibility/subjects/{PB_SUBJECT}/versions/latest"


def pb_version(index: int, option: str = "") -> str:
    """Version ``index`` of an order in proto3: each adds a field (compatible both ways)."""
    notes = "".join(f"  string note_{n} = {20 + n};\n" for n in range(index))
    return (
        f'syntax = "proto3";\npackage bench;\nimport "google/protobuf/timestamp.proto";\n{option}'
        "message Order {\n  string order_id = 1;\n  double amount = 2;\n  Currency currency = 3;\n"
        "  repeated Item items = 4;\n  google.protobuf.Timestamp placed_at = 5;\n"
        "  map<string, string> labels = 6;\n  oneof payment { string card = 7; bytes token = 8; }\n"
        f"{notes}  message Item {{ string sku = 1; int32 quantity = 2; }}\n}}\n"
        "enum Currency { CURRENCY_UNKNOWN = 0; EUR = 1; USD = 2; GBP = 3; }\n"
    )


def _fresh_pb(index: int) -> str:
    """The next version, a definition of its own each time (an option's value differs)."""
    return pb_version(HISTORY, f'option java_package = "bench.v{index}";\n')


def protobuf_compatibility(client: httpx.Client, url: str, pid: int) -> list[Figure]:
    """PB checks against HISTORY versions, in process and over HTTP (a new definition each
    time: protoc compiles it, then the check), against protoc compiling the same definition."""
    meta = {"tenant": "", "namespace": "", "status": "released", "format": "PB"}
    client.post(f"/subjects/{PB_SUBJECT}", json=meta).raise_for_status()
    for version in range(HISTORY):
        body = {"serialization": "pb", "schemaDefinition": pb_version(version)}
        client.post(f"/subjects/{PB_SUBJECT}/versions", json=body).raise_for_status()
    config = {"compatibility": "BACKWARD_TRANSITIVE"}
    client.put(f"/config/{PB_SUBJECT}", json=config).raise_for_status()
    history = [(f"version {v + 1}", proto_definition(pb_version(v))) for v in range(HISTORY)]
    new = proto_definition(pb_version(HISTORY))

    def ours(i: int) -> None:
        if protobuf_check(Mode.BACKWARD_TRANSITIVE, new, history, "WIRE_JSON"):
            raise AssertionError("the bench's PB history is meant to be compatible")

    def compiled(i: int) -> None:
        proto_definition(_fresh_pb(1_000_000 + i))

    base_rate, _ = timed(compiled, COMPAT_CHECKS, 1)
    ours_rate, _ = timed(ours, COMPAT_CHECKS, 1)
    fresh = itertools.count()

    def request() -> bytes:
        body = json.dumps({"schema": _fresh_pb(next(fresh))}).encode()
        return services.http_request("POST", PB_PATH, body, JSON)

    answer = client.post(PB_PATH, json={"schema": _fresh_pb(-1)})
    if not answer.json()["isCompatible"]:
        raise AssertionError(f"the bench's PB history is meant to be compatible: {answer.text}")
    rate, p99, cpu = _fleet(url, pid, request)
    name, raw = "registry_throughput", "protoc compile"
    in_process = f"PB BACKWARD_TRANSITIVE check vs {HISTORY} versions"
    metric = f"PB POST /compatibility vs {HISTORY} versions (HTTP), a new definition each time"
    return [
        Figure(name, in_process, ours_rate, "checks/s", base_rate, raw),
        Figure(name, metric, rate, "checks/s", base_rate, raw),
        Figure(name, f"{metric} p99", p99, "ms"),
        cpu_figure(f"{metric}, server CPU per check", cpu),
    ]
