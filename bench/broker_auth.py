"""Publishing 1 KB events in batches of 100 with JWT authentication on, against off.

Two brokers on the same Postgres and Kafka, each its own process with one worker: one with
``--auth off``, one with ``--auth jwt`` (RS256, a JWK set file, audience and issuer checked)
publishing to an event type whose ``authorization`` names the writers. Each client thread
sends its own token; a token is verified once and then cached, so the goal is at least 0.9x of
the unauthenticated rate. The runs alternate (off, jwt, jwt, off) so both see the same load
and drift.

    .venv/bin/python -m bench broker_auth
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from bench import services
from bench.broker_publish import _event, _rate, poster
from bench.report import Figure, report
from changebroker import pg
from changebroker.stack.run import broker_process

BATCH = 100
THREADS = 4
ROUNDS = 2
AUDIENCE = "changebroker-bench"
ISSUER = "https://bench.invalid"
SCOPES = "nakadi.event_type.write nakadi.event_stream.write nakadi.event_stream.read"


def _jwks(key: rsa.RSAPrivateKey, path: Path) -> None:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path.write_text(json.dumps({"keys": [{**public, "kid": "bench", "alg": "RS256"}]}))


def _token(key: rsa.RSAPrivateKey, sub: str) -> str:
    claims = {
        "sub": sub,
        "scope": SCOPES,
        "aud": AUDIENCE,
        "iss": ISSUER,
        "exp": int(time.time()) + 3600,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "bench"})


def _publish_rate(url: str, name: str, body: bytes, tokens: list[str]) -> float:
    next_token = iter(tokens)
    lock = threading.Lock()

    def headers() -> dict[str, str]:
        with lock:
            return {"Authorization": f"Bearer {next(next_token)}"}

    return _rate(THREADS, poster(url, name, body, BATCH, headers))


def main() -> int:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = Path(tempfile.mkstemp(prefix="bench-jwks-", suffix=".json")[1])
    _jwks(key, jwks)
    jwt_flags = ["--auth", "jwt", "--auth-jwks", str(jwks)]
    jwt_flags += ["--auth-audience", AUDIENCE, "--auth-issuer", ISSUER]
    tokens = [_token(key, f"bench-{n}") for n in range(THREADS)]
    bootstrap = services.kafka_bootstrap()
    # Both brokers serve one metadata database: the same event type, through either.
    with (
        pg.scratch_database(services.pg_server_dsn(), "bench_auth") as meta_dsn,
        contextlib.ExitStack() as running,
    ):
        urls, pids = {}, {}
        for mode, flags in (("off", ["--auth", "off"]), ("jwt", jwt_flags)):
            log = Path(tempfile.mkstemp(prefix=f"bench-broker-{mode}-", suffix=".log")[1])
            process, urls[mode] = broker_process(meta_dsn, bootstrap, log, "--workers", "1", *flags)
            process.start()
            running.callback(process.stop)
            assert process.process is not None
            pids[mode] = process.process.pid
        name = f"bench.auth_{uuid.uuid4().hex[:8]}"
        writers = [{"data_type": "service", "value": f"bench-{n}"} for n in range(THREADS)]
        created = httpx.post(
            f"{urls['jwt']}/event-types",
            headers={"Authorization": f"Bearer {tokens[0]}"},
            json={
                "name": name,
                "owning_application": "bench",
                "category": "business",
                "enrichment_strategies": ["metadata_enrichment"],
                "partition_strategy": "hash",
                "partition_key_fields": ["order_number"],
                "schema": {
                    "type": "json_schema",
                    "schema": json.dumps({"properties": {"order_number": {"type": "string"}}}),
                },
                "authorization": {"admins": writers, "readers": writers, "writers": writers},
            },
            timeout=60,
        )
        created.raise_for_status()
        encoded = [json.dumps(_event(i), separators=(",", ":")).encode() for i in range(BATCH)]
        body = b"[" + b",".join(encoded) + b"]"
        rates: dict[str, list[float]] = {"off": [], "jwt": []}
        # The broker's CPU per event: what authentication adds, steadier than a shared
        # machine's rates.
        cpu: dict[str, float] = {"off": 0.0, "jwt": 0.0}
        events: dict[str, float] = {"off": 0.0, "jwt": 0.0}
        for round_ in range(ROUNDS):
            # off, jwt, jwt, off, ...: a rate that drifts while the topic grows favours neither.
            for mode in ("off", "jwt") if round_ % 2 == 0 else ("jwt", "off"):
                began, cpu_before = time.monotonic(), services.server_cpu(pids[mode])
                rate = _publish_rate(urls[mode], name, body, tokens)
                cpu[mode] += services.server_cpu(pids[mode]) - cpu_before
                events[mode] += rate * (time.monotonic() - began)
                rates[mode].append(rate)
        off, on = (sum(rates[m]) / ROUNDS for m in ("off", "jwt"))
        per_event = {m: cpu[m] / events[m] * 1e6 for m in cpu}
        report(
            [
                Figure(
                    "broker_auth",
                    f"1 KB events/s, batches of {BATCH}, --auth jwt (RS256), 1 worker",
                    on,
                    "events/s",
                    baseline=off,
                    baseline_name="--auth off, same run",
                ),
                Figure(
                    "broker_auth",
                    "broker CPU per event, --auth jwt (RS256)",
                    per_event["jwt"],
                    "µs",
                    baseline=per_event["off"],
                    baseline_name="--auth off, same run",
                    higher_is_better=False,
                ),
            ]
        )
        return 0


if __name__ == "__main__":
    sys.exit(main())
