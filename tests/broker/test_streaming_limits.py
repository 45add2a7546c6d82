"""The stream's query parameters: Nakadi's defaults and how it reads 0 and out-of-range values."""

from __future__ import annotations

import pytest

from changebroker.broker.streams.event_stream import LimitError, StreamLimits, parse_limits


def test_defaults_are_nakadis() -> None:
    assert parse_limits({}) == StreamLimits(
        batch_limit=1,
        stream_limit=0,
        batch_flush_timeout=30.0,
        stream_timeout=3600.0,
        stream_keep_alive_limit=0,
    )


def test_zero_means_the_default_and_timeouts_past_4200_s_mean_unspecified() -> None:
    assert parse_limits({"batch_flush_timeout": "0"}).batch_flush_timeout == 30.0
    assert parse_limits({"stream_timeout": "0"}).stream_timeout == 3600.0
    assert parse_limits({"stream_timeout": "5000"}).stream_timeout == 3600.0
    assert parse_limits({"stream_timeout": "4200"}).stream_timeout == 4200.0
    # A flush timeout above 30 s is checked against the default stream timeout, not 0.
    assert parse_limits({"batch_flush_timeout": "40"}).batch_flush_timeout == 40.0


def test_given_values_are_kept() -> None:
    assert parse_limits(
        {
            "batch_limit": "10",
            "stream_limit": "100",
            "batch_flush_timeout": "2",
            "stream_timeout": "60",
            "stream_keep_alive_limit": "3",
        }
    ) == StreamLimits(10, 100, 2.0, 60.0, 3)


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ({"batch_limit": "0"}, "batch_limit can't be lower than 1"),
        ({"batch_limit": "1.5"}, "batch_limit must be a whole number"),
        ({"stream_limit": "-1"}, "stream_limit must be a number >= 0"),
        ({"batch_limit": "5", "stream_limit": "4"}, "stream_limit can't be lower than batch_limit"),
        ({"batch_flush_timeout": "nan"}, "batch_flush_timeout must be a number >= 0"),
        (
            {"batch_flush_timeout": "40", "stream_timeout": "30"},
            "stream_timeout can't be lower than batch_flush_timeout",
        ),
    ],
)
def test_contradictions_and_bad_numbers(query: dict[str, str], detail: str) -> None:
    with pytest.raises(LimitError, match=detail.replace("(", r"\(")):
        parse_limits(query)
