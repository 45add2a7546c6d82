"""X-Flow-Id on every request and response, the access line and the request's duration."""

from __future__ import annotations

import logging
import os
import time
import urllib.parse

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from changebroker import logs, metrics
from changebroker.http.responses import RESPOND

FLOW_ID_HEADER = "x-flow-id"
# The access line's status of a request whose client left before its body was read (nginx's).
CLIENT_LEFT = 499
access_log = logging.getLogger("changebroker.access")


class FlowIdMiddleware:
    """Take X-Flow-Id from the request (or make one), log it, echo it on the response; log
    the request and observe its duration (by route template: after routing, the scope names
    the route that served it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == FLOW_ID_HEADER.encode()),
            None,
        )
        # 32 random hex digits, as uuid4().hex reads, in a quarter of its time (0.6 us).
        current = incoming or os.urandom(16).hex()
        token = logs.flow_id.set(current)
        started = time.perf_counter()
        status = 500

        async def send_with_flow_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-flow-id", current.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        extensions = scope.get("extensions") or {}
        if (respond := extensions.get(RESPOND)) is not None:

            def respond_with_flow_id(code: int, head: bytes, body: bytes) -> bool:
                nonlocal status
                flow_id = current.encode("latin-1")
                if not respond(code, b"%sx-flow-id: %s\r\n" % (head, flow_id), body):
                    return False
                status = code
                return True

            extensions[RESPOND] = respond_with_flow_id

        try:
            await self.app(scope, receive, send_with_flow_id)
        except ClientDisconnect:
            # Gone before its body was read (or cut off at the body timeout): nobody to answer,
            # nothing failed here.
            status = CLIENT_LEFT
        finally:
            seconds = time.perf_counter() - started
            metrics.observe_request(scope, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                request = {"method": scope["method"], "path": scope["path"]}
                if query := scope.get("query_string"):
                    # As the handlers read it: percent-decoded (the log line escapes).
                    request["query"] = urllib.parse.unquote(query.decode("latin-1"))
                fields = logs.fields(**request, status=status, ms=round(seconds * 1000, 2))
                # makeRecord, not info(): the caller's file and line, which no line shows,
                # cost a stack walk per request (a tenth of a woken long poll's CPU).
                record = access_log.makeRecord(
                    access_log.name, logging.INFO, __file__, 0, "request", (), None, extra=fields
                )
                access_log.handle(record)
            logs.flow_id.reset(token)
