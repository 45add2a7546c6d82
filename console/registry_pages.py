"""Registry: subjects, their versions and compatibility mode, and "would this schema be
accepted?" with the engine's violations listed by path and rule, each with the document that
shows it where the engine proved one."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console.context import PAGE_SIZE, Console, gather, page_number
from changebroker.console.upstream import Reply


def _scope(request: Request) -> dict[str, str]:
    """The tenant and namespace a subject lives in (both optional in the OpenSchema API)."""
    return {
        key: request.query_params[key]
        for key in ("tenant", "namespace")
        if request.query_params.get(key)
    }


def routes(console: Console) -> list[BaseRoute]:
    up = console.upstream

    async def index(request: Request) -> Response:
        scope = _scope(request)
        query = request.query_params.get("q", "").strip().lower()
        page = page_number(request)
        reply = await up.registry("GET", "/subjects", params=scope)
        names = reply.fields.get("name", [])
        found = sorted(n for n in names if query in n.lower())
        return console.page(
            request,
            "registry.html",
            title="Registry",
            problem=reply.problem,
            scope=scope,
            query=query,
            subjects=found[page * PAGE_SIZE : (page + 1) * PAGE_SIZE],
            total=len(found),
            page=page,
            more=(page + 1) * PAGE_SIZE < len(found),
        )

    async def subject(request: Request, checked: Reply | None = None, sent: str = "") -> Response:
        name = request.path_params["subject"]
        scope = _scope(request)
        base = f"/subjects/{quote(name)}"
        versions, config = await gather(
            up.registry("GET", base + "/versions", params=scope),
            up.registry("GET", f"/config/{quote(name)}", params=scope),
        )
        numbers = versions.fields.get("version", [])
        shown = request.query_params.get("version") or (str(numbers[-1]) if numbers else "")
        schema: Reply | None = None
        if shown:
            schema = await up.registry(
                "GET", f"{base}/versions/{quote(shown)}/schema", params=scope
            )
        replies = [r for r in (versions, config, schema) if r is not None]
        found: Any = schema.fields if schema else {}
        body: dict[str, Any] = found.get("schema") if isinstance(found.get("schema"), dict) else {}
        definition = body.get("schemaDefinition")
        return console.page(
            request,
            "subject.html",
            title=f"Subject {name}",
            name=name,
            scope=scope,
            problems=[r.problem for r in replies if r.problem],
            versions=numbers,
            shown=shown,
            schema=body,
            definition=json.dumps(definition, indent=2, sort_keys=True)
            if isinstance(definition, dict | list)
            else definition,
            compatibility=config.fields.get("compatibility", ""),
            checked=checked,
            sent=sent,
        )

    async def check(request: Request) -> Response:
        name = request.path_params["subject"]
        form = await request.form()
        sent = str(form.get("schema", ""))
        try:
            definition: Any = json.loads(sent)
        except ValueError:
            definition = sent  # not JSON (Avro text, a typo): the registry says what it is
        reply = await up.registry(
            "POST",
            f"/compatibility/subjects/{quote(name)}/versions/latest",
            params=_scope(request),
            json_body={"schema": definition},
        )
        return await subject(request, checked=reply, sent=sent)

    return [
        Route("/registry", index),
        Route("/registry/subjects/{subject}", subject),
        # A check changes nothing: allowed in read-only mode too.
        Route("/registry/subjects/{subject}/check", check, methods=["POST"]),
    ]
