"""The bridge's reads of the changeserver's ``GET /changes``: one keep-alive HTTP/1.1
connection, parsed by h11, nothing else.

Every other client in the product uses httpx. This one does not because the bridge reads
``/changes`` once for every commit it hears of, hundreds of times a second under a steady
trickle of small transactions, and a request through httpx's layers (auth, redirects, the
connection pool, anyio) costs ~1 ms of CPU where the exchange itself costs ~0.1 ms. In the
bridge benchmark's steady phase that was a third of the bridge's CPU.

The answers come in the changeserver's compact form (the change log's stored bodies, with
the relations they name), read back into what the JSON answer parses to: rendering a change
as JSON cost the changeserver ~20 times what writing its stored body does, and the bridge
parsed it again. A changeserver that does not offer the form (an older one of a fleet)
answers JSON, read as it is.

One request at a time: a request cancelled or failed part way (a read ahead the bridge no
longer wants, a timeout) leaves the connection in an unknown state, so it is closed and the
next request opens another.

The server closes a connection left idle for its keep-alive timeout (5 s by default), which
a paused bridge (a long garbage collection, a stopped process) outlives. A kept-alive
connection the server closed is replaced before the request goes out when the close was
seen already, and otherwise the request, which reached no one, is sent again once on a new
connection: ``GET /changes`` reads only, so sending it twice is harmless. Either way the
bridge reads on in the same session.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
import orjson

from changebroker import auth
from changebroker.changeserver import changes

_READ_SIZE = 256 * 1024  # a 10,000-change answer is ~1 MB compact, ~3.5 MB in JSON
_ACCEPT = f"{changes.COMPACT}, application/json;q=0.5"
_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter, h11.Connection]


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"

    def changes(self) -> dict[str, Any]:
        """A 200 answer's body as its JSON reads (``lastSequence``, ``changes``, ...)."""
        if self.content_type == changes.COMPACT:
            return changes.from_compact(self.body)
        # orjson reads it exactly: the changeserver's values are strings, its numbers 64-bit.
        parsed: dict[str, Any] = orjson.loads(self.body)
        return parsed


class ChangesUnreadable(Exception):
    """The changeserver did not answer, or not in HTTP/1.1 the bridge can read."""


class _ClosedWhileIdle(ChangesUnreadable):
    """A kept-alive connection was closed by the server before any of the answer came."""


class ChangesClient:
    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        ca_file: Path | None,
        timeout: float,
    ) -> None:
        """``ca_file``: trusted for an ``https`` URL, as by our other clients (``None``: the
        system's CAs)."""
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the changeserver URL must be http:// or https://: {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = auth.client_ssl_context(ca_file) if url.scheme == "https" else None
        self._path = f"{url.path.rstrip('/')}/changes"
        self._headers = [("Host", url.netloc), ("Accept", _ACCEPT), *headers.items()]
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._stream: _Stream | None = None

    async def get(self, params: Iterable[tuple[str, str]]) -> Answer:
        """``GET /changes`` with ``params``; raises :class:`ChangesUnreadable` (or
        ``TimeoutError`` past the timeout) when there is no answer to read."""
        target = f"{self._path}?{urllib.parse.urlencode(list(params))}"
        async with self._lock:
            try:
                async with asyncio.timeout(self._timeout):
                    try:
                        return await self._exchange(target)
                    except _ClosedWhileIdle:
                        self._close()
                        return await self._exchange(target)
            except BaseException:
                self._close()
                raise

    async def aclose(self) -> None:
        self._close()

    async def _exchange(self, target: str) -> Answer:
        if self._stream is not None and self._stream[0].at_eof():
            self._close()  # the server closed it while it idled
        reused = self._stream is not None
        if self._stream is None:
            try:
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=self._ssl, limit=_READ_SIZE
                )
            except OSError as exc:
                raise ChangesUnreadable(
                    f"cannot connect to the changeserver at {self._host}:{self._port}: {exc}"
                ) from exc
            self._stream = (reader, writer, h11.Connection(h11.CLIENT))
        reader, writer, connection = self._stream
        status = 0
        content_type = "application/json"
        body: list[bytes] = []
        try:
            writer.write(
                connection.send(h11.Request(method="GET", target=target, headers=self._headers))
                + connection.send(h11.EndOfMessage())
            )
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    connection.receive_data(await reader.read(_READ_SIZE))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    for name, value in event.headers:
                        if name == b"content-type":
                            content_type = value.decode("latin-1")
                elif isinstance(event, h11.Data):
                    body.append(event.data)  # a piece h11 cut off for us: no copy needed
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise ConnectionResetError("the changeserver closed the connection mid-answer")
        except (h11.ProtocolError, OSError) as exc:
            if reused and not status:
                raise _ClosedWhileIdle(f"the kept-alive connection was closed: {exc}") from exc
            raise ChangesUnreadable(f"reading the changeserver's answer: {exc}") from exc
        if connection.our_state is h11.DONE and connection.their_state is h11.DONE:
            connection.start_next_cycle()
        else:
            self._close()  # the server said Connection: close
        return Answer(status, b"".join(body), content_type)

    def _close(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
            self._stream = None
