"""The assignment rule alone: balanced by partition count, few moves, direct requests first."""

from __future__ import annotations

from collections import Counter

from changebroker.broker.subscriptions.rebalance import Slot, assign

KEYS = [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3)]


def test_one_stream_gets_six_and_a_second_makes_it_three_and_three_moving_only_three() -> None:
    alone = assign(KEYS, [Slot("one")], {})
    assert set(alone.values()) == {"one"}
    shared = assign(KEYS, [Slot("one"), Slot("two")], {k: "one" for k in KEYS})
    assert Counter(shared.values()) == {"one": 3, "two": 3}
    moved = [k for k in KEYS if shared[k] != alone[k]]
    assert len(moved) == 3


def test_a_stream_keeps_what_it_has_while_within_its_share() -> None:
    current = {("a", 0): "one", ("a", 1): "two", ("b", 0): "one", ("b", 1): "two"}
    target = assign(KEYS, [Slot("one"), Slot("two"), Slot("three")], current)
    assert Counter(target.values()) == {"one": 2, "two": 2, "three": 2}
    assert all(target[k] == owner for k, owner in current.items())


def test_direct_requests_win_and_the_rest_is_balanced_among_the_others() -> None:
    current = {k: "auto1" for k in KEYS}
    streams = [Slot("auto1"), Slot("auto2"), Slot("direct", frozenset({("b", 3), ("a", 0)}))]
    target = assign(KEYS, streams, current)
    assert target[("b", 3)] == target[("a", 0)] == "direct"
    assert Counter(target.values()) == {"direct": 2, "auto1": 2, "auto2": 2}


def test_with_only_direct_streams_the_partitions_nobody_asked_for_wait() -> None:
    target = assign(KEYS, [Slot("direct", frozenset({("a", 1)}))], {})
    assert target == {k: ("direct" if k == ("a", 1) else None) for k in KEYS}
