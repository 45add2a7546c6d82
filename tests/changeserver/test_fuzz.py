"""Schemathesis fuzzes the changeserver with requests generated from transicator's spec.

Whatever comes in, no 5xx (each operation has a server of its own, so a
generated /markdown only takes down the one it tests), every
documented response has its documented shape, and every error is the spec's
``{"code", "error", "description"}``. The change log holds rows under two
selectors, so generated queries find changes, not only empty lists.
"""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.support.changeserver import SPEC, Harness, MakeServer, conforms

SCHEMA = schemathesis.openapi.from_path(SPEC)


@pytest.fixture
def seeded(make_server: MakeServer) -> Harness:
    """Set up once per operation: hypothesis reruns the test body, not its fixtures."""
    server = make_server()
    server.sql(
        "INSERT INTO items SELECT n, 'row ' || n, CASE WHEN n % 2 = 0 THEN 'even' ELSE 'odd' END"
        " FROM generate_series(1, 20) AS n"
    )
    server.wait_for(10, selector="even")
    return server


def _json_error(response: Any) -> None:
    if response.status_code < 400:
        return
    body = response.json()
    conforms(body, "Error")
    assert body["description"], body


@SCHEMA.parametrize()
@hypothesis.settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_generated_requests_get_documented_answers_and_errors(
    case: schemathesis.Case, seeded: Harness
) -> None:
    block = (case.query or {}).get("block")
    if isinstance(block, int) and block > 1:
        case.query["block"] = 1  # a generated hour-long poll proves nothing more than 1 s
    response = case.call(base_url=seeded.url, timeout=30)
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
    _json_error(response)
