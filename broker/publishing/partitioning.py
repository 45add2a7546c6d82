"""Which partition an event goes to: random, hash (as Nakadi computes it), user_defined.

Nakadi's hash: for each key field, the field's value as Java's ``toString``
renders it (strings as they are, other JSON values as compact JSON), its Java
``String.hashCode``; the sum in 32-bit arithmetic; ``abs`` of it modulo the
partition count indexes the partition ids sorted as strings ("10" before "2").
Data change events read key fields relative to ``data``. An Avro event carries what places
it in its metadata record: ``partition`` (user_defined) or ``partition_keys`` (hash).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from changebroker.numerals import whole_number

STRATEGIES = ("random", "hash", "user_defined")


class PartitioningError(ValueError):
    """The event cannot be placed; the message says why."""


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units."""
    h = 0
    if text.isascii():
        # One UTF-16 unit per ASCII character: its byte value.
        for unit in text.encode("ascii"):
            h = (31 * h + unit) & 0xFFFFFFFF
        return _int32(h)
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + (encoded[i] << 8 | encoded[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def java_to_string(value: Any) -> str:
    """How org.json's ``get(path).toString()`` renders a JSON value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)  # as json.dumps writes it, without its cost
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@functools.cache
def _string_sorted_ids(partitions: int) -> tuple[int, ...]:
    """Partition ids in Nakadi's order: sorted as strings, so 10 comes before 2."""
    return tuple(int(p) for p in sorted(str(p) for p in range(partitions)))


def user_defined_partition(event: Mapping[str, Any], partitions: int) -> int:
    metadata = event.get("metadata")
    return _chosen(metadata.get("partition") if isinstance(metadata, Mapping) else None, partitions)


def _chosen(chosen: Any, partitions: int) -> int:
    if not isinstance(chosen, str) or not whole_number(chosen) or int(chosen) >= partitions:
        raise PartitioningError(
            f"metadata.partition must name one of the partitions '0'..'{partitions - 1}'"
            f" (user_defined strategy); got {chosen!r}"
        )
    return int(chosen)


Partitioner = Callable[[Mapping[str, Any]], int]


def partitioner(
    strategy: str, key_fields: Sequence[str], category: str, partitions: int
) -> Partitioner:
    """The event -> partition function of one event type, its key paths split once."""
    if strategy == "user_defined":
        return functools.partial(user_defined_partition, partitions=partitions)
    if strategy != "hash":
        return lambda _event: random.randrange(partitions)
    paths = [tuple((f"data.{f}" if category == "data" else f).split(".")) for f in key_fields]
    ids = _string_sorted_ids(partitions)

    def hashed(event: Mapping[str, Any]) -> int:
        total = 0
        for path in paths:
            node: Any = event
            for part in path:
                if not isinstance(node, dict) or part not in node:
                    raise PartitioningError(
                        f"partition key field {'.'.join(path)!r} is missing from the event"
                    )
                node = node[part]
            total += java_string_hash(java_to_string(node))
        return _hashed(total, ids)

    return hashed


def _hashed(total: int, ids: tuple[int, ...]) -> int:
    # Where Java's abs overflows (a sum of exactly -2^31) Nakadi itself fails; we take 2^31.
    return ids[abs(_int32(total)) % len(ids)]


def metadata_partitioner(strategy: str, partitions: int) -> Partitioner:
    """The Avro metadata record -> partition function of one event type."""
    if strategy == "user_defined":
        return lambda metadata: _chosen(metadata.get("partition"), partitions)
    if strategy != "hash":
        return lambda _metadata: random.randrange(partitions)
    ids = _string_sorted_ids(partitions)

    def hashed(metadata: Mapping[str, Any]) -> int:
        keys = metadata.get("partition_keys")
        if not keys:
            raise PartitioningError(
                "Cannot calculate hash value for partitioning: partition keys not set."
            )
        return _hashed(sum(java_string_hash(key) for key in keys), ids)

    return hashed
