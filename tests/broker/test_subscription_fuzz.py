"""Schemathesis sends generated requests to a subscription that exists, past the 404s.

Streaming endpoints are left out (a generated stream holds its request open for
its stream_timeout); DELETE too, or the rest of the run would be 404s again.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
import schemathesis

from tests.broker.test_fuzz import FUZZ_SETTINGS, SCHEMA, _call_and_check
from tests.support.event_types import business_event_type


@pytest.fixture(scope="module")
def existing_subscription(client: httpx.Client, broker_url: str) -> str:
    name = f"fuzz_{uuid.uuid4().hex[:8]}.subscribed"
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    created = client.post(
        "/subscriptions", json={"owning_application": "fuzz", "event_types": [name]}
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


@(
    SCHEMA.include(path_regex=r"\{subscription_id\}")
    .exclude(method="DELETE")
    .exclude(path_regex=r"/events$")
    .parametrize()
)
@FUZZ_SETTINGS
def test_generated_requests_to_an_existing_subscription(
    case: schemathesis.Case, broker_url: str, existing_subscription: str
) -> None:
    case.path_parameters = {
        **(case.path_parameters or {}),
        "subscription_id": existing_subscription,
    }
    _call_and_check(case, broker_url)
