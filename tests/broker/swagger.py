"""Check responses against the Nakadi Swagger definitions (docs/specs/)."""

from __future__ import annotations

import functools
from typing import Any

import httpx
import yaml
from jsonschema.validators import Draft4Validator

from tests.support import SPECS

SPEC = SPECS / "nakadi-event-bus-api-0.10.1.yaml"


def _as_meant(node: Any) -> Any:
    """Two of the spec's words read as what Nakadi means by them.

    ``pattern: RFC 3339 date-time`` is prose (as a regex it matches nothing), and
    link hrefs are ``format: uri`` though Nakadi's own example and answers are
    relative (``/subscriptions?offset=20&limit=10``): a URI reference.
    """
    if isinstance(node, dict):
        return {
            k: "uri-reference" if (k, v) == ("format", "uri") else _as_meant(v)
            for k, v in node.items()
            if (k, v) != ("pattern", "RFC 3339 date-time")
        }
    if isinstance(node, list):
        return [_as_meant(v) for v in node]
    return node


# Optional objects Nakadi writes as ``null`` when they were never set (Jackson's default), which
# the spec's types do not admit: (definition, property).
_WRITTEN_AS_NULL = [("Subscription", "authorization")]


@functools.cache
def spec() -> dict[str, Any]:
    """The whole Nakadi spec as meant (see ``_as_meant``), for schemathesis too.

    ``Problem`` lists ``type`` as required, yet Nakadi's own answers leave it out (its Problems
    are zalando/problem's ``about:blank``, which is not written), and RFC 7807 reads a missing
    ``type`` as ``about:blank``: the broker answers the same, so ``type`` is optional here.
    """
    loaded: dict[str, Any] = _as_meant(yaml.safe_load(SPEC.read_text()))
    for definition, name in _WRITTEN_AS_NULL:
        properties = loaded["definitions"][definition]["properties"]
        properties[name] = {"anyOf": [properties[name], {"type": "null"}]}
    problem = loaded["definitions"]["Problem"]
    problem["required"] = [field for field in problem["required"] if field != "type"]
    return loaded


def _definitions() -> dict[str, Any]:
    return {"definitions": spec()["definitions"]}


def validate(definition: str, instance: Any, *, array: bool = False) -> None:
    """Raise if ``instance`` is not a ``definition`` (or an array of them)."""
    ref = {"$ref": f"#/definitions/{definition}"}
    schema = {**_definitions(), **({"type": "array", "items": ref} if array else ref)}
    Draft4Validator(schema).validate(instance)


def assert_problem(response: httpx.Response, status: int, detail_contains: str = "") -> str:
    """The response is a Problem JSON with ``status``; returns its detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    validate("Problem", body)
    assert "type" not in body, body  # as Nakadi writes its Problems
    assert body["status"] == status
    detail = str(body.get("detail", ""))
    assert detail_contains in detail, detail
    return detail
