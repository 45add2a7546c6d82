"""``nakadi.access.log``: one event per request, as Nakadi's access log filter writes it.

Method, path, query (``?...`` or empty), user agent, the calling application (``-`` when
unauthenticated) and its hash, status, milliseconds spent, Accept-Encoding and
Content-Encoding (``-`` when absent), the request body's length (its Content-Length) and the
bytes of the response body. A stream's event comes when it ends. While a request is served,
its app's :class:`OwnEvents` is :data:`current`, for the audit lines it writes
(:mod:`.audit`).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from changebroker.auth import Principal
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.own_events.definitions import ACCESS_LOG
from changebroker.http import RESPOND
from changebroker.numerals import whole_number

current: ContextVar[OwnEvents | None] = ContextVar("own_events", default=None)


class AccessLog:
    def __init__(self, app: ASGIApp, own: OwnEvents) -> None:
        self.app = app
        self.own = own

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.own.enabled:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500
        response_bytes = 0

        async def counted_send(message: Message) -> None:
            nonlocal status, response_bytes
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                response_bytes += len(message.get("body", b""))
            await send(message)

        extensions = scope.get("extensions") or {}
        if (respond := extensions.get(RESPOND)) is not None:
            # A response written in one write (changebroker.http.OneWriteResponse) is counted too.

            def counted_respond(code: int, head: bytes, body: bytes) -> bool:
                nonlocal status, response_bytes
                if not respond(code, head, body):
                    return False
                status, response_bytes = code, len(body)
                return True

            extensions[RESPOND] = counted_respond
        token = current.set(self.own)
        try:
            await self.app(scope, receive, counted_send)
        finally:
            current.reset(token)
            spent = time.monotonic() - started
            self.own.add(ACCESS_LOG, self._fields, scope, status, spent, response_bytes)

    def _fields(
        self, scope: Scope, status: int, spent: float, response_bytes: int
    ) -> dict[str, Any]:
        """The event's fields, made in the background from what the request left."""
        headers = dict(scope["headers"])
        principal = scope.get("state", {}).get("principal")
        app = principal.sub if isinstance(principal, Principal) else "-"
        query = scope.get("query_string", b"").decode("latin-1")
        length = headers.get(b"content-length", b"").decode("latin-1")
        return {
            "method": scope["method"],
            "path": scope["path"],
            "query": f"?{query}" if query else "",
            "user_agent": headers.get(b"user-agent", b"-").decode("latin-1"),
            "app": app,
            "app_hashed": self.own.hashed(app),
            "status_code": status,
            "response_time_ms": int(spent * 1000),
            "accept_encoding": headers.get(b"accept-encoding", b"-").decode("latin-1"),
            "content_encoding": headers.get(b"content-encoding", b"-").decode("latin-1"),
            "request_length": int(length) if whole_number(length) else 0,
            "response_length": response_bytes,
        }
