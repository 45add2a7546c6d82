"""The broker's administration: ``/settings/admins``, ``/settings/blacklist``,
``/settings/features``, kept in Postgres (``sql/broker/004_settings.sql``).

Every broker process reads the settings again when its copy is older than ``REFRESH``
(one query a second at most, whatever the request rate), and at once after it changed them
itself; a blocked application or event type is so refused on its next publish and its open
streams close within a second.

Administrators are an AdminAuthorization: ``readers`` may read the settings, ``writers`` change
the blacklist and features, ``admins`` change the administrators; every one of them passes the
per-resource checks of event types and subscriptions.

Features are Nakadi's, those the broker honours (:class:`Feature`), named in any case on input
and written lower-case, as Nakadi does. ``disable_db_write_operations`` makes the metadata
read-only for everyone (:meth:`AdminSettings.check_writable`, 503), as Nakadi's: event types,
subscriptions being created or deleted, the administrators.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from changebroker.auth import Principal, admin_attribute, audit, principal_of
from changebroker.broker import authorization
from changebroker.broker.authorization import Operation
from changebroker.broker.bodies import json_body
from changebroker.broker.errors import BadRequest, Unavailable, Unprocessable

REFRESH = 1.0  # seconds a process trusts its copy of the settings

# Nakadi's answers to a blocked consumer or producer (403).
EVENT_TYPE_BLOCKED = "Application or event type is blocked"
SUBSCRIPTION_BLOCKED = "Application or subscription is blocked"

BLACKLIST_TYPES = ("CONSUMER_APP", "CONSUMER_ET", "PRODUCER_APP", "PRODUCER_ET")


class Feature(StrEnum):
    """Nakadi's features the broker honours, in Nakadi's order and words."""

    DISABLE_EVENT_TYPE_CREATION = "disable_event_type_creation"
    DISABLE_EVENT_TYPE_DELETION = "disable_event_type_deletion"
    DELETE_EVENT_TYPE_WITH_SUBSCRIPTIONS = "delete_event_type_with_subscriptions"
    DISABLE_SUBSCRIPTION_CREATION = "disable_subscription_creation"
    DISABLE_DB_WRITE_OPERATIONS = "disable_db_write_operations"


FEATURE_NAMES = ", ".join(Feature)


def initial_admins(entries: tuple[str, ...]) -> dict[str, list[dict[str, str]]]:
    """The administrators before the first POST: the ``--admins`` callers."""
    attributes = [
        {"data_type": data_type, "value": value}
        for data_type, value in map(admin_attribute, entries)
    ]
    return {"admins": attributes, "readers": attributes, "writers": attributes}


@dataclass(frozen=True)
class Snapshot:
    admins: dict[str, Any]
    blacklist: frozenset[tuple[str, str]]
    features: dict[str, bool]

    def blocked(self, kind: str, name: str) -> bool:
        return (kind, name) in self.blacklist


@dataclass
class AdminSettings:
    pool: AsyncConnectionPool
    default_admins: dict[str, Any]
    _snapshot: Snapshot | None = None
    _loaded: float = 0.0
    _listeners: list[Any] = field(default_factory=list)

    async def current(self) -> Snapshot:
        if self._snapshot is None or time.monotonic() - self._loaded > REFRESH:
            await self.reload()
        assert self._snapshot is not None
        return self._snapshot

    async def reload(self) -> Snapshot:
        async with self.pool.connection() as conn:
            admins_row = await (await conn.execute("SELECT authz FROM broker_admins")).fetchone()
            blacklist = await (
                await conn.execute("SELECT type, name FROM broker_blacklist")
            ).fetchall()
            features = await (
                await conn.execute("SELECT feature, enabled FROM broker_features")
            ).fetchall()
        self._snapshot = Snapshot(
            admins=admins_row[0] if admins_row else self.default_admins,
            blacklist=frozenset((kind, name) for kind, name in blacklist),
            features={feature: bool(enabled) for feature, enabled in features},
        )
        self._loaded = time.monotonic()
        return self._snapshot

    # -- questions the other APIs ask ----------------------------------------------------

    async def is_admin(self, principal: Principal, operation: Operation = "admin") -> bool:
        if principal.unrestricted:
            return True
        admins = (await self.current()).admins
        return authorization.listed(principal, admins.get(authorization.LISTS[operation]))

    async def feature(self, feature: Feature) -> bool:
        return (await self.current()).features.get(feature, False)

    async def check_writable(self) -> None:
        """503, in Nakadi's words, while ``disable_db_write_operations`` is on."""
        if await self.feature(Feature.DISABLE_DB_WRITE_OPERATIONS):
            raise Unavailable("Database is currently in read-only mode")

    async def check_producer(self, principal: Principal, event_type: str) -> None:
        """403 when the application or the event type is blocked from publishing."""
        if await self._blocked(principal, [event_type], "PRODUCER_APP", "PRODUCER_ET"):
            authorization.refuse(
                principal, f"publish to {event_type}", "blocked", detail=EVENT_TYPE_BLOCKED
            )

    async def check_consumer(
        self, principal: Principal, event_types: list[str], detail: str = EVENT_TYPE_BLOCKED
    ) -> None:
        """403 (saying ``detail``) when the application or one of the event types is blocked
        from consuming."""
        if await self.consumer_blocked(principal, event_types):
            authorization.refuse(
                principal, f"consume {','.join(event_types)}", "blocked", detail=detail
            )

    async def consumer_blocked(self, principal: Principal, event_types: list[str]) -> bool:
        return await self._blocked(principal, event_types, "CONSUMER_APP", "CONSUMER_ET")

    async def _blocked(
        self, principal: Principal, event_types: list[str], app_kind: str, et_kind: str
    ) -> bool:
        """An event type's block holds for every caller, authenticated or not; an
        application's for the application a token names (with authentication off none does)."""
        snapshot = await self.current()
        if any(snapshot.blocked(et_kind, name) for name in event_types):
            return True
        return not principal.unrestricted and snapshot.blocked(app_kind, principal.sub)

    # -- the /settings endpoints ---------------------------------------------------------

    async def require_admin(self, request: Request, operation: Operation) -> Principal:
        """The caller, when the administrators' list for ``operation`` names it; else 403."""
        principal = principal_of(request)
        if not await self.is_admin(principal, operation):
            authorization.refuse(
                principal,
                f"{request.method} {request.url.path}",
                f"not one of the broker's administrators ({authorization.LISTS[operation]})",
            )
        return principal

    async def get_admins(self, request: Request) -> Response:
        await self.require_admin(request, "read")
        return JSONResponse((await self.current()).admins)

    async def post_admins(self, request: Request) -> Response:
        principal = await self.require_admin(request, "admin")
        body = await _json(request)
        invalid = authorization.section_problem(body, ("admins", "readers", "writers"))
        if invalid:
            raise Unprocessable(invalid)
        await self.check_writable()
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_admins (authz) VALUES (%s)"
                " ON CONFLICT (singleton) DO UPDATE SET authz = excluded.authz, updated_at = now()",
                (Jsonb(body),),
            )
        audit("admins changed", principal, "/settings/admins", admins=json.dumps(body))
        return JSONResponse((await self.reload()).admins)

    async def get_blacklist(self, request: Request) -> Response:
        await self.require_admin(request, "read")
        snapshot = await self.current()

        def names(kind: str) -> list[str]:
            return sorted(name for k, name in snapshot.blacklist if k == kind)

        return JSONResponse(
            {
                "producers": {"apps": names("PRODUCER_APP"), "event_types": names("PRODUCER_ET")},
                "consumers": {"apps": names("CONSUMER_APP"), "event_types": names("CONSUMER_ET")},
            }
        )

    async def put_blacklist(self, request: Request) -> Response:
        return await self._change_blacklist(request, block=True)

    async def delete_blacklist(self, request: Request) -> Response:
        return await self._change_blacklist(request, block=False)

    async def _change_blacklist(self, request: Request, *, block: bool) -> Response:
        principal = await self.require_admin(request, "write")
        kind, name = request.path_params["blacklist_type"], request.path_params["name"]
        if kind not in BLACKLIST_TYPES:
            raise Unprocessable(f"blacklist_type is one of {', '.join(BLACKLIST_TYPES)}")
        async with self.pool.connection() as conn:
            if block:
                await conn.execute(
                    "INSERT INTO broker_blacklist (type, name) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING",
                    (kind, name),
                )
            else:
                await conn.execute(
                    "DELETE FROM broker_blacklist WHERE type = %s AND name = %s", (kind, name)
                )
        what = "blocked" if block else "unblocked"
        audit(what, principal, f"/settings/blacklist/{kind}/{name}")
        await self.reload()
        return Response(status_code=204)

    async def get_features(self, request: Request) -> Response:
        await self.require_admin(request, "read")
        features = (await self.current()).features
        items = [{"feature": name, "enabled": features.get(name, False)} for name in Feature]
        return JSONResponse({"items": items})

    async def post_features(self, request: Request) -> Response:
        principal = await self.require_admin(request, "write")
        feature, enabled = _feature_switch(await _json(request))
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_features (feature, enabled) VALUES (%s, %s)"
                " ON CONFLICT (feature) DO UPDATE SET enabled = excluded.enabled,"
                " updated_at = now()",
                (feature.value, enabled),
            )
        audit(
            "feature set", principal, "/settings/features", feature=feature.value, enabled=enabled
        )
        await self.reload()
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        blacklist_entry = "/settings/blacklist/{blacklist_type}/{name}"
        return [
            Route("/settings/admins", self.get_admins, methods=["GET"]),
            Route("/settings/admins", self.post_admins, methods=["POST"]),
            Route("/settings/blacklist", self.get_blacklist, methods=["GET"]),
            Route(blacklist_entry, self.put_blacklist, methods=["PUT"]),
            Route(blacklist_entry, self.delete_blacklist, methods=["DELETE"]),
            Route("/settings/features", self.get_features, methods=["GET"]),
            Route("/settings/features", self.post_features, methods=["POST"]),
        ]


async def _json(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise Unprocessable("the body must be a JSON object")
    return body


def _feature_switch(body: Mapping[str, Any]) -> tuple[Feature, bool]:
    """A FeatureWrapper as Nakadi reads it: the feature in any case, ``enabled`` false when
    absent or null; what it cannot read is 400, as Nakadi's (a misspelt field leaves no
    feature)."""
    name, enabled = body.get("feature"), body.get("enabled")
    if name is None:
        raise BadRequest(f'"feature" is required: one of [{FEATURE_NAMES}]')
    try:
        feature = Feature(name.lower() if isinstance(name, str) else name)
    except ValueError:
        raise BadRequest(
            f"Illegal enum value: '{name}'. Possible values: [{FEATURE_NAMES}]"
        ) from None
    if enabled is not None and not isinstance(enabled, bool):
        raise BadRequest(f'"enabled" is true or false, not {json.dumps(enabled)}')
    return feature, bool(enabled)
