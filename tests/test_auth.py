"""The authentication every service shares: tokens files, JWTs, introspection."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from changebroker import auth, pg
from changebroker.auth import AuthSettings, Principal, Unauthenticated
from changebroker.registry.app import create_app as registry_app
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import AUDIENCE, ISSUER, Issuer, tokens_file

# One loop for every call, as in a service: the HTTP clients' connections belong to it.
LOOP = asyncio.new_event_loop()


def principal(authenticator: auth.Authenticator, token: str | None) -> Principal:
    return LOOP.run_until_complete(authenticator.principal(token))


def refused(authenticator: auth.Authenticator, token: str | None) -> str:
    with pytest.raises(Unauthenticated) as caught:
        principal(authenticator, token)
    return str(caught.value)


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


def jwt_auth(jwks: str, **overrides: Any) -> auth.Authenticator:
    settings = {"mode": "jwt", "jwks": jwks, "audience": AUDIENCE, "issuer": ISSUER, **overrides}
    return AuthSettings(**settings).authenticator()


def test_off_lets_everyone_do_everything() -> None:
    anyone = principal(AuthSettings().authenticator(), None)
    assert anyone.unrestricted and anyone.has_scope("nakadi.config.write")


def test_tokens_file_maps_tokens_and_follows_changes(tmp_path: Path) -> None:
    path = tokens_file(tmp_path / "tokens.json", {"t-1": ("shop", ["nakadi.event_stream.write"])})
    tokens = AuthSettings(mode="tokens", tokens_file=path).authenticator()
    assert principal(tokens, "t-1") == Principal(
        "shop", "service", frozenset({"nakadi.event_stream.write"})
    )
    assert "unknown token" in refused(tokens, "t-2")
    assert "Bearer" in refused(tokens, None)

    tokens_file(path, {"t-2": ("billing", [])})
    stamp = time.time() + 5  # a later mtime than the first write, whatever the clock's step
    os.utime(path, (stamp, stamp))
    auth_module_interval = auth.FILE_CHECK_INTERVAL
    auth.FILE_CHECK_INTERVAL = 0.0
    try:
        assert principal(tokens, "t-2").sub == "billing"
        assert "unknown token" in refused(tokens, "t-1")
    finally:
        auth.FILE_CHECK_INTERVAL = auth_module_interval


def test_a_tokens_file_that_is_not_valid_fails_at_start(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('["not", "a", "map"]')
    with pytest.raises(SystemExit, match="tokens file"):
        auth.start(AuthSettings(mode="tokens", tokens_file=path), "test")
    with pytest.raises(SystemExit, match="--auth-tokens"):
        auth.start(AuthSettings(mode="tokens"), "test")


@pytest.mark.parametrize("algorithm", ["RS256", "ES256", "HS256"])
def test_jwt_signed_with_each_algorithm(issuer: Issuer, tmp_path: Path, algorithm: str) -> None:
    verifier = jwt_auth(str(issuer.write_jwks(tmp_path / "jwks.json")))
    token = issuer.token("shop", ["a", "b"], algorithm=algorithm, type="user")
    assert principal(verifier, token) == Principal("shop", "user", frozenset({"a", "b"}))


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"lifetime": -120}, "expired"),
        ({"nbf": int(time.time()) + 3600}, "not yet valid"),
        ({"aud": "another-service"}, "audience"),
        ({"iss": "https://elsewhere.test"}, "issuer"),
    ],
)
def test_jwt_claims_are_checked(
    issuer: Issuer, tmp_path: Path, claims: dict[str, Any], reason: str
) -> None:
    verifier = jwt_auth(str(issuer.write_jwks(tmp_path / "jwks.json")))
    assert reason in refused(verifier, issuer.token("shop", **claims)).lower()


def test_jwt_clock_skew_is_tolerated_up_to_the_setting(issuer: Issuer, tmp_path: Path) -> None:
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    just_expired = issuer.token("shop", lifetime=-20)
    assert principal(jwt_auth(jwks, clock_skew=60), just_expired).sub == "shop"
    assert "expired" in refused(jwt_auth(jwks, clock_skew=5), just_expired)


def test_jwt_bad_signature_and_garbage(issuer: Issuer, tmp_path: Path) -> None:
    verifier = jwt_auth(str(issuer.write_jwks(tmp_path / "jwks.json")))
    forged = Issuer().token("shop")  # the same key id, another key
    assert "signature" in refused(verifier, forged).lower()
    assert "invalid token" in refused(verifier, "not-a-jwt")
    unsigned = issuer.token("shop", algorithm="HS256").split(".")
    none_header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"  # {"alg":"none","typ":"JWT"}
    assert "signed with one of" in refused(verifier, f"{none_header}.{unsigned[1]}.")


def test_jwt_needs_exp(issuer: Issuer, tmp_path: Path) -> None:
    import jwt

    verifier = jwt_auth(str(issuer.write_jwks(tmp_path / "jwks.json")))
    token = jwt.encode(
        {"sub": "shop", "aud": AUDIENCE, "iss": ISSUER},
        issuer.rsa_key,
        algorithm="RS256",
        headers={"kid": issuer.kid("RS256")},
    )
    assert "exp" in refused(verifier, token)


class JwksServer:
    """A JWK set URL that counts its fetches."""

    def __init__(self, issuer: Issuer) -> None:
        self.issuer = issuer
        self.fetches = 0

    async def jwks(self, request: Request) -> JSONResponse:
        self.fetches += 1
        return JSONResponse(self.issuer.jwks())


def test_jwks_url_is_cached_and_fetched_again_for_a_rotated_key() -> None:
    issuer = Issuer()
    server = JwksServer(issuer)
    app = Starlette(routes=[Route("/jwks", server.jwks)])
    with serve_in_thread(app) as url:
        verifier = jwt_auth(f"{url}/jwks")
        for n in range(5):
            assert principal(verifier, issuer.token(f"app-{n}")).sub == f"app-{n}"
        assert server.fetches == 1

        issuer.rotate()
        rotated = issuer.token("after-rotation")
        # A kid it does not hold is looked up again, but not more often than JWKS_MIN_REFETCH.
        assert "no signing key" in refused(verifier, rotated)
        minimum = auth.JWKS_MIN_REFETCH
        auth.JWKS_MIN_REFETCH = 0.0
        try:
            assert principal(verifier, issuer.token("after-rotation", lifetime=300)).sub
        finally:
            auth.JWKS_MIN_REFETCH = minimum
        assert server.fetches == 2


def test_a_verified_jwt_is_not_verified_again(issuer: Issuer, tmp_path: Path) -> None:
    verifier = jwt_auth(str(issuer.write_jwks(tmp_path / "jwks.json")))
    assert isinstance(verifier, auth.JwtVerifier)
    token = issuer.token("shop")
    first = principal(verifier, token)
    calls = 0
    original = verifier._verify

    async def counting(token: str) -> Any:
        nonlocal calls
        calls += 1
        return await original(token)

    verifier._verify = counting  # type: ignore[method-assign]
    for _ in range(100):
        assert principal(verifier, token) is first
    assert calls == 0


class Introspection:
    """An RFC 7662 endpoint and a tokeninfo endpoint over one token table, counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens: dict[str, dict[str, Any]] = {
            "good": {"sub": "shop", "scope": "nakadi.event_stream.read x", "exp": time.time() + 60},
        }

    async def introspect(self, request: Request) -> JSONResponse:
        self.calls += 1
        token = (await request.form())["token"]
        found = self.tokens.get(str(token))
        return JSONResponse({"active": True, **found} if found else {"active": False})

    async def tokeninfo(self, request: Request) -> JSONResponse:
        self.calls += 1
        token = auth.bearer(request.headers) or ""
        found = self.tokens.get(token)
        if found is None:
            return JSONResponse({"error": "invalid_token"}, status_code=400)
        scopes = found["scope"].split()
        return JSONResponse(
            {"uid": found["sub"], "scope": scopes, "realm": "/services", "expires_in": 60}
        )


@pytest.fixture(scope="module")
def introspection() -> Iterator[tuple[Introspection, str]]:
    endpoint = Introspection()
    app = Starlette(
        routes=[
            Route("/introspect", endpoint.introspect, methods=["POST"]),
            Route("/oauth2/tokeninfo", endpoint.tokeninfo),
        ]
    )
    with serve_in_thread(app) as url:
        yield endpoint, url


@pytest.mark.parametrize("path", ["/introspect", "/oauth2/tokeninfo"])
def test_introspection_answers_are_cached_for_their_lifetime(
    introspection: tuple[Introspection, str], path: str
) -> None:
    endpoint, url = introspection
    introspector = AuthSettings(mode="introspect", introspect_url=url + path).authenticator()
    before = endpoint.calls
    for _ in range(10):
        found = principal(introspector, "good")
        assert found == Principal("shop", "service", frozenset({"nakadi.event_stream.read", "x"}))
    assert endpoint.calls == before + 1
    for _ in range(3):
        refused(introspector, "bad")
    assert endpoint.calls == before + 2  # a refusal is cached for a while too


def test_a_revoked_token_is_refused_by_a_service_within_the_introspection_cache(
    introspection: tuple[Introspection, str], pg_server_dsn: str
) -> None:
    """The issuer's answer says the token is valid for an hour; revoked, the registry refuses
    it once the cache (1 s here, 60 s by default) lets the answer go."""
    endpoint, url = introspection
    endpoint.tokens["revocable"] = {
        "sub": "shop",
        "scope": "registry.read",
        "exp": time.time() + 3600,
    }
    settings = AuthSettings(
        mode="introspect", introspect_url=f"{url}/introspect", introspect_cache=1.0
    )
    bearer = {"authorization": "Bearer revocable"}
    with (
        pg.scratch_database(pg_server_dsn, "t_introspect") as dsn,
        serve_in_thread(registry_app(dsn, authenticator=settings.authenticator())) as registry,
        httpx.Client(base_url=registry, timeout=10) as client,
    ):
        assert client.get("/subjects", headers=bearer).status_code == 200
        del endpoint.tokens["revocable"]
        revoked = time.monotonic()
        wait_until(
            lambda: client.get("/subjects", headers=bearer).status_code == 401,
            timeout=30,
            what="the revoked token to be refused",
        )
        assert time.monotonic() - revoked <= 1.0 + 1.0


def test_active_is_the_json_boolean_true_or_the_token_is_refused(
    introspection: tuple[Introspection, str],
) -> None:
    endpoint, url = introspection
    introspector = AuthSettings(
        mode="introspect", introspect_url=f"{url}/introspect"
    ).authenticator()
    for token, active in [("stringly", "false"), ("stringly-true", "true"), ("one", 1)]:
        endpoint.tokens[token] = {"sub": "shop", "scope": "x", "active": active}
        assert "not active" in refused(introspector, token)
    assert principal(introspector, "good").sub == "shop"


def test_settings_round_trip_through_flags(tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    auth.add_options(parser)
    settings = AuthSettings(
        mode="jwt",
        jwks="https://issuer.test/jwks",
        audience="a",
        issuer="i",
        clock_skew=12.0,
        introspect_cache=5.0,
        admins=("alice", "ops"),
    )
    assert AuthSettings.from_args(parser.parse_args(settings.args())) == settings


def test_bearer_parsing() -> None:
    assert auth.bearer({"authorization": "Bearer abc"}) == "abc"
    assert auth.bearer({"authorization": "bearer  abc "}) == "abc"
    assert auth.bearer({"authorization": "Basic abc"}) is None
    assert auth.bearer([(b"authorization", b"Bearer xyz")]) == "xyz"
    assert auth.bearer({}) is None
    assert json.dumps(auth.client_headers("t")) == '{"Authorization": "Bearer t"}'


def test_kafka_clients_take_the_deployments_tls_and_sasl_properties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from changebroker import kafka

    monkeypatch.setenv(
        kafka.CLIENT_CONFIG_ENV,
        "security.protocol=SASL_SSL; sasl.mechanism=SCRAM-SHA-512;ssl.ca.location=/ca.pem",
    )
    config = kafka.client_config("k:9092", **{"group.id": "g"})
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config["ssl.ca.location"] == "/ca.pem"
    assert config["group.id"] == "g"
    with pytest.raises(ValueError, match="key=value"):
        kafka.deployment_config("security.protocol")


def test_up_passes_authentication_and_tls_to_every_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from changebroker.cli import build_parser
    from changebroker.http import Tls
    from changebroker.stack.local import LocalStack
    from changebroker.state import StateDir

    tokens = tokens_file(tmp_path / "tokens.json", {"t": ("bridge", [])})
    settings = AuthSettings(mode="tokens", tokens_file=tokens, admins=("ops",))
    stack = LocalStack(
        state=StateDir(tmp_path / "state"),
        auth=settings,
        client_token="t",
        tls=Tls(tmp_path / "server.pem", tmp_path / "server.key"),
        ca_file=tmp_path / "ca.pem",
    )
    # What `up` puts in every service's environment.
    monkeypatch.setenv("CHANGEBROKER_PG_DSN", "postgresql://postgres@127.0.0.1:1/changebroker")
    parser = build_parser()
    for service in stack.services():
        args = parser.parse_args([service.name, *service.args])
        assert service.base_url.startswith("https://"), service
        if service.name != "console":  # it checks no tokens: people's browsers use it
            assert AuthSettings.from_args(args).mode == "tokens", service.name
            assert args.auth_tokens == tokens and args.admins == ("ops",)
        assert args.tls_cert == tmp_path / "server.pem", service.name
        if service.name in ("bridge", "console"):
            assert args.tls_ca == tmp_path / "ca.pem"
        # The token travels in the environment, never on a command line.
        assert "t" not in service.args
