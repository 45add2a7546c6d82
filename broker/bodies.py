"""Request bodies: gzip-encoded or plain, parsed as JSON, with Problem answers when they are not."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from broker.problems import problem


class BadBody(Exception):
    """The body cannot be read; ``response`` is the Problem to answer."""

    def __init__(self, response: JSONResponse) -> None:
        self.response = response


async def raw(request: Request) -> bytes:
    """The body as the client meant it: ``Content-Encoding: gzip`` is undone here."""
    data = await request.body()
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding == "gzip":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadBody(problem(400, f"the body is not valid gzip: {exc}")) from None
    raise BadBody(
        problem(415, f"Content-Encoding {encoding!r} is not supported: send gzip or identity")
    )


def parse(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBody(problem(400, f"the body is not valid JSON: {exc}")) from None


async def json_body(request: Request) -> Any:
    return parse(await raw(request))
