"""The access policy (broker/authorization.py) as plain data in, an answer out: who is refused,
in which words, in which order the layers are asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from changebroker.auth import ANONYMOUS, Principal
from changebroker.broker import authorization as policy
from changebroker.broker.authorization import (
    EVENT_TYPE_BLOCKED,
    SUBSCRIPTION_BLOCKED,
    Administration,
    Operation,
    Refusal,
)

SHOP = Principal("shop")
BI = Principal("bi")
AUDITOR = Principal("auditor")  # reads as an administrator, administers nothing
OPS = Principal("ops")


def attributes(*names: str) -> list[dict[str, str]]:
    return [{"data_type": "service", "value": name} for name in names]


def section(admins: tuple[str, ...] = (), readers: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "admins": attributes(*admins),
        "readers": attributes(*readers),
        "writers": attributes(*admins),
    }


def administration(*blocked: tuple[str, str]) -> Administration:
    admins = {
        "admins": attributes("ops"),
        "readers": attributes("ops", "auditor"),
        "writers": attributes("ops"),
    }
    return Administration(admins, frozenset(blocked), {})


SHOPS: Mapping[str, Any] = section(admins=("shop",), readers=("shop",))


def test_a_writer_publishes_another_is_refused_in_the_words_of_the_lists() -> None:
    assert policy.publish_refusal(SHOP, "orders", SHOPS, administration()) is None
    refused = policy.publish_refusal(BI, "orders", SHOPS, administration())
    assert refused == Refusal("write event type orders", "not one of the writers")
    assert refused.detail == "Access on write event type orders denied: not one of the writers"
    # Without a section, every authenticated caller writes.
    assert policy.publish_refusal(BI, "orders", None, administration()) is None


def test_an_event_types_block_holds_for_everyone_an_applications_for_its_token() -> None:
    blocked_type = administration(("PRODUCER_ET", "orders"))
    for caller in (SHOP, OPS, ANONYMOUS):
        refused = policy.publish_refusal(caller, "orders", SHOPS, blocked_type)
        assert refused is not None and refused.detail == EVENT_TYPE_BLOCKED, caller
    blocked_app = administration(("PRODUCER_APP", "shop"))
    assert policy.publish_refusal(SHOP, "orders", SHOPS, blocked_app) is not None
    # With authentication off no token names the application.
    assert (
        policy.publish_refusal(Principal("shop", unrestricted=True), "orders", None, blocked_app)
        is None
    )


def test_administrators_read_as_their_readers_list_says_and_administer_as_their_admins() -> None:
    every: tuple[Operation, ...] = ("read", "write", "admin")
    for operation in every:
        assert (
            policy.resource_refusal(OPS, SHOPS, operation, "event type x", administration()) is None
        )
    assert policy.resource_refusal(AUDITOR, SHOPS, "read", "event type x", administration()) is None
    for operation in every[1:]:
        refused = policy.resource_refusal(
            AUDITOR, SHOPS, operation, "event type x", administration()
        )
        assert refused is not None, operation
    refused = policy.admin_refusal(AUDITOR, administration(), "write", "PUT /settings/x")
    assert refused == Refusal("PUT /settings/x", "not one of the broker's administrators (writers)")


def test_consuming_asks_the_block_then_the_subscription_then_each_event_type() -> None:
    sections = {"orders": SHOPS, "payments": section(readers=("bi",))}
    subscription = ("s-1", section(readers=("bi",)))
    blocked = administration(("CONSUMER_ET", "payments"))
    refused = policy.consume_refusal(
        SHOP, sections, blocked, subscription, words=SUBSCRIPTION_BLOCKED
    )
    assert refused is not None and refused.detail == SUBSCRIPTION_BLOCKED
    refused = policy.consume_refusal(SHOP, sections, administration(), subscription)
    assert refused == Refusal("read subscription s-1", "not one of the readers")
    refused = policy.consume_refusal(BI, sections, administration(), subscription)
    assert refused == Refusal("read event type orders", "not one of the readers")
    assert policy.consume_refusal(AUDITOR, sections, administration(), subscription) is None


def test_deleting_while_disabled_is_for_the_administrators_alone() -> None:
    assert policy.deletion_refusal(SHOP, "orders", administration(), disabled=False) is None
    assert policy.deletion_refusal(OPS, "orders", administration(), disabled=True) is None
    refused = policy.deletion_refusal(SHOP, "orders", administration(), disabled=True)
    assert refused is not None and refused.detail == "Event Type deletion is disabled"


def test_a_stream_learns_why_its_reader_lost_access() -> None:
    sections = {"orders": SHOPS}
    assert policy.lost_read(SHOP, sections, administration()) is None
    assert (
        policy.lost_read(BI, sections, administration()) == "no longer one of the readers of orders"
    )
    lost = policy.lost_read(SHOP, sections, administration(), section(readers=("bi",)))
    assert lost == "no longer one of the subscription's readers"
    assert policy.lost_read(AUDITOR, sections, administration(), section()) is None
