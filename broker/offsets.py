"""Nakadi offsets on the wire: ``001-<timeline, 4 hex>-<kafka offset, 18 digits>``.

A cursor names the last event consumed, so reading resumes at ``offset + 1``;
``-1`` (written ``001-0001--1``) is "before the first event". ``begin`` (any
case) means before the oldest event still available, which the caller resolves
against the partition's low watermark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN = "begin"
OFFSET_DIGITS = 18
# Nakadi's version of the offset format; the only one it and we write.
FORMAT_VERSION = "001"

_OFFSET = re.compile(r"^001-([0-9a-fA-F]{4})-(-1|[0-9]{1,18})$")
# Nakadi clients from before timelines send bare Kafka offsets (the manual's "12").
_LEGACY = re.compile(r"^(-1|[0-9]{1,18})$")


class OffsetFormatError(ValueError):
    """The text is neither ``begin`` nor an offset in Nakadi's format."""


@dataclass(frozen=True)
class Offset:
    """A parsed cursor offset: ``begin``, or the last consumed Kafka offset (-1 = none)."""

    kafka_offset: int | None
    timeline: int

    @property
    def is_begin(self) -> bool:
        return self.kafka_offset is None


def format_offset(kafka_offset: int, timeline: int = 1) -> str:
    """``format_offset(1)`` -> ``"001-0001-000000000000000001"``; ``-1`` -> ``"001-0001--1"``."""
    digits = "-1" if kafka_offset < 0 else f"{kafka_offset:0{OFFSET_DIGITS}d}"
    return f"{FORMAT_VERSION}-{timeline:04x}-{digits}"


def parse_offset(text: str, timeline: int = 1) -> Offset:
    """Parse a cursor's offset; a bare number is taken on ``timeline`` (legacy clients)."""
    if text.lower() == BEGIN:
        return Offset(None, timeline)
    match = _OFFSET.match(text)
    if match is not None:
        return Offset(int(match.group(2)), int(match.group(1), 16))
    if _LEGACY.match(text):
        return Offset(int(text), timeline)
    raise OffsetFormatError(text)
