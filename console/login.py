"""Who may use the console when the services check credentials: operators sign in with a
token, checked as every service checks one (changebroker/auth.py).

The token comes as ``Authorization: Bearer`` (scripts) or from the ``changebroker_token``
cookie the sign-in form sets (browsers: HttpOnly, SameSite=Strict, Secure over HTTPS, so
another site can neither read it nor post a form with it). Pages need the read scope, actions
(every POST) the admin scope; without a token a page answers 401 with the sign-in form.
With authentication off nothing is asked and the sign-in page leads to the overview.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker import auth
from changebroker.console.context import Console, from_another_site, redirect

COOKIE = "changebroker_token"
DEFAULT_READ_SCOPE = "console.read"
DEFAULT_ADMIN_SCOPE = "console.admin"
OPEN_PATHS = frozenset({"/health", "/login", "/logout"})
OPEN_PREFIXES = ("/static/",)


def token_of(scope: Scope) -> str | None:
    """The bearer token, else the sign-in cookie's."""
    return auth.bearer_of(scope) or Request(scope).cookies.get(COOKIE) or None


def _local(target: str | None) -> str:
    """Where to go after signing in: a path of this console only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def scope_table(routes: list[BaseRoute], read_scope: str, admin_scope: str) -> auth.ScopeTable:
    """Every page (a GET route) needs ``read_scope``, every action (a POST route)
    ``admin_scope``; anything else the latter."""
    needs = {"GET": read_scope, "POST": admin_scope}
    rules = [
        auth.ScopeRule(frozenset({method}), route.path_regex, needs[method])
        for route in routes
        if isinstance(route, Route)
        for method in sorted(route.methods or ())
        if method in needs
    ]
    return auth.ScopeTable(tuple(rules), strictest=admin_scope)


def protect(
    app: Starlette,
    console: Console,
    authenticator: auth.Authenticator,
    read_scope: str,
    admin_scope: str,
) -> ASGIApp:
    """``app`` behind the operators' tokens: the sign-in form for 401, a message for 403."""

    def refuse(status: int, message: str) -> ASGIApp:
        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            request = Request(scope, receive)
            if status == 401:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                page = sign_in_page(console, request, message, target, status_code=401)
                page.headers["WWW-Authenticate"] = "Bearer"
            else:
                page = console.message(request, status_code=403, title="Refused", message=message)
            await page(scope, receive, send)

        return answer

    return auth.AuthMiddleware(
        app,
        authenticator,
        refuse,
        open_paths=OPEN_PATHS,
        open_prefixes=OPEN_PREFIXES,
        scopes=scope_table(app.routes, read_scope, admin_scope),
        token_of=token_of,
    )


def sign_in_page(
    console: Console, request: Request, problem: str | None, target: str, status_code: int = 200
) -> Response:
    return console.page(
        request,
        "login.html",
        status_code=status_code,
        title="Sign in",
        problem=problem,
        next=_local(target),
    )


def routes(console: Console, authenticator: auth.Authenticator, read_scope: str) -> list[BaseRoute]:
    async def show(request: Request) -> Response:
        if authenticator.mode == "off":
            return redirect("/")
        return sign_in_page(console, request, None, request.query_params.get("next", "/"))

    async def sign_in(request: Request) -> Response:
        if authenticator.mode == "off":
            return redirect("/")
        if from_another_site(request):
            return console.message(
                request, status_code=403, title="Refused", message="Sign in on this console."
            )
        form = await request.form()
        token, target = str(form.get("token", "")).strip(), str(form.get("next", "/"))
        try:
            principal = await authenticator.principal(token)
        except auth.Unauthenticated as error:
            auth.audit("refused", None, "console sign-in", status=401, reason=error)
            return sign_in_page(console, request, str(error), target, status_code=401)
        if not principal.has_scope(read_scope):
            message = f"the token lacks the scope {read_scope}"
            auth.audit("refused", principal, "console sign-in", status=403, reason=message)
            return sign_in_page(console, request, message, target, status_code=403)
        auth.audit("signed in", principal, "console")
        response = redirect(_local(target))
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def sign_out(request: Request) -> Response:
        response = redirect("/login")
        response.delete_cookie(COOKIE)
        return response

    return [
        Route("/login", show, methods=["GET"]),
        Route("/login", sign_in, methods=["POST"]),
        Route("/logout", sign_out, methods=["POST"]),
    ]
