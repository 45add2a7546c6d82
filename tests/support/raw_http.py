"""HTTP/1.1 over a bare socket, byte for byte as the JDK's HttpClient sends it; and reading
raw answers: until the server closes, compared without what differs per request.

The JDK (and what is built on it: Spring's RestClient, fahrschein's JDK request
factory) asks a plain-HTTP server for HTTP/2 on every new connection: the request
carries ``Upgrade: h2c`` and ``HTTP2-Settings``, and its body follows in a TCP
segment of its own. A server that does not upgrade must serve it as HTTP/1.1.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Captured from Java 17's HttpClient.newHttpClient() posting a JSON string.
_JDK_HEAD = (
    "{method} {path} HTTP/1.1\r\n"
    "Connection: Upgrade, HTTP2-Settings\r\n"
    "{length}"
    "Host: {host}\r\n"
    "HTTP2-Settings: AAEAAEAAAAIAAAAAAAMAAAAAAAQBAAAAAAUAAEAAAAYABgAA\r\n"
    "Upgrade: h2c\r\n"
    "User-Agent: Java-http-client/17.0.15\r\n"
    "{content_type}"
    "\r\n"
)


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def jdk_request(url: str, method: str, path: str, body: Any = None) -> tuple[bytes, bytes]:
    """The head and the body (b"" without one) of the JDK's request."""
    data = b"" if body is None else json.dumps(body).encode()
    head = _JDK_HEAD.format(
        method=method,
        path=path,
        host=urlsplit(url).netloc,
        length=f"Content-Length: {len(data)}\r\n" if body is not None else "",
        content_type="Content-Type: application/json\r\n" if body is not None else "",
    )
    return head.encode(), data


def until_closed(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    received = b""
    while block := conn.recv(65536):
        received += block
    return received


def without_date_and_flow_id(raw: bytes) -> bytes:
    """Raw answers without the header lines that differ between two requests."""
    lines = raw.split(b"\r\n")
    return b"\r\n".join(
        line for line in lines if not line.lower().startswith((b"date:", b"x-flow-id:"))
    )


def plain_get(url: str, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n\r\n".encode()


class Connection:
    """One keep-alive connection: send bytes, read whole responses."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def send(self, *segments: bytes) -> None:
        for segment in segments:
            if segment:
                self._sock.sendall(segment)

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed the connection; unread: {self._buffer!r}")
        self._buffer += chunk

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            self._fill()
        line, self._buffer = self._buffer.split(b"\r\n", 1)
        return line

    def response(self) -> RawResponse:
        status = int(self._line().split()[1])
        headers: dict[str, str] = {}
        while line := self._line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._line(), 16):
                body += self._take(size)
                self._line()
            self._line()
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return RawResponse(status, headers, body)

    def close(self) -> None:
        self._sock.close()


def jdk_exchange(
    url: str, method: str, path: str, body: Any, then: str
) -> tuple[RawResponse, RawResponse, RawResponse, RawResponse]:
    """The JDK's request twice, answered as HTTP/1.1 with its body, each followed on the same
    connection by ``GET then``: first as the JDK sends it (head, then the body in a segment
    of its own, then the next request once answered), then with all three in one segment."""
    head, data = jdk_request(url, method, path, body)
    follow = plain_get(url, then)
    connection = Connection(url)
    try:
        connection.send(head, data)
        first = connection.response()
        connection.send(follow)
        first_next = connection.response()
        connection.send(head + data + follow)
        again = connection.response()
        again_next = connection.response()
    finally:
        connection.close()
    for response in (first, again):
        assert response.status != 101, "the server switched protocols"
    return first, first_next, again, again_next
