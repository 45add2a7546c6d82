"""``/settings/admins``, ``/settings/blacklist``, ``/settings/features``: the broker's
administration as Nakadi serves it, asked of and written to ``AdminSettings``; each endpoint
asks the gate whether the caller is one of the administrators (``readers`` read the settings,
``writers`` change the blacklist and features, ``admins`` change the administrators).

Features are Nakadi's, those the broker honours (``Feature``), named in any case on input and
written lower-case, as Nakadi does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from changebroker.auth import audit
from changebroker.broker import authorization
from changebroker.broker.access import Access
from changebroker.broker.admin_settings import (
    BLACKLIST_TYPES,
    FEATURE_NAMES,
    AdminSettings,
    Feature,
)
from changebroker.broker.bodies import json_body
from changebroker.broker.errors import BadRequest, Unprocessable


@dataclass
class SettingsApi:
    admin: AdminSettings
    access: Access

    async def get_admins(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        return JSONResponse((await self.admin.current()).admins)

    async def post_admins(self, request: Request) -> Response:
        principal = await self.access.require_admin(request, "admin")
        body = await _json(request)
        invalid = authorization.section_problem(body, ("admins", "readers", "writers"))
        if invalid:
            raise Unprocessable(invalid)
        await self.admin.check_writable()
        administration = await self.admin.set_admins(body)
        audit("admins changed", principal, "/settings/admins", admins=json.dumps(body))
        return JSONResponse(administration.admins)

    async def get_blacklist(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        administration = await self.admin.current()

        def names(kind: str) -> list[str]:
            return sorted(name for k, name in administration.blacklist if k == kind)

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
        principal = await self.access.require_admin(request, "write")
        kind, name = request.path_params["blacklist_type"], request.path_params["name"]
        if kind not in BLACKLIST_TYPES:
            raise Unprocessable(f"blacklist_type is one of {', '.join(BLACKLIST_TYPES)}")
        await self.admin.set_blocked(kind, name, block=block)
        what = "blocked" if block else "unblocked"
        audit(what, principal, f"/settings/blacklist/{kind}/{name}")
        return Response(status_code=204)

    async def get_features(self, request: Request) -> Response:
        await self.access.require_admin(request, "read")
        features = (await self.admin.current()).features
        items = [{"feature": name, "enabled": features.get(name, False)} for name in Feature]
        return JSONResponse({"items": items})

    async def post_features(self, request: Request) -> Response:
        principal = await self.access.require_admin(request, "write")
        feature, enabled = _feature_switch(await _json(request))
        await self.admin.set_feature(feature, enabled)
        audit(
            "feature set", principal, "/settings/features", feature=feature.value, enabled=enabled
        )
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
