"""transicator's error answers: ``{"code", "error", "description"}`` JSON, for bad requests,
refusals and unknown paths alike."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class BadRequest(Exception):
    """A request answered with ``status`` and transicator's error body."""

    def __init__(self, status: int, code: str, error: str, description: str = "") -> None:
        super().__init__(error)
        self.status, self.code, self.error, self.description = status, code, error, description


def error_response(
    status: int,
    code: str,
    error: str,
    description: str = "",
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"code": code, "error": error, "description": description or error}
    return JSONResponse(body, status_code=status, headers=headers)


def refuse(status: int, message: str) -> Response:
    """A request refused by authentication (401) or for a missing scope (403)."""
    if status == 401:
        return error_response(401, "UNAUTHORIZED", message, headers={"WWW-Authenticate": "Bearer"})
    return error_response(403, "FORBIDDEN", message)


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods answer in transicator's error shape, like every other error."""
    assert isinstance(exc, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "BAD_REQUEST")
    return error_response(exc.status_code, code, exc.detail, headers=exc.headers)


EXCEPTION_HANDLERS = {HTTPException: http_error}
