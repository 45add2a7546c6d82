"""Nakadi's error body: Problem JSON (RFC 7807), ``application/problem+json``.

Every broker endpoint answers errors through :func:`problem`, so the status,
title and body shape are the same everywhere.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.responses import JSONResponse

PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem(status: int, detail: str | None = None, *, title: str | None = None) -> JSONResponse:
    """``problem(404, "EventType \\"x\\" does not exist.")`` as Nakadi writes it."""
    body: dict[str, object] = {
        "type": f"https://httpstatus.es/{status}",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE)
