"""Who is calling: bearer tokens checked the same way by every service.

Four modes, chosen with ``--auth`` (env ``CHANGEBROKER_AUTH``):

- ``off`` (the local default): every caller may do everything; logged loudly at start.
- ``tokens``: a JSON file ``{"<token>": {"sub": "...", "type": "service", "scopes": [...]}}``,
  read again when it changes.
- ``jwt``: signed JWTs (HS256, RS256, ES256) checked against a JWK set from a file (read again
  when it changes) or a URL (fetched again every few minutes, and when a token names a key id
  it does not hold: keys rotate); ``exp`` is required, ``nbf``, ``aud`` and ``iss`` checked,
  with a configurable clock skew.
- ``introspect``: an RFC 7662 introspection endpoint (POST ``token=``) or a Zalando-style
  tokeninfo URL (one whose path ends in ``tokeninfo``: GET with the token as bearer).

A token is checked once: the answer is cached until the token expires, an introspection
answer at most ``--auth-introspect-cache`` (a revoked token is refused after that at the
latest); tokens files follow the file. Each request then carries a ``Principal``: its subject, its
``type`` (what a Nakadi authorization attribute's ``data_type`` matches) and its scopes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import jwt
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker import config, logs

log = logging.getLogger(__name__)
# One line per refused request and per admin action: who, what, which resource.
audit_log = logging.getLogger("changebroker.audit")

MODES = ("off", "tokens", "jwt", "introspect")
DEFAULT_TYPE = "service"
ALGORITHMS = ("HS256", "RS256", "ES256")
# Bounds of the verified-token cache: enough for every client of a busy service.
CACHE_SIZE = 10_000
# How long an introspection answer is trusted at most (the issuer may revoke a token before
# it expires), and a refusal.
DEFAULT_INTROSPECT_CACHE = 60.0
REFUSAL_TTL = 5.0
# A JWK set from a URL is fetched again this often, and at most this often for an unknown kid.
JWKS_REFRESH = 300.0
JWKS_MIN_REFETCH = 10.0
# Files (tokens, JWK sets) are looked at for changes at most this often.
FILE_CHECK_INTERVAL = 1.0


@dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    sub: str
    type: str = DEFAULT_TYPE
    scopes: frozenset[str] = frozenset()
    # Authentication off: every scope and every resource check passes.
    unrestricted: bool = False

    def has_scope(self, scope: str) -> bool:
        return self.unrestricted or scope in self.scopes


ANONYMOUS = Principal("anonymous", "user", unrestricted=True)


class Unauthenticated(Exception):
    """No credentials, or credentials we cannot accept: HTTP 401."""


class Authenticator(Protocol):
    mode: str

    async def principal(self, token: str | None) -> Principal:
        """The caller holding ``token``; ``Unauthenticated`` when there is none or it is bad."""
        ...


class Off:
    mode = "off"

    async def principal(self, token: str | None) -> Principal:
        return ANONYMOUS


def _scopes(value: Any) -> frozenset[str]:
    """Scopes as OAuth2 spells them (one space-separated string) or as a list."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple):
        return frozenset(str(s) for s in value)
    return frozenset()


class _WatchedFile:
    """A file's parsed content, parsed again when its modification time or size changes."""

    def __init__(self, path: Path, parse: Callable[[Any], Any]) -> None:
        self.path = path
        self._parse = parse
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self.value: Any = None
        self.load()

    def load(self) -> Any:
        now = time.monotonic()
        if self._stamp is not None and now - self._checked < FILE_CHECK_INTERVAL:
            return self.value
        self._checked = now
        stat = self.path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            try:
                value = self._parse(json.loads(self.path.read_text()))
            except (ValueError, TypeError, KeyError) as error:
                if self._stamp is None:
                    raise ValueError(f"{self.path}: {error}") from None
                # A half-written file: keep what was loaded, look again on the next check.
                log.warning("file not reloaded", extra=logs.fields(path=self.path, error=error))
                return self.value
            self.value, self._stamp = value, stamp
            log.info("auth file loaded", extra=logs.fields(path=self.path))
        return self.value


def _parse_tokens(document: Any) -> dict[str, Principal]:
    if not isinstance(document, dict):
        raise ValueError('a tokens file is {"<token>": {"sub": ..., "scopes": [...]}}')
    return {
        token: Principal(
            sub=str(entry["sub"]),
            type=str(entry.get("type", DEFAULT_TYPE)),
            scopes=_scopes(entry.get("scopes", [])),
        )
        for token, entry in document.items()
    }


class TokensFile:
    """Static tokens from a JSON file, read again when the file changes."""

    mode = "tokens"

    def __init__(self, path: Path) -> None:
        self._file = _WatchedFile(path, _parse_tokens)

    async def principal(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("send Authorization: Bearer <token>")
        found = self._file.load().get(token)
        if found is None:
            raise Unauthenticated("unknown token")
        return found


class _Cache:
    """Answers per token until they expire, the least recently used dropped beyond CACHE_SIZE."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[float, Principal | Unauthenticated]] = OrderedDict()

    def get(self, token: str) -> Principal | Unauthenticated | None:
        entry = self._entries.get(token)
        if entry is None:
            return None
        if entry[0] <= time.time():
            del self._entries[token]
            return None
        self._entries.move_to_end(token)
        return entry[1]

    def put(self, token: str, until: float, answer: Principal | Unauthenticated) -> None:
        self._entries[token] = (until, answer)
        self._entries.move_to_end(token)
        while len(self._entries) > CACHE_SIZE:
            self._entries.popitem(last=False)

    async def principal(
        self,
        token: str | None,
        check: Callable[[str], Awaitable[Principal | Unauthenticated]],
        kind: str,
    ) -> Principal:
        """The cached answer for ``token``, else ``check``'s (which caches what may be kept);
        ``kind`` names the token a request without one should send."""
        if not token:
            raise Unauthenticated(f"send Authorization: Bearer <{kind}>")
        answer = self.get(token)
        if answer is None:
            answer = await check(token)
        if isinstance(answer, Unauthenticated):
            raise answer
        return answer


class JwkSet:
    """Signing keys by key id, from a JWK set file or URL."""

    def __init__(self, source: str, *, client: httpx.AsyncClient | None = None) -> None:
        self.source = source
        self._remote = source.startswith(("http://", "https://"))
        self._client = client
        self._file = None if self._remote else _WatchedFile(Path(source), jwt.PyJWKSet.from_dict)
        self._keys: jwt.PyJWKSet | None = None
        self._fetched = 0.0
        self._lock = asyncio.Lock()

    async def _current(self, *, refetch: bool) -> jwt.PyJWKSet:
        if self._file is not None:
            keys: jwt.PyJWKSet = self._file.load()
            return keys
        age = time.monotonic() - self._fetched
        stale = self._keys is None or age > JWKS_REFRESH or (refetch and age > JWKS_MIN_REFETCH)
        if stale:
            async with self._lock:
                age = time.monotonic() - self._fetched
                if self._keys is None or age > JWKS_MIN_REFETCH:
                    self._keys = await self._fetch()
                    self._fetched = time.monotonic()
        assert self._keys is not None
        return self._keys

    async def _fetch(self) -> jwt.PyJWKSet:
        client = self._client or httpx.AsyncClient(timeout=10)
        try:
            response = await client.get(self.source)
            response.raise_for_status()
            keys = jwt.PyJWKSet.from_dict(response.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWKSetError) as error:
            if self._keys is None:
                raise Unauthenticated(f"the signing keys cannot be fetched: {error}") from None
            log.warning("JWK set not refreshed", extra=logs.fields(url=self.source, error=error))
            return self._keys
        finally:
            if self._client is None:
                await client.aclose()
        log.info("JWK set fetched", extra=logs.fields(url=self.source, keys=len(keys.keys)))
        return keys

    async def key(self, kid: str | None, algorithm: str) -> Any:
        """The key that checks a token signed with ``algorithm`` by key ``kid`` (or by the only
        key of that kind when the token names none); keys are fetched again once if unknown."""
        for refetch in (False, True):
            for jwk in (await self._current(refetch=refetch)).keys:
                if (kid is None or jwk.key_id == kid) and _key_fits(jwk, algorithm):
                    return jwk.key
        raise Unauthenticated(f"no signing key {kid or 'for ' + algorithm} is known")


def _key_fits(jwk: jwt.PyJWK, algorithm: str) -> bool:
    return {"HS": "oct", "RS": "RSA", "ES": "EC"}[algorithm[:2]] == jwk.key_type


@dataclass
class JwtVerifier:
    """Signed JWTs: signature, ``exp`` (required), ``nbf``, ``aud`` and ``iss``."""

    keys: JwkSet
    audience: str | None = None
    issuer: str | None = None
    leeway: float = 30.0
    mode: str = "jwt"
    _cache: _Cache = field(default_factory=_Cache)

    async def principal(self, token: str | None) -> Principal:
        return await self._cache.principal(token, self._verify, "JWT")

    async def _verify(self, token: str) -> Principal | Unauthenticated:
        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            if algorithm not in ALGORITHMS:
                raise Unauthenticated(f"tokens are signed with one of {', '.join(ALGORITHMS)}")
            key = await self.keys.key(header.get("kid"), algorithm)
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "sub"], "verify_aud": self.audience is not None},
            )
        except jwt.InvalidTokenError as error:
            refusal = Unauthenticated(f"invalid token: {error}")
            # Expired and not-yet-valid tokens change with time: not cached.
            if not isinstance(error, jwt.ExpiredSignatureError | jwt.ImmatureSignatureError):
                self._cache.put(token, time.time() + REFUSAL_TTL, refusal)
            return refusal
        except Unauthenticated as refusal:
            return refusal
        principal = Principal(
            sub=str(claims["sub"]),
            type=str(claims.get("type", DEFAULT_TYPE)),
            scopes=_scopes(claims.get("scope", claims.get("scp", claims.get("scopes")))),
        )
        self._cache.put(token, float(claims["exp"]) + self.leeway, principal)
        return principal


@dataclass
class Introspector:
    """Tokens checked by the issuer: RFC 7662 introspection, or a Zalando-style tokeninfo."""

    url: str
    client: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=10))
    cache_seconds: float = DEFAULT_INTROSPECT_CACHE
    mode: str = "introspect"
    _cache: _Cache = field(default_factory=_Cache)

    @property
    def tokeninfo(self) -> bool:
        return httpx.URL(self.url).path.rstrip("/").endswith("tokeninfo")

    async def principal(self, token: str | None) -> Principal:
        return await self._cache.principal(token, self._ask, "token")

    async def _ask(self, token: str) -> Principal | Unauthenticated:
        try:
            if self.tokeninfo:
                response = await self.client.get(
                    self.url, headers={"Authorization": f"Bearer {token}"}
                )
            else:
                response = await self.client.post(self.url, data={"token": token})
        except httpx.HTTPError as error:
            # Not cached: the issuer may answer the next time.
            return Unauthenticated(f"the token cannot be checked now: {error}")
        answer: Any = None
        if response.status_code == 200:
            try:
                answer = response.json()
            except ValueError:
                answer = None
        now = time.time()
        # RFC 7662: active is the JSON boolean true, nothing else ("false" is not false). A
        # tokeninfo answer has no such member: its 200 is the token's validity.
        active = isinstance(answer, dict) and answer.get("active", self.tokeninfo) is True
        if not active:
            refusal = Unauthenticated("the token is not active")
            if response.status_code < 500:
                self._cache.put(token, now + REFUSAL_TTL, refusal)
            return refusal
        sub = (
            answer.get("sub")
            or answer.get("uid")
            or answer.get("username")
            or answer.get("client_id")
        )
        if not sub:
            return Unauthenticated("the token's introspection names no subject")
        realm = str(answer.get("realm", ""))
        kind = answer.get("type") or ("user" if realm.strip("/") == "employees" else DEFAULT_TYPE)
        principal = Principal(str(sub), str(kind), _scopes(answer.get("scope")))
        until = now + self.cache_seconds
        if "exp" in answer:
            until = min(until, float(answer["exp"]))
        elif "expires_in" in answer:
            until = min(until, now + float(answer["expires_in"]))
        self._cache.put(token, until, principal)
        return principal


# -- settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AuthSettings:
    """What the ``--auth*`` flags say; the same on every service."""

    mode: str = "off"
    tokens_file: Path | None = None
    jwks: str | None = None
    audience: str | None = None
    issuer: str | None = None
    introspect_url: str | None = None
    clock_skew: float = 30.0
    introspect_cache: float = DEFAULT_INTROSPECT_CACHE
    admins: tuple[str, ...] = ()
    ca_file: Path | None = None  # trust for the JWK set and introspection URLs over TLS

    def authenticator(self) -> Authenticator:
        """The authenticator these settings describe; ``ValueError`` says what is missing."""
        if self.mode == "off":
            return Off()
        if self.mode == "tokens":
            if self.tokens_file is None:
                raise ValueError("--auth tokens needs --auth-tokens FILE")
            return TokensFile(self.tokens_file)
        client = httpx.AsyncClient(timeout=10, verify=client_verify(self.ca_file))
        if self.mode == "jwt":
            if not self.jwks:
                raise ValueError("--auth jwt needs --auth-jwks FILE_OR_URL")
            return JwtVerifier(
                JwkSet(self.jwks, client=client), self.audience, self.issuer, self.clock_skew
            )
        if self.mode == "introspect":
            if not self.introspect_url:
                raise ValueError("--auth introspect needs --auth-introspect-url URL")
            return Introspector(self.introspect_url, client, self.introspect_cache)
        raise ValueError(f"--auth is one of {', '.join(MODES)}, not {self.mode!r}")

    def args(self) -> list[str]:
        """These settings as flags, for a service started with them (``up --auth ...``)."""
        flags = ["--auth", self.mode, "--auth-clock-skew", f"{self.clock_skew:g}s"]
        flags += ["--auth-introspect-cache", f"{self.introspect_cache:g}s"]
        for flag, value in [
            ("--auth-tokens", self.tokens_file),
            ("--auth-jwks", self.jwks),
            ("--auth-audience", self.audience),
            ("--auth-issuer", self.issuer),
            ("--auth-introspect-url", self.introspect_url),
            ("--admins", ",".join(self.admins) or None),
        ]:
            if value is not None:
                flags += [flag, str(value)]
        return flags

    def to_json(self) -> dict[str, Any]:
        """As JSON, for a service's worker processes (``from_json`` makes it again)."""
        raw = dataclasses.asdict(self)
        for name in ("tokens_file", "ca_file"):
            raw[name] = None if raw[name] is None else str(raw[name])
        return raw

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AuthSettings:
        paths = {n: None if raw[n] is None else Path(raw[n]) for n in ("tokens_file", "ca_file")}
        return cls(**{**raw, **paths, "admins": tuple(raw["admins"])})

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AuthSettings:
        return cls(
            mode=args.auth,
            tokens_file=args.auth_tokens,
            jwks=args.auth_jwks or None,
            audience=args.auth_audience or None,
            issuer=args.auth_issuer or None,
            introspect_url=args.auth_introspect_url or None,
            clock_skew=args.auth_clock_skew,
            introspect_cache=args.auth_introspect_cache,
            admins=args.admins,
            ca_file=getattr(args, "tls_ca", None),
        )


def _mode(text: str) -> str:
    if text not in MODES:
        raise argparse.ArgumentTypeError(f"use one of {', '.join(MODES)}")
    return text


def admin_attribute(entry: str) -> tuple[str, str]:
    """An ``--admins`` entry as (data_type, value): ``service:ops`` is that caller alone; a
    bare ``ops`` keeps its first meaning, the subject under any data type (``*``)."""
    data_type, colon, value = entry.partition(":")
    if not colon:
        return "*", entry
    if not data_type or not value:
        raise ValueError(f"{entry!r} is not <data_type>:<value> (e.g. service:ops) or a subject")
    return data_type, value


def _admins(text: str) -> tuple[str, ...]:
    entries = tuple(entry.strip() for entry in text.split(",") if entry.strip())
    for entry in entries:
        try:
            admin_attribute(entry)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return entries


def add_options(parser: argparse.ArgumentParser) -> None:
    """The authentication flags every service takes (env ``CHANGEBROKER_AUTH`` etc.)."""
    add = config.add_option
    add(parser, "--auth", scope="", type=_mode, default="off", help="off|tokens|jwt|introspect")
    add(parser, "--auth-tokens", scope="", type=Path, help="tokens file (JSON) for --auth tokens")
    add(parser, "--auth-jwks", scope="", help="JWK set file or URL for --auth jwt")
    add(parser, "--auth-audience", scope="", help="the aud a JWT must carry")
    add(parser, "--auth-issuer", scope="", help="the iss a JWT must carry")
    add(parser, "--auth-introspect-url", scope="", help="RFC 7662 or tokeninfo URL")
    add(
        parser,
        "--auth-clock-skew",
        scope="",
        type=config.parse_duration,
        default=30.0,
        help="tolerance for exp/nbf",
    )
    add(
        parser,
        "--auth-introspect-cache",
        scope="",
        type=config.parse_duration,
        default=DEFAULT_INTROSPECT_CACHE,
        help="longest an introspection answer is trusted: a revoked token is refused after it",
    )
    add(
        parser,
        "--admins",
        scope="",
        type=_admins,
        default=(),
        help="comma-separated data_type:value callers (e.g. service:ops, user:alice) that"
        " administer the broker until /settings/admins is set; a bare value is that subject"
        " under any data_type",
    )


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """The credentials this service's own HTTP clients send to the other services."""
    config.add_option(
        parser,
        "--client-token",
        scope="",
        help="bearer token sent to the other services when they check credentials",
    )


def start(settings: AuthSettings, service: str) -> Authenticator:
    """The service's authenticator, saying loudly when there is none."""
    try:
        authenticator = settings.authenticator()
    except (ValueError, OSError) as error:
        raise SystemExit(f"{service}: {error}") from None
    if authenticator.mode == "off":
        log.warning(
            "AUTHENTICATION IS OFF: anyone who reaches this port may read, write and delete"
            " everything; start with --auth tokens|jwt|introspect to require credentials",
            extra=logs.fields(service=service),
        )
    else:
        log.info("authentication on", extra=logs.fields(service=service, mode=authenticator.mode))
    return authenticator


# -- serving -----------------------------------------------------------------------------


def bearer(headers: Mapping[str, str] | list[tuple[bytes, bytes]]) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    if isinstance(headers, list):
        raw = next((v for k, v in headers if k == b"authorization"), None)
        value = raw.decode("latin-1") if raw is not None else ""
    else:
        value = headers.get("authorization", "")
    scheme, _, token = value.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


# The answer to a refused request: a Response, or any ASGI app (a page that needs the request).
Refuse = Callable[[int, str], Response | ASGIApp]
TokenOf = Callable[[Scope], str | None]


@dataclass(frozen=True)
class ScopeRule:
    """Requests with one of ``methods`` whose path ``path`` matches whole need ``scope``
    (None: any authenticated caller)."""

    methods: frozenset[str]
    path: re.Pattern[str]
    scope: str | None


def rule(methods: str, path: str, scope: str | None) -> ScopeRule:
    """``rule("GET POST", r"/subscriptions", "nakadi.event_stream.read")``."""
    return ScopeRule(frozenset(methods.split()), re.compile(path), scope)


@dataclass(frozen=True)
class ScopeTable:
    """The scope each request needs, by method and path: the first rule naming both decides.

    HEAD is checked as GET, since Starlette serves a HEAD with the GET route's handler. A
    method or path no rule names needs ``strictest``: a route added without its rule is
    closed, never open (``tests/test_security_matrix.py`` walks every service's routes)."""

    rules: tuple[ScopeRule, ...]
    strictest: str

    def rule(self, method: str, path: str) -> ScopeRule | None:
        method = "GET" if method == "HEAD" else method
        for candidate in self.rules:
            if method in candidate.methods and candidate.path.fullmatch(path):
                return candidate
        return None

    def __call__(self, method: str, path: str) -> str | None:
        """The scope the request needs; None: any authenticated caller."""
        found = self.rule(method, path)
        return self.strictest if found is None else found.scope


def bearer_of(scope: Scope) -> str | None:
    return bearer(scope["headers"])


def audit(what: str, principal: Principal | None, resource: str, **more: Any) -> None:
    """One audit line: who (subject), what, on which resource."""
    audit_log.info(
        what,
        extra=logs.fields(sub=principal.sub if principal else "-", resource=resource, **more),
    )


@dataclass
class AuthMiddleware:
    """Authenticates every request but those to ``open_paths`` and checks the scope its
    method and path need (``scopes``); a refusal is answered with ``refuse(status, message)``
    in the service's own error format. The caller is ``principal_of(request)`` in the
    handlers. ``open_prefixes``: paths under these are open too; ``token_of``: where the token
    is (the ``Authorization`` header unless told)."""

    app: ASGIApp
    authenticator: Authenticator
    refuse: Refuse
    _: KW_ONLY
    scopes: ScopeTable
    open_paths: frozenset[str] = frozenset()
    open_prefixes: tuple[str, ...] = ()
    token_of: TokenOf = bearer_of

    def is_open(self, path: str) -> bool:
        return path in self.open_paths or path.startswith(self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        principal = ANONYMOUS
        if self.authenticator.mode != "off" and not self.is_open(path):
            try:
                principal = await self.authenticator.principal(self.token_of(scope))
            except Unauthenticated as error:
                audit("refused", None, path, method=method, status=401, reason=error)
                await self.refuse(401, str(error))(scope, receive, send)
                return
            needed = self.scopes(method, path)
            if needed is not None and not principal.has_scope(needed):
                message = f"the token lacks the scope {needed}"
                audit("refused", principal, path, method=method, status=403, reason=message)
                await self.refuse(403, message)(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def principal_of(request: Any) -> Principal:
    """The caller that ``AuthMiddleware`` authenticated for this request."""
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise RuntimeError("the app is served without AuthMiddleware")
    return principal


# -- TLS for our clients -----------------------------------------------------------------


def client_verify(ca_file: Path | None) -> Any:
    """httpx's ``verify``: the system's trust, or a CA file's (a self-signed stack's)."""
    if ca_file is None:
        return True
    return client_ssl_context(ca_file)


def client_ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """The trust of our own clients' TLS: the system's, or a CA file's (a self-signed stack's)."""
    return ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))


def client_headers(token: str | None) -> dict[str, str]:
    """The headers our own clients send to a service that checks credentials."""
    return {"Authorization": f"Bearer {token}"} if token else {}
