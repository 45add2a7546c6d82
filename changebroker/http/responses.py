"""Responses written in one write: ``RESPOND`` in a request's scope, and the response class
that uses it where the server offers it (``protocol.UpgradeIgnoringProtocol``)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

# scope["extensions"][RESPOND]: ``respond(status, head, body) -> bool`` writes a whole
# response at once, from any callback on the server's event loop, without the request's own
# task: what lets one commit answer thousands of long polls in one pass (see
# ``UpgradeIgnoringProtocol.respond``). ``head`` is the response's own header lines
# (``header_lines``), content-length among them, connection not: rendered once, an answer
# many waiters share costs each of them a concatenation.
RESPOND = "changebroker.respond"
Respond = Callable[[int, bytes, bytes], bool]


def header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """``name: value\r\n`` for each header, as a response head spells them."""
    return b"".join([name + b": " + value + b"\r\n" for name, value in headers])


class OneWriteResponse(Response):
    """A ``Response`` written in one write (status line, headers and body) where the server
    offers ``RESPOND``: uvicorn's send writes the head and the body apart, two system calls,
    which is most of a small answer's cost. Elsewhere, sent as any response is."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        respond: Respond | None = (scope.get("extensions") or {}).get(RESPOND)
        if respond is None or not respond(
            self.status_code, header_lines(self.raw_headers), bytes(self.body)
        ):
            await super().__call__(scope, receive, send)
