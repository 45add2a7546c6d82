"""Check responses against the Nakadi Swagger definitions (seed 000 with its structure)."""

from __future__ import annotations

import functools
from typing import Any

import httpx
import yaml
from jsonschema.validators import Draft4Validator

from tests.support import SPECS

SPEC = SPECS / "nakadi-event-bus-api-0.10.1.yaml"


def _drop_prose_patterns(node: Any) -> Any:
    """The spec writes ``pattern: RFC 3339 date-time`` as prose; as a regex it matches nothing."""
    if isinstance(node, dict):
        return {
            k: _drop_prose_patterns(v)
            for k, v in node.items()
            if not (k == "pattern" and v == "RFC 3339 date-time")
        }
    if isinstance(node, list):
        return [_drop_prose_patterns(v) for v in node]
    return node


@functools.cache
def _definitions() -> dict[str, Any]:
    spec = yaml.safe_load(SPEC.read_text())
    return {"definitions": _drop_prose_patterns(spec["definitions"])}


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
    assert body["status"] == status
    detail = str(body.get("detail", ""))
    assert detail_contains in detail, detail
    return detail
