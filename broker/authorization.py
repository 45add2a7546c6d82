"""The broker's access policy: who may do what, as Nakadi decides it, from plain data.

Every function here answers from what it is given (the caller, an ``authorization`` section,
the broker's :class:`Administration`) and does no I/O: ``changebroker.broker.access`` (the
gate) fetches that data from the stores and refuses, with an audit line, what a ``*_refusal``
function here names. Three layers, each answering 403 (after authentication answered 401):

- OAuth2 scopes per endpoint (``Scopes.table``), as the Nakadi API's ``security`` sections list
  them; the scope names are configurable. ``AuthMiddleware`` asks the table before any route
  runs. A route the table does not name needs ``config_write``, the strictest scope: a route
  added without its rule is closed, never open. ``OPEN_PATHS`` need no credentials at all.
- Per-resource authorization: an event type's ``authorization`` has ``admins`` (update,
  delete), ``readers`` (streams, cursors) and ``writers`` (publishing); a subscription's has
  ``admins`` and ``readers``. Each is a list of attributes ``{"data_type", "value"}``; a caller
  matches one when the data type is its type (or ``*``) and the value its subject (or ``*``).
  A resource without an ``authorization`` section is open to every authenticated caller.
- The broker's administration (``/settings``, kept by ``changebroker.broker.admin_settings``):
  its administrators pass every per-resource check; its blacklist blocks applications and
  event types from publishing or consuming, whoever asks.

With authentication off every caller is unrestricted and only an event type's block refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from changebroker.auth import Principal, ScopeTable, rule
from changebroker.broker.errors import BadRequest

# Served to every caller, credentials or none: load balancers probe /health without them.
OPEN_PATHS = frozenset({"/health"})

# Nakadi's answers to a blocked consumer or producer (403).
EVENT_TYPE_BLOCKED = "Application or event type is blocked"
SUBSCRIPTION_BLOCKED = "Application or subscription is blocked"

Operation = Literal["admin", "read", "write"]
LISTS: dict[Operation, str] = {"admin": "admins", "read": "readers", "write": "writers"}


@dataclass(frozen=True)
class Scopes:
    """Nakadi's scope names (configurable: an issuer may name them otherwise)."""

    config_write: str = "nakadi.config.write"
    event_type_write: str = "nakadi.event_type.write"
    event_stream_write: str = "nakadi.event_stream.write"
    event_stream_read: str = "nakadi.event_stream.read"

    def table(self) -> ScopeTable:
        """The scope each route needs, as the API's ``security`` sections say (None: any
        authenticated caller; the settings' own administrators decide there). Every route the
        broker serves has its rule here, or is one of ``OPEN_PATHS``
        (tests/broker/test_route_scopes.py walks them); any other method or path needs
        ``config_write``, the strictest: Nakadi's scope for deleting event types and its
        configuration, the one no reader or writer holds."""
        name = r"/event-types/[^/]+"
        subscription = r"/subscriptions/[^/]+"
        read, write = self.event_stream_read, self.event_stream_write
        return ScopeTable(
            (
                # Publishing first: the most frequent request.
                rule("POST", name + "/events", write),
                rule("GET", name + "/events", read),
                rule("GET", r"/event-types/?", None),
                rule("POST", r"/event-types/?", self.event_type_write),
                rule("GET", name, None),
                rule("PUT", name, self.event_type_write),
                rule("DELETE", name, self.config_write),
                rule("GET", name + r"/(schemas(/[^/]+)?|timelines)", None),
                rule("POST", name + "/schemas", self.event_type_write),
                rule("POST", name + "/deleted-events", write),
                rule("GET", name + r"/partitions(/[^/]+)?", read),
                rule("POST", name + "/(cursor-distances|cursors-lag|shifted-cursors)", read),
                rule("GET POST", r"/subscriptions", read),
                rule("GET PUT DELETE", subscription, read),
                rule("GET POST", subscription + "/events", read),
                rule("GET POST PATCH", subscription + "/cursors", read),
                rule("GET", subscription + "/stats", read),
                rule("GET", r"/registry/(enrichment|partition)-strategies", read),
                rule("GET POST", r"/settings/(admins|features)", None),
                rule("GET", r"/settings/blacklist", None),
                rule("PUT DELETE", r"/settings/blacklist/[^/]+/[^/]+", None),
                rule("GET", r"/(metrics|status)", None),
                # Nakadi's envelope schemas for Avro clients: any authenticated caller.
                rule("GET", r"/avro-schemas/[^/]+/versions(/[^/]+)?", None),
                # Storages, timelines and repartitioning: no scope, the broker's administrators
                # decide (broker/timelines/api.py), as Nakadi's API names no scope there.
                rule("GET POST", r"/storages", None),
                rule("GET DELETE", r"/storages/[^/]+", None),
                rule("PUT", r"/storages/default/[^/]+", None),
                rule("POST", name + "/timelines", None),
                rule("PUT", name + "/partition-count", None),
            ),
            strictest=self.config_write,
        )


def matches(attribute: Mapping[str, Any], principal: Principal) -> bool:
    data_type, value = attribute.get("data_type"), attribute.get("value")
    return data_type in ("*", principal.type) and value in ("*", principal.sub)


def attribute_query(text: str) -> Principal:
    """A listing's ``writer`` / ``reader`` parameter, ``<data_type>:<value>``, as the caller it
    names; 400 when it is not that."""
    data_type, colon, value = text.partition(":")
    if not colon or not data_type or not value or ":" in value:
        raise BadRequest(f"{text!r} is not <data_type>:<value>, e.g. service:shop")
    return Principal(value, data_type)


def section_problem(section: object, names: Sequence[str]) -> str | None:
    """Why ``section`` is not an ``authorization`` object whose lists ``names`` each hold at
    least one attribute, or None; as Nakadi words it."""
    if not isinstance(section, Mapping):
        return 'Field "authorization" must be an object'
    for name in names:
        attributes = section.get(name)
        if not isinstance(attributes, list) or not attributes:
            return f'Field "authorization.{name}" must contain at least one attribute'
        for attribute in attributes:
            if not (
                isinstance(attribute, Mapping)
                and isinstance(attribute.get("data_type"), str)
                and isinstance(attribute.get("value"), str)
            ):
                return f'Field "authorization.{name}" items must have string data_type and value'
    return None


def lists(authorization: Mapping[str, Any] | None, operation: Operation, who: Principal) -> bool:
    """Does the section's list for ``operation`` name ``who``, by name or by a wildcard? (A
    resource without a section lists nobody: the listings' filters ask who is named.)"""
    return any(matches(a, who) for a in (authorization or {}).get(LISTS[operation]) or ())


def listed(principal: Principal, attributes: Sequence[Mapping[str, Any]] | None) -> bool:
    return principal.unrestricted or any(matches(a, principal) for a in attributes or ())


def allowed(
    principal: Principal, authorization: Mapping[str, Any] | None, operation: Operation
) -> bool:
    """May ``principal`` do ``operation`` on a resource with this ``authorization`` section
    (the broker's administrators aside)?"""
    if principal.unrestricted or not authorization:
        return True
    return listed(principal, authorization.get(LISTS[operation]))


# -- the broker's administration, and what it decides ------------------------------------


@dataclass(frozen=True)
class Administration:
    """What ``/settings`` holds: the administrators (an ``authorization`` section whose
    ``readers`` read the settings, ``writers`` change the blacklist and features, ``admins``
    the administrators), the blacklist as (type, name) pairs and the features switched."""

    admins: Mapping[str, Any]
    blacklist: frozenset[tuple[str, str]]
    features: Mapping[str, bool]

    def blocked(self, kind: str, name: str) -> bool:
        return (kind, name) in self.blacklist


def is_admin(principal: Principal, administration: Administration, operation: Operation) -> bool:
    """Does the administrators' list for ``operation`` name ``principal``?"""
    if principal.unrestricted:
        return True
    return listed(principal, administration.admins.get(LISTS[operation]))


def _blocked(
    principal: Principal,
    event_types: Sequence[str],
    administration: Administration,
    app_kind: str,
    et_kind: str,
) -> bool:
    """An event type's block holds for every caller, authenticated or not; an application's for
    the application a token names (with authentication off none does)."""
    if any(administration.blocked(et_kind, name) for name in event_types):
        return True
    return not principal.unrestricted and administration.blocked(app_kind, principal.sub)


def consumer_blocked(
    principal: Principal, event_types: Sequence[str], administration: Administration
) -> bool:
    return _blocked(principal, event_types, administration, "CONSUMER_APP", "CONSUMER_ET")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: the ``action`` and ``reason`` the audit line names, and the
    Problem's ``detail`` (Nakadi's own words where it has them)."""

    action: str
    reason: str
    words: str | None = None

    @property
    def detail(self) -> str:
        return self.words or f"Access on {self.action} denied: {self.reason}"


def resource_refusal(
    principal: Principal,
    section: Mapping[str, Any] | None,
    operation: Operation,
    resource: str,
    administration: Administration,
) -> Refusal | None:
    """Unless ``section`` lets ``principal`` do ``operation`` on ``resource`` (or the caller is
    one of the broker's administrators: its readers for reading, its admins otherwise)."""
    if allowed(principal, section, operation):
        return None
    if is_admin(principal, administration, "read" if operation == "read" else "admin"):
        return None
    return Refusal(f"{operation} {resource}", f"not one of the {LISTS[operation]}")


def admin_refusal(
    principal: Principal, administration: Administration, operation: Operation, action: str
) -> Refusal | None:
    """Unless the administrators' list for ``operation`` names ``principal``."""
    if is_admin(principal, administration, operation):
        return None
    return Refusal(action, f"not one of the broker's administrators ({LISTS[operation]})")


def publish_refusal(
    principal: Principal,
    event_type: str,
    section: Mapping[str, Any] | None,
    administration: Administration,
) -> Refusal | None:
    """Unless ``principal`` is one of the event type's writers, and neither it nor the event
    type is blocked from producing."""
    if _blocked(principal, [event_type], administration, "PRODUCER_APP", "PRODUCER_ET"):
        return Refusal(f"publish to {event_type}", "blocked", EVENT_TYPE_BLOCKED)
    return resource_refusal(principal, section, "write", f"event type {event_type}", administration)


def consumer_block_refusal(
    principal: Principal,
    event_types: Sequence[str],
    administration: Administration,
    words: str = EVENT_TYPE_BLOCKED,
) -> Refusal | None:
    """When the application or one of the event types is blocked from consuming (the Problem
    saying ``words``)."""
    if consumer_blocked(principal, event_types, administration):
        return Refusal(f"consume {','.join(event_types)}", "blocked", words)
    return None


def consume_refusal(
    principal: Principal,
    sections: Mapping[str, Mapping[str, Any] | None],
    administration: Administration,
    subscription: tuple[str, Mapping[str, Any] | None] | None = None,
    *,
    words: str = EVENT_TYPE_BLOCKED,
) -> Refusal | None:
    """Unless ``principal`` reads every event type (``sections``: each one's ``authorization``
    by name) and the ``subscription`` (its id and section) when it reads one, neither blocked
    from consuming; a block says ``words``."""
    blocked = consumer_block_refusal(principal, list(sections), administration, words)
    if blocked is not None:
        return blocked
    if subscription is not None:
        subscription_id, section = subscription
        refused = resource_refusal(
            principal, section, "read", f"subscription {subscription_id}", administration
        )
        if refused is not None:
            return refused
    for name, section in sections.items():
        refused = resource_refusal(principal, section, "read", f"event type {name}", administration)
        if refused is not None:
            return refused
    return None


def deletion_refusal(
    principal: Principal, event_type: str, administration: Administration, *, disabled: bool
) -> Refusal | None:
    """While event type deletion is ``disabled``, only the broker's administrators delete."""
    if disabled and not is_admin(principal, administration, "admin"):
        return Refusal(
            f"delete event type {event_type}",
            "deletion is disabled",
            "Event Type deletion is disabled",
        )
    return None


def lost_read(
    principal: Principal,
    sections: Mapping[str, Mapping[str, Any] | None],
    administration: Administration,
    subscription: Mapping[str, Any] | None = None,
) -> str | None:
    """Why ``principal``, streaming the event types of ``sections`` (and a subscription with
    the section ``subscription``, when it streams one's), may no longer read; None while it
    may."""
    if is_admin(principal, administration, "read"):
        return None
    if not allowed(principal, subscription, "read"):
        return "no longer one of the subscription's readers"
    for name, section in sections.items():
        if not allowed(principal, section, "read"):
            return f"no longer one of the readers of {name}"
    return None
