"""What can name a subscription or a stream: ids the store, the stream API and consumer
tags (a publish's ``X-CONSUMER-TAG``) check alike, before Postgres sees them."""

from __future__ import annotations

import re

# A UUID as Postgres reads one: hyphenated or not, either case. Python's uuid.UUID also takes
# forms Postgres refuses ("urn:uuid:...", braces, hyphens anywhere), which would fail there.
_UUID = re.compile(r"[0-9a-f]{8}(-?)[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{12}", re.I)


def valid_id(text: str) -> bool:
    """Whether ``text`` can name a subscription or a stream (both are UUIDs)."""
    return _UUID.fullmatch(text) is not None
