"""Requests and error bodies as Nakadi answers them: each test sends the request of Nakadi's own
acceptance test (zalando/nakadi ``acceptance-test/``, named per test) and expects its answer."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import httpx

from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.broker.stream_support import order, publish
from tests.broker.subscription_support import create
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type


def test_problems_have_title_status_and_detail_and_no_type(client: httpx.Client) -> None:
    """Nakadi's Problem JSON (zalando/problem's ``about:blank`` type is not written)."""
    response = client.get("/event-types/no.such.type")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "title": "Not Found",
        "status": 404,
        "detail": 'EventType "no.such.type" does not exist.',
    }
    validate("Problem", response.json())
    # Errors Starlette raises (no route, wrong method) are shaped the same.
    assert set(client.get("/no-such-thing").json()) == {"title", "status", "detail"}
    assert set(client.patch("/event-types").json()) == {"title", "status", "detail"}


def test_stream_of_an_unknown_event_type_is_topic_not_found(client: httpx.Client) -> None:
    """EventStreamReadingAT.whenGetEventsWithUnknownTopicThenTopicNotFound."""
    response = client.get("/event-types/blah-topic/events")
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {"title": "Not Found", "status": 404, "detail": "topic not found"}


def test_unknown_partition_is_partition_not_found(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """PartitionsControllerAT.whenGetPartitionThenPartitionNotFound (and ...TopicNotFound)."""
    name = make_event_type()
    detail = assert_problem(client.get(f"/event-types/{name}/partitions/43766"), 404)
    assert detail == "partition not found"
    detail = assert_problem(client.get("/event-types/not-existing-topic/partitions/0"), 404)
    assert detail == 'EventType "not-existing-topic" does not exist.'


def test_shifted_cursor_without_shift_is_shifted_by_zero(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """CursorOperationsAT.unshiftCursor: ``[{"partition": "0", "offset": "BEGIN"}]``."""
    name = make_event_type()
    shifted = f"/event-types/{name}/shifted-cursors"
    response = client.post(shifted, json=[{"partition": "0", "offset": "BEGIN"}])
    assert response.status_code == 200, response.text
    assert response.json() == [{"partition": "0", "offset": "001-0001--1"}]
    publish(client, name, [order("1"), order("2")])
    at_first = {"partition": "0", "offset": "001-0001-000000000000000000"}
    assert client.post(shifted, json=[{**at_first, "shift": None}]).json() == [at_first]
    assert client.post(shifted, json=[{**at_first, "shift": 1}]).json() == [
        {"partition": "0", "offset": "001-0001-000000000000000001"}
    ]


def test_content_encoding_on_anything_but_post_is_406(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """CompressedEventPublishingAT.whenGetWithGzipEncodingThenNotAcceptable: Nakadi's filter
    refuses any ``Content-Encoding`` on a method other than POST, before the endpoint runs."""
    name = make_event_type()
    response = client.get(f"/event-types/{name}", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 406
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "title": "Not Acceptable",
        "status": 406,
        "detail": "GET method doesn't support gzip content encoding",
    }
    current = client.get(f"/event-types/{name}").json()
    put = client.put(
        f"/event-types/{name}",
        json={**current, "owning_application": "other"},
        headers={"Content-Encoding": "identity"},
    )
    assert assert_problem(put, 406) == "PUT method doesn't support gzip content encoding"
    assert (
        client.get(f"/event-types/{name}").json()["owning_application"]
        == current["owning_application"]
    )
    deleted = client.delete(f"/event-types/{name}", headers={"Content-Encoding": "gzip"})
    assert assert_problem(deleted, 406) == "DELETE method doesn't support gzip content encoding"
    assert client.get(f"/event-types/{name}").status_code == 200


def test_health_is_nakadis_plain_ok_and_status_says_what_answers(client: httpx.Client) -> None:
    """HealthCheckAT.whenHealthCheckThenOk: ``GET /health`` is 200 with the body ``OK``."""
    health = client.get("/health")
    assert health.status_code == 200
    assert health.text == "OK"
    assert health.headers["content-type"].startswith("text/plain")
    status = client.get("/status")
    assert status.status_code == 200
    assert status.json() == {"status": "OK", "postgres": "OK", "kafka": "OK"}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_status_names_an_unreachable_kafka_while_health_stays_ok(broker_dsn: str) -> None:
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=f"127.0.0.1:{_closed_port()}")
    with (
        serve_in_thread(create_app(settings)) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert http.get("/health").text == "OK"
        status = http.get("/status")
        assert status.status_code == 503
        body = status.json()
        assert body["status"] == "DEGRADED"
        assert body["postgres"] == "OK"
        assert body["kafka"] != "OK" and body["kafka"]


AUTHORIZATION_KEPT = {
    "title": "Unprocessable Entity",
    "status": 422,
    "detail": "Changing authorization object to `null` is not possible due to existing one",
}


def test_dropping_an_authorization_is_nakadis_problem_byte_for_byte(
    client: httpx.Client, unique_name
) -> None:
    """EventTypeAT.whenUpdateETAuthObjectThen422 compares the whole body as text; Nakadi's
    subscriptions refuse it with the same validator and words."""
    owners = [{"data_type": "user", "value": "ops"}]
    authorization = {"admins": owners, "readers": owners, "writers": owners}
    name = unique_name("guarded")
    body = business_event_type(name, authorization=authorization)
    assert client.post("/event-types", json=body).status_code == 201
    response = client.put(f"/event-types/{name}", json={**body, "authorization": None})
    assert response.status_code == 422
    assert response.text == json.dumps(AUTHORIZATION_KEPT, separators=(",", ":"))
    subscription = create(client, [name], authorization={"admins": owners, "readers": owners})
    unguarded = {k: v for k, v in subscription.items() if k != "authorization"}
    response = client.put(f"/subscriptions/{subscription['id']}", json=unguarded)
    assert response.status_code == 422
    assert response.json() == AUTHORIZATION_KEPT


def test_read_from_cursors_without_initial_cursors_is_422_in_nakadis_words(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """SubscriptionAT.testSubscriptionWithReadFromCursorsWithoutInitialCursors (its body has
    ``"initial_cursors": []``; Nakadi reads a missing one as that too)."""
    body = {"owning_application": "x", "event_types": [make_event_type()], "read_from": "cursors"}
    sent: list[dict[str, list[object]]] = [{"initial_cursors": []}, {}]
    for initial_cursors in sent:
        response = client.post("/subscriptions", json={**body, **initial_cursors})
        assert response.json() == {
            "title": "Unprocessable Entity",
            "status": 422,
            "detail": "initial_cursors should contain cursors for all partitions of subscription",
        }


def test_a_url_nakadis_firewall_rejects_is_400_before_authentication(
    client: httpx.Client,
) -> None:
    """InvalidRequestAT.whenRequestRejectedExceptionThrownThenResponseIs400: an encoded slash
    or period, a double slash or a semicolon is a 400 Problem, not a 404; a name with dots
    passes."""
    for path in ("/%2F%2F/", "/event-types//x", "/event-types;x", "/event-types/%2e%2e/x"):
        response = client.get(path)
        assert_problem(response, 400, "potentially malicious")
    assert client.get("/event-types/no.such.type").status_code == 404
