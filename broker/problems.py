"""Nakadi's error body: Problem JSON (RFC 7807), ``application/problem+json``.

Every broker error answers through :func:`problem`, so the status, title and
body shape are the same everywhere; :func:`render` is the app's one handler
of :class:`changebroker.broker.errors.BrokerError`. As Nakadi's, a body has ``title``, ``status``
and ``detail`` and no ``type``: RFC 7807 reads a missing ``type`` as ``about:blank``, "the
problem has no semantics beyond that of the HTTP status code" (docs/nakadi-differences.md).
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from changebroker.broker.errors import BrokerError

PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem(status: int, detail: str | None = None, *, title: str | None = None) -> JSONResponse:
    """``problem(404, "EventType \\"x\\" does not exist.")`` as Nakadi writes it."""
    body: dict[str, object] = {
        "title": title or HTTPStatus(status).phrase,
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE)


async def render(request: Request, exc: Exception) -> Response:
    """The Problem of a :class:`BrokerError` an endpoint raised."""
    assert isinstance(exc, BrokerError), exc
    return problem(exc.status, exc.detail, title=exc.title)
