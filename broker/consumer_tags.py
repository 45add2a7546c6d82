"""Consumer tags: a publisher's ``X-CONSUMER-TAG: consumer_subscription_id=<uuid>`` makes the
batch's events visible to that subscription only (docs/nakadi-differences.md).

The tag travels with each event as the Kafka record header ``CONSUMER_SUBSCRIPTION_ID``,
as Nakadi stores it, so events tagged by either are read alike. A subscription stream skips
events tagged for another subscription; a low-level stream skips every tagged event.
"""

from __future__ import annotations

from confluent_kafka import Message

from changebroker.broker.errors import Unprocessable
from changebroker.broker.subscriptions.ids import valid_id

HEADER = "X-CONSUMER-TAG"
SUBSCRIPTION_TAG = "CONSUMER_SUBSCRIPTION_ID"
# Nakadi's tags; it sets the second itself, for debugging, and publishers may not.
KNOWN_TAGS = frozenset({SUBSCRIPTION_TAG, "DEBUG_PUBLISHER_TOPIC_ID"})
# What confluent-kafka takes as a record's headers.
KafkaHeaders = list[tuple[str, str | bytes | None]]


class InvalidConsumerTag(Unprocessable):
    """422, as Nakadi answers a malformed ``X-CONSUMER-TAG``."""


def parse(value: str | None) -> KafkaHeaders | None:
    """The Kafka headers a publish's ``X-CONSUMER-TAG`` asks for; None when it has none.

    Nakadi's rules and messages: comma-separated ``tag=value`` pairs, whitespace ignored,
    tag names in any case; the only tag publishers may set is ``consumer_subscription_id``,
    once, and its value is a UUID."""
    if value is None:
        return None
    if not value.strip():
        raise InvalidConsumerTag(f"{HEADER}: is empty!")
    entries = _split(value, ",")
    tags: dict[str, str] = {}
    for entry in entries:
        pair = _split("".join(entry.split()), "=")
        if len(pair) != 2:
            raise InvalidConsumerTag(
                f"header tag parameter is imbalanced, expected: 2 but provided {len(entries)}"
            )
        tag, tagged = pair[0].upper(), pair[1]
        if tag not in KNOWN_TAGS:
            raise InvalidConsumerTag(f"invalid header tag: {pair[0]}")
        if tag in tags:
            raise InvalidConsumerTag(f"duplicate header tag: {tag}")
        if tag != SUBSCRIPTION_TAG:
            raise InvalidConsumerTag(f"header tag unsupported: {pair[0]}")
        if not valid_id(tagged):
            raise InvalidConsumerTag(f"header tag value: {tagged} is not an UUID")
        tags[tag] = tagged
    return [(tag, tagged.encode()) for tag, tagged in tags.items()]


def _split(text: str, separator: str) -> list[str]:
    """``text`` split as Java's ``String.split`` does (trailing empty parts dropped), so
    that ``consumer_subscription_id=,`` is refused with Nakadi's words."""
    parts = text.split(separator)
    while len(parts) > 1 and not parts[-1]:
        parts.pop()
    return parts


def hidden(message: Message, subscription_id: str | None) -> bool:
    """Whether a stream for ``subscription_id`` (None: a low-level stream) skips the event."""
    headers = message.headers()  # read records' headers are a list of (key, bytes)
    if not headers:
        return False
    for key, value in headers if isinstance(headers, list) else headers.items():
        if key.upper() == SUBSCRIPTION_TAG:
            tagged = value.decode() if isinstance(value, bytes) else value
            return subscription_id is None or tagged != subscription_id
    return False
