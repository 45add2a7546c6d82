"""Request paths Nakadi refuses before any routing or authentication: 400.

Nakadi runs behind Spring's strict HTTP firewall, which rejects a URL whose path is not
normalized (``//``, a ``.`` or ``..`` segment) or holds what could change its meaning
downstream: an encoded slash, backslash, percent sign, period or NUL, a backslash, a
semicolon. Its clients (and its acceptance tests) see a 400 there, not a 404; so do ours.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker.broker.problems import problem

# Lower-cased, as found in the raw (undecoded) path.
_ENCODED = (b"%2f", b"%5c", b"%25", b"%2e", b"%00", b"%3b")
_RAW = (b";", b"\\", b"\x00")


def rejected(raw_path: bytes) -> str | None:
    """What makes ``raw_path`` one the firewall refuses, None when it passes."""
    lowered = raw_path.lower()
    for found in _ENCODED + _RAW:
        if found in lowered:
            return found.decode("latin-1")
    if b"//" in raw_path:
        return "//"
    segments = raw_path.split(b"/")
    if b"." in segments or b".." in segments:
        return "a . or .. segment"
    return None


class UrlFirewall:
    """ASGI middleware: a refused path is answered 400 in Nakadi's Problem format."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            reason = rejected(raw)
            if reason is not None:
                detail = (
                    "The request was rejected because the URL contained a potentially malicious"
                    f" String {reason!r}"
                )
                await problem(400, detail)(scope, receive, send)
                return
        await self.app(scope, receive, send)
