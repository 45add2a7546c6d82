"""The dead-letter queue of subscriptions, as Nakadi's acceptance tests drive it: streams whose
batches are never committed count failed sends; at the annotated count the partition narrows
to single events, skips the poison pill (to ``nakadi.dead.letter.queue`` when asked) and goes
back to whole batches; a cursor reset forgets it all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from changebroker.broker.subscriptions.dead_letters import (
    MAX_EVENT_SEND_COUNT,
    UNPROCESSABLE_EVENT_POLICY,
)
from tests.broker.stream_support import order, publish
from tests.broker.subscription_support import Stream, commit, create
from tests.broker.swagger import assert_problem

COMMIT_TIMEOUT = "Commit timeout reached"


def _dlq_subscription(
    client: httpx.Client, name: str, policy: str = "SKIP_EVENT", count: int = 3
) -> str:
    annotations = {MAX_EVENT_SEND_COUNT: str(count), UNPROCESSABLE_EVENT_POLICY: policy}
    return str(create(client, [name], read_from="begin", annotations=annotations)["id"])


def _uncommitted_stream(
    client: httpx.Client, subscription_id: str, **params: Any
) -> list[dict[str, Any]]:
    """A stream whose consumer never commits: every batch until the broker ends it."""
    stream = Stream(client, subscription_id, **params)
    try:
        return stream.until_end()
    finally:
        stream.close()


def _offsets(batches: list[dict[str, Any]]) -> list[str]:
    return [b["cursor"]["offset"][-2:] for b in batches if b.get("events")]


def _debug(batches: list[dict[str, Any]]) -> list[str]:
    return [b["info"]["debug"] for b in batches if "info" in b]


@pytest.fixture
def fifty(client: httpx.Client, make_event_type: Callable[..., str]) -> str:
    name = make_event_type(partition_strategy="random", partition_key_fields=None)
    publish(client, name, [order(str(i)) for i in range(50)])
    return name


def test_a_batch_failing_three_times_narrows_to_single_events_then_the_pill_is_skipped(
    client: httpx.Client, fifty: str
) -> None:
    subscription_id = _dlq_subscription(client, fifty)
    params = {"batch_limit": 3, "commit_timeout": 1}
    for _ in range(3):
        batches = _uncommitted_stream(client, subscription_id, **params)
        assert COMMIT_TIMEOUT in _debug(batches)
        assert _offsets(batches)[0] == "02"  # whole batches of three
    # Looking through the failing batch (offsets 0 to 2) one event at a time.
    for _ in range(3):
        batches = _uncommitted_stream(client, subscription_id, **params)
        assert len(batches) == 2, batches  # the single event, then the commit timeout
        assert len(batches[0]["events"]) == 1 and _offsets(batches) == ["00"]
        assert _debug(batches)[-1] == COMMIT_TIMEOUT
    # Offset 0 failed three times alone: skipped, and committed for the consumer.
    batches = _uncommitted_stream(client, subscription_id, **params)
    assert _offsets(batches) == ["01"]
    cursors = client.get(f"/subscriptions/{subscription_id}/cursors").json()["items"]
    assert cursors[0]["offset"].endswith("000000000000000000")


def test_committing_single_events_to_the_end_of_the_batch_goes_back_to_whole_batches(
    client: httpx.Client, fifty: str
) -> None:
    subscription_id = _dlq_subscription(client, fifty)
    params: dict[str, Any] = {"batch_limit": 10, "commit_timeout": 1}
    for _ in range(3):
        assert _offsets(_uncommitted_stream(client, subscription_id, **params))[0] == "09"
    # A consumer committing every batch: ten single events (offsets 0 to 9, the batch that
    # failed), then whole batches again; stream_limit counts the committed ones.
    stream = Stream(client, subscription_id, stream_limit=20, **params)
    batches = []
    try:
        while (batch := stream.batch()) is not None:
            batches.append(batch)
            if batch.get("events"):
                assert (
                    commit(client, subscription_id, stream.id, [batch["cursor"]]).status_code == 204
                )
    finally:
        stream.close()
    sizes = [len(b["events"]) for b in batches if b.get("events")]
    assert sizes == [1] * 10 + [10]
    assert batches[-1]["info"]["debug"] == "Stream limit in events reached: 20"
    assert "events" not in batches[-1]


def test_a_cursor_reset_forgets_the_dead_letter_state(client: httpx.Client, fifty: str) -> None:
    subscription_id = _dlq_subscription(client, fifty)
    params = {"batch_limit": 3, "commit_timeout": 1}
    snapshot = client.get(f"/subscriptions/{subscription_id}/cursors").json()["items"]
    for _ in range(3):
        _uncommitted_stream(client, subscription_id, **params)
    assert _offsets(_uncommitted_stream(client, subscription_id, **params)) == ["00"]
    reset = client.patch(f"/subscriptions/{subscription_id}/cursors", json={"items": snapshot})
    assert reset.status_code == 204, reset.text
    first = _uncommitted_stream(client, subscription_id, **params)
    assert len(first[0]["events"]) == 3


@pytest.mark.parametrize(
    ("annotations", "detail"),
    [
        (
            {MAX_EVENT_SEND_COUNT: "x", UNPROCESSABLE_EVENT_POLICY: "SKIP_EVENT"},
            "must be an integer",
        ),
        (
            {MAX_EVENT_SEND_COUNT: "11", UNPROCESSABLE_EVENT_POLICY: "SKIP_EVENT"},
            "between 2 and 10",
        ),
        ({MAX_EVENT_SEND_COUNT: "3"}, f"{UNPROCESSABLE_EVENT_POLICY} must be also set"),
        ({UNPROCESSABLE_EVENT_POLICY: "SKIP_EVENT"}, f"{MAX_EVENT_SEND_COUNT} must be also set"),
        (
            {MAX_EVENT_SEND_COUNT: "3", UNPROCESSABLE_EVENT_POLICY: "RETRY"},
            "must be one of: SKIP_EVENT, DEAD_LETTER_QUEUE",
        ),
    ],
)
def test_the_annotations_are_checked_in_nakadis_words(
    client: httpx.Client,
    make_event_type: Callable[..., str],
    annotations: dict[str, str],
    detail: str,
) -> None:
    body = {
        "owning_application": "order-service",
        "event_types": [make_event_type()],
        "annotations": annotations,
    }
    assert_problem(client.post("/subscriptions", json=body), 422, detail)
