"""Request bodies: gzip-, zstd-encoded or plain, parsed as JSON; :class:`BadBody` when not.

A body is read up to ``MAX_BODY_BYTES``, and decoded up to it too, so a small
compressed body cannot expand without bound; past that the answer is 413.
Nakadi takes gzip and zstd request bodies; anything else is 415. As Nakadi, only a POST
may say how its body is encoded: :class:`EncodedOnlyOnPost` answers any other request with a
``Content-Encoding`` header 406.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from typing import Any

import zstandard
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker.broker.errors import BrokerError
from changebroker.broker.problems import problem

# 1000 events of Nakadi's 999,000-byte maximum would not fit; batches that big are split
# by clients anyway, and one request must not hold gigabytes of memory.
MAX_BODY_BYTES = 64 * 1024 * 1024
# zstd input fed at a time: one byte can expand to ~32 KB (a run-length block), so a step
# adds at most ~64 MB before the size is checked again.
ZSTD_STEP_BYTES = 2048


class BadBody(BrokerError):
    """The body cannot be read: 400, or 413 when too large, 415 for an unknown encoding."""

    status = 400


def _too_large() -> BadBody:
    return BadBody(
        f"the body exceeds {MAX_BODY_BYTES} bytes: send the events in smaller batches", status=413
    )


def _gunzip(data: bytes) -> bytes:
    # wbits 16+: the gzip container; max_length bounds what one call may expand to.
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        plain = inflater.decompress(data, MAX_BODY_BYTES + 1)
        if len(plain) > MAX_BODY_BYTES or inflater.unconsumed_tail:
            raise _too_large()
        plain += inflater.flush()
        if not inflater.eof:
            raise zlib.error("the gzip stream is truncated")
    except zlib.error as exc:
        raise BadBody(f"the body is not valid gzip: {exc}") from None
    return plain


def _unzstd(data: bytes) -> bytes:
    plain = bytearray()
    rest = memoryview(data)
    try:
        # Frame after frame: concatenated frames are one stream, as zstd's own tools read them.
        while rest:
            inflater = zstandard.ZstdDecompressor().decompressobj()
            while not inflater.eof:
                if not rest:
                    raise zstandard.ZstdError("the zstd stream is truncated")
                plain += inflater.decompress(rest[:ZSTD_STEP_BYTES])
                rest = rest[ZSTD_STEP_BYTES:]
                if len(plain) > MAX_BODY_BYTES:
                    raise _too_large()
            if inflater.unused_data:
                rest = memoryview(inflater.unused_data + rest.tobytes())
    except zstandard.ZstdError as exc:
        raise BadBody(f"the body is not valid zstd: {exc}") from None
    return bytes(plain)


DECODERS: dict[str, Callable[[bytes], bytes]] = {"gzip": _gunzip, "zstd": _unzstd}


async def raw(request: Request) -> bytes:
    """The body as the client meant it: ``Content-Encoding`` gzip or zstd is undone here."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    decode = DECODERS.get(encoding)
    if decode is None and encoding not in ("", "identity"):
        raise BadBody(
            f"Content-Encoding {encoding!r} is not supported: send gzip, zstd or identity",
            status=415,
        )
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    data = b"".join(chunks)
    return data if decode is None else decode(data)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} does not fit a double")
    return value


# JSON as RFC 8259 has it: NaN and Infinity are not numbers, and a number no double holds is
# refused rather than kept as infinity (published events are encoded by orjson, which would
# write a non-finite float as null).
DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


def parse(data: bytes) -> Any:
    try:
        return DECODER.decode(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadBody("the body nests too deeply to read") from None


async def json_body(request: Request) -> Any:
    return parse(await raw(request))


class EncodedOnlyOnPost:
    """406 for a request other than POST that carries ``Content-Encoding`` (whatever it names),
    in Nakadi's words: its filter refuses them before any endpoint runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] != "POST"
            and any(name == b"content-encoding" for name, _ in scope["headers"])
        ):
            detail = f"{scope['method']} method doesn't support gzip content encoding"
            await problem(406, detail)(scope, receive, send)
            return
        await self.app(scope, receive, send)
