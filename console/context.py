"""What every page handler shares: the upstream clients, the samples, the templates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from changebroker.auth import Principal, audit
from changebroker.console.history import History
from changebroker.console.upstream import Reply, Upstream

HERE = Path(__file__).parent
PAGE_SIZE = 50


@dataclass
class Console:
    upstream: Upstream
    history: History
    templates: Jinja2Templates
    read_only: bool
    # Newest total unconsumed events per subscription id, from the sampler.
    subscription_lag: dict[str, int]
    sampled_at: float = 0.0
    admin_scope: str = "console.admin"  # what an operator's token needs to act

    def page(
        self, request: Request, template: str, status_code: int = 200, **values: Any
    ) -> HTMLResponse:
        operator = request.scope.get("state", {}).get("principal")
        may_act = isinstance(operator, Principal) and operator.has_scope(self.admin_scope)
        values.setdefault("read_only", self.read_only or not may_act)
        # Who signed in (none when authentication is off).
        values.setdefault(
            "operator",
            operator.sub if isinstance(operator, Principal) and not operator.unrestricted else None,
        )
        return self.templates.TemplateResponse(request, template, values, status_code=status_code)

    def message(
        self, request: Request, *, status_code: int, title: str, message: str
    ) -> HTMLResponse:
        """A page that only says what happened: not found, refused, not done."""
        return self.page(
            request, "message.html", status_code=status_code, title=title, message=message
        )

    def not_found(self, request: Request, what: str) -> HTMLResponse:
        """404: the broker has no ``what`` ("event type order.created")."""
        return self.message(
            request, status_code=404, title="Not found", message=f"The broker has no {what}."
        )

    def not_done(self, request: Request, title: str, problem: str) -> HTMLResponse:
        """502: the service refused an action (``title``: "Not reset"); ``problem`` says why."""
        return self.message(request, status_code=502, title=title, message=problem)

    def action(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` of a form that acts, run unless :meth:`refuse_when_read_only` refuses;
        an audit line names the operator (the services see the console's own token)."""

        async def guarded(request: Request) -> Response:
            refused = self.refuse_when_read_only(request)
            if refused:
                return refused
            response = await handler(request)
            operator = request.scope.get("state", {}).get("principal")
            audit(
                "console action",
                operator if isinstance(operator, Principal) else None,
                request.url.path,
                status=response.status_code,
            )
            return response

        return guarded

    def refuse_when_read_only(self, request: Request) -> Response | None:
        """The answer to an action in read-only mode, or to a form posted from another site."""
        if self.read_only:
            return self.message(
                request,
                status_code=403,
                title="Read-only",
                message="This console runs with --read-only: it shows, it does not act.",
            )
        if from_another_site(request):
            return self.message(
                request,
                status_code=403,
                title="Refused",
                message="Actions are taken only from this console's own pages.",
            )
        return None


def from_another_site(request: Request) -> bool:
    """A form posted from a page of another site (the browser says so in ``Origin``)."""
    origin = request.headers.get("origin")
    return bool(origin) and urlsplit(origin).netloc != request.headers.get("host")


async def gather(*calls: Awaitable[Reply]) -> list[Reply]:
    """Upstream calls made concurrently: a page waits for the slowest, not for their sum."""
    return list(await asyncio.gather(*calls))


def redirect(url: str) -> RedirectResponse:
    # 303: the browser follows a POSTed form with a GET (reloading never repeats the action).
    return RedirectResponse(url, status_code=303)


def page_number(request: Request) -> int:
    raw = request.query_params.get("page", "0")
    return int(raw) if raw.isdigit() else 0


def templates() -> Jinja2Templates:
    found = Jinja2Templates(directory=str(HERE / "templates"))
    found.env.globals["PAGE_SIZE"] = PAGE_SIZE
    return found
