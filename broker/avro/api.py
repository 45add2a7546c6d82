"""``/avro-schemas/{name}/versions``: Nakadi's envelope schemas, for clients that write and read
``application/avro-binary`` (``batch.publishing`` and ``batch.consumption``, versions 0 and 1)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker.broker.avro.envelope import SCHEMAS
from changebroker.broker.errors import NotFound

SERVED = ("batch.publishing", "batch.consumption")


def _versions(request: Request) -> dict[str, dict[str, object]]:
    name = request.path_params["name"]
    if name not in SERVED:
        raise NotFound(f"no Avro schema {name!r}: there are {', '.join(SERVED)}")
    return SCHEMAS[name]


async def versions(request: Request) -> Response:
    found = _versions(request)
    items = [{"avro_schema": found[v], "version": v} for v in sorted(found)]
    return JSONResponse({"items": items})


async def version(request: Request) -> Response:
    found = _versions(request)
    wanted = request.path_params["version"]
    if wanted not in found:
        raise NotFound(f"no version {wanted!r} of {request.path_params['name']}")
    return JSONResponse({"avro_schema": found[wanted], "version": wanted})


def routes() -> list[BaseRoute]:
    return [
        Route("/avro-schemas/{name}/versions", versions, methods=["GET"]),
        Route("/avro-schemas/{name}/versions/{version}", version, methods=["GET"]),
    ]
