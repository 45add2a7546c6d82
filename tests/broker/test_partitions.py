"""``GET /event-types/{name}/partitions`` and ``/partitions/{p}``: Nakadi offsets and lag."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import httpx

from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.broker.stream_support import order, publish, two_partition_type
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type


def test_empty_partitions_have_newest_before_the_first_event(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = two_partition_type(make_event_type)
    response = client.get(f"/event-types/{name}/partitions")
    assert response.status_code == 200, response.text
    validate("Partition", response.json(), array=True)
    assert response.json() == [
        {
            "partition": p,
            "oldest_available_offset": "001-0001-000000000000000000",
            "newest_available_offset": "001-0001--1",
        }
        for p in ("0", "1")
    ]


def test_partitions_with_cursors_report_unconsumed_events(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = two_partition_type(make_event_type)
    publish(client, name, [order("a", "0"), order("b", "0"), order("c", "0"), order("d", "1")])
    cursors = [{"partition": "0", "offset": "001-0001-000000000000000000"}]

    response = client.get(
        f"/event-types/{name}/partitions", params={"cursors": json.dumps(cursors)}
    )

    assert response.status_code == 200, response.text
    validate("Partition", response.json(), array=True)
    assert response.json() == [
        {
            "partition": "0",
            "oldest_available_offset": "001-0001-000000000000000000",
            "newest_available_offset": "001-0001-000000000000000002",
            "unconsumed_events": 2,
        },
        # Not every partition needs a cursor; those without have no lag figure.
        {
            "partition": "1",
            "oldest_available_offset": "001-0001-000000000000000000",
            "newest_available_offset": "001-0001-000000000000000000",
        },
    ]
    begin = [{"partition": "1", "offset": "begin"}]
    lagging = client.get(f"/event-types/{name}/partitions", params={"cursors": json.dumps(begin)})
    assert lagging.json()[1]["unconsumed_events"] == 1


def test_one_partition_with_and_without_consumed_offset(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order("1"), order("2"), order("3")])

    plain = client.get(f"/event-types/{name}/partitions/0")
    assert plain.status_code == 200, plain.text
    validate("Partition", plain.json())
    assert plain.json() == {
        "partition": "0",
        "oldest_available_offset": "001-0001-000000000000000000",
        "newest_available_offset": "001-0001-000000000000000002",
    }
    for consumed, unconsumed in [
        ("001-0001-000000000000000002", 0),
        ("001-0001-000000000000000000", 2),
        ("begin", 3),
        ("001-0001--1", 3),
    ]:
        response = client.get(
            f"/event-types/{name}/partitions/0", params={"consumed_offset": consumed}
        )
        assert response.status_code == 200, response.text
        validate("Partition", response.json())
        assert response.json()["unconsumed_events"] == unconsumed, consumed


def test_partition_errors(client: httpx.Client, make_event_type: Callable[..., str]) -> None:
    name = make_event_type()
    publish(client, name, [order("1")])
    assert_problem(client.get("/event-types/no.such.type/partitions"), 404, "does not exist")
    assert_problem(client.get("/event-types/no.such.type/partitions/0"), 404, "does not exist")
    # Nakadi's words (its PartitionsControllerAT).
    assert assert_problem(client.get(f"/event-types/{name}/partitions/9"), 404) == (
        "partition not found"
    )
    assert assert_problem(client.get(f"/event-types/{name}/partitions/\u00b3"), 404) == (
        "partition not found"
    )
    assert_problem(
        client.get(f"/event-types/{name}/partitions/0", params={"consumed_offset": "soon"}),
        422,
        "invalid cursor format, partition: 0 offset: soon",
    )
    assert_problem(
        client.get(
            f"/event-types/{name}/partitions/0",
            params={"consumed_offset": "001-0001-000000000000000009"},
        ),
        422,
        "invalid offset 001-0001-000000000000000009 for partition 0",
    )
    assert_problem(
        client.get(f"/event-types/{name}/partitions", params={"cursors": "[{"}), 400, "JSON array"
    )
    assert_problem(
        client.get(
            f"/event-types/{name}/partitions",
            params={"cursors": json.dumps([{"partition": "3", "offset": "begin"}])},
        ),
        422,
        "non existing partition 3",
    )


def _watermark_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("watermarks"))


def test_app_shutdown_closes_the_watermark_consumer(
    broker_dsn: str, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    before = _watermark_threads()
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap)
    with serve_in_thread(create_app(settings)) as url, httpx.Client(base_url=url) as http:
        name = unique_name("marks")
        assert http.post("/event-types", json=business_event_type(name)).status_code == 201
        # The first watermark question creates the consumer on the watermarks thread.
        assert http.get(f"/event-types/{name}/partitions").status_code == 200
        assert _watermark_threads() == before + 1
    assert _watermark_threads() == before
