"""A subscription stream's ``stream_limit`` counts committed events, as Nakadi's does: the
stream sends at most that many and ends once that many are committed, its last batch saying
so; uncommitted, it waits for the commits (or its commit timeout)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.broker.subscription_support import Stream, commit, published


def test_the_stream_ends_once_stream_limit_events_are_committed(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    _, subscription_id = published(client, make_event_type, 10)
    stream = Stream(client, subscription_id, batch_limit=1, stream_limit=3, batch_flush_timeout=0.1)
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
    assert sum(len(b.get("events", [])) for b in batches) == 3
    last = batches[-1]
    assert "events" not in last
    assert last["info"]["debug"] == "Stream limit in events reached: 3"
    assert last["cursor"]["offset"].endswith("000000000000000002")


def test_sent_but_uncommitted_the_stream_waits_for_its_commit_timeout(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    _, subscription_id = published(client, make_event_type, 10)
    stream = Stream(client, subscription_id, batch_limit=1, stream_limit=3, commit_timeout=1)
    try:
        batches = stream.until_end()
    finally:
        stream.close()
    assert sum(len(b.get("events", [])) for b in batches) == 3  # no more than the limit
    assert batches[-1]["info"]["debug"] == "Commit timeout reached"
