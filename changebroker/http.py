"""ASGI plumbing every HTTP service shares: X-Flow-Id, access lines, serving.

Error bodies are not here on purpose: each API has its own error format
(transicator, Nakadi Problem, OpenSchema), and each service owns its own.
"""

from __future__ import annotations

import logging
import time
import uuid

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from changebroker import logs

FLOW_ID_HEADER = "x-flow-id"
access_log = logging.getLogger("changebroker.access")


class FlowIdMiddleware:
    """Take X-Flow-Id from the request (or make one), log it, echo it on the response."""

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
        current = incoming or uuid.uuid4().hex
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

        try:
            await self.app(scope, receive, send_with_flow_id)
        finally:
            access_log.info(
                "request",
                extra=logs.fields(
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round((time.perf_counter() - started) * 1000, 2),
                ),
            )
            logs.flow_id.reset(token)


def serve(app: ASGIApp, host: str, port: int) -> None:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT (graceful: open requests finish)."""
    uvicorn.run(
        FlowIdMiddleware(app),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
