"""The services the console shows, reached through their public HTTP APIs only.

Every call answers a ``Reply`` instead of raising: a page shows what each service said (or
that it did not answer) beside what the others said, so one service down never blanks a page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from changebroker import auth


@dataclass(frozen=True)
class Endpoints:
    broker: str
    registry: str
    changeserver: str
    changeserver_mgmt: str
    bridge: str
    # A fleet's servers, each by its management URL (none: the one at ``changeserver_mgmt``).
    changeserver_fleet: tuple[str, ...] = ()
    # Sent to every service (they check it when their authentication is on).
    token: str | None = None
    ca_file: Path | None = None  # trusted for the services' HTTPS besides the system's CAs


@dataclass(frozen=True)
class Reply:
    """One answer: ``status`` 0 when the service did not answer (``error`` says why)."""

    url: str
    status: int = 0
    body: Any = None
    text: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def answered(self) -> bool:
        return self.status != 0

    @property
    def fields(self) -> dict[str, Any]:
        """The body when it is a JSON object; ``{}`` for an error text, a list or no answer, so
        a page shows what it has."""
        return self.body if isinstance(self.body, dict) else {}

    @property
    def problem(self) -> str:
        """What went wrong, in one line, for a page to show."""
        if not self.answered:
            return f"no answer from {self.url}: {self.error}"
        if self.ok:
            return ""
        detail = self.text.strip()[:500]
        return f"{self.status} from {self.url}: {detail}"


class Upstream:
    """One HTTP client per service; short timeouts so a slow service cannot stall a page."""

    def __init__(self, endpoints: Endpoints, timeout: float = 5.0) -> None:
        self.endpoints = endpoints
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        self._client = httpx.AsyncClient(
            timeout=timeout,
            limits=limits,
            headers=auth.client_headers(endpoints.token),
            verify=auth.client_verify(endpoints.ca_file),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def call(
        self,
        method: str,
        url: str,
        *,
        params: Any = None,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        try:
            response = await self._client.request(
                method,
                url,
                params=params,
                json=json_body,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as error:
            return Reply(url, error=str(error) or type(error).__name__)
        text = response.text
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        return Reply(url, response.status_code, body, text)

    # -- per service ---------------------------------------------------------------------

    async def broker(self, method: str, path: str, **kwargs: Any) -> Reply:
        return await self.call(method, self.endpoints.broker + path, **kwargs)

    async def registry(self, method: str, path: str, **kwargs: Any) -> Reply:
        return await self.call(method, self.endpoints.registry + path, **kwargs)

    async def changeserver(self, path: str, **kwargs: Any) -> Reply:
        return await self.call("GET", self.endpoints.changeserver + path, **kwargs)

    async def changeserver_mgmt(self, path: str, server: str | None = None) -> Reply:
        """``path`` on the changeserver's management port (``server``: one of a fleet's)."""
        return await self.call("GET", (server or self.endpoints.changeserver_mgmt) + path)

    async def bridge(self, method: str, path: str, **kwargs: Any) -> Reply:
        return await self.call(method, self.endpoints.bridge + path, **kwargs)
