"""Schemathesis fuzzes the broker with requests generated from the Nakadi Swagger spec.

Whatever comes in, the broker must not fail (no 5xx), every documented
response must have its documented shape, and every error must be a Problem
JSON whose ``status`` is the HTTP status. The second test sends the generated
requests to an event type that exists, so they reach validation, not only the 404.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.broker.swagger import spec
from tests.support.event_types import business_event_type

SCHEMA = (
    schemathesis.openapi.from_dict(spec())
    # Streams hold a request open for a generated stream_timeout (up to 70 minutes);
    # test_streaming*.py covers their parameters one by one.
    .exclude(method="GET", path="/event-types/{name}/events")
    # Not served by this broker (yet): Nakadi's operator settings.
    .exclude(path_regex=r"^/settings")
)


@pytest.fixture(scope="module")
def existing_event_type(client: httpx.Client) -> str:
    name = f"fuzz_{uuid.uuid4().hex[:8]}.orders"
    response = client.post("/event-types", json=business_event_type(name))
    assert response.status_code == 201, response.text
    return name


def _assert_problem_json(case: schemathesis.Case, response: Any) -> None:
    """Errors are Problem JSON, but for those the spec gives another shape (batch items)."""
    if response.status_code < 400:
        return
    documented = case.operation.definition.raw.get("responses", {}).get(str(response.status_code))
    shape = (documented or {}).get("schema")
    if shape is not None and shape.get("$ref") != "#/definitions/Problem":
        return
    # schemathesis gives each header as the list of its values.
    content_type = {k.lower(): v for k, v in response.headers.items()}["content-type"][0]
    assert content_type.startswith("application/problem+json"), (
        response.status_code,
        response.text,
    )
    assert response.json()["status"] == response.status_code, response.text


FUZZ_SETTINGS = hypothesis.settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)


def _call_and_check(case: schemathesis.Case, broker_url: str) -> None:
    response = case.call(base_url=broker_url, timeout=30)
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
    _assert_problem_json(case, response)


@SCHEMA.parametrize()
@FUZZ_SETTINGS
def test_generated_requests_get_documented_answers_and_problem_errors(
    case: schemathesis.Case, broker_url: str
) -> None:
    _call_and_check(case, broker_url)


# Deleting the shared event type would turn the rest of the run into 404s.
@SCHEMA.include(path_regex=r"\{name\}").exclude(method="DELETE").parametrize()
@FUZZ_SETTINGS
def test_generated_requests_to_an_existing_event_type(
    case: schemathesis.Case, broker_url: str, existing_event_type: str
) -> None:
    case.path_parameters = {**(case.path_parameters or {}), "name": existing_event_type}
    _call_and_check(case, broker_url)
