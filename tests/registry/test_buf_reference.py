"""The registry's Protobuf verdicts over HTTP against Buf's own ``buf breaking`` (WIRE and
WIRE_JSON) on the seeded corpus of tests/registry/protobuf_corpus.py.

Buf judges an evolution as a whole; the registry's FULL mode asks the same question (old
readers of new data and new readers of old data), so on every pair the two must report the
same rules, or the difference is in ``DIFFERENCES`` with its reason, shown on the wire: a
message encoded with one version's classes and decoded with the other's. Run with ``-s`` for
the rates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from google.protobuf.message import DecodeError

from changebroker.registry.compat.protobuf import Category
from tests.registry.buf_reference import buf_rules, package
from tests.registry.protobuf_corpus import Pair, corpus, message_class

PAIRS = corpus()


def _string_to_bytes(old: str, new: str) -> None:
    """A reader of the string refuses what a writer of bytes may write."""
    written = message_class(new, "Value")(value=b"\xff\xfe").SerializeToString()
    with pytest.raises(DecodeError):
        message_class(old, "Value").FromString(written)
    # The other way, the bytes reader takes every string: BACKWARD holds, as Buf says.
    back = message_class(old, "Value")(value="naïve").SerializeToString()
    assert message_class(new, "Value").FromString(back).value == "naïve".encode()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Difference:
    reason: str
    shown: Callable[[str, str], None]  # raises unless the wire shows the reason


DIFFERENCES: dict[tuple[Category, str], Difference] = {
    (Category.WIRE, "type string->bytes"): Difference(
        "Buf lets a string field become bytes; the registry's FULL refuses it because FORWARD"
        " does: a reader of the old string rejects bytes that are not UTF-8 (BACKWARD holds)",
        _string_to_bytes,
    ),
}


def _registry_rules(client: httpx.Client, index: int, pair: Pair, category: Category) -> set[str]:
    """The rules the registry's FULL check of the pair reports, over HTTP."""
    old, new = pair.texts(package(index))
    subject = f"buf-{category.value.lower()}-{index}"
    meta = {
        "tenant": "buf", "namespace": "reference", "status": "released", "format": "PB",
        "compatibility": "FULL", "protobufCategory": category.value,
    }  # fmt: skip
    assert client.post(f"/subjects/{subject}", json=meta).status_code == 200
    registered = client.post(f"/subjects/{subject}/versions", json={"schemaDefinition": old})
    assert registered.status_code == 200, registered.text
    check = client.post(f"/compatibility/subjects/{subject}/versions/latest", json={"schema": new})
    assert check.status_code == 200, check.text
    answer = check.json()
    rules = {violation["rule"] for violation in answer["violations"]}
    assert answer["isCompatible"] == (not rules)
    for violation in answer["violations"]:
        assert violation["path"].startswith("#/") and violation["message"], violation
    return rules


@pytest.fixture(scope="module")
def http(registry_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry_url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("category", list(Category))
def test_registry_agrees_with_buf_or_the_wire_shows_why(
    http: httpx.Client, category: Category
) -> None:
    assert len(PAIRS) >= 300
    reference = buf_rules(PAIRS, category.value)
    with ThreadPoolExecutor(4) as pool:
        ours = list(
            pool.map(
                lambda item: _registry_rules(http, item[0], item[1], category), enumerate(PAIRS)
            )
        )
    assert any(reference) and not all(reference)  # Buf found breaks, and compatible pairs
    unexplained, explained = [], 0
    for index, pair in enumerate(PAIRS):
        if ours[index] == reference[index]:
            continue
        difference = DIFFERENCES.get((category, pair.kind))
        if difference is None:
            unexplained.append(
                f"{pair.kind}: Buf {sorted(reference[index])}, ours {sorted(ours[index])}"
            )
            continue
        difference.shown(*pair.texts(package(index)))
        explained += 1
    same = len(PAIRS) - explained - len(unexplained)
    print(f"\n{category}: {same} of {len(PAIRS)} pairs report Buf's rules exactly;"
          f" {explained} differ for the reasons listed")  # fmt: skip
    assert not unexplained, "\n".join(unexplained)
    assert explained == sum(1 for kind in DIFFERENCES if kind[0] is category)
