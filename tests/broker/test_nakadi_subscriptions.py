"""The ``/subscriptions`` resource and its stats as Nakadi's acceptance tests (``SubscriptionAT``,
``HilaAT``) and its JSON read them, on the real broker and Kafka.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx

from tests.broker.subscription_support import Stream, create, published
from tests.broker.swagger import assert_problem, validate


def service(name: str) -> dict[str, str]:
    return {"data_type": "service", "value": name}


def test_put_keeps_annotations_and_labels(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (testSubscriptionAnnotationLabelIsUpdated): PUT /subscriptions/{id} with
    annotations {"foo": "bar"} and labels {"kar": "booz"} answers 204 and GET shows them; a PUT
    without them keeps them. Before, 204 and they were dropped."""
    name = make_event_type()
    subscription = create(client, [name])
    sid = subscription["id"]
    changed = {**subscription, "annotations": {"foo": "bar"}, "labels": {"kar": "booz"}}
    assert client.put(f"/subscriptions/{sid}", json=changed).status_code == 204
    got = client.get(f"/subscriptions/{sid}").json()
    assert (got["annotations"], got["labels"]) == ({"foo": "bar"}, {"kar": "booz"})
    assert client.put(f"/subscriptions/{sid}", json=subscription).status_code == 204
    got = client.get(f"/subscriptions/{sid}").json()
    assert (got["annotations"], got["labels"]) == ({"foo": "bar"}, {"kar": "booz"})
    # Keys and values as Nakadi's validation allows them.
    bad = {**subscription, "labels": {"": "x"}}
    assert_problem(client.put(f"/subscriptions/{sid}", json=bad), 422, "Key cannot be empty")
    created = create(client, [name], consumer_group="labelled", labels={"team": "orders"})
    assert created["labels"] == {"team": "orders"}


def test_an_authorization_without_admins_or_readers_is_422(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (testSubscriptionWithNullAuthorisation): POST /subscriptions with authorization
    {"admins": [], "readers": []} answers 422 "Unprocessable Entity". Before, 201."""
    name = make_event_type()
    body = {
        "owning_application": "app",
        "event_types": [name],
        "read_from": "end",
        "consumer_group": "test",
        "authorization": {"admins": [], "readers": []},
    }
    refused = client.post("/subscriptions", json=body)
    detail = assert_problem(refused, 422)
    assert refused.json()["title"] == "Unprocessable Entity"
    assert detail == 'Field "authorization.admins" must contain at least one attribute'


def test_a_subscription_is_written_with_nakadis_nulls_and_empty_lists(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi writes what was never set as null (authorization, annotations, labels) or []
    (initial_cursors), in its field order. Before, those fields were left out."""
    name = make_event_type()
    created = client.post(
        "/subscriptions", json={"owning_application": "app", "event_types": [name]}
    )
    assert created.status_code == 201
    body = created.json()
    assert list(body) == [
        "owning_application",
        "event_types",
        "consumer_group",
        "read_from",
        "initial_cursors",
        "authorization",
        "annotations",
        "labels",
        "id",
        "created_at",
        "updated_at",
    ]
    assert (body["initial_cursors"], body["authorization"]) == ([], None)
    assert (body["annotations"], body["labels"]) == (None, None)
    assert client.get(f"/subscriptions/{body['id']}").json() == body


def test_a_full_page_links_to_the_next_one(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (testQuerySubscriptionByAuthReturnsOk): two subscriptions read by service:X;
    GET /subscriptions?reader=service:X&limit=2 answers both, newest first, and _links.next
    "/subscriptions?reader=service:X&offset=2&limit=2". Before, no next link (no third one)."""
    name = make_event_type()
    reader = f"stups_test-app{uuid.uuid4().hex[:8]}"
    authorization = {"admins": [service(reader)], "readers": [service(reader)]}
    ids = [
        create(client, [name], consumer_group=f"test-{g}", authorization=authorization)["id"]
        for g in ("first-group", "second-group")
    ]
    page = client.get("/subscriptions", params={"reader": f"service:{reader}", "limit": 2})
    assert page.status_code == 200
    assert [s["id"] for s in page.json()["items"]] == ids[::-1]
    assert page.json()["_links"] == {
        "next": {"href": f"/subscriptions?reader=service:{reader}&offset=2&limit=2"}
    }
    following = client.get(page.json()["_links"]["next"]["href"])
    assert following.json() == {
        "items": [],
        "_links": {"prev": {"href": f"/subscriptions?reader=service:{reader}&offset=0&limit=2"}},
    }


def test_stats_of_a_subscription_never_streamed_name_no_stream(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenStatsOnNotInitializedSubscriptionThenCorrectResponse,
    whenLightStatsOnNotInitializedSubscriptionThenCorrectResponse): an unassigned partition has
    "stream_id": "" and no unconsumed_events, in the stats and the listing's status. Before,
    no stream_id."""
    name = make_event_type()
    sid = create(client, [name], owning_application=f"app-{uuid.uuid4().hex[:8]}")["id"]
    stats = client.get(f"/subscriptions/{sid}/stats").json()
    assert stats == {
        "items": [
            {
                "event_type": name,
                "partitions": [{"partition": "0", "state": "unassigned", "stream_id": ""}],
            }
        ]
    }
    owner = client.get(f"/subscriptions/{sid}").json()["owning_application"]
    listed = client.get(
        "/subscriptions", params={"owning_application": owner, "show_status": "true"}
    )
    (item,) = listed.json()["items"]
    assert item["status"] == stats["items"]


def test_stats_keep_nakadis_field_order_and_whole_seconds_of_lag(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (testGetSubscriptionStat): with 15 events read and none committed, the stats'
    text holds {"partition":"0","state":"assigned","unconsumed_events":15,"stream_id":...,
    "assignment_type":"auto"}, clients comparing it as text; consumer_lag_seconds is a whole
    number (a fraction made a Java client fail). Before, the stream fields came first and the
    lag had a fraction."""
    _name, sid = published(client, make_event_type, 15)
    stream = Stream(client, sid, max_uncommitted_events=20, batch_flush_timeout=0.2)
    try:
        stream.read_events(15)
        text = client.get(f"/subscriptions/{sid}/stats").text
        expected = {
            "partition": "0",
            "state": "assigned",
            "unconsumed_events": 15,
            "stream_id": stream.id,
            "assignment_type": "auto",
        }
        assert json.dumps(expected, separators=(",", ":")) in text
        lagging = client.get(f"/subscriptions/{sid}/stats", params={"show_time_lag": "true"})
        (partition,) = lagging.json()["items"][0]["partitions"]
        validate("SubscriptionEventTypeStats", lagging.json()["items"][0])
        assert list(partition)[:4] == [
            "partition",
            "state",
            "unconsumed_events",
            "consumer_lag_seconds",
        ]
        assert isinstance(partition["consumer_lag_seconds"], int)
        assert '"consumer_lag_seconds":' in lagging.text
        lag_text = lagging.text.split('"consumer_lag_seconds":')[1].split(",")[0]
        assert lag_text.isdigit(), lag_text
    finally:
        stream.close()
