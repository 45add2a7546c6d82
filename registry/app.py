"""The OpenSchema REST API (docs/specs/openschema-spec-cn.txt) over ``Store``.

Requests and responses are JSON, as ``application/vnd.openschema.v1+json``
(the default) or ``application/json``; every error is
``{"errorCode", "errorMessage"}``. With authentication on, every call but
``/health`` needs a bearer token (40101 without a valid one) whose scopes
allow it (40301): reads need the read scope, writes the write scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from changebroker import auth, http, logs, pg
from changebroker import metrics as service_metrics
from changebroker.controls import CONTROL
from changebroker.http import OneWriteResponse
from changebroker.notified import NotifiedCache
from changebroker.numerals import whole_number
from changebroker.registry import errors, metrics
from changebroker.registry.definitions import text_column
from changebroker.registry.errors import RegistryError, violations_json
from changebroker.registry.store import (
    CHANGES_CHANNEL,
    Store,
    SubjectKey,
    brokers,
    brokers_subject,
    parse_version,
)

log = logging.getLogger(__name__)

OPENSCHEMA_JSON = "application/vnd.openschema.v1+json"
MEDIA_TYPES = (OPENSCHEMA_JSON, "application/json")
MAX_BODY_BYTES = 4 * 1024 * 1024  # a schema, with its metadata, as sent

Handler = Callable[[Request, Store], Awaitable[Any]]


def negotiate(accept: str | None) -> str:
    """The response media type the Accept header prefers; 406 when it takes neither."""
    if not accept or not accept.strip():
        return OPENSCHEMA_JSON
    for weight, media in http.accepted(accept):
        if not weight > 0:
            continue
        if media in MEDIA_TYPES:
            return media
        if media in ("*/*", "application/*"):
            return OPENSCHEMA_JSON
    raise RegistryError(
        errors.NOT_ACCEPTABLE, f"this API answers only in {' or '.join(MEDIA_TYPES)}; fix Accept"
    )


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused (41301) as soon as it passes ``limit`` bytes."""
    too_large = RegistryError(
        errors.PAYLOAD_TOO_LARGE, f"the body exceeds {limit} bytes: schemas are smaller than that"
    )
    declared = request.headers.get("content-length", "")
    if whole_number(declared) and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; 415 for other media types, 42201 for bad JSON."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and content_type not in MEDIA_TYPES:
        raise RegistryError(
            errors.UNSUPPORTED_MEDIA_TYPE,
            f"send the body as {' or '.join(MEDIA_TYPES)}, not {content_type}",
        )
    raw = await _body(request, request.app.state.max_body_bytes)
    if not raw.strip():
        raise RegistryError(errors.INVALID_INPUT, "the request needs a JSON body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RegistryError(errors.INVALID_INPUT, f"the body is not valid JSON: {error}") from None
    except RecursionError:
        raise RegistryError(errors.INVALID_INPUT, "the body nests too deeply") from None
    if not isinstance(body, dict):
        raise RegistryError(errors.INVALID_INPUT, "the body must be a JSON object")
    return body


# A subject is usually a Kafka topic's name (249 characters at most) with "-key" or "-value".
MAX_NAME_LENGTH = 255


def _name(kind: str, value: Any) -> str | None:
    """A subject, tenant or namespace name as given (None: not given); 42201 unless it is
    text Postgres can store, at most ``MAX_NAME_LENGTH`` characters, none of them a control
    character."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise RegistryError(errors.INVALID_INPUT, f"the {kind} must be a string")
    if len(value) > MAX_NAME_LENGTH:
        raise RegistryError(
            errors.INVALID_INPUT, f"the {kind} is longer than {MAX_NAME_LENGTH} characters"
        )
    if CONTROL.search(value):
        raise RegistryError(
            errors.INVALID_INPUT,
            f"the {kind} {value!r} holds a control character (C0, DEL, C1, U+2028 or U+2029):"
            " name it with printable characters",
        )
    return text_column(value, f"the {kind}")


def subject_key(request: Request, body: Mapping[str, Any] | None = None) -> SubjectKey:
    """The subject the path names, in the tenant and namespace the query names (``body``'s,
    when it has them)."""
    query, given = request.query_params, body or {}
    return SubjectKey(
        str(_name("subject", request.path_params["subject"])),
        _name("tenant", given.get("tenant", query.get("tenant"))),
        _name("namespace", given.get("namespace", query.get("namespace"))),
    )


def _error_response(error: RegistryError, media_type: str) -> JSONResponse:
    metrics.refusals.labels(str(error.code)).inc()
    return JSONResponse(error.body(), status_code=error.status, media_type=media_type)


def endpoint(handler: Handler, *, kept: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """Content negotiation and the error format around one handler; a ``kept`` GET is
    answered from memory until the registry's tables change, and any other request that may
    write drops what this process kept once it is done."""

    lookup = LOOKUPS.get(handler)
    writes = handler not in CHANGES_NOTHING

    async def run(request: Request) -> Response:
        media_type = OPENSCHEMA_JSON
        cache: NotifiedCache = request.app.state.cache
        if lookup is not None:  # counted whether memory or the database answers
            metrics.lookups.labels(lookup).inc()
        try:
            media_type = negotiate(request.headers.get("accept"))
            if kept:
                return await _kept_answer(request, handler, cache, media_type)
            try:
                result = await handler(request, request.app.state.store)
            finally:
                if writes and request.method != "GET":
                    cache.invalidate()
            return JSONResponse(result, media_type=media_type)
        except RegistryError as error:
            return _error_response(error, media_type)
        except (PoolTimeout, psycopg.errors.QueryCanceled) as error:
            log.warning("storage timeout", extra=logs.fields(error=str(error)))
            timeout = RegistryError(
                errors.STORAGE_TIMEOUT, "the schema store did not answer in time; try again"
            )
            return _error_response(timeout, media_type)
        except psycopg.Error as error:
            log.error("storage error", extra=logs.fields(error=str(error)))
            failure = RegistryError(
                errors.STORAGE_ERROR, f"the schema store failed: {type(error).__name__}"
            )
            return _error_response(failure, media_type)

    return run


# Answers by schema id never change (ids are never reused): clients may keep them too.
IMMUTABLE = "max-age=31536000, immutable"


async def _kept_answer(
    request: Request, handler: Handler, cache: NotifiedCache, media_type: str
) -> Response:
    """A GET's answer from memory, else from the handler (then kept); with an ETag, and 304
    when the client's If-None-Match has it."""
    key = (request.scope["path"], request.scope["query_string"])
    answer: tuple[bytes, str] | None = cache.get(key)
    if cache.listening:
        metrics.cache_requests.labels("miss" if answer is None else "hit").inc()
    if answer is None:
        generation = cache.generation
        body = bytes(JSONResponse(await handler(request, request.app.state.store)).body)
        answer = (body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')
        cache.put(key, answer, len(body), generation)
    body, etag = answer
    headers = {"etag": etag}
    if "id" in request.path_params:
        headers["cache-control"] = IMMUTABLE
    if _none_match(request.headers.get("if-none-match"), etag):
        return OneWriteResponse(status_code=304, headers=headers)
    return OneWriteResponse(body, media_type=media_type, headers=headers)


def _none_match(header: str | None, etag: str) -> bool:
    """Whether If-None-Match names ``etag`` (weakly compared, as RFC 9110 says) or is ``*``."""
    if not header:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return "*" in tags or etag in tags


# -- handlers ---------------------------------------------------------------------------


async def health(request: Request, store: Store) -> Any:
    await store.ping()
    return {"status": "UP"}


async def get_schema(request: Request, store: Store) -> Any:
    return await store.schema(request.path_params["id"])


async def get_schema_subject(request: Request, store: Store) -> Any:
    return await store.schema_subject(request.path_params["id"])


async def list_subjects(request: Request, store: Store) -> Any:
    query = request.query_params
    tenant, namespace = (
        _name("tenant", query.get("tenant")),
        _name("namespace", query.get("namespace")),
    )
    return {"name": await store.list_subjects(tenant, namespace)}


async def get_subject(request: Request, store: Store) -> Any:
    return await store.subject(subject_key(request))


async def put_subject(request: Request, store: Store) -> Any:
    body = await read_json(request)
    key = subject_key(request, body)
    if brokers(key):  # named whole: the store asks for tenant and namespace here
        raise brokers_subject(key)
    return await store.put_subject(key, body)


async def delete_subject(request: Request, store: Store) -> Any:
    return {"version": await store.delete_subject(subject_key(request))}


async def list_versions(request: Request, store: Store) -> Any:
    return {"version": await store.versions(subject_key(request))}


async def get_version_schema(request: Request, store: Store) -> Any:
    version = parse_version(request.path_params["version"])
    return await store.version(subject_key(request), version)


async def register(request: Request, store: Store) -> Any:
    body = await read_json(request)
    key = await store.pinned(subject_key(request))
    if brokers(key):
        # New versions come through the broker; a definition the subject has answers its id
        # here as any registration of it does (clients look ids up so).
        found = await store.registered(key, body)
        if found is None:
            raise brokers_subject(key)
        return {"id": str(found)}
    return {"id": await store.register(key, body)}


async def delete_version(request: Request, store: Store) -> Any:
    version = parse_version(request.path_params["version"])
    return {"version": await store.delete_version(subject_key(request), version)}


async def test_compatibility(request: Request, store: Store) -> Any:
    version = parse_version(request.path_params["version"])
    body = await read_json(request)
    # {"schema": <definition>} as the spec shows; a full schema object works too.
    if "schema" in body:
        schema = body["schema"]
        wrapped = isinstance(schema, dict) and "schemaDefinition" in schema
        definition = schema["schemaDefinition"] if wrapped else schema
    elif "schemaDefinition" in body:
        definition = body["schemaDefinition"]
    else:
        raise RegistryError(errors.INVALID_INPUT, 'send the schema to test as {"schema": ...}')
    found = await store.test_compatibility(subject_key(request), version, definition)
    metrics.compatibility_checks.labels("incompatible" if found else "compatible").inc()
    return {"isCompatible": not found, "violations": violations_json(found)}


async def get_config(request: Request, store: Store) -> Any:
    return {"compatibility": await store.compatibility(subject_key(request))}


async def put_config(request: Request, store: Store) -> Any:
    body = await read_json(request)
    if "compatibility" not in body:
        raise RegistryError(
            errors.INVALID_INPUT, 'send {"compatibility": "BACKWARD"} or another mode'
        )
    key = await store.pinned(subject_key(request))
    if brokers(key):
        raise brokers_subject(key)
    return {"compatibility": await store.set_compatibility(key, body["compatibility"])}


# POSTs that only read: what they keep (the parsed history, verdicts) stays.
CHANGES_NOTHING: frozenset[Handler] = frozenset({test_compatibility})

ROUTES: list[tuple[str, list[str], Handler]] = [
    ("/schemas/{id}", ["GET"], get_schema),
    ("/schema/{id}", ["GET"], get_schema),  # as the spec's 7.1.1 example spells it
    ("/schemas/{id}/subject", ["GET"], get_schema_subject),
    ("/subjects", ["GET"], list_subjects),
    ("/subjects/{subject}", ["GET"], get_subject),
    ("/subjects/{subject}", ["POST"], put_subject),
    ("/subjects/{subject}/", ["POST"], put_subject),
    ("/subjects/{subject}", ["DELETE"], delete_subject),
    ("/subjects/{subject}/versions", ["GET"], list_versions),
    ("/subjects/{subject}/versions", ["POST"], register),
    ("/subjects/{subject}/versions/{version}/schema", ["GET"], get_version_schema),
    ("/subjects/{subject}/versions/{version}", ["DELETE"], delete_version),
    ("/compatibility/subjects/{subject}/versions/{version}", ["POST"], test_compatibility),
    ("/config/{subject}", ["GET"], get_config),
    ("/config/{subject}", ["PUT"], put_config),
]


# The reads counted in lookups_total, by kind.
LOOKUPS: dict[Handler, str] = {
    get_schema: "schema",
    get_schema_subject: "schema",
    list_subjects: "subjects",
    get_subject: "subject",
    list_versions: "versions",
    get_version_schema: "version",
    get_config: "config",
}


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods, in the API's error format."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: errors.ROUTE_NOT_FOUND, 405: errors.METHOD_NOT_ALLOWED}.get(status, status * 100)
    message = {404: "no such endpoint; see the OpenSchema API", 405: "method not allowed here"}
    return JSONResponse(
        {"errorCode": code, "errorMessage": message.get(status, "request failed")},
        status_code=status,
        media_type=OPENSCHEMA_JSON,
    )


def _refuse(status: int, message: str) -> Response:
    code = errors.UNAUTHORIZED if status == 401 else errors.FORBIDDEN
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"errorCode": code, "errorMessage": message},
        status_code=status,
        media_type=OPENSCHEMA_JSON,
        headers=headers,
    )


@dataclass(frozen=True)
class Scopes:
    """The token scopes the registry's reads and writes need (with authentication on)."""

    read: str = "registry.read"
    write: str = "registry.write"

    def table(self) -> auth.ScopeTable:
        """Reads need ``read`` (testing compatibility is a POST that changes nothing: a read),
        writes and anything else ``write``."""
        subject = r"/subjects/[^/]+"
        reads = [
            r"/schemas?/[^/]+",
            r"/schemas/[^/]+/subject",
            r"/subjects",
            subject,
            subject + "/versions",
            subject + r"/versions/[^/]+/schema",
            r"/config/[^/]+",
            r"/metrics",
        ]
        return auth.ScopeTable(
            (
                auth.rule("GET", "|".join(reads), self.read),
                auth.rule("POST", r"/compatibility" + subject + r"/versions/[^/]+", self.read),
                auth.rule("POST", subject + "/?|" + subject + "/versions", self.write),
                auth.rule("DELETE", subject + "|" + subject + r"/versions/[^/]+", self.write),
                auth.rule("PUT", r"/config/[^/]+", self.write),
            ),
            strictest=self.write,
        )


def create_app(
    dsn: str,
    *,
    authenticator: auth.Authenticator | None = None,
    scopes: Scopes = Scopes(),
    statement_timeout_ms: int = 10_000,
    pool_size: int = 10,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> ASGIApp:
    """The registry on the database ``dsn`` (migrated at start)."""
    cache = NotifiedCache(dsn, CHANGES_CHANNEL)
    store = Store(dsn, pool_size=pool_size, statement_timeout_ms=statement_timeout_ms, cache=cache)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(pg.migrate, dsn, "registry")
        await store.open()
        await cache.start()
        app.state.store = store
        app.state.max_body_bytes = max_body_bytes
        try:
            yield
        finally:
            await cache.close()
            await store.close()

    routes = [
        Route("/health", endpoint(health), methods=["GET"]),
        service_metrics.route(),
    ]
    routes += [
        Route(path, endpoint(handler, kept=methods == ["GET"]), methods=methods)
        for path, methods, handler in ROUTES
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},
    )
    app.state.cache = cache
    return auth.AuthMiddleware(
        app,
        authenticator or auth.Off(),
        _refuse,
        open_paths=frozenset({"/health"}),
        scopes=scopes.table(),
    )
