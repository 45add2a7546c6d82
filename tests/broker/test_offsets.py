"""Offsets: ``001-<timeline, 4 hex>-<kafka offset, 18 digits>``; ``begin`` is before the first."""

from __future__ import annotations

import re

import pytest

from changebroker.broker.streams.cursors import (
    Offset,
    OffsetFormatError,
    format_offset,
    parse_offset,
)
from tests.broker.stream_support import OFFSET_PATTERN


def test_format_pads_kafka_offsets_to_18_digits_on_timeline_1() -> None:
    assert format_offset(0) == "001-0001-000000000000000000"
    assert format_offset(1) == "001-0001-000000000000000001"
    assert format_offset(123456789012345678) == "001-0001-123456789012345678"
    assert re.match(OFFSET_PATTERN, format_offset(42))


def test_before_the_first_event_is_minus_one() -> None:
    assert format_offset(-1) == "001-0001--1"
    assert parse_offset("001-0001--1") == Offset(-1, 1)


def test_timeline_is_four_hex_digits() -> None:
    assert format_offset(5, timeline=26) == "001-001a-000000000000000005"
    assert parse_offset("001-001A-000000000000000005") == Offset(5, 26)


@pytest.mark.parametrize("text", ["begin", "BEGIN", "Begin"])
def test_begin_in_any_case(text: str) -> None:
    assert parse_offset(text).is_begin


def test_round_trip_and_legacy_bare_offsets() -> None:
    assert parse_offset(format_offset(77)) == Offset(77, 1)
    # The manual's pre-timeline cursors ("offset": "12") name a Kafka offset directly.
    assert parse_offset("12") == Offset(12, 1)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "end",
        "001-0001-",
        "002-0001-000000000000000001",
        "001-1-000000000000000001",
        "001-0001-0000000000000000001",
        "001-0001--2",
        "-5",
        "1.5",
        "001-0001-x",
    ],
)
def test_malformed_offsets_are_refused(text: str) -> None:
    with pytest.raises(OffsetFormatError):
        parse_offset(text)
